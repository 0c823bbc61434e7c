package sluice

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// replacedKeys are the keys of an in-memory token-bucket Limiter whose
// bucket KeyBucket.ReplaceConfiguration replaced. A key's typed state in
// memory has no room for a configuration of its own, so a replaced key
// moves to a record in a keyed.MapStore, decided by the limiter's bucket
// codec as a store's key is: the record carries the replaced
// configuration, which the key keeps while it has state; once its bucket
// has refilled and the record expired, the key is a new bucket of the
// limiter's policy again, as a store's key is.
//
// Until the first replacement, no call looks here but for two atomic
// loads. A call that runs on the key in memory at the very time of its
// first replacement looks again once it has decided, and decides again
// on the record if the key moved meanwhile (see memKeys.decide), so that
// no decision goes uncounted.
type replacedKeys struct {
	policy  Policy
	clock   Clock
	maxKeys int

	used atomic.Bool // set once recs and store are ready
	mu   sync.Mutex  // guards the setup
	// Set before used, then read only.
	recs  *keyed.MapStore
	mem   *memRecords
	codec *record.Bucket
}

func newReplacedKeys(p Policy, clock Clock, maxKeys int) *replacedKeys {
	return &replacedKeys{policy: p, clock: clock, maxKeys: maxKeys}
}

// has reports whether key's bucket was replaced and still has state.
func (r *replacedKeys) has(key string) bool {
	return r != nil && r.used.Load() && r.recs.Has(key)
}

// setup makes the store on the first replacement.
func (r *replacedKeys) setup() error {
	if r.used.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used.Load() {
		return nil
	}
	codec, err := storeCodec(r.policy, tokenbucket.Proportionally, record.Order{})
	if err != nil {
		return err
	}
	r.codec = codec.(*record.Bucket) // a token-bucket policy's: only such a limiter has replacedKeys
	r.recs = keyed.NewMapStore(r.clock, r.maxKeys)
	r.mem = &memRecords{recs: r.recs, codec: r.codec, clock: r.clock}
	r.used.Store(true)
	return nil
}

// replace moves key's bucket from mem to a record, if it is not one
// already, and switches it to cfg as a store's ReplaceBucket does.
func (r *replacedKeys) replace(ctx context.Context, keys keyed.Keys, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error {
	if err := r.setup(); err != nil {
		return err
	}
	err := r.recs.Update(ctx, key, func(rec []byte) ([]byte, time.Duration, bool) {
		now := r.clock.Now()
		if rec == nil { // the key's bucket in memory, a new one if none, as a record
			var st tokenbucket.State
			keys.Buckets().WithBucket(key, now, func(_ *tokenbucket.Config, s tokenbucket.State) bool {
				st = append(st[:0], s...)
				return false
			})
			rec, _, _ = r.codec.Update(nil, now, func(_ *tokenbucket.Config, s tokenbucket.State, _ int64) bool {
				copy(s, st)
				return true
			})
		}
		next, _, _ := r.codec.Replace(rec, now, cfg, strategy, seen)
		return next, keyed.TTL(r.codec.ExpiresAt(next), now), true
	})
	if err == nil {
		keys.Reset(key) // its state is the record's now
	}
	return err
}

func (r *replacedKeys) consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	return r.mem.consume(ctx, key, n)
}

func (r *replacedKeys) peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return r.mem.peek(ctx, key, n)
}

func (r *replacedKeys) reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	return r.mem.reserve(ctx, key, n, maxWait)
}
