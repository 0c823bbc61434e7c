package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestLimiterAllowInMemory runs Allow and AllowN on the in-memory path
// that decides without the backend (limiter.go), on the default clock and
// on another, with and without a listener: they decide as one limiter,
// report argument errors, and tell the listener.
func TestLimiterAllowInMemory(t *testing.T) {
	ctx := context.Background()
	ln := &fastListener{}
	for _, tc := range []struct {
		name string
		opts []sluice.LimiterOption
	}{
		{"monotonic", nil},
		{"fake clock", []sluice.LimiterOption{sluice.WithClock(sluice.NewFakeClock(1e18))}},
		{"listener", []sluice.LimiterOption{sluice.WithListener(ln)}},
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
			if tc.name == "listener" {
				// Told of 2 calls that passed (3 tokens) and 1 refused.
				if ln.consumed != 3 || ln.rejected != 1 {
					t.Fatalf("listener: consumed %d, rejected %d; want 3, 1", ln.consumed, ln.rejected)
				}
			}
		})
	}
}

// fastListener counts the tokens it is told of.
type fastListener struct {
	sluice.NopListener
	consumed, rejected int64
}

func (f *fastListener) OnConsumed(n int64) { f.consumed += n }
func (f *fastListener) OnRejected(n int64) { f.rejected += n }
