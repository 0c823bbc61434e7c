package rlqs

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestShadowBucket: a bucket whose limiter is in shadow mode is assigned
// ALLOW_ALL, and the requests Envoy reports on it are counted on the
// limiter as far as it has tokens, the rest reported as shadow
// rejections.
func TestShadowBucket(t *testing.T) {
	var mu sync.Mutex
	var charges []Charge
	h := newHarness(t, WithShadow(func(name string) bool { return name == "api" }),
		WithObserver(func(c Charge) { mu.Lock(); charges = append(charges, c); mu.Unlock() }))
	c, err := decodeWith(t, serviceDoc, serviceLimiters)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sluice.NewLimiter(sluice.LeakyBucket(100, 50, time.Second), sluice.WithClock(fakeClock{h.clock}), sluice.WithShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	h.svc.Swap(c, func(name string) (*sluice.Limiter, bool) { return l, name == "api" })
	a := h.stream(t)
	api := map[string]string{"name": "api"}
	for i, u := range []struct {
		allowed      uint64
		wantRejected int64
	}{
		{0, 0},
		{30, 0},
		{150, 80}, // 70 left of 100
		{10, 10},
	} {
		if got := describe(exchange(t, a, "edge", use(api, u.allowed, 0, 0)).GetBucketAction()[0]); got != "allow_all 1s" {
			t.Fatalf("report %d: action %q, want allow_all", i, got)
		}
		mu.Lock()
		var last Charge
		if len(charges) > 0 {
			last = charges[len(charges)-1]
		}
		n := len(charges)
		mu.Unlock()
		if u.allowed == 0 {
			if n != 0 {
				t.Fatalf("report %d of no requests charged %+v", i, last)
			}
			continue
		}
		if last.Tokens != int64(u.allowed) || last.ShadowRejected != u.wantRejected || last.Err != nil || last.Limiter != "api" {
			t.Errorf("report %d of %d requests: charge %+v, want %d shadow-rejected", i, u.allowed, last, u.wantRejected)
		}
	}
}
