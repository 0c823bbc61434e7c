package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sleep"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[-n N] [-every DURATION]",
		"Demo sends requests, one every DURATION in real time, to a bucket of 5 tokens refilled\n"+
			"at 5 per second, and prints for each whether it was allowed, the tokens left, and\n"+
			"the wait before a rejected request could pass. The defaults take 1.9 seconds.", stderr)
	n := fs.Int("n", 20, "the number of requests")
	every := fs.duration("every", 100*time.Millisecond, "the time between requests (a `duration`: 100ms, '1 second')")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected arguments %q", fs.Args())
	}
	if *n <= 0 || *every < 0 {
		return fs.usagef("-n must be positive and -every not negative, got %d and %v", *n, *every)
	}
	return demo(ctx, stdout, sluice.MonotonicClock(), *n, *every)
}

// demo sends n requests, one every interval by clock (sleeping on it when
// it sleeps, see sluice.Clock, else on a timer),
// to a bucket of 5 tokens refilled at 5 per second, and prints the outcome
// of each.
func demo(ctx context.Context, w io.Writer, clock sluice.Clock, n int, every time.Duration) error {
	const capacity, per = 5, time.Second // the text below says "per second"
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(capacity, per)}}
	b, err := sluice.NewBucket(cfg, sluice.WithClock(clock))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "A bucket of %d tokens, refilled at %d per second (one every %v); a request takes 1 token.\n",
		capacity, capacity, per/capacity)
	fmt.Fprintf(w, "Sending %d requests, one every %v.\n\n", n, every)
	fmt.Fprintf(w, "%8s  %7s  %-8s  %11s  %s\n", "time", "request", "result", "tokens left", "retry after")
	start := clock.Now()
	allowed := 0
	for i := range n {
		due := start + int64(i)*int64(every)
		if d := time.Duration(due - clock.Now()); d > 0 {
			if err := sleep.On(ctx, clock, d); err != nil {
				return err
			}
		}
		at := time.Duration(clock.Now() - start).Round(time.Millisecond)
		r := b.Allow()
		fmt.Fprintf(w, "%6dms  %7d  ", at.Milliseconds(), i+1)
		if r.Allowed {
			allowed++
			fmt.Fprintf(w, "%-8s  %11d\n", "allowed", r.Remaining)
		} else {
			fmt.Fprintf(w, "%-8s  %11d  %v\n", "rejected", r.Remaining, r.RetryAfter.Round(time.Millisecond))
		}
	}
	fmt.Fprintf(w, "\n%d of %d requests allowed: the first ones spend the stored tokens, then requests pass\nonly as fast as tokens come back.\n",
		allowed, n)
	return nil
}
