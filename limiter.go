package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// Result is a Limiter's decision on one request.
type Result struct {
	// Allowed reports whether the request may pass; its tokens were taken.
	Allowed bool
	// Remaining is how many tokens a request could still take now.
	Remaining int64
	// RetryAfter is how long until the same request could pass: 0 when
	// allowed, Never when it never can. Use it for Retry-After.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to the state of an
	// unused key.
	ResetAfter time.Duration
	// Limit is the policy's limit (a bucket's capacity, a window's limit).
	Limit int64
}

func resultOf(r policy.Result) Result {
	return Result{
		Allowed:    r.Allowed,
		Remaining:  r.Remaining,
		RetryAfter: time.Duration(r.RetryAfter),
		ResetAfter: time.Duration(r.ResetAfter),
		Limit:      r.Limit,
	}
}

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
	sleeper  Sleeper
	listener Listener
	// keys holds the state in memory; with a store, it is the fallback of
	// FailLocal.
	keys  keyed
	store *storeKeyed // nil: in memory
}

// NewLimiter returns a limiter that applies p to each key, in memory or,
// with WithStore, in a store. WithClock and WithSleeper apply to its
// decisions and waits, and WithListener to the buckets that Bucket returns
// and, when it is a StoreListener, to store failures. WithStoreTimeout,
// WithStoreFailure and WithInheritance configure the store. It returns the
// *ConfigError of an invalid policy.
func NewLimiter(p Policy, opts ...Option) (*Limiter, error) {
	if p == nil {
		return nil, &ConfigError{Rule: RuleNoLimits, Bandwidth: -1, Msg: "a policy is required"}
	}
	keys, err := p.build()
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxKeys < 0 {
		return nil, &ArgumentError{Op: "NewLimiter", Arg: "WithMaxKeys", Value: int64(o.maxKeys), Want: "must not be negative"}
	}
	keys.bound(o.maxKeys)
	l := &Limiter{policy: p, clock: o.clock, sleeper: o.sleeper, listener: o.listener, keys: keys}
	if l.clock == nil {
		l.clock = MonotonicClock()
	}
	if l.sleeper == nil {
		l.sleeper = TimerSleeper()
	}
	if o.store != nil {
		if l.store, err = newStoreKeyed(p, &o, l.clock, keys); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Policy returns the limiter's policy.
func (l *Limiter) Policy() Policy { return l.policy }

// limiterError turns a policy's argument error into an error for op.
func limiterError(op string, r policy.Result, n, maxWait, limit int64) error {
	switch r.Code {
	case policy.OK:
		return nil
	case policy.TokensAboveLimit:
		return &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: fmt.Sprintf("must not exceed the limit %d", limit)}
	case policy.NonPositiveMaxWait:
		return &ArgumentError{Op: op, Arg: "maxWait", Value: maxWait, Want: "must not be negative"}
	case policy.ReserveNotSupported:
		return fmt.Errorf("%w: %s", ErrReserveNotSupported, op)
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
// where the policy forbids that) and a context that has ended.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r, err := l.decide(ctx, "Limiter.AllowN", key, func(s *storeKeyed) (policy.Result, error) {
		return s.consume(ctx, key, n)
	}, func(now int64) policy.Result {
		return l.keys.consume(key, now, n)
	})
	if err != nil {
		return Result{}, err
	}
	if r.Code != policy.OK {
		return Result{}, limiterError("Limiter.AllowN", r, n, 0, l.keys.quota())
	}
	return resultOf(r), nil
}

// Peek reports what AllowN(ctx, key, n) would decide now, taking nothing:
// for rate-limit headers on responses that do not consume.
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r, err := l.decide(ctx, "Limiter.Peek", key, func(s *storeKeyed) (policy.Result, error) {
		return s.peek(ctx, key, n)
	}, func(now int64) policy.Result {
		return l.keys.peek(key, now, n)
	})
	if err != nil {
		return Result{}, err
	}
	if r.Code != policy.OK {
		return Result{}, limiterError("Limiter.Peek", r, n, 0, l.keys.quota())
	}
	return resultOf(r), nil
}

// Reserve takes n tokens for key that will be there within maxWait
// (Never: no bound) and returns how long the caller must wait before using
// them; 0 when they are there now. When they would take longer it returns
// a *MaxWaitError (ErrMaxWaitExceeded) and takes nothing. Policies that
// cannot reserve (sliding window, sliding log) return
// ErrReserveNotSupported.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64, maxWait time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r, err := l.decide(ctx, "Limiter.Reserve", key, func(s *storeKeyed) (policy.Result, error) {
		return s.reserve(ctx, key, n, int64(maxWait))
	}, func(now int64) policy.Result {
		return l.keys.reserve(key, now, n, int64(maxWait))
	})
	if err != nil {
		return 0, err
	}
	if r.Code != policy.OK {
		return 0, limiterError("Limiter.Reserve", r, n, int64(maxWait), l.keys.quota())
	}
	if !r.Allowed {
		return 0, &MaxWaitError{Tokens: n, Wait: r.RetryAfter, MaxWait: int64(maxWait)}
	}
	return time.Duration(r.Wait), nil
}

// Wait reserves n tokens for key within maxWait, as Reserve, and sleeps
// until they are due. When ctx ends during the sleep it returns ctx.Err();
// the tokens stay taken (a keyed policy cannot give tokens back in
// general).
func (l *Limiter) Wait(ctx context.Context, key string, n int64, maxWait time.Duration) error {
	d, err := l.Reserve(ctx, key, n, maxWait)
	if err != nil || d == 0 {
		return err
	}
	return l.sleeper.Sleep(ctx, d)
}

// Reset forgets key's state: its next request starts afresh.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.store == nil {
		l.keys.reset(key)
		return nil
	}
	err := l.store.reset(ctx, key)
	if err != nil && !isCallerDone(ctx, err) {
		err = &StoreError{Op: "Limiter.Reset", Key: key, Err: err}
	}
	if l.store.failure == FailLocal {
		l.keys.reset(key)
	}
	return err
}

// decide runs a decision in the store, or in memory when there is none or
// the store failed and the limiter falls back to memory. A store failure
// under FailOpen allows the request.
func (l *Limiter) decide(ctx context.Context, op, key string, inStore func(*storeKeyed) (policy.Result, error), inMemory func(now int64) policy.Result) (policy.Result, error) {
	if l.store == nil {
		return inMemory(l.clock.Now()), nil
	}
	r, err := inStore(l.store)
	if err == nil {
		return r, nil
	}
	if isCallerDone(ctx, err) {
		return policy.Result{}, ctx.Err()
	}
	if ferr := l.store.failed(op, key, err); ferr != nil {
		return policy.Result{}, ferr
	}
	if l.store.failure == FailLocal {
		return inMemory(l.clock.Now()), nil
	}
	return policy.Result{Allowed: true, Limit: l.keys.quota()}, nil
}

// Bucket returns the token bucket of key, for a limiter whose policy is a
// token bucket (TokenBucket, LeakyBucket, BucketPolicy): the whole Bucket
// API (probes, blocking calls, reservations, diagnostics) acting on the
// key's state in the limiter's memory or store, created at first use like
// any other. Its clock, sleeper, listener and store options are the
// limiter's. For other policies it returns an error matching
// errors.ErrUnsupported.
func (l *Limiter) Bucket(key string) (*KeyBucket, error) {
	mem, ok := l.keys.(bucketStore)
	if !ok || mem.bucketConfig() == nil {
		return nil, fmt.Errorf("sluice: Limiter.Bucket: policy %s is not a token bucket: %w", l.policy, errors.ErrUnsupported)
	}
	b := &KeyBucket{key: key, clock: l.clock, sleeper: l.sleeper, listener: l.listener}
	if l.store == nil {
		b.mem = mem
	} else {
		b.store = l.store
	}
	return b, nil
}

// Len is the number of keys whose state is held in memory, including
// expired ones not yet dropped; with a store, those of the local fallback.
func (l *Limiter) Len() int { return l.keys.len() }
