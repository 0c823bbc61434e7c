package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/app/storeurl"
)

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("conformance", "[--store URL [--store-timeout D]] [-v] PATH...",
		"Conformance runs vector files (PATH is a *.json file or a directory of them) against\n"+
			"sluice's buckets and limiters, prints every failing step, and ends with the line\n"+
			"\"N passed, M failed, K skipped\". It fails when any case fails.\n\n"+
			"With --store, the buckets and limiters keep their state in that store: keys under a\n"+
			"prefix of the run's own (sluice-conformance-<random>:), none kept longer than an hour,\n"+
			"all deleted when it ends (a failure to delete them is reported on stderr). On PostgreSQL\n"+
			"and MySQL it creates the store's table if it is missing, as sluice serve would, and\n"+
			"leaves the table. A store call that takes longer than --store-timeout fails, as in a\n"+
			"limiter; raise it for a loaded store, since the vectors check decisions, not latency.", stderr)
	store := fs.String("store", "", "the `URL` of the store to test; empty: the local buckets and limiters; mem://, redis://, redis+cluster://, redis+sentinel://, postgres://, mysql://, dynamodb://: that store")
	timeout := fs.duration("store-timeout", sluice.DefaultStoreTimeout, "how long a store call may take (a `duration`: 10s, '1 minute'); with --store")
	verbose := fs.Bool("v", false, "also print passed and skipped cases")
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return fs.usagef("no PATH given")
	case *timeout <= 0:
		return fs.usagef("--store-timeout %v: want a positive duration", *timeout)
	case fs.isSet("store-timeout") && *store == "":
		return fs.usagef("--store-timeout needs --store")
	}
	target, closeStore, err := targetFor(ctx, *store, *timeout, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	r, runErr := conformance.Run(ctx, target, fs.Args()...)
	if r != nil {
		printReport(stdout, r, *verbose)
	}
	if runErr != nil {
		return runErr
	}
	if _, failed, _ := r.Counts(); failed > 0 {
		return fmt.Errorf("%d failed against %s", failed, r.Target)
	}
	return nil
}

// targetFor returns the conformance target of a --store URL, each store
// call bounded by timeout, and how to release it: delete the keys written
// (saying so on stderr if it cannot) and close the store.
func targetFor(ctx context.Context, rawURL string, timeout time.Duration, stderr io.Writer) (conformance.Target, func(), error) {
	if rawURL == "" {
		return conformance.Local{}, func() {}, nil
	}
	store, err := storeurl.Open(ctx, rawURL)
	if err != nil {
		return nil, nil, err
	}
	if err := store.Check(ctx); err != nil {
		store.Close()
		return nil, nil, err
	}
	s := newScratch(store.Store, "sluice-conformance-"+randomHex()+":")
	release := func() {
		if deleted, written, err := s.cleanup(ctx); err != nil {
			fmt.Fprintln(stderr, s.cleanupMessage(deleted, written, err))
		}
		store.Close()
	}
	return conformance.Store{TargetName: store.Scheme, Store: s,
		Options: []sluice.Option{sluice.WithStoreTimeout(timeout)}}, release, nil
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
