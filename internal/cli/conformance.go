package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/storeurl"
)

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("conformance", "[--store URL] [-v] PATH...",
		"Conformance runs vector files (PATH is a *.json file or a directory of them) against\n"+
			"sluice's buckets and limiters, prints every failing step, and ends with the line\n"+
			"\"N passed, M failed, K skipped\". It fails when any case fails.", stderr)
	store := fs.String("store", "", "the `URL` of the store to test; empty: the local buckets and limiters; mem://, redis://, redis+cluster://, redis+sentinel://, postgres://, mysql://: that store")
	verbose := fs.Bool("v", false, "also print passed and skipped cases")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usagef("sluice conformance: no PATH given")
	}
	target, closeStore, err := targetFor(ctx, *store)
	if err != nil {
		return err
	}
	defer closeStore()
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

// targetFor returns the conformance target of a --store URL, and how to
// release it.
func targetFor(ctx context.Context, rawURL string) (conformance.Target, func() error, error) {
	if rawURL == "" {
		return conformance.Local{}, func() error { return nil }, nil
	}
	store, err := storeurl.Open(ctx, rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("sluice conformance: %w", err)
	}
	if err := store.Check(ctx); err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("sluice conformance: %w", err)
	}
	return conformance.Store{TargetName: store.Scheme, Store: store}, store.Close, nil
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
