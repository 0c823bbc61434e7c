package drivertest

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// testDebt runs issue 30's figures on the store, and in memory beside it:
// a token bucket of 1,000 a minute whose holds are settled, retried,
// refunded and left to expire, and a charge beyond the limit whose debt
// the refill pays before anything is admitted.
func testDebt(t *testing.T, e *env) {
	for _, where := range []string{"store", "memory"} {
		t.Run(where, func(t *testing.T) {
			newLimiter := func(clock sluice.Clock) *sluice.Limiter {
				opts := []sluice.Option{sluice.WithClock(clock)}
				if where == "store" {
					opts = append(opts, sluice.WithStore(fakeTimeStore(e.store)), sluice.WithStoreTimeout(slowStore))
				}
				l, err := sluice.NewLimiter(sluice.TokenBucket(1000, 1000, time.Minute), opts...)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			t.Run("Settle", func(t *testing.T) { testSettle(t, e, newLimiter) })
			t.Run("Charge", func(t *testing.T) { testCharge(t, e, newLimiter) })
			t.Run("RacingSettles", func(t *testing.T) { testRacingSettles(t, e, newLimiter, where == "store") })
		})
	}
}

const t0 = int64(1_700_000_000) * int64(time.Second)

// checkCost fails t unless c has the remaining tokens, debt and Settled
// wanted.
func checkCost(t *testing.T, call string, c sluice.Cost, err error, remaining, debt int64, settled bool) {
	t.Helper()
	switch {
	case err != nil:
		t.Fatalf("%s: %v", call, err)
	case c.Remaining != remaining || c.Debt != debt || c.Settled != settled:
		t.Fatalf("%s = Remaining %d, Debt %d, Settled %v; want %d, %d, %v (%+v)", call, c.Remaining, c.Debt, c.Settled, remaining, debt, settled, c)
	}
}

func testSettle(t *testing.T, e *env, newLimiter func(sluice.Clock) *sluice.Limiter) {
	clock := sluicetest.NewFakeClock(t0)
	l, k := newLimiter(clock), key(t)
	h, err := l.Hold(e.ctx, k, 100, time.Minute)
	if err == nil && (!h.Allowed || h.ID == "") {
		t.Fatalf("Hold(100) = %+v, want allowed with an ID", h)
	}
	checkCost(t, "Hold(100)", h, err, 900, 0, false)
	c, err := l.Settle(e.ctx, h.ID, 300)
	checkCost(t, "Settle(300)", c, err, 700, 0, true)
	c, err = l.Settle(e.ctx, h.ID, 300)
	checkCost(t, "Settle(300) again", c, err, 700, 0, false)

	h, err = l.Hold(e.ctx, k, 100, time.Minute)
	checkCost(t, "second Hold(100)", h, err, 600, 0, false)
	c, err = l.Settle(e.ctx, h.ID, 20)
	checkCost(t, "Settle(20)", c, err, 680, 0, true)

	// Two holds of 50 for 10s: one settled 1ns before its TTL ends, which
	// counts, and one at its end, which finds it charged its estimate.
	a, err := l.Hold(e.ctx, k, 50, 10*time.Second)
	checkCost(t, "Hold(50)", a, err, 630, 0, false)
	b, err := l.Hold(e.ctx, k, 50, 10*time.Second)
	checkCost(t, "another Hold(50)", b, err, 580, 0, false)
	clock.Advance(10*time.Second - 1)
	c, err = l.Settle(e.ctx, a.ID, 0)
	checkCost(t, "Settle(0) 1ns before the TTL ends", c, err, 630, 0, true)
	clock.Advance(1)
	c, err = l.Settle(e.ctx, b.ID, 0)
	checkCost(t, "Settle(0) as the TTL ends", c, err, 630, 0, false)

	// Refused holds take nothing and have no ID.
	h, err = l.Hold(e.ctx, k, 700, time.Minute)
	if err != nil || h.Allowed || h.ID != "" || h.Remaining != 630 {
		t.Fatalf("Hold(700) with 630 left = %+v, %v; want refused, no ID, 630 left", h, err)
	}
	if _, err := l.Settle(e.ctx, "not a hold", 1); err == nil {
		t.Fatal("Settle of a bad ID: no error")
	}
}

func testCharge(t *testing.T, e *env, newLimiter func(sluice.Clock) *sluice.Limiter) {
	clock := sluicetest.NewFakeClock(t0)
	l, k := newLimiter(clock), key(t)
	c, err := l.Charge(e.ctx, k, 1500)
	if err == nil && (c.Allowed || c.RetryAfter != time.Minute) {
		t.Fatalf("Charge(1500) = %+v, want not Allowed, RetryAfter 1m", c)
	}
	checkCost(t, "Charge(1500)", c, err, 0, 500, false)
	for _, at := range []time.Duration{0, time.Second, time.Minute - 1} {
		clock.Set(t0 + int64(at))
		if r, err := l.Allow(e.ctx, k); err != nil || r.Allowed {
			t.Fatalf("Allow at %v after the charge = %+v, %v; want refused", at, r, err)
		}
	}
	clock.Set(t0 + int64(time.Minute))
	if r, err := l.Allow(e.ctx, k); err != nil || !r.Allowed || r.Remaining != 499 {
		t.Fatalf("Allow at 1m = %+v, %v; want allowed, 499 left", r, err)
	}
	d, err := l.Debt(e.ctx, k)
	checkCost(t, "Debt at 1m", d, err, 499, 0, false)
}

// testRacingSettles settles holds from many goroutines, each hold twice:
// every hold is settled once, and the key ends with exactly the tokens
// the settled costs leave.
func testRacingSettles(t *testing.T, e *env, newLimiter func(sluice.Clock) *sluice.Limiter, shared bool) {
	clock := sluicetest.NewFakeClock(t0)
	// Two limiters on one store, as two processes would have; in memory,
	// one.
	ls := []*sluice.Limiter{newLimiter(clock)}
	if shared {
		ls = append(ls, newLimiter(clock))
	} else {
		ls = append(ls, ls[0])
	}
	k := key(t)
	const holds = 20
	ids := make([]string, holds)
	for i := range ids {
		h, err := ls[0].Hold(e.ctx, k, 10, time.Hour)
		if err != nil || !h.Allowed {
			t.Fatalf("Hold %d = %+v, %v", i, h, err)
		}
		ids[i] = h.ID
	}
	var settled sync.WaitGroup
	var mu sync.Mutex
	found := 0
	for i, id := range ids {
		for j := range 2 {
			settled.Add(1)
			go func() {
				defer settled.Done()
				// Even holds cost 25, odd ones 5: refunds and charges race.
				cost := int64(5 + 20*((i+1)%2))
				c, err := ls[j%2].Settle(e.ctx, id, cost)
				if err != nil {
					t.Error(err)
					return
				}
				if c.Settled {
					mu.Lock()
					found++
					mu.Unlock()
				}
			}()
		}
	}
	settled.Wait()
	if found != holds {
		t.Fatalf("%d settlements found their hold, want each of %d once", found, holds)
	}
	// 10 holds of 25 and 10 of 5: 300 of 1,000.
	d, err := ls[1].Debt(e.ctx, k)
	checkCost(t, "Debt after the settlements", d, err, 700, 0, false)
}
