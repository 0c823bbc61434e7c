package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// Limiter applies a Policy to every key separately: each key (a user, an
// IP address, an API key) has its own bucket or window, created at its
// first use. Keys whose state has expired (a window that ended, a bucket
// that refilled) are forgotten.
//
// Limiter keeps its state in memory, or with WithStore in a driver.Store
// shared by many processes. It is safe for simultaneous use by multiple
// goroutines.
type Limiter struct {
	policy   Policy
	clock    Clock
	observer Observer
	// keys holds the state in memory; with a store, it is the fallback of
	// FailLocal.
	keys keyed.Keys
	// backend decides: keys, or the store behind its failure policy.
	backend engine.Backend
	// mem is backend when it is the keys in memory (no store, one
	// policy): AllowN decides on it directly, and WaitN takes tokens that
	// are there from it without a reservation.
	mem *engine.Mem
	// limit is the policy's Result.Limit, quoted by the argument errors
	// of tokens above it.
	limit int64
	// buckets and inspect are the engine.Buckets of Bucket (see KeyBucket),
	// nil when the policy is not a token bucket.
	buckets, inspect engine.Buckets
	// shadow is WithShadow's: every decision lets its request through.
	shadow bool
	// debts is where Charge, Hold, Settle and Debt run (debt.go), nil
	// when the policy cannot owe tokens.
	debts engine.Debts
}

// NewLimiter returns a limiter that applies p to each key, in memory or,
// with WithStore, in a store. WithClock applies to its decisions and
// waits, WithObserver to its decisions, store calls and those of the
// buckets that Bucket returns, and the options of a store or of a policy
// per key to those: without WithStore (or WithPolicyFor) they are an
// *ArgumentError (see Option). It returns the *ConfigError of an invalid
// policy.
func NewLimiter(p Policy, opts ...Option) (*Limiter, error) {
	if p == nil {
		return nil, nilArgument("NewLimiter", "policy")
	}
	o, err := limiterOptions(opts)
	if err != nil {
		return nil, err
	}
	keys, err := p.build(o.maxKeys)
	if err != nil {
		return nil, err
	}
	if o.maxKeys < 0 {
		return nil, &ArgumentError{Op: "NewLimiter", Arg: "WithMaxKeys", Value: int64(o.maxKeys), Want: "must not be negative"}
	}
	if err := o.lease.check(p); err != nil {
		return nil, err
	}
	l := &Limiter{policy: p, clock: o.clock, observer: o.observer, keys: keys, limit: keys.Quota(), shadow: o.shadow}
	if l.clock == nil {
		l.clock = MonotonicClock()
	}
	if err := checkWallClock(p, l.clock); err != nil {
		return nil, err
	}
	if o.policyFor != nil { // a policy per key (plans.go)
		if o.lease != nil { // a lease is of one policy's state
			return nil, &ArgumentError{Op: "NewLimiter", Arg: "WithLease", Want: "does not combine with WithPolicyFor", kind: errors.ErrUnsupported}
		}
		return newPlanLimiter(l, &o)
	}
	if holdsSlots(p) {
		return newSlotLimiter(l, &o)
	}
	local := engine.NewMem(keys, l.clock)
	l.backend = local
	localDebts := memDebts(p, keys, l.clock)
	l.debts = localDebts
	var localBuckets, localInspect engine.Buckets
	if b := keys.Buckets(); b != nil {
		localBuckets = engine.MemBuckets{Buckets: b, Clock: l.clock, Create: true}
		localInspect = engine.MemBuckets{Buckets: b, Clock: l.clock}
		l.buckets, l.inspect = localBuckets, localInspect
	}
	if o.store == nil {
		l.mem = local
		return l, nil
	}
	setup, err := newStoreSetup(&o, l.clock)
	if err != nil {
		return nil, err
	}
	codec, err := recordCodec(p, setup.inherit, setup.version, false)
	if err != nil {
		return nil, err
	}
	exact := &engine.Stored{Store: setup.store, Codec: codec, Clock: l.clock}
	var stored engine.Backend = exact
	if o.lease != nil {
		stored = engine.NewLeased(exact, o.lease.config(), p.leasing() == policy.LeasesToWindowEnd)
	}
	l.backend = &engine.Failover{Policy: setup.fail, Store: stored, Local: local, Fleet: setup.fleet, Limit: l.limit}
	l.debts = nil
	if d, ok := codec.(record.Debtor); ok && localDebts != nil && record.HoldsDebt(codec) {
		l.debts = &engine.DebtsFailover{Policy: setup.fail, Store: engine.StoredDebts{Store: exact.Store, Codec: d}, Local: localDebts, Limit: l.limit}
	}
	if bc, ok := codec.(*record.Bucket); ok && localBuckets != nil {
		creating, _ := recordCodec(p, setup.inherit, setup.version, true)
		l.buckets = &engine.BucketFailover{Policy: setup.fail, Store: engine.StoredBuckets{Store: setup.store, Codec: creating.(*record.Bucket)},
			Local: localBuckets}
		l.inspect = &engine.BucketFailover{Policy: setup.fail, Store: engine.StoredBuckets{Store: setup.store, Codec: bc}, Local: localInspect}
	}
	return l, nil
}

// checkWallClock returns the *ConfigError of a policy that refills on a
// wall-clock grid (intervally aligned) on a clock that is not a wall
// clock.
func checkWallClock(p Policy, clock Clock) error {
	if !p.wallClock() || clock.IsWallClock() {
		return nil
	}
	return &ConfigError{Rule: RuleAlignedNeedsWallClock, Bandwidth: -1,
		Msg: "intervally aligned refill needs a wall clock: a keyed limiter has one only with WithClock(WallClock())"}
}

// recordCodec returns the record codec of p: a bucket's for token-bucket
// policies, whose records carry their configuration, else a machine's.
// A bucket's codec with create stores a key's new bucket at its first
// call even when the call changed nothing (a KeyBucket's calls, as
// Bucket4j's proxy).
func recordCodec(p Policy, inherit tokenbucket.Strategy, version record.ConfigVersion, create bool) (record.Codec, error) {
	if cfg, strict, ok := p.tokenBucket(); ok {
		return record.NewBucket(cfg, record.BucketOptions{Strict: strict, Inherit: inherit, Compile: compileStored, ConfigVersion: version, CreateOnRead: create}), nil
	}
	e, err := p.erased()
	if err != nil {
		return nil, err
	}
	return record.NewVersionedMachine(p.String(), e, inherit, version), nil
}

// compileStored validates and compiles a configuration read from a
// store's record, as a user's.
func compileStored(c *tokenbucket.Config) (*tokenbucket.Config, error) { return configOf(c).compile() }

// Policy returns the limiter's policy.
func (l *Limiter) Policy() Policy { return l.policy }

// limiterError turns a policy's argument error into an error for op. The
// limit quoted for tokens above it is the one the policy names, else
// limit: a key may have a bucket or a plan of its own.
func limiterError(op string, r policy.Result, n, maxWait, limit int64) error {
	switch r.Code {
	case policy.OK:
		return nil
	case policy.TokensAboveLimit:
		if r.Limit > 0 {
			limit = r.Limit
		}
		return &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: fmt.Sprintf("must not exceed the limit %d", limit),
			kind: ErrTokensAboveLimit}
	case policy.NonPositiveMaxWait:
		return &ArgumentError{Op: op, Arg: "maxWait", Value: time.Duration(maxWait), Want: "must not be negative"}
	case policy.ReserveNotSupported:
		return fmt.Errorf("sluice: %s: the policy cannot reserve: %w", op, errors.ErrUnsupported)
	}
	return &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "must be positive"}
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether n tokens may pass for key now, taking them if so.
// Being limited is a result (Allowed false), not an error; errors are for
// an argument out of bounds (*ArgumentError: n ≤ 0, or above the limit
// where the policy forbids that), a store that failed (*StoreError, under
// FailClosed) and a context that has ended.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var d policy.Decision
	var limit int64
	if m := l.mem; m != nil {
		// In memory, the decision comes back as four words, which stay in
		// registers, rather than through the backend as a policy.Result,
		// which is copied through memory (see policy.Decision).
		d = m.Decide(key, n)
		limit = m.Limit(d.Bound)
	} else {
		r, err := l.backend.Consume(ctx, key, n)
		if err != nil {
			return Result{}, storeError("Limiter.AllowN", key, err)
		}
		d, limit = r.Decision(0), r.Limit
	}
	if d.Code != policy.OK {
		return Result{}, limiterError("Limiter.AllowN", d.Result(limit), n, 0, l.limit)
	}
	if l.shadow {
		return l.shadowDecision(resultOf(d.Result(limit)), n), nil
	}
	notify(l.observer, d.Allowed, n)
	return Result{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: time.Duration(d.RetryAfter),
		ResetAfter: time.Duration(d.ResetAfter), Limit: limit}, nil
}

// shadowDecision is res, the policy's decision on n tokens, as a limiter
// in shadow mode answers it, told to its observer.
func (l *Limiter) shadowDecision(res Result, n int64) Result {
	res = shadowed(res)
	notifyShadow(l.observer, res, n)
	return res
}

// Peek is shorthand for PeekN(ctx, key, 1).
func (l *Limiter) Peek(ctx context.Context, key string) (Result, error) {
	return l.PeekN(ctx, key, 1)
}

// PeekN reports what AllowN(ctx, key, n) would decide now, taking nothing:
// for rate-limit headers on responses that do not consume.
func (l *Limiter) PeekN(ctx context.Context, key string, n int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r, err := l.backend.Peek(ctx, key, n)
	if err != nil {
		return Result{}, storeError("Limiter.PeekN", key, err)
	}
	if r.Code != policy.OK {
		return Result{}, limiterError("Limiter.PeekN", r, n, 0, l.limit)
	}
	if l.shadow {
		return shadowed(resultOf(r)), nil
	}
	return resultOf(r), nil
}

// Reserve is shorthand for ReserveN(ctx, key, 1, maxWait).
func (l *Limiter) Reserve(ctx context.Context, key string, maxWait time.Duration) (*Reservation, error) {
	return l.ReserveN(ctx, key, 1, maxWait)
}

// ReserveN takes n tokens for key that will be there within maxWait (0:
// only if they are there now; Never: no bound), possibly in the future,
// and returns the reservation: when it is OK the tokens are taken and are
// the caller's after its Delay, which the caller waits itself, or gives
// back with Cancel. Tokens that would take longer are a reservation that
// is not OK, which took nothing; its Result says how long they would take.
// It returns an *ArgumentError for n ≤ 0, maxWait < 0, or n above the
// limit where the policy forbids that, and an error matching
// errors.ErrUnsupported for the policies that cannot reserve (sliding
// window, sliding log).
//
// Cancel gives the tokens back where they were taken: the store, or the
// in-memory fallback of FailLocal. A reservation that a failing store let
// through under FailOpen took nothing and gives nothing back.
//
// In shadow mode (WithShadow) a reservation is decided now, as with a
// maxWait of 0, and is OK at once: one the policy refused took nothing
// and gives nothing back.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*Reservation, error) {
	if l.shadow && maxWait > 0 {
		maxWait = 0
	}
	r, err := l.reserve(ctx, "Limiter.ReserveN", key, n, int64(maxWait))
	if err != nil {
		return nil, err
	}
	if l.shadow {
		r.res = shadowed(r.res)
		if !r.ok {
			r.ok, r.delay, r.due = true, 0, l.clock.Now()
		}
		notifyShadow(l.observer, r.res, n)
		return r, nil
	}
	notifyReserved(l.observer, r)
	return r, nil
}

// reserve is ReserveN without the observer.
func (l *Limiter) reserve(ctx context.Context, op, key string, n, maxWait int64) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, at, undo, err := l.backend.Reserve(ctx, key, n, maxWait)
	if err != nil {
		return nil, storeError(op, key, err)
	}
	if r.Code != policy.OK {
		return nil, limiterError(op, r, n, maxWait, l.limit)
	}
	return newReservation(l.clock, at, n, r, undo), nil
}

// Wait is shorthand for WaitN(ctx, key, 1, maxWait).
func (l *Limiter) Wait(ctx context.Context, key string, maxWait time.Duration) error {
	return l.WaitN(ctx, key, 1, maxWait)
}

// WaitN takes n tokens for key, waiting for them if they will be there
// within maxWait, as Bucket4j's blocking tryConsume(n, maxWait) does. One
// rule holds for Bucket.WaitN, KeyBucket.WaitN and Limiter.WaitN:
//
//   - maxWait must be positive; Never waits as long as it takes. n must be
//     positive. Either out of bounds is an *ArgumentError.
//   - Tokens there now are taken at once. Tokens due within maxWait are
//     reserved (taken ahead, so later callers queue behind) and the call
//     sleeps until they are due, on the clock when it sleeps (see Clock).
//   - Tokens due later than maxWait, or than ctx's deadline, are a
//     *MaxWaitError at once (ErrMaxWaitExceeded; with the deadline,
//     context.DeadlineExceeded too), and nothing is taken.
//   - Tokens that can never be had (more than a capacity) are a
//     *MaxWaitError whose Wait is Never, but with maxWait Never an
//     *ArgumentError: that wait would never end.
//   - When ctx ends during the sleep, the tokens are given back
//     (Reservation.Cancel) and it returns ctx.Err().
//
// It shares x/time/rate's name, for the same idea (wait for tokens, then
// go ahead), but not its signature: x/time/rate's WaitN(ctx, n) has no
// maxWait (only ctx's deadline bounds it) and refuses n above the burst
// at once, where this one takes a maxWait, refuses 0 and negative ones,
// and reports a wait too long as a *MaxWaitError. ReserveN is the
// non-blocking form, whose maxWait may be 0.
//
// In shadow mode (WithShadow) it never sleeps: it is AllowN, whose
// decision lets the tokens through.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64, maxWait time.Duration) error {
	if l.shadow && maxWait > 0 {
		_, err := l.AllowN(ctx, key, n)
		return err
	}
	// Tokens there now need no reservation: nothing to sleep and nothing
	// to give back, so nothing to allocate, as x/time/rate's Wait.
	if m := l.mem; m != nil && n > 0 && maxWait > 0 && ctx.Err() == nil && m.Take(key, n) {
		notify(l.observer, true, n)
		return nil
	}
	return waitN(ctx, "Limiter.WaitN", n, maxWait, l.observer, func(ctx context.Context, op string, n, maxWait int64) (*Reservation, error) {
		return l.reserve(ctx, op, key, n, maxWait)
	})
}

// Reset forgets key's state: its next request starts afresh.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return storeError("Limiter.Reset", key, l.backend.Reset(ctx, key))
}

// Bucket returns the token bucket of key, for a limiter whose policy is a
// token bucket (TokenBucket, LeakyBucket, BucketPolicy): the whole Bucket
// API (decisions, waits, reservations, snapshots) acting on the key's
// state in the limiter's memory or store, as Bucket4j's proxy does; its
// first call creates the key's state (see KeyBucket). It is the one way to
// a stored token bucket: NewLimiter(BucketPolicy(cfg), WithStore(s)), then
// Bucket(key). Its clock, observer and store options are the limiter's.
// For other policies it returns an error matching errors.ErrUnsupported.
func (l *Limiter) Bucket(key string) (*KeyBucket, error) {
	if l.buckets == nil {
		return nil, fmt.Errorf("sluice: Limiter.Bucket: policy %s is not a token bucket: %w", l.policy, errors.ErrUnsupported)
	}
	return &KeyBucket{key: key, clock: l.clock, observer: l.observer, backend: l.buckets, inspect: l.inspect}, nil
}

// Len is the number of keys whose state is held in memory, including
// expired ones not yet dropped; with a store, those of the local fallback.
func (l *Limiter) Len() int { return l.keys.Len() }
