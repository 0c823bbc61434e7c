package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
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

// maxPlans bounds the distinct policies whose backends a limiter keeps
// built; a policy beyond them is built for each call.
const maxPlans = 1024

// planKeys is the backend of a Limiter with WithPolicyFor: it resolves
// each key's policy and decides on that policy's backend. Every policy's
// backend keeps records in one engine (the store's, or a keyed.MapStore
// in memory), so that a key whose policy changes is migrated by the new
// policy's codec.
type planKeys struct {
	resolve PolicyFunc
	def     Policy
	clock   Clock
	ttl     int64
	build   func(Policy) (*plan, error) // a policy's backends
	any     *plan                       // the default policy's, which resets a key of any policy

	mu    sync.Mutex
	keys  map[string]cachedPlan // guarded by mu
	max   int
	plans map[string]*plan // guarded by mu; by policy String
}

// plan is a policy's backends: the keys, and their buckets when the
// policy is a token bucket (else nil), as a KeyBucket's calls and
// Snapshot see them.
type plan struct {
	keys             backend
	buckets, inspect bucketBackend
}

type cachedPlan struct {
	p       *plan
	expires int64
}

// newPlanLimiter makes l, whose clock is set, decide with a
// policy per key as o's WithPolicyFor says.
func newPlanLimiter(l *Limiter, o *options) (*Limiter, error) {
	k := &planKeys{resolve: o.policyFor, def: l.policy, clock: l.clock, ttl: int64(o.policyCacheTTL), max: o.policyCacheKeys,
		keys: make(map[string]cachedPlan), plans: make(map[string]*plan)}
	if k.ttl <= 0 {
		k.ttl = int64(defaultPolicyCacheTTL)
	}
	if k.max <= 0 {
		k.max = defaultPolicyCacheKeys
	}
	mem := keyed.NewMapStore(l.clock, o.maxKeys)
	memVersion := record.ConfigVersion{PerKey: true}
	if o.store == nil {
		if err := checkInheritance("NewLimiter", "WithInheritance", inheritanceOf(o)); err != nil {
			return nil, err
		}
		inherit := tokenbucket.Strategy(inheritanceOf(o))
		k.build = func(p Policy) (*plan, error) {
			if err := checkWallClock(p, l.clock); err != nil {
				return nil, err
			}
			codec, err := recordCodec(p, inherit, memVersion, false)
			if err != nil {
				return nil, err
			}
			m := &memRecords{recs: mem, codec: codec, clock: l.clock}
			pl := &plan{keys: m}
			if bc, ok := codec.(*record.Bucket); ok {
				creating, _ := recordCodec(p, inherit, memVersion, true)
				pl.buckets, pl.inspect = memRecordBuckets{m, creating.(*record.Bucket)}, memRecordBuckets{m, bc}
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
		k.build = func(p Policy) (*plan, error) {
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
			m := &memRecords{recs: mem, codec: local, clock: l.clock}
			pl := &plan{keys: &failover{failurePolicy: setup.fail, store: &storeKeys{store: setup.store, codec: codec, clock: l.clock},
				local: m, limit: e.Quota()}}
			if bc, ok := codec.(*record.Bucket); ok {
				creating, _ := recordCodec(p, setup.inherit, version, true)
				localCreating, _ := recordCodec(p, setup.inherit, memVersion, true)
				pl.buckets = &bucketFailover{failurePolicy: setup.fail, store: storeBuckets{store: setup.store, codec: creating.(*record.Bucket)},
					local: memRecordBuckets{m, localCreating.(*record.Bucket)}}
				pl.inspect = &bucketFailover{failurePolicy: setup.fail, store: storeBuckets{store: setup.store, codec: bc},
					local: memRecordBuckets{m, local.(*record.Bucket)}}
			}
			return pl, nil
		}
	}
	var err error
	if k.any, err = k.build(l.policy); err != nil {
		return nil, err
	}
	l.backend, l.buckets, l.inspect = k, planBuckets{k: k}, planBuckets{k: k, inspect: true}
	l.keys = recordLen{Keys: l.keys, recs: mem}
	return l, nil
}

// recordLen is a per-key limiter's keyed.Keys, whose Len counts the keys
// held in memory as records, for Limiter.Len.
type recordLen struct {
	keyed.Keys
	recs *keyed.MapStore
}

func (r recordLen) Len() int { return r.recs.Len() }

// inheritanceOf is o's inheritance, InheritProportionally by default.
func inheritanceOf(o *options) Inheritance {
	if o.inheritance == 0 {
		return InheritProportionally
	}
	return o.inheritance
}

// planOf returns the backends of key's policy: cached, or resolved now.
func (k *planKeys) planOf(ctx context.Context, key string) (*plan, error) {
	now := k.clock.Now()
	k.mu.Lock()
	c, ok := k.keys[key]
	k.mu.Unlock()
	if ok && c.expires > now {
		return c.p, nil
	}
	p, err := k.resolve(ctx, key)
	if err != nil {
		if isCallerDone(ctx, err) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sluice: policy of key %s: %w", driver.QuoteKey(key), err)
	}
	if p == nil {
		p = k.def
	}
	name := p.String()
	k.mu.Lock()
	b, built := k.plans[name]
	k.mu.Unlock()
	if !built {
		if b, err = k.build(p); err != nil {
			return nil, fmt.Errorf("sluice: policy of key %s: %w", driver.QuoteKey(key), err)
		}
	}
	k.mu.Lock()
	if !built && len(k.plans) < maxPlans {
		if prev, ok := k.plans[name]; ok { // built meanwhile by another call
			b = prev
		} else {
			k.plans[name] = b
		}
	}
	if _, ok := k.keys[key]; !ok && len(k.keys) >= k.max {
		for other := range k.keys { // full: drop an arbitrary key, resolved again when next seen
			delete(k.keys, other)
			break
		}
	}
	k.keys[key] = cachedPlan{p: b, expires: now + k.ttl}
	k.mu.Unlock()
	return b, nil
}

func (k *planKeys) consume(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return res, err
	}
	return b.keys.consume(ctx, key, n)
}

func (k *planKeys) peek(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return res, err
	}
	return b.keys.peek(ctx, key, n)
}

func (k *planKeys) reserve(ctx context.Context, key string, n, maxWait int64) (res policy.Result, at int64, undo func(int64), err error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return res, 0, nil, err
	}
	return b.keys.reserve(ctx, key, n, maxWait)
}

// reset forgets key's state; its policy is resolved again at its next
// call.
func (k *planKeys) reset(ctx context.Context, key string) error {
	k.mu.Lock()
	delete(k.keys, key)
	k.mu.Unlock()
	return k.any.keys.reset(ctx, key)
}

// planBuckets is the bucketBackend of a limiter with a policy per key:
// the buckets of the keys whose policy is a token bucket, as a KeyBucket's
// calls see them, or its Snapshot with inspect.
type planBuckets struct {
	k       *planKeys
	inspect bool
}

// bucketsOf returns the buckets of key's policy, or an error matching
// errors.ErrUnsupported when it is not a token bucket.
func (b planBuckets) bucketsOf(ctx context.Context, key string) (bucketBackend, error) {
	pl, err := b.k.planOf(ctx, key)
	if err != nil {
		return nil, err
	}
	if pl.buckets == nil {
		return nil, fmt.Errorf("sluice: KeyBucket of key %s: its policy is not a token bucket: %w", driver.QuoteKey(key), errors.ErrUnsupported)
	}
	if b.inspect {
		return pl.inspect, nil
	}
	return pl.buckets, nil
}

func (b planBuckets) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	bb, err := b.bucketsOf(ctx, key)
	if err != nil {
		return nil, err
	}
	return bb.update(ctx, key, f)
}

func (b planBuckets) replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	bb, err := b.bucketsOf(ctx, key)
	if err != nil {
		return err
	}
	return bb.replace(ctx, key, cfg, inherit)
}
