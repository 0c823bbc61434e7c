package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// doomSleeper is a fake clock's sleeper on which a sleep of a context
// marked doomed ends that context, as a caller's deadline or a client that
// went away would, and the others advance the clock. It records every
// sleep asked for.
type doomSleeper struct {
	*sluicetest.FakeClock
	slept []time.Duration
}

type doomKey struct{}

// doomed returns a context that ends during its first sleep.
func doomed() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	return context.WithValue(ctx, doomKey{}, cancel)
}

func (s *doomSleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.slept = append(s.slept, d)
	if cancel, ok := ctx.Value(doomKey{}).(context.CancelFunc); ok {
		cancel()
		return ctx.Err()
	}
	return s.FakeClock.Sleep(ctx, d)
}

// reservingPolicies take 1 token, then give the next one 1s later.
func reservingPolicies() []sluice.Policy {
	return []sluice.Policy{
		sluice.TokenBucket(1, 1, time.Second),
		sluice.LeakyBucket(1, 1, time.Second),
		sluice.GCRA(1, 1, time.Second),
		sluice.FixedWindow(1, time.Second),
		sluice.AlignedFixedWindow(1, time.Second),
		sluice.Shaper(1, time.Second, 5),
		sluice.Compound(sluice.FixedWindow(1, time.Second), sluice.TokenBucket(3, 1, time.Second)),
		sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(1, time.Second), sluice.Simple(5, time.Minute)}}),
	}
}

// TestWaitGivesTokensBack: a Limiter.Wait whose context ends while it
// sleeps gives its token back, in memory and on a store, so the next
// caller waits one interval, not two.
func TestWaitGivesTokensBack(t *testing.T) {
	for _, p := range reservingPolicies() {
		for _, where := range []string{"memory", "store"} {
			t.Run(where+"/"+p.String(), func(t *testing.T) {
				sl := &doomSleeper{FakeClock: sluicetest.NewFakeClock(t0)}
				opts := []sluice.Option{sluice.WithClock(sl)}
				if where == "store" {
					opts = append(opts, sluice.WithStore(newMapStore()))
				}
				l, err := sluice.NewLimiter(p, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
					t.Fatalf("Allow = %+v, %v", r, err)
				}
				if err := l.WaitN(doomed(), "k", 1, time.Minute); !errors.Is(err, context.Canceled) {
					t.Fatalf("Wait with a context that ends = %v, want context.Canceled", err)
				}
				if err := l.WaitN(ctx, "k", 1, time.Minute); err != nil {
					t.Fatal(err)
				}
				if want := []time.Duration{time.Second, time.Second}; fmt.Sprint(sl.slept) != fmt.Sprint(want) {
					t.Errorf("the two waits slept %v, want %v: the first one's token is given back", sl.slept, want)
				}
			})
		}
	}
}

// TestWaitPastDeadline: a wait that would outlast the context's deadline
// fails at once with a *MaxWaitError matching context.DeadlineExceeded,
// takes nothing and does not sleep, on every blocking call.
func TestWaitPastDeadline(t *testing.T) {
	// A token an hour: the deadline, a minute away, comes first.
	hourly := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(1, sluice.Intervally(1, time.Hour))}}
	newStoreBucket := func(t *testing.T, clock *sluicetest.FakeClock) *sluice.KeyBucket {
		b, err := newStoreBucket(newMapStore(), "k", hourly, sluice.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	newLimiterBucket := func(t *testing.T, clock *sluicetest.FakeClock) *sluice.KeyBucket {
		l, err := sluice.NewLimiter(sluice.BucketPolicy(hourly), sluice.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Bucket("k")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		// run empties the limiter, then makes the blocking call; left
		// reports what the limiter has after it: 0 tokens, or a RetryAfter
		// of 1h, when it took nothing.
		run func(t *testing.T, ctx context.Context, clock *sluicetest.FakeClock) (left func() int64, err error)
	}{
		{"Limiter.Wait", func(t *testing.T, ctx context.Context, clock *sluicetest.FakeClock) (func() int64, error) {
			l, err := sluice.NewLimiter(sluice.BucketPolicy(hourly), sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			l.Allow(context.Background(), "k")
			return func() int64 {
				r, _ := l.PeekN(context.Background(), "k", 1)
				return int64(r.RetryAfter - time.Hour)
			}, l.WaitN(ctx, "k", 1, sluice.Never)
		}},
		{"Bucket.WaitN, no bound", func(t *testing.T, ctx context.Context, clock *sluicetest.FakeClock) (func() int64, error) {
			b, err := sluice.NewBucket(hourly, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			b.TryConsume(1)
			return b.AvailableTokens, b.WaitN(ctx, 1, sluice.Never)
		}},
		{"Bucket.WaitN within 2h", func(t *testing.T, ctx context.Context, clock *sluicetest.FakeClock) (func() int64, error) {
			b, err := sluice.NewBucket(hourly, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			b.TryConsume(1)
			return b.AvailableTokens, b.WaitN(ctx, 1, 2*time.Hour)
		}},
		{"KeyBucket.WaitN in memory", func(t *testing.T, ctx context.Context, clock *sluicetest.FakeClock) (func() int64, error) {
			b := newLimiterBucket(t, clock)
			b.Allow(context.Background())
			return func() int64 { n, _ := b.AvailableTokens(context.Background()); return n }, b.WaitN(ctx, 1, sluice.Never)
		}},
		{"KeyBucket.WaitN on a store", func(t *testing.T, ctx context.Context, clock *sluicetest.FakeClock) (func() int64, error) {
			b := newStoreBucket(t, clock)
			b.Allow(context.Background())
			return func() int64 { n, _ := b.AvailableTokens(context.Background()); return n }, b.WaitN(ctx, 1, 2*time.Hour)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			left, err := tt.run(t, ctx, clock)
			var mw *sluice.MaxWaitError
			if !errors.As(err, &mw) || !mw.Deadline || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, sluice.ErrMaxWaitExceeded) {
				t.Fatalf("%s with a deadline in a minute and a wait of an hour = %v, want a *MaxWaitError of the deadline", tt.name, err)
			}
			if mw.Wait != time.Hour || mw.MaxWait <= 0 || mw.MaxWait > time.Minute {
				t.Errorf("MaxWaitError = %+v, want a wait of 1h over at most a minute", *mw)
			}
			if clock.Slept() != 0 {
				t.Errorf("slept %v before failing, want 0", clock.Slept())
			}
			if got := left(); got != 0 {
				t.Errorf("%s took a token: %d left, want 0", tt.name, got)
			}
		})
	}
}

// TestReservationCancelEveryPath: a reservation cancelled at once, nothing
// taken since, leaves the bucket or key as it was, on every path: a
// Bucket, a Limiter's key in memory and on a store, and a KeyBucket in
// memory and on a store.
func TestReservationCancelEveryPath(t *testing.T) {
	ctx := context.Background()
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(2, 2*time.Second)}}
	type path struct {
		// reserve reserves 2 tokens on a bucket of 2 that lost 1 (due in
		// 1s); look describes the bucket or key.
		reserve func() (*sluice.Reservation, error)
		look    func() string
	}
	limiterPath := func(t *testing.T, clock *sluicetest.FakeClock, opts ...sluice.Option) path {
		l, err := sluice.NewLimiter(sluice.LeakyBucket(2, 1, time.Second), append(opts, sluice.WithClock(clock))...)
		if err != nil {
			t.Fatal(err)
		}
		l.Allow(ctx, "k")
		return path{
			func() (*sluice.Reservation, error) { return l.ReserveN(ctx, "k", 2, time.Minute) },
			func() string { r, err := l.PeekN(ctx, "k", 1); return fmt.Sprint(r, err) },
		}
	}
	keyBucketPath := func(b *sluice.KeyBucket) path {
		b.Allow(ctx)
		return path{
			func() (*sluice.Reservation, error) { return b.ReserveN(ctx, 2, time.Minute) },
			func() string { n, err := b.AvailableTokens(ctx); return fmt.Sprint(n, err) },
		}
	}
	paths := map[string]func(t *testing.T, clock *sluicetest.FakeClock) path{
		"Bucket": func(t *testing.T, clock *sluicetest.FakeClock) path {
			b := newBucket(t, clock, cfg.Bandwidths)
			b.TryConsume(1)
			return path{
				func() (*sluice.Reservation, error) { return b.ReserveN(2, time.Minute) },
				func() string { return fmt.Sprint(b.AvailableTokens()) },
			}
		},
		"Limiter in memory": func(t *testing.T, clock *sluicetest.FakeClock) path { return limiterPath(t, clock) },
		"Limiter on a store": func(t *testing.T, clock *sluicetest.FakeClock) path {
			return limiterPath(t, clock, sluice.WithStore(newMapStore()))
		},
		"KeyBucket in memory": func(t *testing.T, clock *sluicetest.FakeClock) path {
			l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.Bucket("k")
			if err != nil {
				t.Fatal(err)
			}
			return keyBucketPath(b)
		},
		"KeyBucket on a store": func(t *testing.T, clock *sluicetest.FakeClock) path {
			b, err := newStoreBucket(newMapStore(), "k", cfg, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			return keyBucketPath(b)
		},
	}
	for name, newPath := range paths {
		t.Run(name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			p := newPath(t, clock)
			before := p.look()
			r, err := p.reserve()
			if err != nil || !r.OK() || r.Delay() != time.Second {
				t.Fatalf("Reserve(2) = %v, %v; want OK, due in 1s", r, err)
			}
			if during := p.look(); during == before {
				t.Fatalf("the reservation took nothing: %s before and after", before)
			}
			r.Cancel()
			if after := p.look(); after != before {
				t.Errorf("after Cancel: %s, want %s as before the reservation", after, before)
			}
		})
	}
}

// TestCancelWhereTaken: a reservation taken on the in-memory fallback
// while the store failed is given back there, not to the store's state of
// the key once the store is back.
func TestCancelWhereTaken(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(t0)
	store := newMapStore()
	l, err := sluice.NewLimiter(sluice.TokenBucket(3, 1, time.Second), sluice.WithStore(store),
		sluice.WithStoreFailure(sluice.FailLocal), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l.Allow(ctx, "k") // the store's key: 2 left
	store.setFail(errors.New("down"))
	r, err := l.ReserveN(ctx, "k", 2, time.Minute) // in memory: 1 left
	if err != nil || !r.OK() {
		t.Fatalf("Reserve on the fallback = %v, %v", r, err)
	}
	store.setFail(nil)
	r.Cancel()
	if res, _ := l.PeekN(ctx, "k", 1); res.Remaining != 1 {
		t.Errorf("the store's key after the fallback's Cancel: %+v, want 1 remaining after a peek of 1, as before", res)
	}
	store.setFail(errors.New("down"))
	if res, _ := l.PeekN(ctx, "k", 3); !res.Allowed {
		t.Errorf("the fallback's key after Cancel: %+v, want its 3 tokens back", res)
	}
}

// TestWaitAsReservation: Wait takes tokens that are there at once without
// a reservation, and must decide as the reservation would: a Limiter's
// WaitN, in memory, and a Bucket's, against ReserveN and a sleep of its
// Delay on a twin, over a run of calls of 1 to 3 tokens and waits of 1ns
// to 1.5s, some more than the limit; the clocks must agree after each
// call, and so must what a Peek finds.
func TestWaitAsReservation(t *testing.T) {
	type waiter struct {
		wait    func(n int64, maxWait time.Duration) error
		reserve func(n int64, maxWait time.Duration) (*sluice.Reservation, error)
		peek    func() sluice.Result
	}
	limiter := func(t *testing.T, p sluice.Policy, c *sluicetest.FakeClock) waiter {
		l, err := sluice.NewLimiter(p, sluice.WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		return waiter{
			func(n int64, d time.Duration) error { return l.WaitN(ctx, "k", n, d) },
			func(n int64, d time.Duration) (*sluice.Reservation, error) { return l.ReserveN(ctx, "k", n, d) },
			func() sluice.Result { r, _ := l.Peek(ctx, "k"); return r },
		}
	}
	newBucket := func(t *testing.T, c *sluicetest.FakeClock) *sluice.Bucket {
		b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Simple(2, time.Second), sluice.Simple(5, time.Minute)}}, sluice.WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bucket := func(t *testing.T, c *sluicetest.FakeClock) waiter {
		b, ctx := newBucket(t, c), context.Background()
		return waiter{
			func(n int64, d time.Duration) error { return b.WaitN(ctx, n, d) },
			b.ReserveN,
			b.Peek,
		}
	}
	type pair struct {
		name string
		make func(*testing.T, *sluicetest.FakeClock) waiter
	}
	pairs := []pair{{"bucket", bucket}}
	for _, p := range reservingPolicies() {
		pairs = append(pairs, pair{p.String(), func(t *testing.T, c *sluicetest.FakeClock) waiter { return limiter(t, p, c) }})
	}
	for _, pp := range pairs {
		t.Run(pp.name, func(t *testing.T) {
			ca, cb := sluicetest.NewFakeClock(t0), sluicetest.NewFakeClock(t0)
			a, b := pp.make(t, ca), pp.make(t, cb)
			waited := 0
			for i := range 200 {
				n := int64(1 + i%3)
				maxWait := time.Duration(i%4)*500*time.Millisecond + 1 // WaitN's must be positive
				errA := a.wait(n, maxWait)
				r, errB := b.reserve(n, maxWait)
				if errB == nil && r.OK() {
					cb.Advance(r.Delay())
				}
				switch {
				case errB != nil:
					if errA == nil || errA.Error() != strings.Replace(errB.Error(), "ReserveN", "WaitN", 1) {
						t.Fatalf("call %d (%d tokens, %v): Wait = %v, ReserveN = %v", i, n, maxWait, errA, errB)
					}
				case r.OK() != (errA == nil):
					t.Fatalf("call %d (%d tokens, %v): Wait = %v, reservation OK = %v", i, n, maxWait, errA, r.OK())
				case errA != nil && !errors.Is(errA, sluice.ErrMaxWaitExceeded):
					t.Fatalf("call %d: Wait = %v, want a MaxWaitError", i, errA)
				case errA == nil && r.Delay() == 0:
					waited++
				}
				if ca.Now() != cb.Now() || a.peek() != b.peek() {
					t.Fatalf("call %d (%d tokens, %v): clock %d and %+v after Wait, %d and %+v after ReserveN",
						i, n, maxWait, ca.Now(), a.peek(), cb.Now(), b.peek())
				}
				ca.Advance(300 * time.Millisecond)
				cb.Advance(300 * time.Millisecond)
			}
			if waited == 0 {
				t.Error("no call found its tokens there at once")
			}
		})
	}
}

// TestWaitOneRule: Bucket.WaitN, KeyBucket.WaitN and Limiter.WaitN follow
// one rule, Bucket4j's blocking tryConsume's: maxWait must be positive, a
// wait beyond it is a *MaxWaitError that takes nothing, and a wait that
// can never end with no bound is an *ArgumentError.
func TestWaitOneRule(t *testing.T) {
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)}}
	type subject struct {
		wait  func(ctx context.Context, n int64, maxWait time.Duration) error
		avail func() int64
	}
	subjects := map[string]func(t *testing.T, c *sluicetest.FakeClock) subject{
		"Bucket": func(t *testing.T, c *sluicetest.FakeClock) subject {
			b := newBucket(t, c, cfg.Bandwidths)
			return subject{b.WaitN, b.AvailableTokens}
		},
		"KeyBucket": func(t *testing.T, c *sluicetest.FakeClock) subject {
			b, err := newStoreBucket(newMapStore(), "k", cfg, sluice.WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			return subject{b.WaitN, func() int64 { n, _ := b.AvailableTokens(context.Background()); return n }}
		},
		"Limiter": func(t *testing.T, c *sluicetest.FakeClock) subject {
			l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := l.Bucket("k")
			return subject{func(ctx context.Context, n int64, d time.Duration) error { return l.WaitN(ctx, "k", n, d) },
				func() int64 { s, _ := b.Snapshot(context.Background()); return s.AvailableTokens }}
		},
	}
	for name, make := range subjects {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := sluicetest.NewFakeClock(t0)
			s := make(t, clock)
			var ae *sluice.ArgumentError
			for _, d := range []time.Duration{0, -time.Second} {
				if err := s.wait(ctx, 1, d); !errors.As(err, &ae) || ae.Arg != "maxWait" {
					t.Errorf("WaitN(1, %v) = %v, want an *ArgumentError of maxWait", d, err)
				}
			}
			var mw *sluice.MaxWaitError
			if err := s.wait(ctx, 5, 400*ms); !errors.As(err, &mw) || mw.Wait != 500*ms || mw.MaxWait != 400*ms {
				t.Errorf("WaitN(5, 400ms) = %v, want a *MaxWaitError of a 500ms wait", err)
			}
			// A wait has no capacity check; tokens whose wait overflows
			// can never be had.
			if err := s.wait(ctx, math.MaxInt64, time.Hour); !errors.As(err, &mw) || mw.Wait != sluice.Never {
				t.Errorf("WaitN(MaxInt64, 1h) = %v, want a *MaxWaitError of a wait of Never", err)
			}
			if err := s.wait(ctx, math.MaxInt64, sluice.Never); !errors.As(err, &ae) || ae.Arg != "tokens" {
				t.Errorf("WaitN(MaxInt64, Never) = %v, want an *ArgumentError of tokens", err)
			}
			if n := s.avail(); n != 0 || clock.Slept() != 0 {
				t.Errorf("after the refused waits: %d tokens, slept %v; want nothing taken, no sleep", n, clock.Slept())
			}
			if err := s.wait(ctx, 5, 500*ms); err != nil || clock.Slept() != 500*ms {
				t.Errorf("WaitN(5, 500ms) = %v after %v, want nil after 500ms", err, clock.Slept())
			}
		})
	}
}
