// Package limitcore is the half of httplimit's Middleware and grpclimit's
// Interceptor that does not depend on the protocol: the checks of their
// limits, a cost function's answer, the decision of several limits on one
// request, and the wait a rejection gives. Each package keeps its own
// types, options, answers and headers; internal/reqkey holds their keys.
package limitcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/policy"
)

// Problem is an argument out of its bounds: where, the value given and the
// bound it broke. Each package returns it as its own ConfigError.
type Problem struct{ Field, Value, Want string }

// CheckLimits checks the n limits of a middleware, which limit(i)
// describes: there is at least one, and each has a name of printable
// ASCII that no other has, a limiter and a key function. It returns the
// first problem, or nil.
func CheckLimits(n int, limit func(i int) (name string, l *sluice.Limiter, hasKey bool)) *Problem {
	if n == 0 {
		return &Problem{Field: "limits", Value: "[]", Want: "must hold at least one limit"}
	}
	seen := make(map[string]bool, n)
	for i := range n {
		name, l, hasKey := limit(i)
		field := fmt.Sprintf("limits[%d]", i)
		switch {
		case !printable(name):
			return &Problem{Field: field + ".Name", Value: strconv.Quote(name), Want: "must be non-empty printable ASCII"}
		case seen[name]:
			return &Problem{Field: field + ".Name", Value: strconv.Quote(name), Want: "must be unique"}
		case l == nil:
			return &Problem{Field: field + ".Limiter", Value: "nil", Want: "is required"}
		case !hasKey:
			return &Problem{Field: field + ".Key", Value: "nil", Want: "is required"}
		}
		seen[name] = true
	}
	return nil
}

// CheckSettle checks the Settle of limits[i], whose limiter is l: it is
// not negative, and when positive the policy can owe tokens, as settling
// a hold for more than its estimate needs. It returns the problem, or nil.
func CheckSettle(i int, settle time.Duration, l *sluice.Limiter) *Problem {
	field := fmt.Sprintf("limits[%d].Settle", i)
	if settle < 0 {
		return &Problem{Field: field, Value: settle.String(), Want: "must not be negative"}
	}
	if p, ok := l.Policy().(interface{ HoldsDebt() bool }); settle > 0 && (!ok || !p.HoldsDebt()) {
		return &Problem{Field: field, Value: settle.String(), Want: fmt.Sprintf("a limiter whose policy can owe tokens, not %s", l.Policy())}
	}
	return nil
}

// CostReport is what a handler reported of its request's cost with its
// package's Charge, for SettleHolds. The zero value reports nothing. It
// is safe for simultaneous use by multiple goroutines.
type CostReport struct {
	n        atomic.Int64
	reported atomic.Bool
}

// Add reports that the request cost n ≥ 0 tokens more: the reports add
// up. A negative n changes nothing.
func (r *CostReport) Add(n int64) {
	if n < 0 {
		return
	}
	r.n.Add(n)
	r.reported.Store(true)
}

// SettleHolds settles the holds of ds with the cost reported in rep, or
// at their estimates when it reported none, on a context that the
// client's going away does not end: the cost was incurred all the same.
// It passes a hold it could not settle to failed, by the index of its
// limit, its key, the cost and the error, for the package to log: by
// value, so that ds, often on the caller's stack, stays there.
func SettleHolds(ctx context.Context, ds []Decision, rep *CostReport, failed func(ctx context.Context, index int, key string, n int64, err error)) {
	ctx = context.WithoutCancel(ctx)
	for i := range ds {
		d := &ds[i]
		if d.HoldID == "" {
			continue
		}
		n := d.Cost
		if rep.reported.Load() {
			n = rep.n.Load()
		}
		if _, err := d.Limiter.Settle(ctx, d.HoldID, n); err != nil {
			failed(ctx, d.Index, d.Key, n, err)
		}
	}
}

// printable reports whether s is non-empty printable ASCII, which a
// header's structured-field string and a status message hold as it is.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}

// Cost checks what a cost function returned: its error, or a cost that is
// not positive, is an error for the package to prefix with the limit.
func Cost(cost int64, err error) (int64, error) {
	if err != nil {
		return 0, fmt.Errorf("cost: %w", err)
	}
	if cost <= 0 {
		return 0, fmt.Errorf("cost must be positive, got %d", cost)
	}
	return cost, nil
}

// Decision is what one limit decides on a request.
type Decision struct {
	// Index is the limit's in the package's list.
	Index int
	// Limiter, Key and Cost are the limit's limiter, and the request's
	// key and cost under it.
	Limiter *sluice.Limiter
	Key     string
	Cost    int64
	// Res is the limiter's answer, once asked.
	Res sluice.Result
	// Taken is true when Res is AllowN's: the request took its cost.
	Taken bool
	// Defer is set by the package for a limit that counts a request only
	// by its outcome: Decide peeks at it and takes nothing, and Settle
	// takes the cost once the outcome is known.
	Defer bool
	// HoldTTL, when positive, takes the cost as a hold of that many ns
	// (sluice.Limiter.Hold) rather than with AllowN, whose ID is then
	// HoldID, to be settled with the request's actual cost.
	HoldTTL int64
	HoldID  string
	// Slot is the slot a limit of a concurrency policy acquired for the
	// request (Taken then), which Hold keeps until the request ends.
	Slot sluice.Slot
}

// Decide asks the limiters of ds about a request. With one limit that is
// a single AllowN. With several it first peeks at every limiter, and
// rejects without taking anything when one of them would; only then does
// it take the request from each in turn. A request that a concurrent one
// overtook between the peek and the take can still be rejected by a
// later limit after the earlier ones took it: limits shared by several
// processes cannot be taken from atomically together.
//
// It returns nil when every limit let the request through. When a limiter
// fails, it returns that decision and the limiter's error. When a limit
// rejects the request, it returns the rejecting decision with the longest
// wait (RetryAfter), since all of them must pass; a limit that would have
// let the request through but was only peeked at then reports as
// Remaining what is left without the request (its cost is added back,
// exactly: an allowed Remaining is what there was less the cost, for
// every policy).
//
// A cost above a policy's limit, which some policies refuse as an
// argument (sluice.ErrTokensAboveLimit), is the rejection the others
// give: a Result that can never pass (RetryAfter sluice.Never), so that
// every policy answers such a request alike; a limiter in shadow mode
// lets it through as any of its refusals (ShadowRejected).
//
// A deferred decision (Defer) is only peeked at: a request that its
// limit would refuse now is rejected (alone, after an AllowN, which takes
// nothing when it refuses, so that a penalty box starts its block), and
// one it lets through takes nothing yet, its Remaining being what is left before the request
// (its cost added back, as for a limit only peeked at above), until
// Settle counts it.
func Decide(ctx context.Context, ds []Decision) (*Decision, error) {
	for i := range ds {
		if HoldsSlots(ds[i].Limiter) {
			ds[i].Cost = 1 // a request holds one slot, whatever its cost
		}
	}
	if len(ds) > 1 {
		rejected := false
		for i := range ds {
			d := &ds[i]
			res, err := d.Limiter.PeekN(ctx, d.Key, d.Cost)
			if d.Res, err = neverPasses(ctx, d, res, err); err != nil {
				return d, err
			}
			rejected = rejected || !d.Res.Allowed
		}
		if rejected {
			return worst(ds), nil
		}
	}
	for i := range ds {
		d := &ds[i]
		if d.Defer {
			if len(ds) == 1 {
				res, err := d.Limiter.PeekN(ctx, d.Key, d.Cost)
				if d.Res, err = neverPasses(ctx, d, res, err); err != nil {
					return d, err
				}
				if !d.Res.Allowed {
					// Asked again with AllowN, which takes nothing when
					// it refuses, so that a policy that acts on a
					// refusal (a penalty box's block) sees this one.
					res, err := d.Limiter.AllowN(ctx, d.Key, d.Cost)
					if d.Res, err = neverPasses(ctx, d, res, err); err != nil {
						return d, err
					}
					if !d.Res.Allowed {
						return d, nil
					}
					// The limit freed up in between: counted now.
					d.Defer, d.Taken = false, true
				}
			}
			continue
		}
		res, err := take(ctx, d)
		if d.Res, err = neverPasses(ctx, d, res, err); err != nil {
			releaseAll(ds)
			return d, err
		}
		if !d.Res.Allowed {
			releaseAll(ds)
			return worst(ds), nil
		}
		d.Taken = true
	}
	for i := range ds {
		if d := &ds[i]; d.Defer && !d.Res.ShadowRejected {
			d.Res.Remaining = policy.SatAdd(d.Res.Remaining, d.Cost)
		}
	}
	return nil, nil
}

// Settle takes the cost of every deferred decision of ds, of a request
// that Decide let through, whose outcome counts says counts against its
// limit (counts is given the decision's Index): the cost is taken even when the limit has since filled up (a
// refusal then takes nothing, the limit being full anyway). It takes it
// under ctx without its cancellation, since a client that hangs up must
// not escape the count of its request. It returns the first decision
// whose limiter failed, with the error, having tried every one.
func Settle(ctx context.Context, ds []Decision, counts func(index int) bool) (*Decision, error) {
	ctx = context.WithoutCancel(ctx)
	var failed *Decision
	var ferr error
	for i := range ds {
		d := &ds[i]
		if !d.Defer || !counts(d.Index) {
			continue
		}
		res, err := d.Limiter.AllowN(ctx, d.Key, d.Cost)
		if err != nil && failed == nil {
			failed, ferr = d, err
			continue
		}
		d.Res, d.Taken = res, res.Allowed
	}
	return failed, ferr
}

// Deferred reports whether ds has a deferred decision, to settle.
func Deferred(ds []Decision) bool {
	for i := range ds {
		if ds[i].Defer {
			return true
		}
	}
	return false
}

// Holding reports whether ds has a hold, to settle with the request's
// actual cost.
func Holding(ds []Decision) bool {
	for i := range ds {
		if ds[i].HoldID != "" {
			return true
		}
	}
	return false
}

// take takes d's cost: a slot when its limiter holds slots, else AllowN.
func take(ctx context.Context, d *Decision) (sluice.Result, error) {
	if d.HoldTTL > 0 {
		c, err := d.Limiter.Hold(ctx, d.Key, d.Cost, time.Duration(d.HoldTTL))
		d.HoldID = c.ID
		return c.Result, err
	}
	if !HoldsSlots(d.Limiter) {
		return d.Limiter.AllowN(ctx, d.Key, d.Cost)
	}
	s, err := d.Limiter.Acquire(ctx, d.Key, 0, 0)
	if s.Allowed {
		d.Slot = s
	}
	return s.Result, err
}

// HoldsSlots reports whether l's policy holds slots (sluice.Concurrency):
// a request then holds one for as long as it runs.
func HoldsSlots(l *sluice.Limiter) bool {
	p, ok := l.Policy().(interface{ Slots() bool })
	return ok && p.Slots()
}

// releaseTimeout bounds the release of a request's slots, which runs
// after the request's own context may have ended.
const releaseTimeout = 5 * time.Second

// releaseAll gives back the slots the decisions of ds hold, for a request
// refused after some were acquired, or ended.
func releaseAll(ds []Decision) {
	for i := range ds {
		d := &ds[i]
		if d.Slot.ID == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_, _ = d.Limiter.Release(ctx, d.Slot)
		cancel()
		d.Slot = sluice.Slot{}
	}
}

// Hold keeps the slots that ds acquired for a request until the release
// it returns is called, when the request ends: it renews them every
// third of their TTL while ctx, the request's, lasts. Once ctx ends (the
// client went away) it stops renewing, so that a handler that never
// returns holds its slots at most one TTL more. release must be called
// once, deferred so that a panic calls it too; it is a no-op when ds
// hold no slot.
func Hold(ctx context.Context, ds []Decision) (release func()) {
	// The held slots are copied, so that ds, on its caller's stack, does
	// not escape to the renewing goroutine.
	var held []Decision
	every := time.Duration(0)
	for i := range ds {
		if s := ds[i].Slot; s.ID != 0 {
			held = append(held, ds[i])
			if every == 0 || s.TTL/3 < every {
				every = s.TTL / 3
			}
		}
	}
	if held == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(max(every, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for i := range held {
				if d := &held[i]; d.Slot.ID != 0 {
					if r, err := d.Limiter.Renew(ctx, d.Slot); err == nil && r.Allowed {
						d.Slot = r
					}
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		releaseAll(held)
	}
}

// neverPasses returns res, err of d's limiter, and for a cost above the
// limit of a policy that refuses it as an argument error, the rejection
// the other policies give: a Result that can never pass, with what the
// key has now.
func neverPasses(ctx context.Context, d *Decision, res sluice.Result, err error) (sluice.Result, error) {
	if !errors.Is(err, sluice.ErrTokensAboveLimit) {
		return res, err
	}
	// The limiter refused the cost before touching the key's state: a
	// Peek of 1 token describes it.
	now, perr := d.Limiter.Peek(ctx, d.Key)
	if perr != nil {
		return sluice.Result{}, perr
	}
	if now.Shadow { // a limiter in shadow mode refuses nobody
		now.ShadowRejected, now.RetryAfter = true, sluice.Never
		return now, nil
	}
	if now.Allowed { // an allowed Remaining is what there was less the token
		now.Remaining = policy.SatAdd(now.Remaining, 1)
	}
	now.Allowed, now.RetryAfter = false, sluice.Never
	return now, nil
}

// worst adds back the cost of the decisions that allowed the request
// without taking it, and returns the rejecting decision with the longest
// wait.
func worst(ds []Decision) *Decision {
	var w *Decision
	for i := range ds {
		d := &ds[i]
		if d.Res.Allowed && !d.Taken && !d.Res.ShadowRejected {
			d.Res.Remaining = policy.SatAdd(d.Res.Remaining, d.Cost)
		}
		if !d.Res.Allowed && (w == nil || d.Res.RetryAfter > w.Res.RetryAfter) {
			w = d
		}
	}
	return w
}

// Seconds is d in whole seconds, rounded up, as HTTP's Retry-After and
// the rate-limit headers give it: a client that waits that long never
// comes back early.
func Seconds(d time.Duration) int64 { return policy.CeilDiv(int64(d), int64(time.Second)) }
