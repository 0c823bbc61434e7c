package sluice

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// KeyBucket is the token bucket of one key of a Limiter, or of one key of
// a driver.Store (NewStoreBucket): Bucket4j's bucket proxy. It has the
// operations and views of Bucket, each taking a context and returning an
// error, since the state may live in a store shared by many processes;
// with a store every call is one atomic update of the key's state. It has
// no TryConsume, Bucket's allocation-free hot path: AllowN decides.
//
// A store's failure is handled as WithStoreFailure says: FailClosed
// returns a *StoreError, FailLocal runs the call on an in-memory bucket of
// this process, and FailOpen lets the calls that decide whether tokens
// pass (Allow, Peek, Reserve, Wait and their N forms, the blocking view)
// through, with a Result that is Allowed and otherwise zero, and returns
// a *StoreError from the calls that read, add or reconfigure.
//
// KeyBucket is safe for simultaneous use by multiple goroutines.
type KeyBucket struct {
	key      string
	clock    Clock
	observer Observer
	backend  bucketBackend
}

// NewStoreBucket returns the token bucket of key in s, with the
// configuration cfg for a key that has no state yet. As Bucket4j's proxy,
// its first call creates the key's state, even a call that only reads:
// the bucket's refill counts from then. A key that has state
// keeps the configuration stored with it, migrated to cfg (with the
// WithInheritance strategy) when cfg changed since it was written.
// WithStoreTimeout, WithStoreFailure, WithClock and WithObserver apply.
func NewStoreBucket(s driver.Store, key string, cfg BucketConfig, opts ...StoreBucketOption) (*KeyBucket, error) {
	o := storeBucketOptions(opts)
	o.store = s
	if o.store == nil {
		return nil, nilArgument("NewStoreBucket", "store")
	}
	// Aligned refill is allowed here (BucketPolicy refuses it because a
	// keyed limiter's buckets start at each key's first use).
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	clock, err := bucketClock(c, &o)
	if err != nil {
		return nil, err
	}
	setup, err := newStoreSetup(&o, clock)
	if err != nil {
		return nil, err
	}
	codec := record.NewBucket(c, record.BucketOptions{Inherit: setup.inherit, CreateOnRead: true, Compile: compileStored, Order: setup.order})
	// The local buckets are made on the first failover: most buckets never
	// need them, and a table is most of a KeyBucket's memory.
	local := sync.OnceValue(func() bucketBackend {
		return memBuckets{buckets: keyed.NewTable[tokenbucket.State](tokenbucket.NewMulti(c), 0).Buckets(), clock: clock}
	})
	return &KeyBucket{key: key, clock: clock, observer: o.observer, backend: &bucketFailover{
		failurePolicy: setup.fail,
		store:         storeBuckets{store: setup.store, codec: codec},
		local:         func(context.Context) (bucketBackend, error) { return local(), nil },
	}}, nil
}

// NewLazyStoreBucket is NewStoreBucket with the configuration given by
// supply, which is called only when the key has no state (for limits read
// from a slow database) and at most once per successful call. A key that
// has state keeps its stored configuration, never migrated. It is
// NewLazyBuckets(s, ...).Bucket(key), with an engine of its own: for
// many keys, make one LazyBuckets and ask it for each key's bucket.
func NewLazyStoreBucket(s driver.Store, key string, supply func(ctx context.Context) (BucketConfig, error), opts ...StoreBucketOption) (*KeyBucket, error) {
	if s == nil {
		return nil, nilArgument("NewLazyStoreBucket", "store")
	}
	if supply == nil {
		return nil, nilArgument("NewLazyStoreBucket", "supply")
	}
	p, err := NewLazyBuckets(s, func(ctx context.Context, _ string) (BucketConfig, error) { return supply(ctx) }, opts...)
	if err != nil {
		return nil, err
	}
	return p.Bucket(key), nil
}

// update runs f on the key's bucket and returns where it ran.
func (b *KeyBucket) update(ctx context.Context, f bucketFunc) (bucketBackend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.backend.update(ctx, b.key, f)
}

// run runs req on the key's bucket, with a snapshot after it when snap is
// not nil; with peek, it takes nothing (see giveBack). limit is the
// bucket's smallest capacity.
func (b *KeyBucket) run(ctx context.Context, req tokenbucket.Request, peek bool, snap *Snapshot) (res tokenbucket.Result, limit int64, err error) {
	_, err = b.update(ctx, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		var changed bool
		res, changed = tokenbucket.Apply(cfg, st, now, req)
		limit = quotaOf(cfg)
		if peek {
			giveBack(st, res, req.Tokens)
			changed = false
		}
		if snap != nil {
			snap.fill(cfg, st, now)
		}
		return changed
	})
	return res, limit, err
}

// apply runs req on the key's bucket. A store's failure is a *StoreError
// under every policy but FailLocal; decide is for the calls that let
// tokens through under FailOpen.
func (b *KeyBucket) apply(ctx context.Context, op string, req tokenbucket.Request, snap *Snapshot) (tokenbucket.Result, error) {
	res, _, err := b.run(ctx, req, false, snap)
	if err != nil {
		return tokenbucket.Result{}, storeError(op, b.key, err)
	}
	return res, argError(op, res, req)
}

// decide runs AllowN, or PeekN with peek, on the key's bucket. Under
// FailOpen a store's failure lets the tokens through.
func (b *KeyBucket) decide(ctx context.Context, op string, n int64, peek bool, snap *Snapshot) (Result, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsumeAndReturnRemaining, Tokens: n}
	res, limit, err := b.run(ctx, req, peek, snap)
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

// Key is the bucket's key.
func (b *KeyBucket) Key() string { return b.key }

// Allow is shorthand for AllowN(ctx, 1).
func (b *KeyBucket) Allow(ctx context.Context) (Result, error) { return b.AllowN(ctx, 1) }

// AllowN takes n tokens if they are all there now, and returns the
// decision, as Bucket.AllowN.
func (b *KeyBucket) AllowN(ctx context.Context, n int64) (Result, error) {
	return b.decide(ctx, "KeyBucket.AllowN", n, false, nil)
}

// Peek is shorthand for PeekN(ctx, 1).
func (b *KeyBucket) Peek(ctx context.Context) (Result, error) { return b.PeekN(ctx, 1) }

// PeekN reports what AllowN(ctx, n) would decide now, taking nothing, as
// Bucket.PeekN.
func (b *KeyBucket) PeekN(ctx context.Context, n int64) (Result, error) {
	return b.decide(ctx, "KeyBucket.PeekN", n, true, nil)
}

// TryConsumeAsMuchAsPossible is Bucket.TryConsumeAsMuchAsPossible.
func (b *KeyBucket) TryConsumeAsMuchAsPossible(ctx context.Context) (int64, error) {
	return b.tryConsumeUpTo(ctx, "KeyBucket.TryConsumeAsMuchAsPossible", math.MaxInt64, nil)
}

// TryConsumeUpTo is Bucket.TryConsumeUpTo.
func (b *KeyBucket) TryConsumeUpTo(ctx context.Context, limit int64) (int64, error) {
	return b.tryConsumeUpTo(ctx, "KeyBucket.TryConsumeUpTo", limit, nil)
}

func (b *KeyBucket) tryConsumeUpTo(ctx context.Context, op string, limit int64, snap *Snapshot) (int64, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeAsMuchAsPossible, Tokens: limit}
	res, err := b.apply(ctx, op, req, snap)
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
	return b.consumeIgnoringRateLimits(ctx, "KeyBucket.ConsumeIgnoringRateLimits", n, nil)
}

func (b *KeyBucket) consumeIgnoringRateLimits(ctx context.Context, op string, n int64, snap *Snapshot) (time.Duration, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeIgnoringRateLimits, Tokens: n}
	res, err := b.apply(ctx, op, req, snap)
	if err != nil {
		return 0, err
	}
	notify(b.observer, true, n)
	return time.Duration(res.Value), nil
}

// AddTokens is Bucket.AddTokens.
func (b *KeyBucket) AddTokens(ctx context.Context, n int64) error {
	_, err := b.apply(ctx, "KeyBucket.AddTokens", tokenbucket.Request{Op: tokenbucket.OpAddTokens, Tokens: n}, nil)
	return err
}

// ForceAddTokens is Bucket.ForceAddTokens.
func (b *KeyBucket) ForceAddTokens(ctx context.Context, n int64) error {
	_, err := b.apply(ctx, "KeyBucket.ForceAddTokens", tokenbucket.Request{Op: tokenbucket.OpForceAddTokens, Tokens: n}, nil)
	return err
}

// Reset fills the bucket, as Bucket.Reset.
func (b *KeyBucket) Reset(ctx context.Context) error {
	_, err := b.apply(ctx, "KeyBucket.Reset", tokenbucket.Request{Op: tokenbucket.OpReset}, nil)
	return err
}

// AvailableTokens is Bucket.AvailableTokens.
func (b *KeyBucket) AvailableTokens(ctx context.Context) (int64, error) {
	res, err := b.apply(ctx, "KeyBucket.AvailableTokens", tokenbucket.Request{Op: tokenbucket.OpAvailable}, nil)
	return res.Value, err
}

// Configuration returns the configuration in force for the key: the
// stored one when the key has state.
func (b *KeyBucket) Configuration(ctx context.Context) (BucketConfig, error) {
	if err := ctx.Err(); err != nil {
		return BucketConfig{}, err
	}
	cfg, err := b.backend.configuration(ctx, b.key)
	if err != nil {
		return BucketConfig{}, storeError("KeyBucket.Configuration", b.key, err)
	}
	return configOf(cfg), nil
}

// ReplaceConfiguration switches the key's stored bucket to cfg, carrying
// its tokens over by strategy, as Bucket.ReplaceConfiguration. The key
// keeps cfg even though its limiter is configured otherwise, until the
// limiter's own configuration changes. An in-memory Limiter's key keeps
// cfg while it has state, as a stored key does while its record lasts:
// once its bucket has refilled and nothing is taken, the key is a new
// bucket of the limiter's policy again.
func (b *KeyBucket) ReplaceConfiguration(ctx context.Context, cfg BucketConfig, strategy Inheritance) error {
	return b.replace(ctx, "KeyBucket.ReplaceConfiguration", cfg, strategy, nil)
}

func (b *KeyBucket) replace(ctx context.Context, op string, cfg BucketConfig, strategy Inheritance, snap *Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := replacement(cfg, strategy, b.clock)
	if err != nil {
		return err
	}
	var seen func(*tokenbucket.Config, tokenbucket.State, int64)
	if snap != nil {
		seen = snap.fill
	}
	return storeError(op, b.key, b.backend.replace(ctx, b.key, c, tokenbucket.Strategy(strategy), seen))
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

// WaitN reserves n tokens within maxWait and sleeps until they are due, as
// Limiter.WaitN.
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
			_, _ = ran.update(context.Background(), b.key, func(cfg *tokenbucket.Config, st tokenbucket.State, _ int64) bool {
				return rc.undo(cfg, st, now)
			})
		}
	}
	return newReservation(b.clock, at, n, res, undo), nil
}
