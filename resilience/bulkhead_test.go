package resilience_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestBulkheadDefaults(t *testing.T) {
	if got, want := resilience.DefaultBulkheadConfig(), (resilience.BulkheadConfig{MaxConcurrentCalls: 25}); got != want {
		t.Errorf("DefaultBulkheadConfig() = %+v, want Resilience4j's %+v", got, want)
	}
	b, err := resilience.NewBulkhead("svc", resilience.DefaultBulkheadConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var done []func()
	for i := range 25 {
		d, err := b.AcquirePermission(ctx)
		if err != nil {
			t.Fatalf("call %d of 25: %v", i, err)
		}
		done = append(done, d)
	}
	if _, err := b.AcquirePermission(ctx); !errors.Is(err, resilience.ErrBulkheadFull) {
		t.Fatalf("call 26 = %v, want ErrBulkheadFull at once (no wait by default)", err)
	}
	done[0]()
	if n, _ := b.AvailableConcurrentCalls(ctx); n != 1 {
		t.Fatalf("AvailableConcurrentCalls after one completed = %d, want 1", n)
	}
	if err := b.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do after a call completed = %v", err)
	}
	if n, _ := b.AvailableConcurrentCalls(ctx); n != 1 {
		t.Fatalf("AvailableConcurrentCalls after Do = %d, want 1: Do gives its place back", n)
	}
}

// TestBulkheadShared: two bulkheads of one name on one store are one
// bulkhead; a call waits up to MaxWaitDuration for a place to lapse.
func TestBulkheadShared(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	store := memstore.New()
	cfg := resilience.BulkheadConfig{MaxConcurrentCalls: 2, MaxWaitDuration: 2 * time.Second, Lease: time.Second}
	a, _ := resilience.NewBulkhead("svc", cfg, sluice.WithStore(store), sluice.WithClock(clock))
	b, _ := resilience.NewBulkhead("svc", cfg, sluice.WithStore(store), sluice.WithClock(clock))
	ctx := context.Background()
	if _, err := a.AcquirePermission(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquirePermission(ctx); err != nil {
		t.Fatal(err)
	}
	// Both holders crashed, renewing nothing: the next call waits for a
	// place to lapse, 1s later, within its 2s.
	if _, err := b.AcquirePermission(ctx); err != nil {
		t.Fatalf("a third call within MaxWaitDuration = %v, want a place once one lapsed", err)
	}
	if slept := clock.Slept(); slept < time.Second || slept > 2*time.Second {
		t.Errorf("the third call waited %v on the clock, want 1s to 2s", slept)
	}
}

func TestBulkheadErrors(t *testing.T) {
	for _, cfg := range []resilience.BulkheadConfig{
		{MaxConcurrentCalls: 0}, {MaxConcurrentCalls: 1001}, {MaxConcurrentCalls: 1, MaxWaitDuration: -1}, {MaxConcurrentCalls: 1, Lease: -1},
	} {
		if _, err := resilience.NewBulkhead("svc", cfg); !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("NewBulkhead(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	b, _ := resilience.NewBulkhead("svc", resilience.BulkheadConfig{MaxConcurrentCalls: 1})
	defer func() {
		if recover() == nil {
			t.Fatal("Do of a panicking function did not panic")
		}
		if n, _ := b.AvailableConcurrentCalls(context.Background()); n != 1 {
			t.Fatalf("after a panic in Do, %d places available, want 1", n)
		}
	}()
	b.Do(context.Background(), func(context.Context) error { panic("bug") })
}
