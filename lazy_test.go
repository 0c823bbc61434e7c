package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLazyBuckets: each key gets the configuration its supplier gives,
// supplied only while the key has no state; a key with state keeps the
// stored one.
func TestLazyBuckets(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(t0)
	var mu sync.Mutex
	supplied := map[string]int{}
	supply := func(_ context.Context, key string) (sluice.BucketConfig, error) {
		mu.Lock()
		supplied[key]++
		mu.Unlock()
		if key == "broken" {
			return sluice.BucketConfig{}, errors.New("plans db down")
		}
		limit := int64(2)
		if strings.HasPrefix(key, "paid:") {
			limit = 10
		}
		return sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(limit, time.Hour)}}, nil
	}
	p, err := sluice.NewLazyBuckets(newMapStore(), supply, sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key   string
		limit int64
	}{{"free:a", 2}, {"paid:b", 10}, {"free:c", 2}} {
		for i := range 3 {
			r, err := p.Bucket(tt.key).Allow(ctx)
			if err != nil || r.Limit != tt.limit {
				t.Errorf("Bucket(%q).Allow #%d = %+v, %v; want limit %d", tt.key, i, r, err, tt.limit)
			}
		}
		if supplied[tt.key] != 1 {
			t.Errorf("configuration of %q supplied %d times, want once", tt.key, supplied[tt.key])
		}
	}
	if _, err := p.Bucket("broken").Allow(ctx); err == nil || !strings.Contains(err.Error(), "plans db down") {
		t.Errorf("Allow with a failing supplier = %v, want its error", err)
	}
	cfg, err := p.Bucket("paid:b").Configuration(ctx)
	if err != nil || cfg.Bandwidths[0].Capacity() != 10 {
		t.Errorf("Configuration() = %+v, %v; want the stored capacity 10", cfg, err)
	}
	if _, err := sluice.NewLazyBuckets(nil, supply); err == nil {
		t.Error("NewLazyBuckets(nil store) = nil error")
	}
	if _, err := sluice.NewLazyBuckets(newMapStore(), nil); err == nil {
		t.Error("NewLazyBuckets(nil supply) = nil error")
	}
}

// TestLazyBucketsFailLocal: with the store down, each key falls back to a
// local bucket of its own supplied configuration.
func TestLazyBucketsFailLocal(t *testing.T) {
	ctx := context.Background()
	store := newMapStore()
	store.setFail(fmt.Errorf("test: %w: connection refused", driver.ErrUnavailable))
	supply := func(_ context.Context, key string) (sluice.BucketConfig, error) {
		return sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(int64(len(key)), time.Hour)}}, nil
	}
	p, err := sluice.NewLazyBuckets(store, supply, sluice.WithStoreFailure(sluice.FailLocal))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ab", "abcd"} {
		n := 0
		for range 6 {
			if r, err := p.Bucket(key).Allow(ctx); err != nil {
				t.Fatal(err)
			} else if r.Allowed {
				n++
			}
		}
		if n != len(key) {
			t.Errorf("local fallback of %q allowed %d of 6, want its own limit %d", key, n, len(key))
		}
	}
}
