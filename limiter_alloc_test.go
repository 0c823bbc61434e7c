//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only meaningful without it.

package sluice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLimiterAllocs: a key's first decision allocates at most once,
// amortised (the table's growth), a compound's included, whose members'
// states are kept as words in the table's slot; but for a compound with a
// member of no fixed size (a sliding log), whose parts are buffers of
// their own. Every later decision on the key allocates nothing.
func TestLimiterAllocs(t *testing.T) {
	bucket := sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Capacity(100, sluice.Greedy(10, time.Second)), sluice.Capacity(1000, sluice.Greedy(1000, time.Hour)),
	}})
	tests := []struct {
		p     sluice.Policy
		first float64 // the most allocations a key's first decision may take; -1: not bounded
	}{
		{sluice.FixedWindow(100, time.Minute), 1},
		{sluice.SlidingWindow(100, time.Minute), 1},
		{sluice.TokenBucket(100, 10, time.Second), 1},
		{sluice.LeakyBucket(100, 10, time.Second), 1},
		{sluice.GCRA(100, 10, time.Second), 1},
		{sluice.Compound(sluice.FixedWindow(100, time.Minute), sluice.FixedWindow(1000, time.Hour)), 1},
		{sluice.Compound(sluice.SlidingLog(100, time.Minute), sluice.FixedWindow(1000, time.Hour)), -1},
		{sluice.Compound(sluice.FixedWindow(100, time.Minute), sluice.GCRA(100, 10, time.Second),
			sluice.SlidingWindow(1000, time.Hour), sluice.TokenBucket(100, 10, time.Second)), 1},
		{sluice.Compound(sluice.GCRA(100, 10, time.Second), bucket), 1},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.p.String(), func(t *testing.T) {
			l, err := sluice.NewLimiter(tt.p, sluice.WithClock(sluicetest.NewFakeClock(limiterStart)))
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, 100_000)
			for i := range keys {
				keys[i] = fmt.Sprint("key", i)
			}
			// AllocsPerRun runs f once more than asked: every key once.
			i := 0
			each := func() {
				l.Allow(ctx, keys[i])
				i++
			}
			if allocs := testing.AllocsPerRun(len(keys)-1, each); tt.first >= 0 && allocs > tt.first {
				t.Errorf("allocations per first decision on a key = %v, want at most %v", allocs, tt.first)
			}
			i = 0
			if allocs := testing.AllocsPerRun(len(keys)-1, each); allocs != 0 {
				t.Errorf("allocations per second decision on a key = %v, want 0", allocs)
			}
		})
	}
}

// TestWaitAllocs: a Wait for tokens that are there at once, on a bucket or
// an in-memory key, allocates nothing, as x/time/rate's Wait: a call that
// will neither sleep nor give the tokens back needs no reservation. Calls
// that must sleep still take one.
func TestWaitAllocs(t *testing.T) {
	ctx := context.Background()
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(1e9, time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := b.Wait(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Bucket.Wait: %v allocations, want 0", allocs)
	}
	for _, p := range []sluice.Policy{sluice.TokenBucket(1e9, 1e9, time.Second), sluice.GCRA(1e9, 1e9, time.Second), sluice.FixedWindow(1e9, time.Second)} {
		l, err := sluice.NewLimiter(p)
		if err != nil {
			t.Fatal(err)
		}
		l.Wait(ctx, "k", time.Second) // the key's first decision inserts it
		if allocs := testing.AllocsPerRun(100, func() {
			if err := l.Wait(ctx, "k", time.Second); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("%v: Limiter.Wait: %v allocations, want 0", p, allocs)
		}
	}
}
