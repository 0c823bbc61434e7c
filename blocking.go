package sluice

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/sleep"
)

// waitBound is how long a call may wait under ctx: maxWait, or the time
// left until ctx's deadline when that is sooner (byDeadline). A wait past
// the deadline would be cut short, its tokens taken for nothing, so it is
// refused at once instead.
func waitBound(ctx context.Context, maxWait int64) (bound int64, byDeadline bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return maxWait, false
	}
	if left := int64(time.Until(dl)); left < maxWait {
		return max(left, 0), true
	}
	return maxWait, false
}

// reserveFunc reserves n tokens within maxWait, for the call op.
type reserveFunc func(ctx context.Context, op string, n, maxWait int64) (*Reservation, error)

// waitN is WaitN on a bucket or key that reserve reserves on, under the
// one rule of Bucket.WaitN, KeyBucket.WaitN and Limiter.WaitN (Bucket4j's
// blocking tryConsume): it reserves n tokens due within maxWait (> 0;
// Never: no bound) and ctx's deadline, and sleeps on the reservation's
// clock until they are due, giving them back when ctx ends first. Tokens
// due later are a *MaxWaitError at once, and nothing is taken; tokens
// that can never be had with no bound (maxWait Never) are an
// *ArgumentError, since that wait would never end.
func waitN(ctx context.Context, op string, n int64, maxWait time.Duration, obs Observer, reserve reserveFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case n <= 0:
		return &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "must be positive"}
	case maxWait <= 0:
		return &ArgumentError{Op: op, Arg: "maxWait", Value: maxWait, Want: "must be positive (Never for no bound)"}
	}
	bound, byDeadline := waitBound(ctx, int64(maxWait))
	r, err := reserve(ctx, op, n, bound)
	if err != nil {
		return err
	}
	if !r.OK() {
		wait := int64(r.res.RetryAfter)
		if wait == never && maxWait == Never {
			return &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "can never be had: their wait overflows int64 nanoseconds"}
		}
		notify(obs, false, n)
		return &MaxWaitError{Tokens: n, Wait: time.Duration(wait), MaxWait: time.Duration(bound), Deadline: byDeadline && wait <= int64(maxWait)}
	}
	notify(obs, true, n)
	return r.sleep(ctx, obs)
}

// Reservation is a decision on n tokens that may be due later, as
// x/time/rate's Reservation: when OK, the tokens were taken at once and
// are the caller's after Delay, which the caller waits itself; Cancel
// gives them back if the caller will not use them. A reservation that is
// not OK took nothing; its Result says why (RetryAfter is the wait the
// tokens would have needed, Never if they never can be had).
//
// Bucket.ReserveN, KeyBucket.ReserveN and Limiter.ReserveN return one,
// under one rule: maxWait ≥ 0 bounds the delay (0: only tokens that are
// there now; Never: no bound), and a wait beyond it is a Reservation that
// is not OK, not an error. Unlike WaitN's, a maxWait of 0 is valid here:
// a reservation only now is a decision that sleeps on nothing, which a
// caller that schedules its own work may want, and Bucket4j's reserve and
// the vectors ask for it; WaitN, Bucket4j's blocking tryConsume, refuses
// it as Bucket4j does.
//
// A Reservation is safe for simultaneous use by multiple goroutines.
type Reservation struct {
	ok     bool
	tokens int64
	res    Result
	delay  time.Duration
	clock  Clock
	due    int64 // clock time at which the tokens are the caller's
	// undo gives the tokens back at now; nil when there is nothing to give
	// back (not OK, or nothing was taken).
	undo func(now int64)
	once sync.Once
}

// newReservation is the reservation of n tokens decided at now with res,
// which undo gives back (nil: nothing to give back).
func newReservation(clock Clock, now, n int64, res policy.Result, undo func(now int64)) *Reservation {
	r := &Reservation{ok: res.Allowed, tokens: n, res: resultOf(res), delay: Never, clock: clock, due: never}
	if r.ok {
		r.delay = time.Duration(res.Wait)
		r.due = policy.SatAdd(now, res.Wait)
		r.res.RetryAfter = 0
		r.undo = undo
	}
	return r
}

// OK reports whether the tokens were reserved: they are the caller's after
// Delay.
func (r *Reservation) OK() bool { return r.ok }

// Tokens is the number of tokens asked for.
func (r *Reservation) Tokens() int64 { return r.tokens }

// Delay is how long, from the reservation, the caller must wait before
// using the tokens: 0 when they were there at once, Never when the
// reservation is not OK.
func (r *Reservation) Delay() time.Duration { return r.delay }

// Result is the decision: Allowed is OK; RetryAfter is 0 when OK, else
// the wait the tokens would have needed. Remaining is what the key (or
// bucket) has left when the tokens are due, the moment the caller goes
// ahead; ResetAfter counts from the reservation; Limit is the policy's.
func (r *Reservation) Result() Result { return r.res }

// Cancel is shorthand for CancelAt at the time of the reservation's clock.
func (r *Reservation) Cancel() { r.cancelAt(r.clock.Now()) }

// CancelAt gives the tokens back at t, the caller having decided not to
// use them, as x/time/rate's CancelAt does: once they are due (t after the
// reservation's time plus Delay) they count as used and nothing happens.
// When nothing was taken after the reservation, the key or bucket goes
// back exactly to what it was before it; otherwise the policy gives back
// what it can without touching the requests granted after it (see the
// policies' docs). It never leaves more tokens than there were before the
// reservation. A reservation in a store is given back with a call of the
// store timeout; if that fails, the tokens stay taken. Calls after the
// first do nothing.
func (r *Reservation) CancelAt(t time.Time) { r.cancelAt(unixNano(t)) }

func (r *Reservation) cancelAt(now int64) {
	r.once.Do(func() {
		if r.undo != nil && now <= r.due {
			r.undo(now)
		}
	})
}

// sleep waits on the reservation's clock for the tokens of an OK
// reservation and reports the wait to obs (nil: none). When ctx ends
// first, it gives the tokens back and returns ctx's error.
func (r *Reservation) sleep(ctx context.Context, obs Observer) error {
	d := r.Delay()
	if d == 0 {
		return nil
	}
	tell(obs, Event{Kind: EventWaiting, Tokens: r.tokens, Duration: d})
	if err := sleep.On(ctx, r.clock, d); err != nil {
		r.Cancel()
		tell(obs, Event{Kind: EventCancelled, Tokens: r.tokens})
		return err
	}
	tell(obs, Event{Kind: EventWaited, Duration: d})
	return nil
}

// bucketReceipt is what a reservation did to a token bucket's state, for
// tokenbucket.Undo.
type bucketReceipt struct {
	cfg           *tokenbucket.Config
	before, after tokenbucket.State
	due, n        int64
}

// undo gives the reservation back from st, a state of cfg, at now, and
// reports whether st changed. A bucket reconfigured since keeps its
// tokens.
func (rc *bucketReceipt) undo(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
	if cfg != rc.cfg && !sameConfig(cfg, rc.cfg) {
		return false
	}
	return tokenbucket.Undo(cfg, st, rc.before, rc.after, rc.due, now, rc.n)
}

// reserveBucket reserves n tokens within maxWait on st, a bucket state of
// cfg, at now, as Reserve does, and returns the result, whether st changed
// and the receipt to give them back.
func reserveBucket(cfg *tokenbucket.Config, st tokenbucket.State, now, n, maxWait int64) (policy.Result, bool, *bucketReceipt) {
	before := append(tokenbucket.State(nil), st...)
	res, ok := tokenbucket.Reserve(cfg, st, now, n, maxWait)
	if !ok {
		return res, false, nil
	}
	rc := &bucketReceipt{cfg: cfg, before: before, after: append(tokenbucket.State(nil), st...),
		due: policy.SatAdd(now, res.Wait), n: n}
	if res.Wait > 0 { // what is left when the tokens are due
		then := append(tokenbucket.State(nil), st...)
		tokenbucket.Refill(cfg, then, rc.due)
		res.Remaining = max(tokenbucket.Available(then), 0)
	}
	return res, true, rc
}

// Reserve is shorthand for ReserveN(1, maxWait).
func (b *Bucket) Reserve(maxWait time.Duration) (*Reservation, error) {
	return b.ReserveN(1, maxWait)
}

// ReserveN takes n tokens now that will be there within maxWait (0: only
// if they are there now; Never: no bound), overdrawing the bucket if need
// be, and returns the reservation; the caller waits its Delay itself, and
// may Cancel it. Tokens that would take longer, or never come, are a
// reservation that is not OK, and nothing is taken.
//
// It returns an *ArgumentError for n ≤ 0 or maxWait < 0.
func (b *Bucket) ReserveN(n int64, maxWait time.Duration) (*Reservation, error) {
	r, err := b.reserve(context.Background(), "Bucket.ReserveN", n, int64(maxWait))
	if err != nil {
		return nil, err
	}
	notifyReserved(b.observer, r)
	return r, nil
}

// Wait is shorthand for WaitN(ctx, 1, maxWait).
func (b *Bucket) Wait(ctx context.Context, maxWait time.Duration) error {
	return b.WaitN(ctx, 1, maxWait)
}

// WaitN takes n tokens, waiting for them if they will be there within
// maxWait: Bucket4j's blocking tryConsume(n, maxWait), under the rule
// Limiter.WaitN states. Waiting is fair: the call reserves its tokens
// first (overdrawing the bucket) and then sleeps, so later callers queue
// behind it instead of racing it.
func (b *Bucket) WaitN(ctx context.Context, n int64, maxWait time.Duration) error {
	if n > 0 && maxWait > 0 && b.takeAtOnce(ctx, n) {
		return nil
	}
	return waitN(ctx, "Bucket.WaitN", n, maxWait, b.observer, b.reserve)
}

// reserve is ReserveN without the observer.
func (b *Bucket) reserve(_ context.Context, op string, n, maxWait int64) (*Reservation, error) {
	now := b.clock.Now()
	b.mu.Lock()
	copy(b.scratch, b.state)
	res, changed, rc := reserveBucket(b.cfg, b.scratch, now, n, maxWait)
	if changed {
		b.state, b.scratch = b.scratch, b.state
	}
	limit := limitOf(b.cfg)
	b.mu.Unlock()
	if res.Code != policy.OK {
		return nil, limiterError(op, res, n, maxWait, limit)
	}
	var undo func(int64)
	if rc != nil {
		undo = func(now int64) { b.undo(rc, now) }
	}
	return newReservation(b.clock, now, n, res, undo), nil
}

// takeAtOnce is a blocking call's path for n tokens that are there at
// once: it takes them as a reservation of no wait would, and tells the
// observer as the call would. Such tokens need no reservation, as there is
// nothing to sleep and nothing to give back, so nothing to allocate, as in
// x/time/rate's Wait. It takes nothing when ctx has ended, which the
// reservation's path reports; the caller checks its arguments' bounds.
func (b *Bucket) takeAtOnce(ctx context.Context, n int64) bool {
	if ctx.Err() != nil || !b.take(n) {
		return false
	}
	notify(b.observer, true, n)
	return true
}

// take takes n tokens if they are there now, as a reservation of no wait,
// and reports whether it did.
func (b *Bucket) take(n int64) bool {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	copy(b.scratch, b.state)
	res, ok := tokenbucket.Reserve(b.cfg, b.scratch, now, n, 0)
	if !ok || res.Code != policy.OK || !res.Allowed {
		return false
	}
	b.state, b.scratch = b.scratch, b.state
	return true
}

// undo gives back the reservation of rc at now.
func (b *Bucket) undo(rc *bucketReceipt, now int64) {
	b.mu.Lock()
	copy(b.scratch, b.state)
	if rc.undo(b.cfg, b.scratch, now) {
		b.state, b.scratch = b.scratch, b.state
	}
	b.mu.Unlock()
}

// notifyReserved tells obs, which may be nil, of the reservation r.
func notifyReserved(obs Observer, r *Reservation) {
	if obs == nil {
		return
	}
	notify(obs, r.ok, r.tokens)
	if d := r.Delay(); r.ok && d > 0 {
		obs.Observe(Event{Kind: EventDelayed, Duration: d})
	}
}

// limitOf is the smallest capacity of cfg, a bucket's Result.Limit (the
// machine calls it its Quota).
func limitOf(cfg *tokenbucket.Config) int64 {
	return tokenbucket.NewMulti(cfg).Quota()
}

// sameConfig reports whether a and b are the same bucket configuration.
func sameConfig(a, b *tokenbucket.Config) bool { return slices.Equal(a.Bandwidths, b.Bandwidths) }
