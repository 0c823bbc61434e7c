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
// A KeyBucket runs on a bucketBackend of the same three kinds, plus the
// lazily configured store bucket (lazyBuckets). The failure policy is
// applied in one place for both, failurePolicy.
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
	// replaced holds the keys whose bucket was replaced (replaced.go):
	// nil but for an in-memory token-bucket limiter.
	replaced *replacedKeys
}

// newMemKeys returns keys in memory on clock.
func newMemKeys(keys keyed.Keys, clock Clock) *memKeys {
	return &memKeys{keys: keys, clock: clock}
}

// undecided is the code of memKeys.decide for a key it leaves to the
// record of its replaced bucket. It is none of policy's codes.
const undecided policy.Code = 255

// decide decides on key in memory, as Keys.Decide, or returns undecided
// for a key whose bucket was replaced.
//
// A call that finds key in memory and decides there may race the key's
// first ReplaceConfiguration, which copies the key's bucket into a
// record: decided after the copy, the call would not count in the
// record. So each such call looks again once it has decided: the copy
// and the record's appearing are one step under the record store's lock,
// which has() waits for, so a call that decided after the copy finds the
// record and decides again there. One that decided before the copy may
// count twice, in the copy and again: a rejection too many in that
// instant, never an admission too many.
func (m *memKeys) decide(key string, n int64) (code policy.Code, allowed bool, remaining, retryAfter, resetAfter, limit int64) {
	if m.replaced.has(key) {
		return undecided, false, 0, 0, 0, 0
	}
	code, allowed, remaining, retryAfter, resetAfter, limit = m.keys.Decide(key, m.clock.Now(), n)
	if m.replaced.has(key) { // replaced meanwhile: see above
		return undecided, false, 0, 0, 0, 0
	}
	return code, allowed, remaining, retryAfter, resetAfter, limit
}

// take takes n tokens for key if they are there now, as a reservation of
// no wait; false leaves the call to reserve, a key whose bucket was
// replaced included (see decide for the race with a replacement).
func (m *memKeys) take(key string, n int64) bool {
	if m.replaced.has(key) {
		return false
	}
	return m.keys.Take(key, m.clock.Now(), n) && !m.replaced.has(key)
}

func (m *memKeys) consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	code, allowed, remaining, retryAfter, resetAfter, limit := m.decide(key, n)
	if code == undecided {
		return m.replaced.consume(ctx, key, n)
	}
	return policy.Result{Code: code, Allowed: allowed, Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter, Limit: limit}, nil
}

func (m *memKeys) peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	if m.replaced.has(key) {
		return m.replaced.peek(ctx, key, n)
	}
	return m.keys.Peek(key, m.clock.Now(), n), nil
}

func (m *memKeys) reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	if m.replaced.has(key) {
		return m.replaced.reserve(ctx, key, n, maxWait)
	}
	now := m.clock.Now()
	res, rc := m.keys.Reserve(key, now, n, maxWait)
	if m.replaced.has(key) { // replaced meanwhile: see decide
		if rc != nil {
			m.keys.Cancel(key, now, rc)
		}
		return m.replaced.reserve(ctx, key, n, maxWait)
	}
	if rc == nil {
		return res, now, nil, nil
	}
	return res, rc.At, func(now int64) { m.keys.Cancel(key, now, rc) }, nil
}

func (m *memKeys) reset(ctx context.Context, key string) error {
	if m.replaced.has(key) {
		_ = m.replaced.recs.Delete(ctx, key)
	}
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
// store fails: StoreFailure, told to the listener.
type failurePolicy struct {
	policy   StoreFailure
	listener StoreListener // nil when there is none
}

// failed applies the policy to err, a store call's error, and tells the
// listener: it returns nil when the call is to run on the local fallback
// instead, and otherwise the error to return: a *storeFailure (open under
// FailOpen), or ctx's error when the caller's context ended, which is not
// a store failure.
func (f failurePolicy) failed(ctx context.Context, err error) error {
	if isCallerDone(ctx, err) {
		return ctx.Err()
	}
	if f.listener != nil {
		f.listener.OnStoreFailure(err, f.policy)
	}
	if f.policy == FailLocal {
		return nil
	}
	return &storeFailure{err: err, open: f.policy == FailOpen}
}

// needsStore marks err, the error of a call that only the store can
// answer (a reset, a configuration), as a store failure whatever the
// policy; the caller's context ending is returned as it is.
func needsStore(ctx context.Context, err error) error {
	if err == nil || isCallerDone(ctx, err) || errors.Is(err, keyed.ErrNoConfig) {
		return err
	}
	return &storeFailure{err: err}
}

// failover is a Limiter's store behind its failure policy: local is the
// in-memory fallback of FailLocal, and quota the Limit of a result under
// FailOpen.
type failover struct {
	failurePolicy
	store backend
	local backend
	quota int64
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

func (f *failover) openResult() policy.Result { return policy.Result{Allowed: true, Limit: f.quota} }

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

// bucketSeen is shown a key's bucket after a call, for a snapshot.
type bucketSeen = func(cfg *tokenbucket.Config, st tokenbucket.State, now int64)

// bucketBackend is where a KeyBucket's state lives.
type bucketBackend interface {
	// update runs f on key's bucket and returns where it ran, for the
	// call that gives a reservation back (a bucket whose store failed
	// under FailOpen ran nowhere: nil, with an open *storeFailure).
	update(ctx context.Context, key string, f bucketFunc) (ran bucketBackend, err error)
	// configuration is the configuration in force for key.
	configuration(ctx context.Context, key string) (*tokenbucket.Config, error)
	// replace switches key's bucket to cfg, and shows seen (when not nil)
	// the bucket it leaves.
	replace(ctx context.Context, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error
}

// memBuckets is a bucketBackend in memory: an in-memory Limiter's keys,
// or a local fallback.
type memBuckets struct {
	buckets keyed.Buckets
	clock   Clock
	// mem, when not nil, is the in-memory Limiter's keys, whose buckets
	// may be replaced; nil for a local fallback, which cannot.
	mem *memKeys
}

func (m memBuckets) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	if m.mem != nil && m.mem.replaced.has(key) {
		_, err := memRecordBuckets{m.mem.replaced.mem}.update(ctx, key, f)
		return m, err
	}
	now := m.clock.Now()
	m.buckets.WithBucket(key, now, func(cfg *tokenbucket.Config, st tokenbucket.State) bool {
		return f(cfg, st, now)
	})
	if m.mem != nil && m.mem.replaced.has(key) { // replaced meanwhile: see memKeys.decide; f's last run counts
		_, err := memRecordBuckets{m.mem.replaced.mem}.update(ctx, key, f)
		return m, err
	}
	return m, nil
}

func (m memBuckets) configuration(ctx context.Context, key string) (*tokenbucket.Config, error) {
	if m.mem != nil && m.mem.replaced.has(key) {
		return memRecordBuckets{m.mem.replaced.mem}.configuration(ctx, key)
	}
	return m.buckets.Config(), nil
}

func (m memBuckets) replace(ctx context.Context, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error {
	if m.mem != nil && m.mem.replaced != nil {
		return m.mem.replaced.replace(ctx, m.mem.keys, key, cfg, strategy, seen)
	}
	return fmt.Errorf("sluice: KeyBucket.ReplaceConfiguration of key %s: the bucket follows its in-memory Limiter's policy: %w", driver.QuoteKey(key), errors.ErrUnsupported)
}

// storeBuckets is a bucketBackend in a store, as records of codec.
type storeBuckets struct {
	store *keyed.Store
	codec *record.Bucket
}

func (s storeBuckets) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	return s, s.store.UpdateBucket(ctx, key, s.codec, f)
}

func (s storeBuckets) configuration(ctx context.Context, key string) (*tokenbucket.Config, error) {
	return s.store.Configuration(ctx, key, s.codec)
}

func (s storeBuckets) replace(ctx context.Context, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error {
	return s.store.ReplaceBucket(ctx, key, s.codec, cfg, strategy, seen)
}

// bucketFailover is a KeyBucket's store behind its failure policy. local
// returns the in-memory fallback of FailLocal for a key: a lazily
// configured bucket builds it once it has its configuration.
type bucketFailover struct {
	failurePolicy
	store bucketBackend
	local func(ctx context.Context) (bucketBackend, error)
}

func (f *bucketFailover) update(ctx context.Context, key string, fn bucketFunc) (bucketBackend, error) {
	ran, err := f.store.update(ctx, key, fn)
	if err == nil || errors.Is(err, keyed.ErrNoConfig) {
		return ran, err
	}
	ferr := f.failed(ctx, err)
	if ferr != nil {
		return nil, ferr
	}
	local, lerr := f.local(ctx)
	if lerr != nil { // no fallback to decide on: the store's failure stands
		return nil, &storeFailure{err: err}
	}
	return local.update(ctx, key, fn)
}

// configuration and replace need the store: they fail as it does,
// whatever the policy.
func (f *bucketFailover) configuration(ctx context.Context, key string) (*tokenbucket.Config, error) {
	cfg, err := f.store.configuration(ctx, key)
	return cfg, needsStore(ctx, err)
}

func (f *bucketFailover) replace(ctx context.Context, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error {
	return needsStore(ctx, f.store.replace(ctx, key, cfg, strategy, seen))
}
