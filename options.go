package sluice

import (
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Each constructor takes the options it honours, and the compiler refuses
// the others:
//
//	NewBucket(cfg, ...BucketOption)                  Option
//	NewStoreBucket(s, key, cfg, ...StoreBucketOption) Option, StoreOption
//	NewLazyStoreBucket(s, key, f, ...StoreBucketOption)
//	NewLimiter(p, ...LimiterOption)                  Option, StoreOption, WithStore, WithMaxKeys, WithLease
//
// A StoreOption given to NewLimiter without WithStore is refused with an
// *ArgumentError.

// BucketOption configures NewBucket: an Option.
type BucketOption interface{ applyBucket(*options) }

// StoreBucketOption configures NewStoreBucket and NewLazyStoreBucket: an
// Option or a StoreOption.
type StoreBucketOption interface{ applyStoreBucket(*options) }

// LimiterOption configures NewLimiter: an Option, a StoreOption, WithStore,
// WithMaxKeys or WithLease.
type LimiterOption interface{ applyLimiter(*options) }

// Option configures any constructor: WithClock and WithObserver. The zero
// Option does nothing.
type Option struct{ set func(*options) }

func (f Option) apply(o *options) {
	if f.set != nil {
		f.set(o)
	}
}

func (f Option) applyBucket(o *options)      { f.apply(o) }
func (f Option) applyStoreBucket(o *options) { f.apply(o) }
func (f Option) applyLimiter(o *options)     { f.apply(o) }

// StoreOption configures how a Limiter or a KeyBucket uses its store:
// WithStoreTimeout, WithStoreFailure, WithCircuitBreaker and
// WithInheritance. NewLimiter refuses one without WithStore. The zero
// StoreOption does nothing.
type StoreOption struct {
	name string // the With function, for errors
	set  func(*options)
}

func (f StoreOption) applyStoreBucket(o *options) {
	if f.set != nil {
		f.set(o)
	}
}

func (f StoreOption) applyLimiter(o *options) {
	if f.set != nil {
		f.set(o)
		if o.storeOption == "" {
			o.storeOption = f.name
		}
	}
}

// limiterOption is an option of NewLimiter alone.
type limiterOption func(*options)

func (f limiterOption) applyLimiter(o *options) { f(o) }

type options struct {
	clock    Clock
	observer Observer

	// for a Limiter
	store   driver.Store
	maxKeys int
	lease   *Lease // WithLease

	// for a Limiter or KeyBucket with a store
	storeTimeout    time.Duration
	storeFailure    StoreFailure
	inheritance     Inheritance
	circuitFailures int    // configures the breaker (WithCircuitBreaker)
	configVersion   uint64 // WithConfigVersion

	// for a Limiter with a policy per key (WithPolicyFor, WithPolicyCache)
	policyFor       PolicyFunc
	policyCacheKeys int
	policyCacheTTL  time.Duration
	storeOption     string // the first StoreOption given to NewLimiter, by name
}

func bucketOptions(opts []BucketOption) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.applyBucket(&o)
		}
	}
	return o
}

func limiterOptions(opts []LimiterOption) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.applyLimiter(&o)
		}
	}
	return o
}

// WithClock sets the clock of decisions, and of waits when it sleeps (see
// Clock). The default is MonotonicClock, or WallClock for a bucket with
// aligned refill or a lazily configured one. nil keeps the default.
func WithClock(c Clock) Option { return Option{func(o *options) { o.clock = c }} }

// WithStore keeps a Limiter's state in s instead of this process's
// memory, so that every process using s shares the limits.
func WithStore(s driver.Store) LimiterOption { return limiterOption(func(o *options) { o.store = s }) }

// WithMaxKeys bounds the keys an in-memory Limiter (and the local fallback
// of one with a store) holds to n exactly: past it, a new key first drops
// expired ones, then evicts an arbitrary key, which starts afresh when
// next seen (a full bucket, an empty window). The bound is split among
// shards of at least 1024 keys (a bound under 2048 keys has a single
// lock), and a shard may evict while others still have room: the limiter
// never holds more than n keys, and holds n once every shard has filled.
// The default, 0, is no bound beyond expiry.
func WithMaxKeys(n int) LimiterOption { return limiterOption(func(o *options) { o.maxKeys = n }) }

// WithStoreTimeout bounds each call to the store, end to end: the time it
// waits behind the key's call in flight from this process is included, so
// a call that does not have its answer d after it began fails with a
// store timeout and gets the failure policy's answer. The default is
// DefaultStoreTimeout. A zero or negative d keeps the default.
func WithStoreTimeout(d time.Duration) StoreOption {
	return StoreOption{"WithStoreTimeout", func(o *options) {
		if d > 0 {
			o.storeTimeout = d
		}
	}}
}

// WithStoreFailure sets what a Limiter or KeyBucket does when its store
// fails; the default is FailClosed.
func WithStoreFailure(f StoreFailure) StoreOption {
	return StoreOption{"WithStoreFailure", func(o *options) { o.storeFailure = f }}
}

// WithInheritance sets how a key's stored state is carried over when the
// configured policy changed since it was written (detected by the
// fingerprint stored with it). For token-bucket policies it is the token
// inheritance of ReplaceConfiguration; for other policies InheritNone
// drops the old state and any other strategy keeps it when the new policy
// can read it (same kind of policy). The default is InheritProportionally.
func WithInheritance(t Inheritance) StoreOption {
	return StoreOption{"WithInheritance", func(o *options) { o.inheritance = t }}
}

// WithCircuitBreaker sets after how many consecutive failed store calls a
// Limiter or KeyBucket stops asking its store, so that while the store is
// down or hangs every call gets the failure policy's answer (FailClosed,
// FailOpen, FailLocal) at once instead of after a store timeout. The
// circuit then stays open 50ms, and after each failed probe twice as
// long, at most 500ms; a probe that succeeds closes it. The default, and
// n = 0, is DefaultCircuitFailures; n < 0 turns the breaker off.
//
// The breaker is the limiter's own, not shared with other limiters on
// the same store: each detects an outage after its own n failures, and
// reports its state changes to its Observer as EventCircuit. On a store of
// partitions that fail on their own (a driver.Partitioner, as redisstore
// with a Redis Cluster is: one partition per master), the limiter keeps a
// breaker per partition, so a master that fails opens the circuit of its
// own keys only; the observer is told the state of them all: open while
// any partition's circuit is open.
func WithCircuitBreaker(n int) StoreOption {
	return StoreOption{"WithCircuitBreaker", func(o *options) { o.circuitFailures = n }}
}
