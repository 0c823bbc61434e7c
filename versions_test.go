package sluice_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestConfigVersionConflict: two configurations of one version share a
// store: the stored one wins, the key never moves, and the conflict is
// logged once.
func TestConfigVersionConflict(t *testing.T) {
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	ctx := context.Background()
	store := newMapStore()
	clock := sluice.NewFakeClock(limiterStart)
	a, _ := sluice.NewLimiter(sluice.TokenBucket(100, 100, time.Hour), sluice.WithStore(store), sluice.WithClock(clock), sluice.WithConfigVersion(5))
	b, _ := sluice.NewLimiter(sluice.TokenBucket(50, 50, time.Hour), sluice.WithStore(store), sluice.WithClock(clock), sluice.WithConfigVersion(5))
	a.AllowN(ctx, "k", 10)
	for i := range 4 {
		r, err := b.Allow(ctx, "k")
		if err != nil || r.Limit != 100 || r.Remaining != 89-int64(i) {
			t.Fatalf("Allow #%d under the conflicting configuration = %+v, %v; want the stored one: %d of 100", i, r, err, 89-i)
		}
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "version=5") {
		t.Errorf("log = %q, want one warning naming version 5", logged.String())
	}
	if _, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Second), sluice.WithConfigVersion(1)); err == nil {
		t.Error("NewLimiter(WithConfigVersion without a store) = nil error")
	}
}
