package sluice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// LazyBuckets are the token buckets of the keys of a driver.Store, each
// configured by a supplier that runs only for a key without state:
// Bucket4j's proxy manager building buckets with a lazy configuration
// supplier, for limits per key read from a slow database. A key that has
// state keeps the configuration stored with it, never migrated (replace
// it with KeyBucket.ReplaceConfiguration).
//
// All the keys share one engine (per-key batching, circuit breaker,
// failure policy): Bucket costs one small allocation, not an engine per
// key. LazyBuckets is safe for simultaneous use by multiple goroutines.
type LazyBuckets struct {
	clock    Clock
	observer Observer
	supply   func(ctx context.Context, key string) (BucketConfig, error)
	opts     record.BucketOptions
	none     *record.Bucket // the codec of a key whose state carries its configuration
	backend  bucketBackend

	mu     sync.Mutex
	codecs []suppliedCodec // guarded by mu; the latest configurations supplied, at most maxSuppliedCodecs
}

// suppliedCodec is the codec of a configuration a supplier returned.
type suppliedCodec struct {
	bandwidths []Bandwidth
	codec      *record.Bucket
}

// maxSuppliedCodecs is how many supplied configurations LazyBuckets keeps
// compiled: suppliers usually return one of a few plans, so a key
// without state seldom compiles its configuration again.
const maxSuppliedCodecs = 16

// NewLazyBuckets returns the buckets of s, configured by supply for a key
// without state. supply is called with the key, at most once per call of
// a bucket that finds its key without state (again when the store failed
// and FailLocal runs the call on this process's memory), never for a key
// that has state; its error is returned as the call's, wrapped. The
// clock is WallClock unless WithClock says otherwise, so that supplied
// configurations may refill intervally aligned. The StoreOptions,
// WithClock and WithObserver apply to every bucket.
func NewLazyBuckets(s driver.Store, supply func(ctx context.Context, key string) (BucketConfig, error), opts ...StoreBucketOption) (*LazyBuckets, error) {
	if s == nil {
		return nil, nilArgument("NewLazyBuckets", "store")
	}
	if supply == nil {
		return nil, nilArgument("NewLazyBuckets", "supply")
	}
	o := storeBucketOptions(opts)
	o.store = s
	p := &LazyBuckets{clock: o.clock, observer: o.observer, supply: supply}
	if p.clock == nil {
		p.clock = WallClock() // the configurations are not known yet: aligned refill must work
	}
	setup, err := newStoreSetup(&o, p.clock)
	if err != nil {
		return nil, err
	}
	p.opts = record.BucketOptions{Inherit: setup.inherit, KeepStored: true, CreateOnRead: true, Compile: compileStored}
	p.none = record.NewBucket(nil, p.opts)
	// FailLocal's fallback keeps records in memory, so that each key's
	// local bucket has its own supplied configuration too.
	// It is made at the first failure.
	local := sync.OnceValue(func() *lazyKeys {
		return &lazyKeys{p: p, engine: keyed.NewStore(keyed.NewMapStore(p.clock, 0), p.clock, DefaultStoreTimeout, breaker.NewSet(0, nil, nil))}
	})
	p.backend = &bucketFailover{
		failurePolicy: setup.fail,
		store:         &lazyKeys{p: p, engine: setup.store},
		local:         func(context.Context) (bucketBackend, error) { return local(), nil },
	}
	return p, nil
}

// Bucket returns key's bucket. Its configuration is supplied at the first
// call that finds the key without state.
func (p *LazyBuckets) Bucket(key string) *KeyBucket {
	return &KeyBucket{key: key, clock: p.clock, observer: p.observer, backend: p.backend}
}

// configure calls supply for key and returns the codec of its
// configuration, for a key without state.
func (p *LazyBuckets) configure(ctx context.Context, key string) (*record.Bucket, error) {
	cfg, err := p.supply(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("sluice: configuration of key %s: %w", driver.QuoteKey(key), err)
	}
	p.mu.Lock()
	for _, sc := range p.codecs {
		if slices.Equal(sc.bandwidths, cfg.Bandwidths) {
			p.mu.Unlock()
			return sc.codec, nil
		}
	}
	p.mu.Unlock()
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	if err := checkClock(c, p.clock); err != nil {
		return nil, err
	}
	codec := record.NewBucket(c, p.opts)
	p.mu.Lock()
	if len(p.codecs) == maxSuppliedCodecs {
		p.codecs = slices.Delete(p.codecs, 0, 1)
	}
	p.codecs = append(p.codecs, suppliedCodec{bandwidths: slices.Clone(cfg.Bandwidths), codec: codec})
	p.mu.Unlock()
	return codec, nil
}

// lazyKeys is a bucketBackend of LazyBuckets on one engine: the store's,
// or the in-memory fallback's. Each call runs first with the codec of no
// configuration, which takes a stored bucket as it is, and only when the
// key has no state supplies a configuration and runs again.
type lazyKeys struct {
	p      *LazyBuckets
	engine *keyed.Store
}

// supplied runs call with the codec of no configuration, and once more
// with the supplied configuration's when the key had no state.
func (k *lazyKeys) supplied(ctx context.Context, key string, call func(*record.Bucket) error) error {
	err := call(k.p.none)
	if !errors.Is(err, keyed.ErrNoConfig) {
		return err
	}
	c, err := k.p.configure(ctx, key)
	if err != nil {
		return err
	}
	return call(c)
}

func (k *lazyKeys) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	return k, k.supplied(ctx, key, func(c *record.Bucket) error { return k.engine.UpdateBucket(ctx, key, c, f) })
}

func (k *lazyKeys) configuration(ctx context.Context, key string) (*tokenbucket.Config, error) {
	var cfg *tokenbucket.Config
	err := k.supplied(ctx, key, func(c *record.Bucket) (err error) {
		cfg, err = k.engine.Configuration(ctx, key, c)
		return err
	})
	return cfg, err
}

func (k *lazyKeys) replace(ctx context.Context, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error {
	return k.supplied(ctx, key, func(c *record.Bucket) error { return k.engine.ReplaceBucket(ctx, key, c, cfg, strategy, seen) })
}
