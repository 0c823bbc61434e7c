package sluice

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// KeyBucket is the token bucket of one key of a Limiter, or of one key of
// a driver.Store (NewStoreBucket): Bucket4j's bucket proxy. It has the
// operations of Bucket, each taking a context and returning an error,
// since the state may live in a store shared by many processes; with a
// store every call is one atomic update of the key's state.
//
// A store's failure is handled as its Limiter's WithStoreFailure says:
// FailClosed returns a *StoreError, FailLocal runs the call on an
// in-memory bucket of this process, and FailOpen lets consumption through
// (TryConsume reports true, a probe reports consumed) and returns a
// *StoreError from the calls that only read or add.
//
// KeyBucket is safe for simultaneous use by multiple goroutines.
type KeyBucket struct {
	key      string
	clock    Clock
	sleeper  Sleeper
	listener Listener
	backend  bucketBackend
}

// NewStoreBucket returns the token bucket of key in s, with the
// configuration cfg for a key that has no state yet. As Bucket4j's proxy,
// its first call creates the key's state, even a call that only reads:
// the bucket's refill counts from then. A key that has state
// keeps the configuration stored with it, migrated to cfg (with the
// WithInheritance strategy) when cfg changed since it was written.
// WithStoreTimeout, WithStoreFailure, WithClock, WithSleeper and
// WithListener apply.
func NewStoreBucket(s driver.Store, key string, cfg BucketConfig, opts ...Option) (*KeyBucket, error) {
	o := newOptions(opts)
	o.store = s
	if o.store == nil {
		return nil, &ArgumentError{Op: "NewStoreBucket", Arg: "store", Value: 0, Want: "must not be nil"}
	}
	// Aligned refill is allowed here (BucketPolicy refuses it because a
	// keyed limiter's buckets start at each key's first use).
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	clock, sleeper, err := bucketClocks(c, &o)
	if err != nil {
		return nil, err
	}
	setup, err := newStoreSetup(&o, clock)
	if err != nil {
		return nil, err
	}
	codec := record.NewBucket(c, record.BucketOptions{Inherit: setup.inherit, CreateOnRead: true, Compile: compileStored})
	local := memBuckets{buckets: keyed.NewMem[tokenbucket.State](tokenbucket.NewMulti(c), 0).Buckets(), clock: clock}
	return &KeyBucket{key: key, clock: clock, sleeper: sleeper, listener: o.listener, backend: &bucketFailover{
		failurePolicy: setup.fail,
		store:         storeBuckets{store: setup.store, codec: codec},
		local:         func(context.Context) (bucketBackend, error) { return local, nil },
	}}, nil
}

// NewLazyStoreBucket is NewStoreBucket with the configuration given by
// supply, which is called only when the key has no state (for limits read
// from a slow database) and at most once per successful call. A key that
// has state keeps its stored configuration, never migrated.
func NewLazyStoreBucket(s driver.Store, key string, supply func(ctx context.Context) (BucketConfig, error), opts ...Option) (*KeyBucket, error) {
	if supply == nil {
		return nil, &ArgumentError{Op: "NewLazyStoreBucket", Arg: "supply", Value: 0, Want: "must not be nil"}
	}
	o := newOptions(opts)
	o.store = s
	clock, sleeper := o.clock, o.sleeper
	if clock == nil {
		clock = WallClock() // the configuration is not known yet: aligned refill must work
	}
	if sleeper == nil {
		sleeper = TimerSleeper()
	}
	setup, err := newStoreSetup(&o, clock)
	if err != nil {
		return nil, err
	}
	opt := record.BucketOptions{Inherit: setup.inherit, KeepStored: true, CreateOnRead: true, Compile: compileStored}
	l := &lazyBuckets{store: setup.store, opts: opt, clock: clock, supply: supply, codec: record.NewBucket(nil, opt)}
	return &KeyBucket{key: key, clock: clock, sleeper: sleeper, listener: o.listener, backend: lazyConfig{l: l, next: &bucketFailover{
		failurePolicy: setup.fail,
		store:         lazyStore{l},
		local:         func(ctx context.Context) (bucketBackend, error) { return l.localBuckets(ctx, key) },
	}}}, nil
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// update runs f on the key's bucket and returns where it ran.
func (b *KeyBucket) update(ctx context.Context, f bucketFunc) (bucketBackend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.backend.update(ctx, b.key, f)
}

// run runs req on the key's bucket, with a snapshot after it when snap is
// not nil.
func (b *KeyBucket) run(ctx context.Context, req tokenbucket.Request, snap *Snapshot) (tokenbucket.Result, error) {
	var res tokenbucket.Result
	_, err := b.update(ctx, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		var changed bool
		res, changed = tokenbucket.Apply(cfg, st, now, req)
		if snap != nil {
			snap.fill(cfg, st, now)
		}
		return changed
	})
	return res, err
}

// apply runs req on the key's bucket. A store's failure is a *StoreError
// under every policy but FailLocal; decide is apply for the calls that let
// tokens through under FailOpen.
func (b *KeyBucket) apply(ctx context.Context, op string, req tokenbucket.Request, snap *Snapshot) (tokenbucket.Result, error) {
	res, err := b.run(ctx, req, snap)
	if err != nil {
		return tokenbucket.Result{}, storeError("KeyBucket."+op, b.key, err)
	}
	return res, argError(op, res, req)
}

// decide is apply for the calls that decide whether tokens pass: under
// FailOpen they pass.
func (b *KeyBucket) decide(ctx context.Context, op string, req tokenbucket.Request, snap *Snapshot) (tokenbucket.Result, error) {
	res, err := b.run(ctx, req, snap)
	switch {
	case failedOpen(err):
		return tokenbucket.Result{Consumed: true}, nil
	case err != nil:
		return tokenbucket.Result{}, storeError("KeyBucket."+op, b.key, err)
	}
	return res, argError(op, res, req)
}

// Key is the bucket's key.
func (b *KeyBucket) Key() string { return b.key }

// TryConsume takes n tokens if they are all there now, as Bucket.TryConsume.
func (b *KeyBucket) TryConsume(ctx context.Context, n int64) (bool, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsume, Tokens: n}
	res, err := b.decide(ctx, "TryConsume", req, nil)
	if err != nil {
		return false, err
	}
	notify(b.listener, res.Consumed, n)
	return res.Consumed, nil
}

// TryConsumeAndReturnRemaining is Bucket.TryConsumeAndReturnRemaining.
func (b *KeyBucket) TryConsumeAndReturnRemaining(ctx context.Context, n int64) (ConsumptionProbe, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsumeAndReturnRemaining, Tokens: n}
	res, err := b.decide(ctx, "TryConsumeAndReturnRemaining", req, nil)
	if err != nil {
		return ConsumptionProbe{}, err
	}
	notify(b.listener, res.Consumed, n)
	return consumptionProbe(res), nil
}

// EstimateAbilityToConsume is Bucket.EstimateAbilityToConsume.
func (b *KeyBucket) EstimateAbilityToConsume(ctx context.Context, n int64) (EstimationProbe, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpEstimate, Tokens: n}
	res, err := b.decide(ctx, "EstimateAbilityToConsume", req, nil)
	if err != nil {
		return EstimationProbe{}, err
	}
	return estimationProbe(res), nil
}

// TryConsumeAsMuchAsPossible is Bucket.TryConsumeAsMuchAsPossible.
func (b *KeyBucket) TryConsumeAsMuchAsPossible(ctx context.Context) (int64, error) {
	return b.TryConsumeUpTo(ctx, math.MaxInt64)
}

// TryConsumeUpTo is Bucket.TryConsumeUpTo.
func (b *KeyBucket) TryConsumeUpTo(ctx context.Context, limit int64) (int64, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeAsMuchAsPossible, Tokens: limit}
	res, err := b.apply(ctx, "TryConsumeUpTo", req, nil)
	if err != nil {
		return 0, err
	}
	if res.Value > 0 && b.listener != nil {
		b.listener.OnConsumed(res.Value)
	}
	return res.Value, nil
}

// ConsumeIgnoringRateLimits is Bucket.ConsumeIgnoringRateLimits.
func (b *KeyBucket) ConsumeIgnoringRateLimits(ctx context.Context, n int64) (time.Duration, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeIgnoringRateLimits, Tokens: n}
	res, err := b.apply(ctx, "ConsumeIgnoringRateLimits", req, nil)
	if err != nil {
		return 0, err
	}
	notify(b.listener, true, n)
	return time.Duration(res.Value), nil
}

// AddTokens is Bucket.AddTokens.
func (b *KeyBucket) AddTokens(ctx context.Context, n int64) error {
	_, err := b.apply(ctx, "AddTokens", tokenbucket.Request{Op: tokenbucket.OpAddTokens, Tokens: n}, nil)
	return err
}

// ForceAddTokens is Bucket.ForceAddTokens.
func (b *KeyBucket) ForceAddTokens(ctx context.Context, n int64) error {
	_, err := b.apply(ctx, "ForceAddTokens", tokenbucket.Request{Op: tokenbucket.OpForceAddTokens, Tokens: n}, nil)
	return err
}

// Reset fills the bucket, as Bucket.Reset.
func (b *KeyBucket) Reset(ctx context.Context) error {
	_, err := b.apply(ctx, "Reset", tokenbucket.Request{Op: tokenbucket.OpReset}, nil)
	return err
}

// AvailableTokens is Bucket.AvailableTokens.
func (b *KeyBucket) AvailableTokens(ctx context.Context) (int64, error) {
	res, err := b.apply(ctx, "AvailableTokens", tokenbucket.Request{Op: tokenbucket.OpAvailable}, nil)
	return res.Value, err
}

// Snapshot describes the bucket now, changing nothing: Bucket4j's
// verbose diagnostics.
func (b *KeyBucket) Snapshot(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	_, err := b.apply(ctx, "Snapshot", tokenbucket.Request{Op: tokenbucket.OpAvailable}, &snap)
	return snap, err
}

// TryConsumeVerbose is TryConsumeAndReturnRemaining with a snapshot of the
// bucket after the call.
func (b *KeyBucket) TryConsumeVerbose(ctx context.Context, n int64) (Verbose[ConsumptionProbe], error) {
	var v Verbose[ConsumptionProbe]
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsumeAndReturnRemaining, Tokens: n}
	res, err := b.apply(ctx, "TryConsumeVerbose", req, &v.Snapshot)
	if err != nil {
		return v, err
	}
	notify(b.listener, res.Consumed, n)
	v.Value = consumptionProbe(res)
	return v, nil
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
// limiter's own configuration changes. The bucket of an in-memory
// Limiter's key cannot be reconfigured alone: it returns an error
// matching errors.ErrUnsupported.
func (b *KeyBucket) ReplaceConfiguration(ctx context.Context, cfg BucketConfig, strategy Inheritance) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := replacement(cfg, strategy, b.clock)
	if err != nil {
		return err
	}
	return storeError("KeyBucket.ReplaceConfiguration", b.key, b.backend.replace(ctx, b.key, c, tokenbucket.Strategy(strategy)))
}

// Consume takes n tokens, waiting as long as it takes, as
// BlockingBucket.Consume.
func (b *KeyBucket) Consume(ctx context.Context, n int64) error {
	_, err := blockingWait(ctx, "KeyBucket.Consume", n, never, b.sleeper, b.listener, b.reserve)
	return err
}

// TryConsumeWait takes n tokens if they will be there within maxWait,
// waiting for them, as BlockingBucket.TryConsume: a ctx whose deadline is
// sooner than the wait fails at once and takes nothing, and when ctx ends
// during the wait the tokens are given back and it returns ctx.Err().
func (b *KeyBucket) TryConsumeWait(ctx context.Context, n int64, maxWait time.Duration) (bool, error) {
	return blockingWait(ctx, "KeyBucket.TryConsumeWait", n, int64(maxWait), b.sleeper, b.listener, b.reserve)
}

// Reserve takes n tokens now that will be there within maxWait, as
// Bucket.Reserve: the caller waits Delay itself, and may Cancel the
// reservation, which gives the tokens back where they were taken (the
// store, or the in-memory fallback of FailLocal). When the store fails and
// the bucket fails open, the reservation is OK at once and takes nothing.
func (b *KeyBucket) Reserve(ctx context.Context, n int64, maxWait time.Duration) (*Reservation, error) {
	r, err := b.reserve(ctx, "KeyBucket.Reserve", n, int64(maxWait))
	if err != nil {
		return nil, err
	}
	notifyReserved(b.listener, r)
	return r, nil
}

// reserve is Reserve without the listener.
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
	}
	if res.Code != policy.OK {
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

func consumptionProbe(res tokenbucket.Result) ConsumptionProbe {
	return ConsumptionProbe{
		Consumed:      res.Consumed,
		Remaining:     res.Remaining,
		WaitForRefill: time.Duration(res.WaitForRefill),
		WaitForReset:  time.Duration(res.WaitForReset),
	}
}

func estimationProbe(res tokenbucket.Result) EstimationProbe {
	return EstimationProbe{CanBeConsumed: res.Consumed, Remaining: res.Remaining, WaitForRefill: time.Duration(res.WaitForRefill)}
}
