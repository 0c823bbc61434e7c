package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestPolicyForInMemory: an in-memory Limiter with a policy per key
// limits each key by its policy, migrates a key whose policy changed by
// the inheritance, and returns the resolver's errors.
func TestPolicyForInMemory(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	free, paid := sluice.TokenBucket(4, 4, time.Hour), sluice.TokenBucket(40, 40, time.Hour)
	plan := map[string]sluice.Policy{"paid": paid, "window": sluice.FixedWindow(2, time.Hour)}
	errDown := errors.New("plans db down")
	resolve := func(_ context.Context, key string) (sluice.Policy, error) {
		if key == "broken" {
			return nil, errDown
		}
		return plan[key], nil
	}
	l, err := sluice.NewLimiter(free, sluice.WithClock(clock), sluice.WithPolicyFor(resolve),
		sluice.WithPolicyCache(10, time.Second), sluice.WithInheritance(sluice.InheritAsIs))
	if err != nil {
		t.Fatal(err)
	}
	for key, limit := range map[string]int64{"free": 4, "paid": 40, "window": 2} {
		if r, err := l.Allow(ctx, key); err != nil || r.Limit != limit || r.Remaining != limit-1 {
			t.Errorf("Allow(%q) = %+v, %v; want %d of %d left", key, r, err, limit-1, limit)
		}
	}
	if _, err := l.Allow(ctx, "broken"); !errors.Is(err, errDown) {
		t.Errorf("Allow(broken) = %v, want the resolver's error", err)
	}
	// free takes 2 more (1 of 4 left), then moves to paid: as is, 1 of 40.
	l.AllowN(ctx, "free", 2)
	plan["free"] = paid
	clock.Advance(2 * time.Second) // past the cache's TTL; refills nothing
	if r, err := l.Allow(ctx, "free"); err != nil || r.Limit != 40 || r.Remaining != 0 {
		t.Errorf("Allow(free) after its upgrade = %+v, %v; want its 1 token kept as is, now 0 of 40", r, err)
	}
	b, err := l.Bucket("free")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := b.Snapshot(ctx); err != nil || s.Config.Bandwidths[0].Capacity() != 40 {
		t.Errorf("Bucket(free).Snapshot().Config = %+v, %v; want its plan's capacity 40", s.Config, err)
	}
	w, _ := l.Bucket("window")
	if _, err := w.Allow(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Bucket(window).Allow = %v, want ErrUnsupported: its policy is a window", err)
	}
	if n := l.Len(); n != 3 {
		t.Errorf("Len() = %d, want the 3 keys with state", n)
	}
	if _, err := sluice.NewLimiter(free, sluice.WithPolicyFor(resolve), sluice.WithStoreTimeout(time.Second)); err == nil {
		t.Error("NewLimiter(WithPolicyFor, WithStoreTimeout without a store) = nil error")
	}
}
