package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/conformance"
)

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("conformance", "[--store URL] [-v] PATH...",
		"Conformance runs vector files (PATH is a *.json file or a directory of them) against\n"+
			"sluice's buckets and limiters, prints every failing step, and ends with the line\n"+
			"\"N passed, M failed, K skipped\". It fails when any case fails.", stderr)
	store := fs.String("store", "", "the `URL` of the store to test; empty or mem:// is the local in-memory target")
	verbose := fs.Bool("v", false, "also print passed and skipped cases")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usagef("sluice conformance: no PATH given")
	}
	target, err := targetFor(*store)
	if err != nil {
		return err
	}
	r, runErr := conformance.Run(ctx, target, fs.Args()...)
	if r != nil {
		printReport(stdout, r, *verbose)
	}
	if runErr != nil {
		return fmt.Errorf("sluice conformance: %w", runErr)
	}
	if _, failed, _ := r.Counts(); failed > 0 {
		return fmt.Errorf("sluice conformance: %d failed against %s", failed, r.Target)
	}
	return nil
}

// targetFor returns the conformance target of a --store URL.
func targetFor(store string) (conformance.Target, error) {
	if store == "" || store == "mem://" {
		return conformance.Local{}, nil
	}
	return nil, fmt.Errorf("sluice conformance: store %q is not available yet: only the local in-memory target (mem://) can be tested", store)
}

// printReport prints every failure, and with verbose every case, then the
// summary line.
func printReport(w io.Writer, r *conformance.Report, verbose bool) {
	for _, f := range r.Files {
		if f.Err != nil {
			fmt.Fprintf(w, "FAIL %v\n", f.Err)
		}
		for _, c := range f.Cases {
			switch {
			case c.Status == conformance.Failed:
				fmt.Fprintf(w, "FAIL %v\n", c.Failure)
			case !verbose:
			case c.Status == conformance.Skipped:
				fmt.Fprintf(w, "SKIP %s: case %q: %s\n", f.Path, c.Name, c.Reason)
			default:
				fmt.Fprintf(w, "PASS %s: case %q\n", f.Path, c.Name)
			}
		}
	}
	fmt.Fprintln(w, r.Summary())
}
