package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLimiterAllowInMemory runs Allow and AllowN on the in-memory path
// that decides without the backend (limiter.go), on the default clock and
// on another, with and without an observer: they decide as one limiter,
// report argument errors, and tell the observer.
func TestLimiterAllowInMemory(t *testing.T) {
	ctx := context.Background()
	ln := new(sluicetest.Counter)
	for _, tc := range []struct {
		name string
		opts []sluice.Option
	}{
		{"monotonic", nil},
		{"fake clock", []sluice.Option{sluice.WithClock(sluicetest.NewFakeClock(1e18))}},
		{"observer", []sluice.Option{sluice.WithObserver(ln)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := sluice.NewLimiter(sluice.FixedWindow(3, time.Hour), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			want := []sluice.Result{
				{Allowed: true, Remaining: 2, Limit: 3},
				{Allowed: true, Remaining: 0, Limit: 3},
				{Allowed: false, Remaining: 0, Limit: 3},
			}
			calls := []func() (sluice.Result, error){
				func() (sluice.Result, error) { return l.Allow(ctx, "k") },
				func() (sluice.Result, error) { return l.AllowN(ctx, "k", 2) },
				func() (sluice.Result, error) { return l.Allow(ctx, "k") },
			}
			for i, call := range calls {
				r, err := call()
				if err != nil || r.Allowed != want[i].Allowed || r.Remaining != want[i].Remaining || r.Limit != want[i].Limit {
					t.Fatalf("call %d = %+v, %v; want %+v", i, r, err, want[i])
				}
				if !r.Allowed && r.RetryAfter <= 0 {
					t.Fatalf("call %d: refused with RetryAfter %v", i, r.RetryAfter)
				}
			}
			var ae *sluice.ArgumentError
			if _, err := l.AllowN(ctx, "k", 4); !errors.As(err, &ae) || !errors.Is(err, sluice.ErrTokensAboveLimit) {
				t.Fatalf("AllowN above the limit: %v", err)
			}
			if _, err := l.AllowN(ctx, "k", 0); !errors.As(err, &ae) {
				t.Fatalf("AllowN(0): %v", err)
			}
			if tc.name == "observer" {
				// Told of 2 calls that passed (3 tokens) and 1 refused.
				if got, want := countsOf(ln), (counts{consumed: 3, rejected: 1}); got != want {
					t.Fatalf("observer saw %+v, want %+v", got, want)
				}
			}
		})
	}
}
