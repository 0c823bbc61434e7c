package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// maxPlans bounds the distinct policies whose backends a limiter keeps
// built; a policy beyond them is built for each call.
const maxPlans = 1024

// Plan is a policy's backends: the keys, and their buckets when the
// policy is a token bucket (else nil), as a KeyBucket's calls (Buckets)
// and Snapshot (Inspect) see them.
type Plan struct {
	Keys             Backend
	Buckets, Inspect Buckets
}

// PlanConfig is what Plans are made of, for policies of type P.
type PlanConfig[P any] struct {
	// Resolve returns the policy of key, the limiter's own when the key
	// has none of its own.
	Resolve func(ctx context.Context, key string) (P, error)
	// Name tells policies apart: policies of one name share their Plan.
	Name func(P) string
	// Build returns a policy's Plan, or the error of an invalid policy.
	Build func(P) (*Plan, error)
	// Default is the limiter's own policy, whose Plan resets a key of any
	// policy.
	Default P
	Clock   keyed.Clock
	// TTL is how long, in nanoseconds, a key's policy is kept before it
	// is resolved again; MaxKeys bounds the keys whose policy is kept.
	TTL     int64
	MaxKeys int
}

// Plans is the Backend of a Limiter with a policy per key: it resolves
// each key's policy and decides on that policy's Plan. Every policy's
// backend keeps records in one engine (the store's, or a keyed.MapStore
// in memory), so that a key whose policy changes is migrated by the new
// policy's codec.
type Plans[P any] struct {
	c   PlanConfig[P]
	any *Plan // the default policy's, which resets a key of any policy

	mu    sync.Mutex
	keys  map[string]cachedPlan // guarded by mu
	plans map[string]*Plan      // guarded by mu; by policy name
}

type cachedPlan struct {
	p       *Plan
	expires int64
}

// NewPlans returns the Plans of c, or the error of c's default policy.
func NewPlans[P any](c PlanConfig[P]) (*Plans[P], error) {
	k := &Plans[P]{c: c, keys: make(map[string]cachedPlan), plans: make(map[string]*Plan)}
	var err error
	if k.any, err = c.Build(c.Default); err != nil {
		return nil, err
	}
	return k, nil
}

// planOf returns the backends of key's policy: cached, or resolved now.
func (k *Plans[P]) planOf(ctx context.Context, key string) (*Plan, error) {
	now := k.c.Clock.Now()
	k.mu.Lock()
	c, ok := k.keys[key]
	k.mu.Unlock()
	if ok && c.expires > now {
		return c.p, nil
	}
	p, err := k.c.Resolve(ctx, key)
	if err != nil {
		if keyed.CallerDone(ctx, err) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sluice: policy of key %s: %w", driver.QuoteKey(key), err)
	}
	name := k.c.Name(p)
	k.mu.Lock()
	b, built := k.plans[name]
	k.mu.Unlock()
	if !built {
		if b, err = k.c.Build(p); err != nil {
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
	if _, ok := k.keys[key]; !ok && len(k.keys) >= k.c.MaxKeys {
		for other := range k.keys { // full: drop an arbitrary key, resolved again when next seen
			delete(k.keys, other)
			break
		}
	}
	k.keys[key] = cachedPlan{p: b, expires: now + k.c.TTL}
	k.mu.Unlock()
	return b, nil
}

func (k *Plans[P]) Consume(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return res, err
	}
	return b.Keys.Consume(ctx, key, n)
}

func (k *Plans[P]) Peek(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return res, err
	}
	return b.Keys.Peek(ctx, key, n)
}

func (k *Plans[P]) Reserve(ctx context.Context, key string, n, maxWait int64) (res policy.Result, at int64, undo func(int64), err error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return res, 0, nil, err
	}
	return b.Keys.Reserve(ctx, key, n, maxWait)
}

// Reset forgets key's state; its policy is resolved again at its next
// call.
func (k *Plans[P]) Reset(ctx context.Context, key string) error {
	k.mu.Lock()
	delete(k.keys, key)
	k.mu.Unlock()
	return k.any.Keys.Reset(ctx, key)
}

// Buckets returns the Buckets of the keys whose policy is a token bucket,
// as a KeyBucket's calls see them, or its Snapshot with inspect.
func (k *Plans[P]) Buckets(inspect bool) Buckets { return planBuckets[P]{k: k, inspect: inspect} }

// planBuckets is the Buckets of a limiter with a policy per key.
type planBuckets[P any] struct {
	k       *Plans[P]
	inspect bool
}

// bucketsOf returns the buckets of key's policy, or an error matching
// errors.ErrUnsupported when it is not a token bucket.
func (b planBuckets[P]) bucketsOf(ctx context.Context, key string) (Buckets, error) {
	pl, err := b.k.planOf(ctx, key)
	if err != nil {
		return nil, err
	}
	if pl.Buckets == nil {
		return nil, fmt.Errorf("sluice: KeyBucket of key %s: its policy is not a token bucket: %w", driver.QuoteKey(key), errors.ErrUnsupported)
	}
	if b.inspect {
		return pl.Inspect, nil
	}
	return pl.Buckets, nil
}

func (b planBuckets[P]) Update(ctx context.Context, key string, f BucketFunc) (Buckets, error) {
	bb, err := b.bucketsOf(ctx, key)
	if err != nil {
		return nil, err
	}
	return bb.Update(ctx, key, f)
}

func (b planBuckets[P]) Replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	bb, err := b.bucketsOf(ctx, key)
	if err != nil {
		return err
	}
	return bb.Replace(ctx, key, cfg, inherit)
}
