package sluice

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// PolicyFunc returns the policy of a key: its customer's plan, a tenant's
// override. A nil Policy and a nil error mean the Limiter's own policy.
// It must be safe for simultaneous use; it is called for a key when the
// limiter has not resolved it within the policy cache's TTL.
type PolicyFunc func(ctx context.Context, key string) (Policy, error)

// WithPolicyFor makes a Limiter's policy depend on the key: f says which
// policy applies to a key, and the policy given to NewLimiter is that of
// the keys f returns nil for. Each key's policy is cached (see
// WithPolicyCache); when f later returns another policy for a key, the
// key's state migrates to it as a stored key migrates to a changed
// configuration, by the WithInheritance strategy (default
// InheritProportionally; WithInheritance applies in memory too), in
// memory as in a store. An error of f is the call's, wrapped, and takes
// nothing.
//
// Policies are told apart by their String: f should return one Policy
// value per plan, or equal ones. Every key keeps a record of its own
// policy, in memory as in a store, so a limiter with WithPolicyFor is not
// the allocation-free hot path of a limiter with one policy. Its Bucket
// serves the keys whose policy is a token bucket; the calls of another
// key's KeyBucket return an error matching errors.ErrUnsupported.
//
// With WithConfigVersion, a key stored by a process of a higher version
// keeps that process's policy, as for any limiter; between processes of
// one version, the last policy resolved for a key wins, so two processes
// whose caches disagree after a plan change move the key back and forth
// until the older cache entry expires. f must not be nil.
func WithPolicyFor(f PolicyFunc) Option {
	return Option{name: "WithPolicyFor", scope: limiterOnly, set: func(o *options) { o.policyFor = f }, nilValue: f == nil}
}

// The defaults of WithPolicyCache.
const (
	defaultPolicyCacheKeys = 10_000
	defaultPolicyCacheTTL  = time.Minute
)

// WithPolicyCache bounds the cache of WithPolicyFor: at most keys keys'
// policies (past them an arbitrary entry is dropped, resolved again at
// its key's next call), each resolved again after ttl on the limiter's
// clock. keys ≤ 0 and ttl ≤ 0 keep the defaults, 10,000 keys and a
// minute.
func WithPolicyCache(keys int, ttl time.Duration) Option {
	return Option{name: "WithPolicyCache", scope: plansOnly, set: func(o *options) { o.policyCacheKeys, o.policyCacheTTL = keys, ttl }}
}

// newPlanLimiter makes l, whose clock is set, decide with a
// policy per key as o's WithPolicyFor says.
func newPlanLimiter(l *Limiter, o *options) (*Limiter, error) {
	c := engine.PlanConfig[Policy]{
		Resolve: func(ctx context.Context, key string) (Policy, error) {
			p, err := o.policyFor(ctx, key)
			if p == nil && err == nil {
				p = l.policy
			}
			return p, err
		},
		Name:    Policy.String,
		Default: l.policy,
		Clock:   l.clock,
		TTL:     int64(o.policyCacheTTL),
		MaxKeys: o.policyCacheKeys,
	}
	if c.TTL <= 0 {
		c.TTL = int64(defaultPolicyCacheTTL)
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = defaultPolicyCacheKeys
	}
	mem := keyed.NewMapStore(l.clock, o.maxKeys)
	memVersion := record.ConfigVersion{PerKey: true}
	if o.store == nil {
		if err := checkInheritance("NewLimiter", "WithInheritance", inheritanceOf(o)); err != nil {
			return nil, err
		}
		inherit := tokenbucket.Strategy(inheritanceOf(o))
		c.Build = func(p Policy) (*engine.Plan, error) {
			if err := checkWallClock(p, l.clock); err != nil {
				return nil, err
			}
			codec, err := recordCodec(p, inherit, memVersion, false)
			if err != nil {
				return nil, err
			}
			m := &engine.MemRecords{Recs: mem, Codec: codec, Clock: l.clock}
			pl := &engine.Plan{Keys: m}
			if bc, ok := codec.(*record.Bucket); ok {
				creating, _ := recordCodec(p, inherit, memVersion, true)
				pl.Buckets, pl.Inspect = engine.MemRecordBuckets{M: m, Codec: creating.(*record.Bucket)}, engine.MemRecordBuckets{M: m, Codec: bc}
			}
			return pl, nil
		}
	} else {
		setup, err := newStoreSetup(o, l.clock)
		if err != nil {
			return nil, err
		}
		version := setup.version
		version.PerKey = true
		c.Build = func(p Policy) (*engine.Plan, error) {
			if err := checkWallClock(p, l.clock); err != nil {
				return nil, err
			}
			codec, err := recordCodec(p, setup.inherit, version, false)
			if err != nil {
				return nil, err
			}
			local, err := recordCodec(p, setup.inherit, memVersion, false)
			if err != nil {
				return nil, err
			}
			e, err := p.erased()
			if err != nil {
				return nil, err
			}
			m := &engine.MemRecords{Recs: mem, Codec: local, Clock: l.clock}
			pl := &engine.Plan{Keys: &engine.Failover{Policy: setup.fail, Store: &engine.Stored{Store: setup.store, Codec: codec, Clock: l.clock},
				Local: m, Fleet: setup.fleet, Limit: e.Quota()}}
			if bc, ok := codec.(*record.Bucket); ok {
				creating, _ := recordCodec(p, setup.inherit, version, true)
				localCreating, _ := recordCodec(p, setup.inherit, memVersion, true)
				pl.Buckets = &engine.BucketFailover{Policy: setup.fail, Store: engine.StoredBuckets{Store: setup.store, Codec: creating.(*record.Bucket)},
					Local: engine.MemRecordBuckets{M: m, Codec: localCreating.(*record.Bucket)}}
				pl.Inspect = &engine.BucketFailover{Policy: setup.fail, Store: engine.StoredBuckets{Store: setup.store, Codec: bc},
					Local: engine.MemRecordBuckets{M: m, Codec: local.(*record.Bucket)}}
			}
			return pl, nil
		}
	}
	k, err := engine.NewPlans(c)
	if err != nil {
		return nil, err
	}
	l.backend, l.buckets, l.inspect = k, k.Buckets(false), k.Buckets(true)
	l.keys = engine.RecordLen{Keys: l.keys, Recs: mem}
	return l, nil
}

// inheritanceOf is o's inheritance, InheritProportionally by default.
func inheritanceOf(o *options) Inheritance {
	if o.inheritance == 0 {
		return InheritProportionally
	}
	return o.inheritance
}
