package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
)

// storePolicies are the policies the store tests run, one of each kind.
func storePolicies() []sluice.Policy {
	return []sluice.Policy{
		sluice.FixedWindow(10, time.Second),
		sluice.AlignedFixedWindow(10, time.Second),
		sluice.SlidingWindow(10, time.Second),
		sluice.SlidingLog(5, time.Second),
		sluice.TokenBucket(10, 2, time.Second),
		sluice.LeakyBucket(10, 5, time.Second),
		sluice.GCRA(5, 10, time.Second),
		sluice.Shaper(10, time.Second, 3),
		sluice.Compound(sluice.FixedWindow(8, time.Second), sluice.TokenBucket(5, 1, 200*time.Millisecond)),
		sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Simple(10, time.Second), sluice.Capacity(3, sluice.Intervally(1, 100*time.Millisecond)).WithID("burst"),
		}}),
		sluice.NoLimit(),
	}
}

// TestStoreLimiterMatchesMemory runs the same random calls on a limiter in
// memory and one on a store: every result must be the same.
func TestStoreLimiterMatchesMemory(t *testing.T) {
	ctx := context.Background()
	for _, p := range storePolicies() {
		t.Run(p.String(), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(limiterStart)
			mem, err := sluice.NewLimiter(p, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			st, err := sluice.NewLimiter(p, sluice.WithClock(clock), sluice.WithStore(newMapStore()))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(p.String()))))
			var held [][2]*sluice.Reservation // in memory, in the store
			for i := range 2000 {
				key := fmt.Sprint("k", rng.IntN(3))
				n := int64(rng.IntN(4) + 1)
				var a, b any
				switch rng.IntN(10) {
				case 0:
					ra, ea := mem.PeekN(ctx, key, n)
					rb, eb := st.PeekN(ctx, key, n)
					a, b = fmt.Sprint(ra, ea), fmt.Sprint(rb, eb)
				case 1:
					da, ea := mem.ReserveN(ctx, key, n, 300*time.Millisecond)
					db, eb := st.ReserveN(ctx, key, n, 300*time.Millisecond)
					a, b = describeReservation(da, ea), describeReservation(db, eb)
					if ea == nil && eb == nil {
						held = append(held, [2]*sluice.Reservation{da, db})
					}
				case 3:
					if len(held) == 0 {
						continue
					}
					j := rng.IntN(len(held))
					held[j][0].Cancel()
					held[j][1].Cancel()
					held = append(held[:j], held[j+1:]...)
					ra, ea := mem.PeekN(ctx, key, n)
					rb, eb := st.PeekN(ctx, key, n)
					a, b = fmt.Sprint(ra, ea), fmt.Sprint(rb, eb)
				case 2:
					a, b = mem.Reset(ctx, key), st.Reset(ctx, key)
				default:
					ra, ea := mem.AllowN(ctx, key, n)
					rb, eb := st.AllowN(ctx, key, n)
					a, b = fmt.Sprint(ra, ea), fmt.Sprint(rb, eb)
				}
				if a != b {
					t.Fatalf("call %d on %s: memory %v, store %v", i, key, a, b)
				}
				clock.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
			}
		})
	}
}

// TestStoreMigration changes a limiter's policy under stored keys: the
// state is carried over by the inheritance strategy on next use.
func TestStoreMigration(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name          string
		before, after sluice.Policy
		inherit       sluice.Inheritance
		want          int64 // Remaining after 6 taken before and 1 after
	}{
		{"bucket proportionally", sluice.TokenBucket(10, 1, time.Hour), sluice.TokenBucket(20, 1, time.Hour), sluice.InheritProportionally, 7},
		{"bucket as is", sluice.TokenBucket(10, 1, time.Hour), sluice.TokenBucket(20, 1, time.Hour), sluice.InheritAsIs, 3},
		{"bucket reset", sluice.TokenBucket(10, 1, time.Hour), sluice.TokenBucket(20, 1, time.Hour), sluice.InheritReset, 19},
		{"bucket additive", sluice.TokenBucket(10, 1, time.Hour), sluice.TokenBucket(20, 1, time.Hour), sluice.InheritAdditive, 13},
		{"window kept", sluice.FixedWindow(10, time.Hour), sluice.FixedWindow(20, time.Hour), sluice.InheritAsIs, 13},
		{"window reset", sluice.FixedWindow(10, time.Hour), sluice.FixedWindow(20, time.Hour), sluice.InheritReset, 19},
		{"other policy starts afresh", sluice.FixedWindow(10, time.Hour), sluice.SlidingWindow(20, time.Hour), sluice.InheritAsIs, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(limiterStart)
			store := newMapStore()
			before, err := sluice.NewLimiter(tt.before, sluice.WithClock(clock), sluice.WithStore(store))
			if err != nil {
				t.Fatal(err)
			}
			if r, err := before.AllowN(ctx, "k", 6); err != nil || !r.Allowed {
				t.Fatalf("AllowN(6) before = %+v, %v", r, err)
			}
			after, err := sluice.NewLimiter(tt.after, sluice.WithClock(clock), sluice.WithStore(store), sluice.WithInheritance(tt.inherit))
			if err != nil {
				t.Fatal(err)
			}
			r, err := after.Allow(ctx, "k")
			if err != nil || !r.Allowed || r.Remaining != tt.want {
				t.Errorf("Allow after the change = %+v, %v, want Remaining %d", r, err, tt.want)
			}
		})
	}
}

// TestStoreBucketReplaceSticks checks that a key's bucket reconfigured
// alone keeps its configuration under its limiter's unchanged policy.
func TestStoreBucketReplaceSticks(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	p := sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Hour)}})
	l, err := sluice.NewLimiter(p, sluice.WithClock(clock), sluice.WithStore(newMapStore()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Bucket("vip")
	if err := b.ReplaceConfiguration(ctx, sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(100, time.Hour)}}, sluice.InheritProportionally); err != nil {
		t.Fatal(err)
	}
	if r, err := l.AllowN(ctx, "vip", 50); err != nil || !r.Allowed || r.Remaining != 50 {
		t.Errorf("AllowN(50) on the replaced key = %+v, %v, want allowed with 50 left", r, err)
	}
	snap, err := b.Snapshot(ctx)
	if cfg := snap.Config; err != nil || len(cfg.Bandwidths) != 1 || cfg.Bandwidths[0].Capacity() != 100 {
		t.Errorf("Snapshot().Config = %+v, %v, want capacity 100", cfg, err)
	}
}

func TestStoreFailurePolicies(t *testing.T) {
	ctx := context.Background()
	storeDown := fmt.Errorf("test: %w: connection refused", driver.ErrUnavailable)
	t.Run("closed", func(t *testing.T) {
		store, counts := newMapStore(), new(sluicetest.Counter)
		l, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Second), sluice.WithStore(store), sluice.WithObserver(counts))
		store.setFail(storeDown)
		_, err := l.Allow(ctx, "k")
		var se *sluice.StoreError
		if !errors.As(err, &se) || se.Key != "k" || !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("Allow on a failed store = %v, want a *StoreError matching ErrUnavailable", err)
		}
		if got := counts.StoreFailures(sluice.FailClosed); got != 1 {
			t.Errorf("observer saw %d closed failures, want 1", got)
		}
	})
	t.Run("open", func(t *testing.T) {
		store, counts := newMapStore(), new(sluicetest.Counter)
		l, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Second), sluice.WithStore(store), sluice.WithObserver(counts),
			sluice.WithStoreFailure(sluice.FailOpen))
		store.setFail(storeDown)
		for range 5 {
			if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
				t.Fatalf("Allow failing open = %+v, %v, want allowed", r, err)
			}
		}
		if got := counts.StoreFailures(sluice.FailOpen); got != 5 {
			t.Errorf("observer saw %d open failures, want 5", got)
		}
	})
	t.Run("local", func(t *testing.T) {
		store, counts := newMapStore(), new(sluicetest.Counter)
		clock := sluicetest.NewFakeClock(limiterStart)
		// Without the breaker, the first call after the store is back
		// goes to it (TestCircuitBreaker tests the breaker).
		l, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Second), sluice.WithStore(store), sluice.WithObserver(counts),
			sluice.WithStoreFailure(sluice.FailLocal), sluice.WithClock(clock), sluice.WithCircuitBreaker(-1))
		store.setFail(storeDown)
		var allowed int
		for range 5 {
			r, err := l.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				allowed++
			}
		}
		if allowed != 2 || counts.StoreFailures(sluice.FailLocal) != 5 {
			t.Errorf("local fallback allowed %d of 5 with %d failures seen, want 2 and 5", allowed, counts.StoreFailures(sluice.FailLocal))
		}
		store.setFail(nil)
		if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed || r.Remaining != 1 {
			t.Errorf("Allow with the store back = %+v, %v, want the store's fresh window", r, err)
		}
	})
	t.Run("bucket", func(t *testing.T) {
		store := newMapStore()
		l, _ := sluice.NewLimiter(sluice.TokenBucket(2, 1, time.Second), sluice.WithStore(store))
		b, _ := l.Bucket("k")
		store.setFail(storeDown)
		if _, err := b.AllowN(ctx, 1); !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("AllowN on a failed store = %v, want ErrUnavailable", err)
		}
	})
	t.Run("bucket local", func(t *testing.T) {
		store := newMapStore()
		b, err := newStoreBucket(store, "k", sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(2, time.Hour)}},
			sluice.WithStoreFailure(sluice.FailLocal))
		if err != nil {
			t.Fatal(err)
		}
		store.setFail(storeDown)
		var got []bool
		for range 3 {
			r, err := b.Allow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Allowed)
		}
		if fmt.Sprint(got) != "[true true false]" {
			t.Errorf("Allow ×3 on the local fallback = %v, want a bucket of 2", got)
		}
	})
}

// hangingStore never answers before its context ends; it sends the
// deadline of its first Update's context on deadline, when set.
type hangingStore struct{ deadline chan time.Time }

func (s hangingStore) Update(ctx context.Context, _ string, _ driver.UpdateFunc) error {
	select {
	case s.deadline <- deadlineOf(ctx):
	default:
	}
	<-ctx.Done()
	return fmt.Errorf("%w: %w", driver.ErrIndeterminate, ctx.Err())
}

// deadlineOf returns ctx's deadline, or the zero time when it has none.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// TestStoreTimeout: a call on a hanging store gives the store a context
// that ends at the call's start plus the store timeout, and returns the
// timeout as an indeterminate store failure. Explicit times, not a
// latency: the deadline is compared with the clock read around the call.
func TestStoreTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	store := hangingStore{deadline: make(chan time.Time, 1)}
	l, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Second), sluice.WithStore(store),
		sluice.WithStoreTimeout(timeout))
	before := time.Now()
	_, err := l.Allow(context.Background(), "k")
	after := time.Now()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, driver.ErrIndeterminate) {
		t.Errorf("Allow on a hanging store = %v, want the timeout, indeterminate", err)
	}
	if d := <-store.deadline; d.Before(before.Add(timeout)) || d.After(after.Add(timeout)) {
		t.Errorf("the store call's deadline is %v after the call's start, want the store timeout %v", d.Sub(before), timeout)
	}
	// The caller's own context is not a store failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Allow with a cancelled context = %v, want context.Canceled", err)
	}
}

// slowStore is a mapStore whose updates take a while, so that calls pile
// up behind one in flight.
type slowStore struct {
	*mapStore
	delay time.Duration
}

func (s slowStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	time.Sleep(s.delay)
	return s.mapStore.Update(ctx, key, fn)
}

// TestStoreCoalescing sends many concurrent calls for one key through a
// slow store: they must share round trips, and the limit must hold exactly.
func TestStoreCoalescing(t *testing.T) {
	store := slowStore{newMapStore(), 2 * time.Millisecond}
	l, _ := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithStore(store))
	var allowed atomic.Int64
	var wg sync.WaitGroup
	const callers, each = 32, 10
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r, err := l.Allow(context.Background(), "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 100 {
		t.Errorf("allowed %d, want exactly the limit 100", got)
	}
	if n := store.count(); n >= callers*each/2 {
		t.Errorf("%d store updates for %d calls: coalescing did not batch them", n, callers*each)
	}
	t.Logf("%d calls took %d store updates", callers*each, store.count())
}

// describeReservation is what a reservation decided, or its error, for
// comparing two.
func describeReservation(r *sluice.Reservation, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("ok %v, %d tokens, delay %v, %+v", r.OK(), r.Tokens(), r.Delay(), r.Result())
}
