package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestPolicyAloneAndInCompound runs every policy alone and inside a
// compound beside a member that never limits but keeps the key alive for
// a day, over the same timeline with idle gaps long enough for the policy's
// own state to expire: the decisions must be the same. (A token bucket in
// a compound kept its refill schedule from the key's first use, where the
// same bucket alone starts a new one after being idle.)
func TestPolicyAloneAndInCompound(t *testing.T) {
	ctx := context.Background()
	keeper := sluice.FixedWindow(1<<40, 24*time.Hour)
	for _, p := range storePolicies() {
		if p.String() == sluice.NoLimit().String() {
			continue // no state to keep; its Remaining is above any other member's
		}
		for _, where := range []string{"memory", "store"} {
			t.Run(where+"/"+p.String(), func(t *testing.T) {
				clock := sluicetest.NewFakeClock(limiterStart)
				newLimiter := func(p sluice.Policy) *sluice.Limiter {
					opts := []sluice.Option{sluice.WithClock(clock)}
					if where == "store" {
						opts = append(opts, sluice.WithStore(newMapStore())) // one each: they use the same key
					}
					l, err := sluice.NewLimiter(p, opts...)
					if err != nil {
						t.Fatal(err)
					}
					return l
				}
				alone, inside := newLimiter(p), newLimiter(sluice.Compound(p, keeper))
				rng := rand.New(rand.NewPCG(3, uint64(len(p.String()))))
				for i := range 400 {
					n := int64(rng.IntN(3) + 1)
					var a, b string
					if rng.IntN(4) == 0 {
						ra, ea := alone.ReserveN(ctx, "k", n, 700*time.Millisecond)
						rb, eb := inside.ReserveN(ctx, "k", n, 700*time.Millisecond)
						if errors.Is(ea, errors.ErrUnsupported) && errors.Is(eb, errors.ErrUnsupported) {
							continue
						}
						a, b = reservationOf(ra, ea), reservationOf(rb, eb)
					} else {
						ra, ea := alone.AllowN(ctx, "k", n)
						rb, eb := inside.AllowN(ctx, "k", n)
						a = fmt.Sprint(ra.Allowed, ra.Remaining, ra.RetryAfter, ea)
						b = fmt.Sprint(rb.Allowed, rb.Remaining, rb.RetryAfter, eb)
					}
					if a != b {
						t.Fatalf("call %d at +%v: alone %s, in a compound %s", i, time.Duration(clock.Now()-limiterStart), a, b)
					}
					gap := time.Duration(rng.IntN(120)) * time.Millisecond
					if rng.IntN(8) == 0 {
						gap = time.Duration(rng.IntN(10_000)) * time.Millisecond // idle
					}
					clock.Advance(gap)
				}
			})
		}
	}
}

// reservationOf describes what a reservation decided, the parts a policy
// decides alone (a compound's ResetAfter is its longest member's).
func reservationOf(r *sluice.Reservation, err error) string {
	if err != nil {
		return err.Error()
	}
	res := r.Result()
	return fmt.Sprint(r.OK(), r.Delay(), res.Remaining, res.RetryAfter)
}

// TestNestedCompoundLimit: a compound reports the limit of the member
// that decided, through a compound among its members too, in memory and on
// a store, as its Peek does: AllowN's Limit comes from the decision's
// index into the members' limits, Peek's from the members' own results.
func TestNestedCompoundLimit(t *testing.T) {
	ctx := context.Background()
	p := sluice.Compound(sluice.Compound(sluice.FixedWindow(5, time.Second), sluice.FixedWindow(50, time.Minute)),
		sluice.GCRA(3, 3, time.Second))
	for _, where := range []string{"memory", "store"} {
		clock := sluicetest.NewFakeClock(limiterStart)
		opts := []sluice.Option{sluice.WithClock(clock)}
		if where == "store" {
			opts = append(opts, sluice.WithStore(newMapStore()))
		}
		l, err := sluice.NewLimiter(p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 7))
		seen := map[int64]bool{}
		for i := range 300 {
			n := int64(rng.IntN(3) + 1)
			peek, err := l.PeekN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			if res.Limit != peek.Limit || res.Allowed != peek.Allowed {
				t.Fatalf("%s, call %d: AllowN(%d) = %+v, but PeekN said %+v", where, i, n, res, peek)
			}
			seen[res.Limit] = true
			clock.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		for _, limit := range []int64{3, 5, 50} {
			if !seen[limit] {
				t.Errorf("%s: no decision reported the limit %d; seen %v", where, limit, seen)
			}
		}
	}
}
