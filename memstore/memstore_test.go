package memstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/memstore"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeClockHarness makes stores on one fake clock.
type fakeClockHarness struct{ clock *fakeClock }

func (h fakeClockHarness) MakeStore(context.Context, *testing.T) (driver.Store, error) {
	return memstore.New(memstore.WithClock(h.clock.Now)), nil
}

func (h fakeClockHarness) Advance(d time.Duration) { h.clock.Advance(d) }

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		h    drivertest.Harness
	}{
		{"RealClock", drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
			return memstore.New(), nil
		})},
		{"FakeClock", fakeClockHarness{newFakeClock()}},
		// Bounded, in several shards, never full: the suite's keys stay.
		{"MaxKeys", drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
			return memstore.New(memstore.WithMaxKeys(8 << 10)), nil
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drivertest.RunConformanceTests(t, tt.h)
		})
	}
}

// set writes key's state.
func set(t *testing.T, s *memstore.Store, key, state string, ttl time.Duration) {
	t.Helper()
	err := s.Update(t.Context(), key, func([]byte) ([]byte, time.Duration, bool) {
		return []byte(state), ttl, true
	})
	if err != nil {
		t.Fatalf("Update(%q) = %v, want nil", key, err)
	}
}

// get returns key's state as a string, and whether it has one.
func get(t *testing.T, s *memstore.Store, key string) (string, bool) {
	t.Helper()
	var got []byte
	err := s.Update(t.Context(), key, func(state []byte) ([]byte, time.Duration, bool) {
		got = bytes.Clone(state)
		return nil, 0, false
	})
	if err != nil {
		t.Fatalf("Update(%q) = %v, want nil", key, err)
	}
	return string(got), got != nil
}

func TestTTL(t *testing.T) {
	c := newFakeClock()
	s := memstore.New(memstore.WithClock(c.Now))
	set(t, s, "a", "state", time.Second)
	set(t, s, "forever", "state", 0)
	set(t, s, "negative", "state", -time.Second)
	c.Advance(time.Second - 1)
	if got, ok := get(t, s, "a"); !ok || got != "state" {
		t.Fatalf("state 1ns before its TTL = %q, %v; want \"state\", true", got, ok)
	}
	c.Advance(1)
	if got, ok := get(t, s, "a"); ok {
		t.Errorf("state at its TTL = %q, want none", got)
	}
	if n := s.Len(); n != 2 {
		t.Errorf("Len() after reading an expired key = %d, want 2 (it is dropped when seen)", n)
	}
	c.Advance(100 * 365 * 24 * time.Hour)
	for _, k := range []string{"forever", "negative"} {
		if _, ok := get(t, s, k); !ok {
			t.Errorf("state of %q written without a positive TTL expired", k)
		}
	}
}

func TestTTLRewriteRestarts(t *testing.T) {
	c := newFakeClock()
	s := memstore.New(memstore.WithClock(c.Now))
	set(t, s, "a", "one", time.Second)
	c.Advance(900 * time.Millisecond)
	set(t, s, "a", "two", time.Second)
	c.Advance(900 * time.Millisecond)
	if got, ok := get(t, s, "a"); !ok || got != "two" {
		t.Fatalf("state 900ms after a rewrite with a 1s TTL = %q, %v; want \"two\", true", got, ok)
	}
	// An unchanged update does not restart the TTL.
	c.Advance(100 * time.Millisecond)
	if got, ok := get(t, s, "a"); ok {
		t.Errorf("state 1s after its rewrite = %q, want none", got)
	}
}

func TestTTLHuge(t *testing.T) {
	c := newFakeClock()
	s := memstore.New(memstore.WithClock(c.Now))
	set(t, s, "a", "state", time.Duration(1<<63-1))
	c.Advance(200 * 365 * 24 * time.Hour)
	if _, ok := get(t, s, "a"); !ok {
		t.Errorf("state with the largest TTL expired")
	}
}

// TestSweep checks that inserts drop idle expired keys that are never read
// again.
func TestSweep(t *testing.T) {
	c := newFakeClock()
	s := memstore.New(memstore.WithClock(c.Now))
	const idle, fresh = 1000, 10000
	for i := range idle {
		set(t, s, fmt.Sprint("idle", i), "state", time.Second)
	}
	c.Advance(time.Second)
	for i := range fresh {
		set(t, s, fmt.Sprint("fresh", i), "state", time.Minute)
	}
	// Each insert looks at two entries of its shard, from a random start:
	// not certain to find every expired one, but in practice it leaves a
	// handful at most.
	if n := s.Len(); n > fresh+idle/10 {
		t.Errorf("Len() after %d inserts = %d, want at most %d: fewer than 90%% of the %d expired keys were swept", fresh, n, fresh+idle/10, idle)
	}
}

func TestMaxKeysNeverExceeded(t *testing.T) {
	for _, max := range []int{1, 7, 1000, 5000} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			s := memstore.New(memstore.WithMaxKeys(max))
			const goroutines, keys = 8, 2000
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range keys {
						set(t, s, fmt.Sprint(g, "/", i), "state", 0)
						if n := s.Len(); n > max {
							t.Errorf("Len() = %d, want at most %d", n, max)
							return
						}
					}
				})
			}
			wg.Wait()
			// Every shard has seen far more keys than it holds.
			if n := s.Len(); n != max {
				t.Errorf("Len() after %d inserts = %d, want %d", goroutines*keys, n, max)
			}
		})
	}
}

func TestEvictionPrefersExpired(t *testing.T) {
	c := newFakeClock()
	s := memstore.New(memstore.WithClock(c.Now), memstore.WithMaxKeys(4))
	set(t, s, "b", "b", 0)
	set(t, s, "c", "c", 0)
	set(t, s, "expiring", "x", time.Second)
	set(t, s, "d", "d", 0)
	c.Advance(time.Second)
	set(t, s, "e", "e", 0)
	for _, k := range []string{"b", "c", "d", "e"} {
		if got, ok := get(t, s, k); !ok || got != k {
			t.Errorf("state of %q after an insert into a full store with an expired key = %q, %v; want %q, true", k, got, ok, k)
		}
	}
	if n := s.Len(); n != 4 {
		t.Errorf("Len() = %d, want 4", n)
	}
}

func TestEvictedKeyStartsAfresh(t *testing.T) {
	s := memstore.New(memstore.WithMaxKeys(3))
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		set(t, s, k, k, 0)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len() = %d, want 3", n)
	}
	evicted := 0
	for _, k := range keys {
		err := s.Update(t.Context(), k, func(state []byte) ([]byte, time.Duration, bool) {
			switch {
			case state == nil:
				evicted++
			case string(state) != k:
				t.Errorf("state of %q = %q, want %q or nil", k, state, k)
			}
			return nil, 0, false
		})
		if err != nil {
			t.Fatalf("Update(%q) = %v, want nil", k, err)
		}
	}
	if evicted != 1 {
		t.Errorf("%d keys read as absent after 4 inserts into a store of 3, want 1", evicted)
	}
	if _, ok := get(t, s, "d"); !ok {
		t.Errorf("the key just inserted was evicted")
	}
}

func TestNilNextRemoves(t *testing.T) {
	s := memstore.New()
	set(t, s, "a", "state", 0)
	err := s.Update(t.Context(), "a", func([]byte) ([]byte, time.Duration, bool) {
		return nil, 0, true
	})
	if err != nil {
		t.Fatalf("Update = %v, want nil", err)
	}
	if got, ok := get(t, s, "a"); ok {
		t.Errorf("state after writing nil = %q, want none", got)
	}
	if n := s.Len(); n != 0 {
		t.Errorf("Len() = %d, want 0", n)
	}
}

func TestEmptyStateIsKept(t *testing.T) {
	s := memstore.New()
	set(t, s, "a", "", 0)
	if got, ok := get(t, s, "a"); !ok || got != "" {
		t.Errorf("empty state read back as %q, %v; want \"\", true", got, ok)
	}
}

func TestInPlaceNext(t *testing.T) {
	// fn may return a slice of the state it was given, which the store
	// then copies onto itself.
	s := memstore.New()
	set(t, s, "a", "abcd", 0)
	err := s.Update(t.Context(), "a", func(state []byte) ([]byte, time.Duration, bool) {
		return append(bytes.Clone(state[1:]), 'e'), 0, true
	})
	if err != nil {
		t.Fatalf("Update = %v, want nil", err)
	}
	if got, _ := get(t, s, "a"); got != "bcde" {
		t.Errorf("state = %q, want \"bcde\"", got)
	}
}

func TestContext(t *testing.T) {
	s := memstore.New()
	set(t, s, "a", "kept", 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	err := s.Update(ctx, "a", func([]byte) ([]byte, time.Duration, bool) {
		called = true
		return []byte("written"), 0, true
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a cancelled context = %v, want %v", err, context.Canceled)
	}
	if called {
		t.Errorf("Update with a cancelled context called fn")
	}
	if err := s.Delete(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a cancelled context = %v, want %v", err, context.Canceled)
	}
	if got, _ := get(t, s, "a"); got != "kept" {
		t.Errorf("state = %q, want \"kept\"", got)
	}
}

func TestAtomicHotKey(t *testing.T) {
	s := memstore.New(memstore.WithMaxKeys(100))
	const goroutines, increments = 64, 200
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range increments {
				err := s.Update(t.Context(), "hot", func(state []byte) ([]byte, time.Duration, bool) {
					var n uint64
					if state != nil {
						n = binary.BigEndian.Uint64(state)
					}
					return binary.BigEndian.AppendUint64(nil, n+1), time.Minute, true
				})
				if err != nil {
					t.Errorf("Update = %v, want nil", err)
					return
				}
			}
		})
	}
	wg.Wait()
	var got uint64
	err := s.Update(t.Context(), "hot", func(state []byte) ([]byte, time.Duration, bool) {
		got = binary.BigEndian.Uint64(state)
		return nil, 0, false
	})
	if err != nil {
		t.Fatalf("Update = %v, want nil", err)
	}
	if want := uint64(goroutines * increments); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}
}

func ExampleStore() {
	s := memstore.New()
	ctx := context.Background()
	visit := func(state []byte) ([]byte, time.Duration, bool) {
		return append(bytes.Clone(state), '*'), time.Minute, true
	}
	for range 3 {
		if err := s.Update(ctx, "user:42", visit); err != nil {
			fmt.Println(err)
		}
	}
	_ = s.Update(ctx, "user:42", func(state []byte) ([]byte, time.Duration, bool) {
		fmt.Printf("%s\n", state)
		return nil, 0, false
	})
	fmt.Println(s.Len())
	// Output:
	// ***
	// 1
}
