package keyed_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/internal/keyed"
)

// wallClock is the real clock, in Unix nanoseconds.
type wallClock struct{}

func (wallClock) Now() int64 { return time.Now().UnixNano() }

// fakeClock is a clock that moves only when told, safe for concurrent
// use.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) Now() int64 { return c.now.Load() }

// fakeClockHarness makes MapStores on one fake clock, which the suite
// moves instead of sleeping.
type fakeClockHarness struct{ clock *fakeClock }

func (h fakeClockHarness) MakeStore(context.Context, *testing.T) (driver.Store, error) {
	return keyed.NewMapStore(h.clock, 0), nil
}

func (h fakeClockHarness) Advance(d time.Duration) { h.clock.now.Add(int64(d)) }

// TestMapStoreConformance: MapStore, the store of the in-memory keys kept
// as records, keeps the contract of every driver.Store, on the real clock
// and on a fake one, and bounded.
func TestMapStoreConformance(t *testing.T) {
	fake := &fakeClock{}
	fake.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	tests := []struct {
		name string
		h    drivertest.Harness
	}{
		{"RealClock", drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
			return keyed.NewMapStore(wallClock{}, 0), nil
		})},
		{"FakeClock", fakeClockHarness{fake}},
		// Bounded, in several shards, never full: the suite's keys stay.
		{"MaxKeys", drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
			return keyed.NewMapStore(wallClock{}, 8<<10), nil
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drivertest.RunConformanceTests(t, tt.h)
		})
	}
}
