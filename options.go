package sluice

import (
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Option configures NewBucket or NewLimiter. Each With function says what
// it applies to:
//
//	WithClock, WithObserver          NewBucket and NewLimiter
//	WithStore, WithMaxKeys,          NewLimiter
//	WithPolicyFor, WithShadow
//	WithStoreTimeout,                NewLimiter with WithStore
//	WithStoreFailure,
//	WithCircuitBreaker,
//	WithConfigVersion, WithLease
//	WithInheritance                  NewLimiter with WithStore or WithPolicyFor
//	WithPolicyCache                  NewLimiter with WithPolicyFor
//
// A constructor refuses an option that does not apply to it with an
// *ArgumentError naming the option (its Arg), rather than ignore it. The
// zero Option does nothing.
type Option struct {
	name  string // the With function, for errors
	scope scope
	set   func(*options)
	// nilValue is set by an option whose value may not be nil (WithStore,
	// WithPolicyFor) when it is.
	nilValue bool
}

// scope is what an Option applies to.
type scope uint8

const (
	anyConstructor scope = iota // NewBucket and NewLimiter
	limiterOnly                 // NewLimiter
	storeOnly                   // NewLimiter with WithStore
	storeOrPlans                // NewLimiter with WithStore or WithPolicyFor
	plansOnly                   // NewLimiter with WithPolicyFor
)

// bucketOptions applies opts for NewBucket, and returns the
// *ArgumentError of the first that does not apply to it.
func bucketOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt.set == nil {
			continue
		}
		if opt.scope != anyConstructor {
			return o, &ArgumentError{Op: "NewBucket", Arg: opt.name, Want: "applies only to NewLimiter"}
		}
		opt.set(&o)
	}
	return o, nil
}

// limiterOptions applies opts for NewLimiter, and returns the
// *ArgumentError of the first whose condition (a store, a policy per key)
// the others do not meet.
func limiterOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt.set != nil {
			opt.set(&o)
		}
	}
	for _, opt := range opts {
		var want string
		switch {
		case opt.set == nil:
		case opt.nilValue:
			return o, nilArgument("NewLimiter", opt.name)
		case opt.scope == storeOnly && o.store == nil:
			want = "applies only to a limiter with WithStore"
		case opt.scope == storeOrPlans && o.store == nil && o.policyFor == nil:
			want = "applies only to a limiter with WithStore or WithPolicyFor"
		case opt.scope == plansOnly && o.policyFor == nil:
			want = "applies only to a limiter with WithPolicyFor"
		}
		if want != "" {
			return o, &ArgumentError{Op: "NewLimiter", Arg: opt.name, Want: want}
		}
	}
	return o, nil
}

type options struct {
	clock    Clock
	observer Observer

	// for a Limiter
	store   driver.Store
	maxKeys int
	lease   *Lease // WithLease
	shadow  bool   // WithShadow

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
}

// WithClock sets the clock of a Bucket's or a Limiter's decisions, and of
// their waits when it sleeps (see Clock). The default is MonotonicClock,
// or WallClock for a Bucket with aligned refill. nil keeps the default.
func WithClock(c Clock) Option {
	return Option{name: "WithClock", scope: anyConstructor, set: func(o *options) { o.clock = c }}
}

// WithStore keeps a Limiter's state in s instead of this process's
// memory, so that every process using s shares the limits. s must not be
// nil.
func WithStore(s driver.Store) Option {
	return Option{name: "WithStore", scope: limiterOnly, set: func(o *options) { o.store = s }, nilValue: s == nil}
}

// WithMaxKeys bounds the keys an in-memory Limiter (and the local fallback
// of one with a store) holds to n exactly: past it, a new key first drops
// expired ones, then evicts an arbitrary key, which starts afresh when
// next seen (a full bucket, an empty window). The bound is split among
// shards of at least 1024 keys (a bound under 2048 keys has a single
// lock), and a shard may evict while others still have room: the limiter
// never holds more than n keys, and holds n once every shard has filled.
// The default, 0, is no bound beyond expiry.
func WithMaxKeys(n int) Option {
	return Option{name: "WithMaxKeys", scope: limiterOnly, set: func(o *options) { o.maxKeys = n }}
}

// WithStoreTimeout bounds each call to the store, end to end: the time it
// waits behind the key's call in flight from this process is included, so
// a call that does not have its answer d after it began fails with a
// store timeout and gets the failure policy's answer. The default is
// DefaultStoreTimeout. A zero or negative d keeps the default.
func WithStoreTimeout(d time.Duration) Option {
	return Option{name: "WithStoreTimeout", scope: storeOnly, set: func(o *options) {
		if d > 0 {
			o.storeTimeout = d
		}
	}}
}

// WithStoreFailure sets what a Limiter or KeyBucket does when its store
// fails; the default is FailClosed.
func WithStoreFailure(f StoreFailure) Option {
	return Option{name: "WithStoreFailure", scope: storeOnly, set: func(o *options) { o.storeFailure = f }}
}

// WithInheritance sets how a key's stored state is carried over when the
// configured policy changed since it was written (detected by the
// fingerprint stored with it). For token-bucket policies it is the token
// inheritance of ReplaceConfiguration; for other policies InheritReset
// drops the old state and any other strategy keeps it when the new policy
// can read it (same kind of policy). The default is InheritProportionally.
func WithInheritance(t Inheritance) Option {
	return Option{name: "WithInheritance", scope: storeOrPlans, set: func(o *options) { o.inheritance = t }}
}

// WithCircuitBreaker sets after how many consecutive failed store calls a
// Limiter or KeyBucket stops asking its store, so that while the store is
// down or hangs every call gets the failure policy's answer (FailClosed,
// FailOpen, FailLocal) at once instead of after a store timeout. The
// circuit then stays open 50ms, and after each failed probe twice as
// long, at most 500ms; a probe that succeeds closes it. The default, and
// n = 0, is 5; n < 0 turns the breaker off.
//
// The breaker is the limiter's own, not shared with other limiters on
// the same store: each detects an outage after its own n failures, and
// reports its state changes to its Observer as EventCircuit. On a store of
// partitions that fail on their own (a driver.Partitioner, as redisstore
// with a Redis Cluster is: one partition per master), the limiter keeps a
// breaker per partition, so a master that fails opens the circuit of its
// own keys only; the observer is told the state of them all: open while
// any partition's circuit is open.
func WithCircuitBreaker(n int) Option {
	return Option{name: "WithCircuitBreaker", scope: storeOnly, set: func(o *options) { o.circuitFailures = n }}
}

// WithShadow puts a Limiter in shadow mode when on is true: it decides
// every request by its policy, keeping the same state as without shadow
// mode, but lets every one through. Its Results have Shadow set, and
// ShadowRejected on each request the policy refused, which its Observer
// is told as EventRejected with Event.Shadow set (sluiceprom counts them
// in sluice_shadow_rejected_total): a new limit can be rolled out and
// watched before it refuses anyone. ReserveN and WaitN never delay in
// shadow mode: a reservation is decided now (as with a maxWait of 0) and
// is OK at once, having taken nothing when the policy refused; WaitN
// never sleeps. The buckets that Bucket returns are not in shadow mode.
// The default is false.
func WithShadow(on bool) Option {
	return Option{name: "WithShadow", scope: limiterOnly, set: func(o *options) { o.shadow = on }}
}
