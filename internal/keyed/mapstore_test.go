package keyed

import (
	"context"
	"fmt"
	"testing"
	"time"
)

type clockAt struct{ now int64 }

func (c *clockAt) Now() int64 { return c.now }

// TestMapStore: records expire at their TTL on the clock, a bound evicts,
// and an unchanged update writes nothing.
func TestMapStore(t *testing.T) {
	ctx := context.Background()
	clock := &clockAt{now: t0}
	s := NewMapStore(clock, 0)
	put := func(key, val string, ttl time.Duration) {
		t.Helper()
		if err := s.Update(ctx, key, func([]byte) ([]byte, time.Duration, bool) { return []byte(val), ttl, true }); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key string) string {
		var got string
		s.Update(ctx, key, func(rec []byte) ([]byte, time.Duration, bool) { got = string(rec); return nil, 0, false })
		return got
	}
	put("a", "1", time.Second)
	put("b", "2", 0) // no expiry
	put("a", "11", time.Second)
	if got := get("a"); got != "11" {
		t.Errorf("a = %q, want 11", got)
	}
	clock.now += int64(time.Second)
	if got, has := get("a"), s.Has("a"); got != "" || has {
		t.Errorf("a after its TTL = %q, Has %v; want gone", got, has)
	}
	if got := get("b"); got != "2" {
		t.Errorf("b = %q, want kept without expiry", got)
	}
	s.Delete(ctx, "b")
	if s.Has("b") {
		t.Error("b after Delete is still there")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Update(cancelled, "c", nil); err != context.Canceled {
		t.Errorf("Update with an ended context = %v, want context.Canceled", err)
	}

	for _, bound := range []int{1, 10, 5000, 40_000} {
		bounded := NewMapStore(clock, bound)
		for i := range 2 * bound {
			key := fmt.Sprint("k", i)
			bounded.Update(ctx, key, func([]byte) ([]byte, time.Duration, bool) { return []byte("x"), 0, true })
		}
		if n := bounded.Len(); n > bound || n < bound/2 {
			t.Errorf("Len() of a store bounded to %d keys, given %d = %d", bound, 2*bound, n)
		}
	}
}
