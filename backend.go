package sluice

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// A Limiter decides on a backend: its keys in memory (memKeys), in a
// store (storeKeys), or in a store behind the failure policy (failover).
// A KeyBucket runs on a bucketBackend of the same three kinds. The
// failure policy is applied in one place for both, failurePolicy.
//
// A backend's errors are the caller's context ending and store failures;
// an argument out of bounds is a policy result's Code.

// backend is where a Limiter's keys live.
type backend interface {
	consume(ctx context.Context, key string, n int64) (policy.Result, error)
	peek(ctx context.Context, key string, n int64) (policy.Result, error)
	// reserve takes n tokens for key within maxWait at the time at. A
	// granted reservation that took something comes with undo, which
	// gives it back at now where it was taken.
	reserve(ctx context.Context, key string, n, maxWait int64) (res policy.Result, at int64, undo func(now int64), err error)
	reset(ctx context.Context, key string) error
}

// memKeys is a Limiter's keys in memory, on its clock.
type memKeys struct {
	keys  keyed.Keys
	clock Clock
}

// newMemKeys returns keys in memory on clock.
func newMemKeys(keys keyed.Keys, clock Clock) *memKeys {
	return &memKeys{keys: keys, clock: clock}
}

// decide decides on key in memory, as Keys.Decide.
func (m *memKeys) decide(key string, n int64) (code policy.Code, allowed bool, remaining, retryAfter, resetAfter, limit int64) {
	return m.keys.Decide(key, m.clock.Now(), n)
}

// take takes n tokens for key if they are there now, as a reservation of
// no wait; false leaves the call to reserve.
func (m *memKeys) take(key string, n int64) bool {
	return m.keys.Take(key, m.clock.Now(), n)
}

func (m *memKeys) consume(_ context.Context, key string, n int64) (policy.Result, error) {
	return m.keys.Consume(key, m.clock.Now(), n), nil
}

func (m *memKeys) peek(_ context.Context, key string, n int64) (policy.Result, error) {
	return m.keys.Peek(key, m.clock.Now(), n), nil
}

func (m *memKeys) reserve(_ context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	now := m.clock.Now()
	res, rc := m.keys.Reserve(key, now, n, maxWait)
	if rc == nil {
		return res, now, nil, nil
	}
	return res, rc.At, func(now int64) { m.keys.Cancel(key, now, rc) }, nil
}

func (m *memKeys) reset(_ context.Context, key string) error {
	m.keys.Reset(key)
	return nil
}

// storeKeys is a Limiter's keys in a store, as records of codec.
type storeKeys struct {
	store *keyed.Store
	codec record.Codec
	clock Clock
}

func (s *storeKeys) consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	return s.store.Consume(ctx, key, s.codec, n)
}

func (s *storeKeys) peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return s.store.Peek(ctx, key, s.codec, n)
}

func (s *storeKeys) reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	at := s.clock.Now()
	res, rc, err := s.store.Reserve(ctx, key, s.codec, n, maxWait)
	if rc == nil {
		return res, at, nil, err
	}
	return res, rc.At, func(now int64) { _ = s.store.Cancel(context.Background(), key, s.codec, now, rc) }, err
}

func (s *storeKeys) reset(ctx context.Context, key string) error {
	return s.store.Reset(ctx, key, s.codec)
}

// failurePolicy is what a Limiter or KeyBucket with a store does when the
// store fails: StoreFailure, told to the observer.
type failurePolicy struct {
	policy   StoreFailure
	observer Observer // nil when there is none
}

// failed applies the policy to err, a store call's error, and tells the
// observer: it returns nil when the call is to run on the local fallback
// instead, and otherwise the error to return: a *StoreError (open under
// FailOpen), or ctx's error when the caller's context ended, which is not
// a store failure.
func (f failurePolicy) failed(ctx context.Context, err error) error {
	if isCallerDone(ctx, err) {
		return ctx.Err()
	}
	tell(f.observer, Event{Kind: EventStoreFailure, Err: err, Failure: f.policy})
	if f.policy == FailLocal {
		return nil
	}
	return &StoreError{Err: err, open: f.policy == FailOpen}
}

// needsStore marks err, the error of a call that only the store can
// answer (a reset, a replaced configuration), as a store failure whatever
// the policy; the caller's context ending is returned as it is.
func needsStore(ctx context.Context, err error) error {
	if err == nil || isCallerDone(ctx, err) {
		return err
	}
	return &StoreError{Err: err}
}

// failover is a Limiter's store behind its failure policy: local is the
// in-memory fallback of FailLocal, and limit the Limit of a result under
// FailOpen.
type failover struct {
	failurePolicy
	store backend
	local backend
	limit int64
}

// onStore runs call on the store, and applies the failure policy when the
// store fails.
func onStore[T any](ctx context.Context, f *failover, call func(backend) (T, error), open func() T) (T, error) {
	v, err := call(f.store)
	if err == nil {
		return v, nil
	}
	if err = f.failed(ctx, err); err == nil {
		return call(f.local)
	}
	if failedOpen(err) {
		return open(), nil
	}
	var zero T
	return zero, err
}

func (f *failover) openResult() policy.Result { return policy.Result{Allowed: true, Limit: f.limit} }

func (f *failover) consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	return onStore(ctx, f, func(b backend) (policy.Result, error) { return b.consume(ctx, key, n) }, f.openResult)
}

func (f *failover) peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return onStore(ctx, f, func(b backend) (policy.Result, error) { return b.peek(ctx, key, n) }, f.openResult)
}

// reservation is what a backend's reserve returns.
type reservation struct {
	res  policy.Result
	at   int64
	undo func(int64)
}

func (f *failover) reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	r, err := onStore(ctx, f, func(b backend) (reservation, error) {
		res, at, undo, err := b.reserve(ctx, key, n, maxWait)
		return reservation{res, at, undo}, err
	}, func() reservation { return reservation{res: f.openResult()} })
	return r.res, r.at, r.undo, err
}

// reset forgets key in the store, and in the local fallback of FailLocal.
// A store failure is returned whatever the policy: a key that could not
// be reset is not.
func (f *failover) reset(ctx context.Context, key string) error {
	err := f.store.reset(ctx, key)
	if f.policy == FailLocal {
		_ = f.local.reset(ctx, key)
	}
	return needsStore(ctx, err)
}

// bucketFunc is an operation on a key's bucket: it runs on the state st
// of configuration cfg at now, and reports whether st changed and must be
// stored. It may run more than once (a store retries); the last run counts.
type bucketFunc = func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) (changed bool)

// bucketBackend is where a KeyBucket's state lives.
type bucketBackend interface {
	// update runs f on key's bucket and returns where it ran, for the
	// call that gives a reservation back (a bucket whose store failed
	// under FailOpen ran nowhere: nil, with an open *StoreError).
	update(ctx context.Context, key string, f bucketFunc) (ran bucketBackend, err error)
	// replace switches key's bucket to cfg.
	replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error
}

// memBuckets is a bucketBackend in memory: an in-memory Limiter's keys,
// or a local fallback. With create, a call stores the key's bucket even
// when it changed nothing, so that a KeyBucket's first call creates it.
type memBuckets struct {
	buckets keyed.Buckets
	clock   Clock
	create  bool
}

func (m memBuckets) update(_ context.Context, key string, f bucketFunc) (bucketBackend, error) {
	now := m.clock.Now()
	m.buckets.WithBucket(key, now, func(cfg *tokenbucket.Config, st tokenbucket.State) bool {
		return f(cfg, st, now) || m.create
	})
	return m, nil
}

func (m memBuckets) replace(_ context.Context, key string, _ *tokenbucket.Config, _ tokenbucket.Strategy) error {
	return fmt.Errorf("sluice: KeyBucket.ReplaceConfiguration of key %s: an in-memory Limiter's keys follow its policy; give a key its own configuration with WithPolicyFor: %w",
		driver.QuoteKey(key), errors.ErrUnsupported)
}

// storeBuckets is a bucketBackend in a store, as records of codec.
type storeBuckets struct {
	store *keyed.Store
	codec *record.Bucket
}

func (s storeBuckets) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	return s, s.store.UpdateBucket(ctx, key, s.codec, f)
}

func (s storeBuckets) replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	return s.store.ReplaceBucket(ctx, key, s.codec, cfg, inherit, nil)
}

// bucketFailover is a KeyBucket's store behind its failure policy; local
// is the in-memory fallback of FailLocal.
type bucketFailover struct {
	failurePolicy
	store bucketBackend
	local bucketBackend
}

func (f *bucketFailover) update(ctx context.Context, key string, fn bucketFunc) (bucketBackend, error) {
	ran, err := f.store.update(ctx, key, fn)
	if err == nil {
		return ran, nil
	}
	if ferr := f.failed(ctx, err); ferr != nil {
		return nil, ferr
	}
	return f.local.update(ctx, key, fn)
}

// replace needs the store: it fails as the store does, whatever the
// policy.
func (f *bucketFailover) replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	return needsStore(ctx, f.store.replace(ctx, key, cfg, inherit))
}
