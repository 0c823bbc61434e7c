package sluice_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestConfigVersionConflict: two configurations of one version share a
// store: the stored one wins, the key never moves, and the conflict is
// told to the observer once, never logged by the library.
func TestConfigVersionConflict(t *testing.T) {
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	ctx := context.Background()
	store := newMapStore()
	clock := sluicetest.NewFakeClock(limiterStart)
	rec := &recorder{}
	a, _ := sluice.NewLimiter(sluice.TokenBucket(100, 100, time.Hour), sluice.WithStore(store), sluice.WithClock(clock), sluice.WithConfigVersion(5))
	b, _ := sluice.NewLimiter(sluice.TokenBucket(50, 50, time.Hour), sluice.WithStore(store), sluice.WithClock(clock), sluice.WithConfigVersion(5),
		sluice.WithObserver(rec))
	a.AllowN(ctx, "k", 10)
	for i := range 4 {
		r, err := b.Allow(ctx, "k")
		if err != nil || r.Limit != 100 || r.Remaining != 89-int64(i) {
			t.Fatalf("Allow #%d under the conflicting configuration = %+v, %v; want the stored one: %d of 100", i, r, err, 89-i)
		}
	}
	var conflicts []sluice.Event
	for _, e := range rec.take() {
		if e.Kind == sluice.EventVersionConflict {
			conflicts = append(conflicts, e)
		}
	}
	if len(conflicts) != 1 || conflicts[0].Err == nil || !strings.Contains(conflicts[0].Err.Error(), "version 5") {
		t.Errorf("version conflicts told = %+v, want one naming version 5", conflicts)
	}
	if logged.Len() != 0 {
		t.Errorf("the library logged %q, want nothing", logged.String())
	}
	if _, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Second), sluice.WithConfigVersion(1)); err == nil {
		t.Error("NewLimiter(WithConfigVersion without a store) = nil error")
	}
}
