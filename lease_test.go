package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestWithLeaseArguments(t *testing.T) {
	good := sluice.Lease{Min: 1, Max: 10, TTL: time.Second}
	tests := []struct {
		name  string
		p     sluice.Policy
		lease sluice.Lease
		want  error
	}{
		{"min 0", sluice.GCRA(10, 10, time.Second), sluice.Lease{Min: 0, Max: 10, TTL: time.Second}, sluice.ErrInvalidArgument},
		{"max below min", sluice.GCRA(10, 10, time.Second), sluice.Lease{Min: 5, Max: 4, TTL: time.Second}, sluice.ErrInvalidArgument},
		{"ttl 0", sluice.GCRA(10, 10, time.Second), sluice.Lease{Min: 1, Max: 4}, sluice.ErrInvalidArgument},
		{"sliding log", sluice.SlidingLog(10, time.Second), good, errors.ErrUnsupported},
		{"sliding window", sluice.SlidingWindow(10, time.Second), good, errors.ErrUnsupported},
		{"shaper", sluice.Shaper(10, time.Second, 3), good, errors.ErrUnsupported},
		{"compound", sluice.Compound(sluice.FixedWindow(8, time.Second)), good, errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluice.NewLimiter(tt.p, sluice.WithLease(tt.lease), sluice.WithStore(newMapStore()))
			var ae *sluice.ArgumentError
			if !errors.Is(err, tt.want) || !errors.As(err, &ae) || ae.Arg != "WithLease" {
				t.Errorf("NewLimiter(%s, WithLease(%v)) = %v, want an *ArgumentError for WithLease matching %v", tt.p, tt.lease, err, tt.want)
			}
		})
	}
	// A lease is of one policy's state: a policy per key cannot have one.
	perKey := sluice.WithPolicyFor(func(context.Context, string) (sluice.Policy, error) { return sluice.GCRA(10, 10, time.Second), nil })
	_, err := sluice.NewLimiter(sluice.GCRA(10, 10, time.Second), sluice.WithLease(good), sluice.WithStore(newMapStore()), perKey)
	var ae *sluice.ArgumentError
	if !errors.Is(err, errors.ErrUnsupported) || !errors.As(err, &ae) || ae.Arg != "WithLease" {
		t.Errorf("NewLimiter(WithLease, WithPolicyFor) = %v, want an *ArgumentError for WithLease matching errors.ErrUnsupported", err)
	}
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(10, time.Second), sluice.TokenBucket(10, 1, time.Second), sluice.LeakyBucket(10, 1, time.Second),
		sluice.GCRA(10, 10, time.Second), sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second)}}),
		sluice.Calendar(10, time.Time{}, 1, 0),
	} {
		if _, err := sluice.NewLimiter(p, sluice.WithLease(good), sluice.WithStore(newMapStore())); err != nil {
			t.Errorf("NewLimiter(%s, WithLease(%v)) = %v, want a limiter", p, good, err)
		}
	}
}

// TestLeaseRoundTrips checks that a leased limiter goes to the store once
// per lease, not once per decision, and that its results stay honest.
func TestLeaseRoundTrips(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(1000, time.Minute),
		sluice.TokenBucket(1000, 1, time.Hour),
		sluice.GCRA(1000, 1, time.Hour),
		sluice.Calendar(1000, time.Time{}, 1, 0),
	} {
		t.Run(p.Kind(), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(limiterStart)
			st := newMapStore()
			l, err := sluice.NewLimiter(p, sluice.WithClock(clock), sluice.WithStore(st),
				sluice.WithLease(sluice.Lease{Min: 99, Max: 99, TTL: time.Second}))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 500 {
				r, err := l.Allow(ctx, "k")
				if err != nil || !r.Allowed {
					t.Fatalf("Allow %d = %+v, %v, want allowed", i+1, r, err)
				}
				// This process's lease plus the shared state at its last
				// update: 1000 − the calls so far.
				if want := int64(1000 - i - 1); r.Remaining != want {
					t.Fatalf("Allow %d: Remaining = %d, want %d", i+1, r.Remaining, want)
				}
			}
			// Leases of 1 + 99 tokens: 5 updates for 500 decisions.
			if got := st.count(); got != 5 {
				t.Errorf("store updates for 500 decisions = %d, want 5", got)
			}
		})
	}
}

// TestLeaseRefusal checks a refusal under leasing: the store's answer for
// the tokens the lease cannot cover, with its RetryAfter, then answered
// from this process until that has passed.
func TestLeaseRefusal(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	st := newMapStore()
	l, err := sluice.NewLimiter(sluice.FixedWindow(10, time.Minute), sluice.WithClock(clock), sluice.WithStore(st),
		sluice.WithLease(sluice.Lease{Min: 4, Max: 4, TTL: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
			t.Fatalf("Allow %d = %+v, %v, want allowed", i+1, r, err)
		}
	}
	clock.Advance(10 * time.Second)
	r, err := l.Allow(ctx, "k")
	if err != nil || r.Allowed || r.RetryAfter != 50*time.Second || r.Remaining != 0 {
		t.Fatalf("Allow 11 = %+v, %v, want refused with RetryAfter 50s and 0 left", r, err)
	}
	updates := st.count()
	clock.Advance(10 * time.Second)
	r, err = l.Allow(ctx, "k")
	if err != nil || r.Allowed || r.RetryAfter != 40*time.Second {
		t.Fatalf("Allow 12 = %+v, %v, want refused with RetryAfter 40s", r, err)
	}
	if got := st.count(); got != updates {
		t.Errorf("a refusal within the last one's RetryAfter went to the store (%d updates, want %d)", got, updates)
	}
	// The window ends: the next one's tokens, and the lease does not
	// carry the old window's into it.
	clock.Advance(40 * time.Second)
	for i := range 10 {
		if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
			t.Fatalf("new window: Allow %d = %+v, %v, want allowed", i+1, r, err)
		}
	}
	if r, _ := l.Allow(ctx, "k"); r.Allowed {
		t.Errorf("new window: Allow 11 allowed, want refused: a window admits at most its limit")
	}
}

// TestLeaseWindowBound checks that a fixed window's leases end with the
// window: tokens leased in one window are never spent in the next.
func TestLeaseWindowBound(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	st := newMapStore()
	opts := []sluice.Option{sluice.WithClock(clock), sluice.WithStore(st),
		sluice.WithLease(sluice.Lease{Min: 50, Max: 50, TTL: time.Hour})}
	a, err := sluice.NewLimiter(sluice.FixedWindow(100, time.Minute), opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sluice.NewLimiter(sluice.FixedWindow(100, time.Minute), opts...)
	if err != nil {
		t.Fatal(err)
	}
	// b opens the window; a takes 1 + 50 near its end and spends 1.
	if r, _ := b.Allow(ctx, "k"); !r.Allowed {
		t.Fatal("first Allow refused")
	}
	clock.Advance(59 * time.Second)
	if r, _ := a.Allow(ctx, "k"); !r.Allowed {
		t.Fatal("first Allow refused")
	}
	clock.Advance(time.Second) // the next window
	var admitted int
	for range 200 {
		if r, _ := a.Allow(ctx, "k"); r.Allowed {
			admitted++
		}
		if r, _ := b.Allow(ctx, "k"); r.Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Errorf("the second window admitted %d, want exactly its limit 100", admitted)
	}
}

// TestLeaseCalendarBound: a calendar's lease ends with its period, at
// midnight in its zone: two processes, one of which took a lease a second
// before, admit exactly the limit in the new day.
func TestLeaseCalendarBound(t *testing.T) {
	ctx := context.Background()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	clock := sluicetest.NewFakeClock(time.Date(2026, 3, 7, 23, 59, 0, 0, ny).UnixNano())
	st := newMapStore()
	opts := []sluice.Option{sluice.WithClock(clock), sluice.WithStore(st),
		sluice.WithLease(sluice.Lease{Min: 50, Max: 50, TTL: time.Hour})}
	daily := sluice.Calendar(100, time.Date(2026, 1, 1, 0, 0, 0, 0, ny), 0, 1)
	a, err := sluice.NewLimiter(daily, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sluice.NewLimiter(daily, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Allow(ctx, "k"); !r.Allowed {
		t.Fatal("first Allow refused")
	}
	clock.Advance(59 * time.Second)
	if r, _ := a.Allow(ctx, "k"); !r.Allowed {
		t.Fatal("first Allow refused")
	}
	clock.Advance(time.Second) // midnight: March 8, a 23-hour day
	var admitted int
	for range 200 {
		if r, _ := a.Allow(ctx, "k"); r.Allowed {
			admitted++
		}
		if r, _ := b.Allow(ctx, "k"); r.Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Errorf("the new day admitted %d, want exactly its limit 100", admitted)
	}
	clock.Advance(23*time.Hour - time.Nanosecond)
	if r, _ := a.Allow(ctx, "k"); r.Allowed {
		t.Errorf("1ns before the day's end: allowed %+v", r)
	}
	clock.Advance(time.Nanosecond)
	if r, _ := a.Allow(ctx, "k"); !r.Allowed {
		t.Errorf("at the next midnight: refused %+v", r)
	}
}

// TestLeaseIdleProcess checks the under-admission bound when load moves:
// a process that stops holds at most Max tokens out of the others' reach,
// and loses them when its lease expires.
func TestLeaseIdleProcess(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	st := newMapStore()
	const max = 20
	opts := []sluice.Option{sluice.WithClock(clock), sluice.WithStore(st),
		sluice.WithLease(sluice.Lease{Min: 5, Max: max, TTL: time.Second})}
	p := sluice.TokenBucket(1000, 1, time.Hour) // no refill to speak of
	a, _ := sluice.NewLimiter(p, opts...)
	b, _ := sluice.NewLimiter(p, opts...)
	var admitted int64
	// a is busy, then stops with what is left of its lease.
	for range 100 {
		if r, _ := a.Allow(ctx, "k"); r.Allowed {
			admitted++
		}
	}
	// b takes the rest.
	for range 2000 {
		if r, _ := b.Allow(ctx, "k"); r.Allowed {
			admitted++
		}
	}
	if admitted > 1000 || admitted < 1000-max {
		t.Errorf("admitted %d, want between the limit less Max (%d) and the limit 1000", admitted, 1000-max)
	}
	clock.Advance(2 * time.Second) // a's lease expired
	if r, _ := a.Allow(ctx, "k"); r.Allowed {
		t.Errorf("a spent its lease after it expired")
	}
}

// TestLeaseConcurrent runs limiters standing for processes, each with
// goroutines, on one memstore key that does not refill, for each policy
// that leases: together they admit at most the limit, and at least the
// limit less what their last leases held.
func TestLeaseConcurrent(t *testing.T) {
	const (
		procs      = 4
		goroutines = 8
		calls      = 300
		limit      = 5000
		max        = 64
	)
	ctx := context.Background()
	for _, p := range []sluice.Policy{
		sluice.GCRA(limit, 1, time.Hour),
		sluice.TokenBucket(limit, 1, time.Hour),
		sluice.FixedWindow(limit, time.Hour),
		sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Simple(limit, time.Hour), sluice.Simple(2*limit, 2*time.Hour),
		}}),
	} {
		t.Run(p.Kind(), func(t *testing.T) {
			st := memstore.New()
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for range procs {
				l, err := sluice.NewLimiter(p, sluice.WithStore(st),
					sluice.WithLease(sluice.Lease{Min: 1, Max: max, TTL: time.Minute}))
				if err != nil {
					t.Fatal(err)
				}
				for range goroutines {
					wg.Go(func() {
						for range calls {
							r, err := l.Allow(ctx, "hot")
							switch {
							case err != nil:
								failed.Add(1)
							case r.Allowed:
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if failed.Load() != 0 {
				t.Errorf("%d calls failed", failed.Load())
			}
			if got := admitted.Load(); got > limit || got < limit-procs*max {
				t.Errorf("admitted %d, want in [limit − P×Max, limit] = [%d, %d]", got, limit-procs*max, limit)
			}
		})
	}
}

// TestLeaseStoreFailure checks that a store failure while taking a lease
// gets the failure policy's answer, and that the tokens the lease still
// held are not lost to it.
func TestLeaseStoreFailure(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	st := newMapStore()
	l, err := sluice.NewLimiter(sluice.TokenBucket(100, 1, time.Hour), sluice.WithClock(clock), sluice.WithStore(st),
		sluice.WithStoreFailure(sluice.FailClosed), sluice.WithCircuitBreaker(-1),
		sluice.WithLease(sluice.Lease{Min: 3, Max: 3, TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
		t.Fatalf("Allow = %+v, %v, want allowed", r, err)
	}
	st.setFail(fmt.Errorf("test: %w: down", driver.ErrUnavailable))
	// 3 leased tokens are left: a request of 5 needs the store, which
	// fails, and the 3 stay the lease's.
	var se *sluice.StoreError
	if _, err := l.AllowN(ctx, "k", 5); !errors.As(err, &se) || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("AllowN(5) with the store down = %v, want a *StoreError matching driver.ErrUnavailable", err)
	}
	for i := range 3 {
		if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
			t.Fatalf("Allow %d from the lease with the store down = %+v, %v, want allowed", i+1, r, err)
		}
	}
	if _, err := l.Allow(ctx, "k"); !errors.As(err, &se) {
		t.Errorf("Allow past the lease with the store down = %v, want a *StoreError", err)
	}
}
