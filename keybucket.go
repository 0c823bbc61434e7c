package sluice

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// KeyBucket is the token bucket of one key of a Limiter whose policy is
// a token bucket (Limiter.Bucket): Bucket4j's bucket proxy. It has the
// operations of Bucket, each taking a context and returning an error,
// since the state may live in a store shared by many processes; with a
// store every call is one atomic update of the key's state. It has no
// TryConsume, Bucket's allocation-free hot path: AllowN decides.
//
// As Bucket4j's proxy, its first call creates the key's state, even a
// call that only reads (AvailableTokens, PeekN), so that the key's refill
// counts from then: an intervally bandwidth refills a period after that
// call, and initial tokens are the tokens the key has then. Snapshot
// alone creates nothing: inspecting keys leaves no state behind. The
// Limiter's own calls (AllowN, PeekN) store a key's state only when they
// change it.
//
// A store's failure is handled as WithStoreFailure says: FailClosed
// returns a *StoreError, FailLocal runs the call on an in-memory bucket of
// this process, and FailOpen lets the calls that decide whether tokens
// pass (Allow, Peek, Reserve, Wait and their N forms) through, with a
// Result that is Allowed and otherwise zero, and returns a *StoreError
// from the calls that read, add or reconfigure.
//
// KeyBucket is safe for simultaneous use by multiple goroutines.
type KeyBucket struct {
	key      string
	clock    Clock
	observer Observer
	backend  engine.Buckets // creates the key's state at its first call
	inspect  engine.Buckets // stores nothing it does not change, for Snapshot
}

// update runs f on the key's bucket and returns where it ran.
func (b *KeyBucket) update(ctx context.Context, f engine.BucketFunc) (engine.Buckets, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.backend.Update(ctx, b.key, f)
}

// run runs req on the key's bucket; with peek, it takes nothing (see
// giveBack). limit is the bucket's smallest capacity.
func (b *KeyBucket) run(ctx context.Context, req tokenbucket.Request, peek bool) (res tokenbucket.Result, limit int64, err error) {
	_, err = b.update(ctx, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		var changed bool
		res, changed = tokenbucket.Apply(cfg, st, now, req)
		limit = limitOf(cfg)
		if peek {
			giveBack(st, res, req.Tokens)
			changed = false
		}
		return changed
	})
	return res, limit, err
}

// apply runs req on the key's bucket. A store's failure is a *StoreError
// under every policy but FailLocal; decide is for the calls that let
// tokens through under FailOpen.
func (b *KeyBucket) apply(ctx context.Context, op string, req tokenbucket.Request) (tokenbucket.Result, error) {
	res, _, err := b.run(ctx, req, false)
	if err != nil {
		return tokenbucket.Result{}, storeError(op, b.key, err)
	}
	return res, argError(op, res, req)
}

// decide runs AllowN, or PeekN with peek, on the key's bucket. Under
// FailOpen a store's failure lets the tokens through.
func (b *KeyBucket) decide(ctx context.Context, op string, n int64, peek bool) (Result, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsumeAndReturnRemaining, Tokens: n}
	res, limit, err := b.run(ctx, req, peek)
	switch {
	case failedOpen(err):
		res = tokenbucket.Result{Consumed: true}
	case err != nil:
		return Result{}, storeError(op, b.key, err)
	case res.Code != tokenbucket.OK:
		return Result{}, argError(op, res, req)
	}
	if !peek {
		notify(b.observer, res.Consumed, n)
	}
	return bucketResult(res, limit), nil
}

// Allow is shorthand for AllowN(ctx, 1).
func (b *KeyBucket) Allow(ctx context.Context) (Result, error) { return b.AllowN(ctx, 1) }

// AllowN takes n tokens if they are all there now, and returns the
// decision, as Bucket.AllowN.
func (b *KeyBucket) AllowN(ctx context.Context, n int64) (Result, error) {
	return b.decide(ctx, "KeyBucket.AllowN", n, false)
}

// Peek is shorthand for PeekN(ctx, 1).
func (b *KeyBucket) Peek(ctx context.Context) (Result, error) { return b.PeekN(ctx, 1) }

// PeekN reports what AllowN(ctx, n) would decide now, taking nothing, as
// Bucket.PeekN.
func (b *KeyBucket) PeekN(ctx context.Context, n int64) (Result, error) {
	return b.decide(ctx, "KeyBucket.PeekN", n, true)
}

// TryConsumeAsMuchAsPossible is Bucket.TryConsumeAsMuchAsPossible.
func (b *KeyBucket) TryConsumeAsMuchAsPossible(ctx context.Context) (int64, error) {
	return b.tryConsumeUpTo(ctx, "KeyBucket.TryConsumeAsMuchAsPossible", math.MaxInt64)
}

// TryConsumeUpTo is Bucket.TryConsumeUpTo.
func (b *KeyBucket) TryConsumeUpTo(ctx context.Context, limit int64) (int64, error) {
	return b.tryConsumeUpTo(ctx, "KeyBucket.TryConsumeUpTo", limit)
}

func (b *KeyBucket) tryConsumeUpTo(ctx context.Context, op string, limit int64) (int64, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeAsMuchAsPossible, Tokens: limit}
	res, err := b.apply(ctx, op, req)
	if err != nil {
		return 0, err
	}
	if res.Value > 0 {
		notify(b.observer, true, res.Value)
	}
	return res.Value, nil
}

// ConsumeIgnoringRateLimits is Bucket.ConsumeIgnoringRateLimits.
func (b *KeyBucket) ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeIgnoringRateLimits, Tokens: n}
	res, err := b.apply(ctx, "KeyBucket.ConsumeIgnoringRateLimits", req)
	if err != nil {
		return 0, err
	}
	notify(b.observer, true, n)
	return time.Duration(res.Value), nil
}

// AddTokens is Bucket.AddTokens.
func (b *KeyBucket) AddTokens(ctx context.Context, n int64) error {
	_, err := b.apply(ctx, "KeyBucket.AddTokens", tokenbucket.Request{Op: tokenbucket.OpAddTokens, Tokens: n})
	return err
}

// ForceAddTokens is Bucket.ForceAddTokens.
func (b *KeyBucket) ForceAddTokens(ctx context.Context, n int64) error {
	_, err := b.apply(ctx, "KeyBucket.ForceAddTokens", tokenbucket.Request{Op: tokenbucket.OpForceAddTokens, Tokens: n})
	return err
}

// Reset fills the bucket, as Bucket.Reset.
func (b *KeyBucket) Reset(ctx context.Context) error {
	_, err := b.apply(ctx, "KeyBucket.Reset", tokenbucket.Request{Op: tokenbucket.OpReset})
	return err
}

// AvailableTokens is Bucket.AvailableTokens.
func (b *KeyBucket) AvailableTokens(ctx context.Context) (int64, error) {
	res, err := b.apply(ctx, "KeyBucket.AvailableTokens", tokenbucket.Request{Op: tokenbucket.OpAvailable})
	return res.Value, err
}

// Snapshot returns the state of the key's bucket now, for diagnostics, as
// Bucket.Snapshot: the configuration in force (the stored one when the
// key has state), the tokens of each bandwidth and the time to a full
// bucket. It changes nothing and stores nothing: a key without state is
// shown as the new bucket it would be.
func (b *KeyBucket) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	var s Snapshot
	_, err := b.inspect.Update(ctx, b.key, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		tokenbucket.Refill(cfg, st, now)
		s.fill(cfg, st, now)
		return false
	})
	if err != nil {
		return Snapshot{}, storeError("KeyBucket.Snapshot", b.key, err)
	}
	return s, nil
}

// ReplaceConfiguration switches the key's bucket to cfg, carrying its
// tokens over by inherit, as Bucket.ReplaceConfiguration. The key keeps
// cfg although its limiter is configured otherwise, until the limiter's
// own configuration changes or the key's state expires (its bucket
// refilled), when it is a new bucket of the limiter's policy again.
//
// It needs a key whose state carries its configuration: a key in a
// store, or of a limiter with WithPolicyFor. An in-memory Limiter's keys
// follow its policy: on them it returns an error matching
// errors.ErrUnsupported, and a key is given its own configuration with
// WithPolicyFor.
func (b *KeyBucket) ReplaceConfiguration(ctx context.Context, cfg BucketConfig, inherit Inheritance) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := replacement("KeyBucket.ReplaceConfiguration", cfg, inherit, b.clock)
	if err != nil {
		return err
	}
	return storeError("KeyBucket.ReplaceConfiguration", b.key, b.backend.Replace(ctx, b.key, c, tokenbucket.Strategy(inherit)))
}

// Reserve is shorthand for ReserveN(ctx, 1, maxWait).
func (b *KeyBucket) Reserve(ctx context.Context, maxWait time.Duration) (*Reservation, error) {
	return b.ReserveN(ctx, 1, maxWait)
}

// ReserveN takes n tokens now that will be there within maxWait, as
// Bucket.ReserveN: the caller waits Delay itself, and may Cancel the
// reservation, which gives the tokens back where they were taken (the
// store, or the in-memory fallback of FailLocal). When the store fails and
// the bucket fails open, the reservation is OK at once and takes nothing.
func (b *KeyBucket) ReserveN(ctx context.Context, n int64, maxWait time.Duration) (*Reservation, error) {
	r, err := b.reserve(ctx, "KeyBucket.ReserveN", n, int64(maxWait))
	if err != nil {
		return nil, err
	}
	notifyReserved(b.observer, r)
	return r, nil
}

// Wait is shorthand for WaitN(ctx, 1, maxWait).
func (b *KeyBucket) Wait(ctx context.Context, maxWait time.Duration) error {
	return b.WaitN(ctx, 1, maxWait)
}

// WaitN takes n tokens, waiting for them if they will be there within
// maxWait, under the rule Limiter.WaitN states.
func (b *KeyBucket) WaitN(ctx context.Context, n int64, maxWait time.Duration) error {
	return waitN(ctx, "KeyBucket.WaitN", n, maxWait, b.observer, b.reserve)
}

// reserve is ReserveN without the observer.
func (b *KeyBucket) reserve(ctx context.Context, op string, n, maxWait int64) (*Reservation, error) {
	var (
		res policy.Result
		rc  *bucketReceipt
		at  int64
	)
	ran, err := b.update(ctx, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		var changed bool
		at = now
		res, changed, rc = reserveBucket(cfg, st, now, n, maxWait)
		return changed
	})
	switch {
	case failedOpen(err):
		return newReservation(b.clock, b.clock.Now(), n, policy.Result{Allowed: true}, nil), nil
	case err != nil:
		return nil, storeError(op, b.key, err)
	case res.Code != policy.OK:
		return nil, limiterError(op, res, n, maxWait, 0)
	}
	var undo func(int64)
	if rc != nil {
		undo = func(now int64) {
			_, _ = ran.Update(context.Background(), b.key, func(cfg *tokenbucket.Config, st tokenbucket.State, _ int64) bool {
				return rc.undo(cfg, st, now)
			})
		}
	}
	return newReservation(b.clock, at, n, res, undo), nil
}
