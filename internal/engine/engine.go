// Package engine is where a Limiter's and a KeyBucket's calls run: their
// keys in memory (Mem, MemBuckets), in a store (Stored, StoredBuckets,
// Leased), as records in memory (MemRecords, MemRecordBuckets), with a
// policy per key (Plans), and a store behind the failure policy
// (Failover, BucketFailover). The failure policy is applied in one place
// for both, FailurePolicy.
//
// The root package builds these from its options and turns their errors
// into its own at the API's boundary: a store failure comes out of here
// as a *StoreFailed. A backend's other errors are the caller's context
// ending; an argument out of bounds is a policy result's Code.
package engine

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Backend is where a Limiter's keys live.
type Backend interface {
	Consume(ctx context.Context, key string, n int64) (policy.Result, error)
	Peek(ctx context.Context, key string, n int64) (policy.Result, error)
	// Reserve takes n tokens for key within maxWait at the time at. A
	// granted reservation that took something comes with undo, which
	// gives it back at now where it was taken.
	Reserve(ctx context.Context, key string, n, maxWait int64) (res policy.Result, at int64, undo func(now int64), err error)
	Reset(ctx context.Context, key string) error
}

// BucketFunc is an operation on a key's bucket: it runs on the state st
// of configuration cfg at now, and reports whether st changed and must be
// stored. It may run more than once (a store retries); the last run counts.
type BucketFunc = func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) (changed bool)

// Buckets is where a KeyBucket's state lives.
type Buckets interface {
	// Update runs f on key's bucket and returns where it ran, for the
	// call that gives a reservation back (a bucket whose store failed
	// under FailOpen ran nowhere: nil, with an open *StoreFailed).
	Update(ctx context.Context, key string, f BucketFunc) (ran Buckets, err error)
	// Replace switches key's bucket to cfg.
	Replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error
}

// Failure is what a backend with a store does when the store fails: the
// root's StoreFailure, value for value.
type Failure uint8

// The failure policies.
const (
	FailClosed Failure = iota
	FailOpen
	FailLocal
	FailShare
)

// FailurePolicy is what a Limiter or KeyBucket with a store does when the
// store fails; OnFailure, when set, is told of every store failure (the
// root's observer).
type FailurePolicy struct {
	Failure   Failure
	OnFailure func(err error)
}

// StoreFailed is a store's failure on its way out of the engine, which
// the root returns as its *StoreError. Open marks one under FailOpen,
// which the calls that decide whether tokens pass let through.
type StoreFailed struct {
	Err  error
	Open bool
}

func (e *StoreFailed) Error() string { return e.Err.Error() }

func (e *StoreFailed) Unwrap() error { return e.Err }

// failed applies the policy to err, a store call's error, and tells
// OnFailure: it returns nil when the call is to run on the local fallback
// instead, and otherwise the error to return: a *StoreFailed (open under
// FailOpen), or ctx's error when the caller's context ended, which is not
// a store failure.
func (f FailurePolicy) failed(ctx context.Context, err error) error {
	if keyed.CallerDone(ctx, err) {
		return ctx.Err()
	}
	if f.OnFailure != nil {
		f.OnFailure(err)
	}
	if f.Failure == FailLocal || f.Failure == FailShare {
		return nil
	}
	return &StoreFailed{Err: err, Open: f.Failure == FailOpen}
}

// needsStore marks err, the error of a call that only the store can
// answer (a reset, a replaced configuration), as a store failure whatever
// the policy; the caller's context ending is returned as it is.
func needsStore(ctx context.Context, err error) error {
	if err == nil || keyed.CallerDone(ctx, err) {
		return err
	}
	return &StoreFailed{Err: err}
}

// Failover is a Limiter's store behind its failure policy: Local is the
// in-memory fallback of FailLocal and FailShare, Fleet the processes
// whose share FailShare takes, and Limit the Limit of a result under
// FailOpen.
type Failover struct {
	Policy FailurePolicy
	Store  Backend
	Local  Backend
	Fleet  *Fleet // FailShare's; nil under every other policy
	Limit  int64
}

// onStore runs call on the store, and applies the failure policy when the
// store fails. Under FailShare a call that succeeded beats into the
// fleet, and one that failed runs on the local fallback's share, or
// fails closed while this process knows no fleet.
func onStore[T any](ctx context.Context, f *Failover, call func(Backend) (T, error), open func() T) (T, error) {
	v, err := call(f.Store)
	storeErr := err
	if err == nil {
		if f.Fleet != nil {
			f.Fleet.Beat()
		}
		return v, nil
	}
	if err = f.Policy.failed(ctx, err); err == nil {
		if f.Fleet == nil {
			return call(f.Local)
		}
		if n := f.Fleet.Size(); n > 0 {
			return call(shared{f.Local, n})
		}
		err = &StoreFailed{Err: fmt.Errorf("%w; no share to fall back on: this process has not seen its fleet yet", storeErr)}
	}
	if sf, ok := err.(*StoreFailed); ok && sf.Open {
		return open(), nil
	}
	var zero T
	return zero, err
}

func (f *Failover) openResult() policy.Result { return policy.Result{Allowed: true, Limit: f.Limit} }

func (f *Failover) Consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	return onStore(ctx, f, func(b Backend) (policy.Result, error) { return b.Consume(ctx, key, n) }, f.openResult)
}

func (f *Failover) Peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return onStore(ctx, f, func(b Backend) (policy.Result, error) { return b.Peek(ctx, key, n) }, f.openResult)
}

// reservation is what a backend's Reserve returns.
type reservation struct {
	res  policy.Result
	at   int64
	undo func(int64)
}

func (f *Failover) Reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	r, err := onStore(ctx, f, func(b Backend) (reservation, error) {
		res, at, undo, err := b.Reserve(ctx, key, n, maxWait)
		return reservation{res, at, undo}, err
	}, func() reservation { return reservation{res: f.openResult()} })
	return r.res, r.at, r.undo, err
}

// Reset forgets key in the store, and in the local fallback of FailLocal
// and FailShare.
// A store failure is returned whatever the policy: a key that could not
// be reset is not.
func (f *Failover) Reset(ctx context.Context, key string) error {
	err := f.Store.Reset(ctx, key)
	if f.Policy.Failure == FailLocal || f.Policy.Failure == FailShare {
		_ = f.Local.Reset(ctx, key)
	}
	return needsStore(ctx, err)
}

// BucketFailover is a KeyBucket's store behind its failure policy; Local
// is the in-memory fallback of FailLocal. A bucket's full API has no
// share: under FailShare it fails closed.
type BucketFailover struct {
	Policy FailurePolicy
	Store  Buckets
	Local  Buckets
}

func (f *BucketFailover) Update(ctx context.Context, key string, fn BucketFunc) (Buckets, error) {
	ran, err := f.Store.Update(ctx, key, fn)
	if err == nil {
		return ran, nil
	}
	if ferr := f.Policy.failed(ctx, err); ferr != nil {
		return nil, ferr
	}
	if f.Policy.Failure == FailShare {
		return nil, &StoreFailed{Err: err}
	}
	return f.Local.Update(ctx, key, fn)
}

// Replace needs the store: it fails as the store does, whatever the
// policy.
func (f *BucketFailover) Replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	return needsStore(ctx, f.Store.Replace(ctx, key, cfg, inherit))
}
