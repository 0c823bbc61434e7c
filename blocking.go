package sluice

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/tokenbucket"
)

// BlockingBucket is the view of a Bucket whose calls wait for their tokens,
// Bucket4j's BlockingBucket. Waiting is fair: a call reserves its tokens
// first (overdrawing the bucket) and then sleeps, so later callers queue
// behind it instead of racing it.
type BlockingBucket struct{ b *Bucket }

// Blocking returns the blocking view of b.
func (b *Bucket) Blocking() BlockingBucket { return BlockingBucket{b} }

// TryConsume takes n tokens, waiting for them if they will be there within
// maxWait, and reports whether it took them. When they would take longer it
// returns false at once, takes nothing and does not wait.
//
// When ctx ends during the wait, the tokens are given back and ctx.Err() is
// returned. It returns an *ArgumentError for n ≤ 0 or maxWait ≤ 0, and with
// maxWait == Never when the wait would overflow.
func (bb BlockingBucket) TryConsume(ctx context.Context, n int64, maxWait time.Duration) (bool, error) {
	return bb.b.wait(ctx, "BlockingBucket.TryConsume", n, int64(maxWait))
}

// Consume takes n tokens, waiting as long as it takes for them. When ctx
// ends during the wait, the tokens are given back and ctx.Err() is returned.
// It returns an *ArgumentError for n ≤ 0 or when the wait would overflow.
func (bb BlockingBucket) Consume(ctx context.Context, n int64) error {
	_, err := bb.b.wait(ctx, "BlockingBucket.Consume", n, never)
	return err
}

// wait reserves n tokens within maxWait and sleeps until they are due. It
// reports whether it took them.
func (b *Bucket) wait(ctx context.Context, op string, n, maxWait int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	req := tokenbucket.Request{Op: tokenbucket.OpReserve, Tokens: n, MaxWait: maxWait}
	res := b.apply(b.clock.Now(), req, nil)
	if res.Code != tokenbucket.OK {
		return false, argError(op, res, req)
	}
	notify(b.listener, res.Consumed, n)
	if !res.Consumed {
		return false, nil
	}
	if err := sleepReserved(ctx, b.sleeper, b.listener, n, res.Value, b.giveBack); err != nil {
		return false, err
	}
	return true, nil
}

// sleepReserved sleeps the wait (ns) of n reserved tokens and reports it to
// listener (nil: none). When ctx ends first it gives the tokens back and
// returns ctx's error.
func sleepReserved(ctx context.Context, sleeper Sleeper, listener Listener, n, wait int64, giveBack func(n int64)) error {
	if wait == 0 {
		return nil
	}
	d := time.Duration(wait)
	if err := sleeper.Sleep(ctx, d); err != nil {
		giveBack(n)
		if listener != nil {
			listener.OnCancelled(n)
		}
		return err
	}
	if listener != nil {
		listener.OnWaited(d)
	}
	return nil
}

// giveBack returns the tokens of a reservation that will not be used.
func (b *Bucket) giveBack(n int64) {
	b.apply(b.clock.Now(), tokenbucket.Request{Op: tokenbucket.OpReturnTokens, Tokens: n}, nil)
}

// Reservation is tokens taken now for use after a delay: Bucket4j's
// SchedulingBucket for callers that schedule their own work. It is safe for
// concurrent use.
type Reservation struct {
	clock    Clock
	giveBack func(n int64)
	tokens   int64
	delay    time.Duration
	due      int64 // clock time at which the tokens are the caller's

	once sync.Once
}

// Tokens is the number of tokens reserved.
func (r *Reservation) Tokens() int64 { return r.tokens }

// Delay is how long the caller must wait, from the reservation, before
// using the tokens. It is 0 when they were there at once.
func (r *Reservation) Delay() time.Duration { return r.delay }

// Cancel gives the tokens back, if their due time has not come yet (after
// that they count as used, as in x/time/rate). Calling it again does nothing.
func (r *Reservation) Cancel() {
	r.once.Do(func() {
		if r.clock.Now() < r.due {
			r.giveBack(r.tokens)
		}
	})
}

// Reserve takes n tokens now that will be there within maxWait, overdrawing
// the bucket if need be, and returns the reservation with its delay. The
// caller waits itself. Pass Never as maxWait for no limit.
//
// When the tokens would take longer than maxWait, it returns a *MaxWaitError
// (ErrMaxWaitExceeded) and takes nothing. It returns an *ArgumentError for
// n ≤ 0, maxWait ≤ 0, or with no limit when the wait would overflow.
func (b *Bucket) Reserve(n int64, maxWait time.Duration) (*Reservation, error) {
	now := b.clock.Now()
	req := tokenbucket.Request{Op: tokenbucket.OpReserve, Tokens: n, MaxWait: int64(maxWait)}
	res := b.apply(now, req, nil)
	if res.Code != tokenbucket.OK {
		return nil, argError("Reserve", res, req)
	}
	return reserved(b.listener, b.clock, b.giveBack, now, n, maxWait, res)
}

// reserved turns a reservation decided at now into the caller's
// *Reservation, or a *MaxWaitError when its wait was over maxWait, and
// tells l, which may be nil. Bucket and KeyBucket reserve through it.
func reserved(l Listener, clock Clock, giveBack func(int64), now, n int64, maxWait time.Duration, res tokenbucket.Result) (*Reservation, error) {
	notify(l, res.Consumed, n)
	if !res.Consumed {
		return nil, &MaxWaitError{Tokens: n, Wait: res.Value, MaxWait: int64(maxWait)}
	}
	d := time.Duration(res.Value)
	if d > 0 && l != nil {
		l.OnDelayed(d)
	}
	due := now + res.Value
	if due < now {
		due = never
	}
	return &Reservation{clock: clock, giveBack: giveBack, tokens: n, delay: d, due: due}, nil
}
