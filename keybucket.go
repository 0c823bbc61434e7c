package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
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

	// mem is set for a key of an in-memory Limiter; store otherwise.
	mem   bucketStore
	store *storeKeyed

	// lazy supplies the configuration of a key that has no state yet; mu
	// guards store while it is replaced by one with that configuration.
	lazy func(context.Context) (Config, error)
	opts options
	mu   sync.Mutex
}

// NewStoreBucket returns the token bucket of key in s, with the
// configuration cfg for a key that has no state yet. As Bucket4j's proxy,
// its first call creates the key's state, even a call that only reads:
// the bucket's refill counts from then. A key that has state
// keeps the configuration stored with it, migrated to cfg (with the
// WithInheritance strategy) when cfg changed since it was written.
// WithStoreTimeout, WithStoreFailure, WithClock, WithSleeper and
// WithListener apply.
func NewStoreBucket(s driver.Store, key string, cfg Config, opts ...Option) (*KeyBucket, error) {
	o := newOptions(opts)
	o.store = s
	return newStoreBucket(key, &o, cfg)
}

// NewLazyStoreBucket is NewStoreBucket with the configuration given by
// supply, which is called only when the key has no state (for limits read
// from a slow database) and at most once per successful call. A key that
// has state keeps its stored configuration, never migrated.
func NewLazyStoreBucket(s driver.Store, key string, supply func(ctx context.Context) (Config, error), opts ...Option) (*KeyBucket, error) {
	if supply == nil {
		return nil, &ArgumentError{Op: "NewLazyStoreBucket", Arg: "supply", Value: 0, Want: "must not be nil"}
	}
	o := newOptions(opts)
	o.store = s
	b := &KeyBucket{key: key, lazy: supply, opts: o}
	b.clock, b.sleeper, b.listener = o.clock, o.sleeper, o.listener
	if b.clock == nil {
		b.clock = WallClock() // the configuration is not known yet: aligned refill must work
	}
	if b.sleeper == nil {
		b.sleeper = TimerSleeper()
	}
	sk, err := newStoreKeyed(nil, &o, b.clock, nil)
	if err != nil {
		return nil, err
	}
	b.store = sk
	return b, nil
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// newStoreBucket builds the KeyBucket of a single configuration; aligned
// refill is allowed here (BucketPolicy refuses it because a keyed
// limiter's buckets start at each key's first use).
func newStoreBucket(key string, o *options, cfg Config) (*KeyBucket, error) {
	if o.store == nil {
		return nil, &ArgumentError{Op: "NewStoreBucket", Arg: "store", Value: 0, Want: "must not be nil"}
	}
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	clock, sleeper, err := bucketClocks(c, o)
	if err != nil {
		return nil, err
	}
	b := &KeyBucket{key: key, clock: clock, sleeper: sleeper, listener: o.listener}
	sk, err := newStoreKeyed(bucketConfigPolicy{c}, o, b.clock, nil)
	if err != nil {
		return nil, err
	}
	sk.createOnRead = true
	b.store = sk
	return b, nil
}

// bucketConfigPolicy is the Policy of one compiled configuration, aligned
// refill included, for NewStoreBucket.
type bucketConfigPolicy struct{ cfg *tokenbucket.Config }

func (p bucketConfigPolicy) String() string { return string(KindBucket) }
func (p bucketConfigPolicy) Kind() Kind     { return KindBucket }
func (p bucketConfigPolicy) Window() time.Duration {
	return time.Duration(tokenbucket.NewMulti(p.cfg).Window())
}
func (p bucketConfigPolicy) build() (keyed, error) {
	return newMemKeyed[tokenbucket.State](tokenbucket.NewMulti(p.cfg)), nil
}
func (p bucketConfigPolicy) erased() (policy.Erased, error) { return nil, errors.ErrUnsupported }
func (p bucketConfigPolicy) tokenBucket() (*tokenbucket.Config, bool, bool) {
	return p.cfg, false, true
}

// errNeedConfig is a lazy bucket's signal that the key has no state.
var errNeedConfig = errors.New("sluice: no configuration")

// backend returns the store that b's calls go to now.
func (b *KeyBucket) backend() *storeKeyed {
	if b.lazy == nil {
		return b.store
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store
}

// configure gives a lazy bucket its configuration.
func (b *KeyBucket) configure(ctx context.Context) error {
	cfg, err := b.lazy(ctx)
	if err != nil {
		return fmt.Errorf("sluice: configuration of key %q: %w", b.key, err)
	}
	c, err := cfg.compile()
	if err != nil {
		return err
	}
	if err := checkClock(c, b.clock); err != nil {
		return err
	}
	o := b.opts
	sk, err := newStoreKeyed(bucketConfigPolicy{c}, &o, b.clock, nil)
	if err != nil {
		return err
	}
	sk.noMigrate, sk.createOnRead = true, true
	b.mu.Lock()
	b.store = sk
	b.mu.Unlock()
	return nil
}

// bucketFunc is an operation on a key's bucket: it runs on the state st
// of configuration cfg at now, and reports whether st changed and must be
// stored. It may run more than once (a store retries); the last run counts.
type bucketFunc func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) (changed bool)

// bucketSite is where a KeyBucket operation ran.
type bucketSite uint8

const (
	siteMem   bucketSite = iota // the in-memory Limiter's key
	siteStore                   // the store
	siteLocal                   // the in-memory fallback of FailLocal
	siteOpen                    // nowhere: the store failed and the bucket fails open
)

// update runs f on the key's bucket, applying the failure policy, and
// returns where it ran. Under FailOpen it does not run f and returns
// siteOpen with the *StoreError.
func (b *KeyBucket) update(ctx context.Context, op string, f bucketFunc) (bucketSite, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if b.mem != nil {
		b.inMemory(b.mem, f)
		return siteMem, nil
	}
	s, err, failure := b.onStore(ctx, func(s *storeKeyed) error {
		return s.applyBucket(ctx, b.key, f)
	})
	switch {
	case err != nil:
		return 0, err
	case failure == nil:
		return siteStore, nil
	}
	if ferr := s.failed("KeyBucket."+op, b.key, failure); ferr != nil {
		return 0, ferr
	}
	if s.failure == FailLocal && s.local != nil {
		b.inMemory(s.local.(bucketStore), f)
		return siteLocal, nil
	}
	return siteOpen, &StoreError{Op: "KeyBucket." + op, Key: b.key, Err: failure}
}

// updateAt runs f on the key's bucket at site only, where an earlier call
// ran: a reservation is given back where it was taken. A store's failure
// leaves the bucket as it is.
func (b *KeyBucket) updateAt(site bucketSite, f bucketFunc) {
	switch site {
	case siteMem:
		b.inMemory(b.mem, f)
	case siteLocal:
		if local, ok := b.backend().local.(bucketStore); ok {
			b.inMemory(local, f)
		}
	case siteStore:
		_ = b.backend().applyBucket(context.Background(), b.key, f)
	}
}

// inMemory runs f on the key's bucket in mem, now.
func (b *KeyBucket) inMemory(mem bucketStore, f bucketFunc) {
	now := b.clock.Now()
	mem.withBucket(b.key, now, func(cfg *tokenbucket.Config, st tokenbucket.State) bool {
		return f(cfg, st, now)
	})
}

// apply runs req on the key's bucket, applying the failure policy: under
// FailOpen a consuming operation is let through, and the others return
// the *StoreError.
func (b *KeyBucket) apply(ctx context.Context, op string, req tokenbucket.Request, snap *Snapshot) (tokenbucket.Result, error) {
	var res tokenbucket.Result
	site, err := b.update(ctx, op, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		var changed bool
		res, changed = tokenbucket.Apply(cfg, st, now, req)
		if snap != nil {
			snap.fill(cfg, st, now)
		}
		return changed
	})
	if site == siteOpen {
		switch req.Op {
		case tokenbucket.OpTryConsume, tokenbucket.OpTryConsumeAndReturnRemaining, tokenbucket.OpEstimate:
			return tokenbucket.Result{Consumed: true}, nil
		}
		return tokenbucket.Result{}, err
	}
	if err != nil {
		return tokenbucket.Result{}, err
	}
	return res, argError(op, res, req)
}

// onStore runs f on the key's store. When f finds the key without state
// and the bucket is lazy, the bucket gets its configuration and f runs
// again. err is for the caller as it is: the supplier's error, or ctx's
// when the caller's context ended. failure is the store's failure, for the
// caller's failure policy.
func (b *KeyBucket) onStore(ctx context.Context, f func(*storeKeyed) error) (s *storeKeyed, err, failure error) {
	s = b.backend()
	failure = f(s)
	if errors.Is(failure, errNeedConfig) {
		if err := b.configure(ctx); err != nil {
			return s, err, nil
		}
		s = b.backend()
		failure = f(s)
	}
	if failure != nil && isCallerDone(ctx, failure) {
		return s, ctx.Err(), nil
	}
	return s, nil, failure
}

// Key is the bucket's key.
func (b *KeyBucket) Key() string { return b.key }

// TryConsume takes n tokens if they are all there now, as Bucket.TryConsume.
func (b *KeyBucket) TryConsume(ctx context.Context, n int64) (bool, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsume, Tokens: n}
	res, err := b.apply(ctx, "TryConsume", req, nil)
	if err != nil {
		return false, err
	}
	notify(b.listener, res.Consumed, n)
	return res.Consumed, nil
}

// TryConsumeAndReturnRemaining is Bucket.TryConsumeAndReturnRemaining.
func (b *KeyBucket) TryConsumeAndReturnRemaining(ctx context.Context, n int64) (ConsumptionProbe, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsumeAndReturnRemaining, Tokens: n}
	res, err := b.apply(ctx, "TryConsumeAndReturnRemaining", req, nil)
	if err != nil {
		return ConsumptionProbe{}, err
	}
	notify(b.listener, res.Consumed, n)
	return consumptionProbe(res), nil
}

// EstimateAbilityToConsume is Bucket.EstimateAbilityToConsume.
func (b *KeyBucket) EstimateAbilityToConsume(ctx context.Context, n int64) (EstimationProbe, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpEstimate, Tokens: n}
	res, err := b.apply(ctx, "EstimateAbilityToConsume", req, nil)
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
func (b *KeyBucket) Configuration(ctx context.Context) (Config, error) {
	if err := ctx.Err(); err != nil {
		return Config{}, err
	}
	if b.mem != nil {
		return configOf(b.mem.bucketConfig()), nil
	}
	var cfg *tokenbucket.Config
	_, err, failure := b.onStore(ctx, func(s *storeKeyed) (err error) {
		cfg, err = s.configuration(ctx, b.key)
		return err
	})
	if failure != nil {
		err = &StoreError{Op: "KeyBucket.Configuration", Key: b.key, Err: failure}
	}
	if err != nil {
		return Config{}, err
	}
	return configOf(cfg), nil
}

// ReplaceConfiguration switches the key's stored bucket to cfg, carrying
// its tokens over by strategy, as Bucket.ReplaceConfiguration. The key
// keeps cfg even though its limiter is configured otherwise, until the
// limiter's own configuration changes. The bucket of an in-memory
// Limiter's key cannot be reconfigured alone: it returns an error
// matching errors.ErrUnsupported.
func (b *KeyBucket) ReplaceConfiguration(ctx context.Context, cfg Config, strategy TokensInheritance) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.mem != nil {
		return fmt.Errorf("sluice: ReplaceConfiguration of key %q: the bucket follows its in-memory Limiter's policy: %w", b.key, errors.ErrUnsupported)
	}
	c, err := replacement(cfg, strategy, b.clock)
	if err != nil {
		return err
	}
	_, err, failure := b.onStore(ctx, func(s *storeKeyed) error {
		return s.replaceBucket(ctx, b.key, c, strategy)
	})
	if failure != nil {
		err = &StoreError{Op: "KeyBucket.ReplaceConfiguration", Key: b.key, Err: failure}
	}
	return err
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
	site, err := b.update(ctx, op, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
		var changed bool
		at = now
		res, changed, rc = reserveBucket(cfg, st, now, n, maxWait)
		return changed
	})
	switch {
	case site == siteOpen:
		return newReservation(b.clock, b.clock.Now(), n, policy.Result{Allowed: true}, nil), nil
	case err != nil:
		return nil, err
	case res.Code != policy.OK:
		return nil, limiterError(op, res, n, maxWait, 0)
	}
	var undo func(int64)
	if rc != nil {
		undo = func(now int64) {
			b.updateAt(site, func(cfg *tokenbucket.Config, st tokenbucket.State, _ int64) bool {
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
