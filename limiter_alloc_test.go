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
)

// TestLimiterNoAllocsOnExistingKeys: a decision on a key that already has
// state allocates nothing, from the key's second decision on.
func TestLimiterNoAllocsOnExistingKeys(t *testing.T) {
	policies := []sluice.Policy{
		sluice.FixedWindow(100, time.Minute),
		sluice.SlidingWindow(100, time.Minute),
		sluice.TokenBucket(100, 10, time.Second),
		sluice.LeakyBucket(100, 10, time.Second),
		sluice.GCRA(100, 10, time.Second),
		sluice.Compound(sluice.FixedWindow(100, time.Minute), sluice.FixedWindow(1000, time.Hour)),
	}
	ctx := context.Background()
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			l, err := sluice.NewLimiter(p, sluice.WithClock(sluice.NewFakeClock(limiterStart)))
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, 200)
			for i := range keys {
				keys[i] = fmt.Sprint("key", i)
				if _, err := l.Allow(ctx, keys[i]); err != nil {
					t.Fatal(err)
				}
			}
			i := 0
			allocs := testing.AllocsPerRun(len(keys)-1, func() {
				l.Allow(ctx, keys[i])
				i++
			})
			if allocs != 0 {
				t.Errorf("allocations per second decision on a key = %v, want 0", allocs)
			}
		})
	}
}
