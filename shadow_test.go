package sluice_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestShadowDecidesAsWithout runs a limiter in shadow mode beside the same
// limiter without it, on the same requests: the shadow one lets every
// request through, flags as ShadowRejected exactly those the other
// refused, keeps the same state (Remaining), and tells its observer of
// each flagged one as a shadow rejection.
func TestShadowDecidesAsWithout(t *testing.T) {
	policies := []sluice.Policy{
		sluice.FixedWindow(3, time.Second),
		sluice.TokenBucket(3, 1, 500*ms),
		sluice.SlidingWindow(3, time.Second),
		sluice.GCRA(2, 2, time.Second),
	}
	for _, p := range policies {
		for _, stored := range []bool{false, true} {
			name := p.String()
			if stored {
				name += "/store"
			}
			t.Run(name, func(t *testing.T) {
				clock := sluicetest.NewFakeClock(t0)
				var shadowCount sluicetest.Counter
				shadowEvents := 0
				obs := sluice.ObserverFunc(func(e sluice.Event) {
					shadowCount.Observe(e)
					if e.Shadow {
						shadowEvents++
					}
				})
				opts := []sluice.Option{sluice.WithClock(clock)}
				if stored {
					opts = append(opts, sluice.WithStore(memstore.New()))
				}
				plain, err := sluice.NewLimiter(p, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if stored {
					opts[1] = sluice.WithStore(memstore.New())
				}
				shadow, err := sluice.NewLimiter(p, append(opts, sluice.WithShadow(true), sluice.WithObserver(obs))...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				refused := 0
				for i := range 40 {
					clock.Advance(time.Duration(i%7) * 60 * ms)
					n := int64(1 + i%2)
					want, err := plain.AllowN(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					got, err := shadow.AllowN(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if !want.Allowed {
						refused++
					}
					if !got.Allowed || !got.Shadow || got.ShadowRejected != !want.Allowed || got.Remaining != want.Remaining ||
						got.RetryAfter != want.RetryAfter {
						t.Fatalf("request %d: shadow AllowN = %+v, want allowed, shadow, ShadowRejected %v and the plain %+v", i, got, !want.Allowed, want)
					}
					peek, err := shadow.PeekN(ctx, "k", 1)
					if err != nil {
						t.Fatal(err)
					}
					if !peek.Allowed || !peek.Shadow {
						t.Fatalf("PeekN = %+v, want allowed and shadow", peek)
					}
				}
				if refused == 0 {
					t.Fatal("the plain limiter refused nothing: the test shows nothing")
				}
				if shadowEvents != refused || int(shadowCount.Events(sluice.EventRejected)) != refused {
					t.Errorf("observer told %d shadow rejections (%d rejections), want %d", shadowEvents, shadowCount.Events(sluice.EventRejected), refused)
				}
			})
		}
	}
}

// TestShadowWaitsNever checks that ReserveN and WaitN never delay in
// shadow mode, and take nothing for what the policy refused.
func TestShadowWaitsNever(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	l, err := sluice.NewLimiter(sluice.TokenBucket(2, 1, time.Second), sluice.WithClock(clock), sluice.WithShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 2 {
		if err := l.WaitN(ctx, "k", 1, time.Minute); err != nil {
			t.Fatalf("WaitN %d: %v", i, err)
		}
	}
	r, err := l.ReserveN(ctx, "k", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Delay() != 0 || !r.Result().ShadowRejected || r.Result().RetryAfter != time.Second {
		t.Errorf("ReserveN on an empty bucket = OK %v, delay %v, %+v; want OK at once, shadow-rejected, retry after 1s", r.OK(), r.Delay(), r.Result())
	}
	r.Cancel() // gives nothing back: it took nothing
	if err := l.WaitN(ctx, "k", 1, time.Minute); err != nil {
		t.Errorf("WaitN on an empty bucket: %v", err)
	}
	if clock.Slept() != 0 {
		t.Errorf("slept %v, want never", clock.Slept())
	}
	res, err := l.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !res.ShadowRejected || res.Remaining != 0 {
		t.Errorf("Peek after = %+v, want the bucket still empty", res)
	}
}

// A limiter in shadow mode lets every request through, and says which
// ones its policy refused: roll a new limit out, watch what it would do,
// then drop WithShadow.
func ExampleWithShadow() {
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithShadow(true))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		res, err := l.Allow(context.Background(), "alice")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %v, would have been rejected %v, remaining %d\n", res.Allowed, res.ShadowRejected, res.Remaining)
	}
	// Output:
	// allowed true, would have been rejected false, remaining 1
	// allowed true, would have been rejected false, remaining 0
	// allowed true, would have been rejected true, remaining 0
}
