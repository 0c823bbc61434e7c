//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only meaningful without it.

package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestObserverNoAllocs: a decision allocates nothing for its observer.
func TestObserverNoAllocs(t *testing.T) {
	ctx := context.Background()
	l, err := sluice.NewLimiter(sluice.TokenBucket(100, 10, time.Second),
		sluice.WithClock(sluicetest.NewFakeClock(t0)), sluice.WithObserver(nopObserver{}))
	if err != nil {
		t.Fatal(err)
	}
	l.Allow(ctx, "k")
	if allocs := testing.AllocsPerRun(100, func() { l.Allow(ctx, "k") }); allocs != 0 {
		t.Errorf("allocations per observed decision = %v, want 0", allocs)
	}
}
