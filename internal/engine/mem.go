package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// Mem is a Limiter's keys in memory, on its clock.
type Mem struct {
	keys  keyed.Keys
	clock keyed.Clock
}

// NewMem returns keys in memory on clock.
func NewMem(keys keyed.Keys, clock keyed.Clock) *Mem {
	return &Mem{keys: keys, clock: clock}
}

// Decide decides on key in memory, as keyed.Keys.Consume: Consume
// without the context, the error and the Result, which a Limiter in
// memory has no use for.
func (m *Mem) Decide(key string, n int64) policy.Decision {
	return m.keys.Consume(key, m.clock.Now(), n)
}

// Limit is the limit of a Decision's bound b.
func (m *Mem) Limit(b uint32) int64 { return m.keys.Limits()[b] }

// Take takes n tokens for key if they are there now, as a reservation of
// no wait; false leaves the call to Reserve.
func (m *Mem) Take(key string, n int64) bool {
	return m.keys.Take(key, m.clock.Now(), n)
}

func (m *Mem) Consume(_ context.Context, key string, n int64) (policy.Result, error) {
	d := m.Decide(key, n)
	return d.Result(m.Limit(d.Bound)), nil
}

func (m *Mem) Peek(_ context.Context, key string, n int64) (policy.Result, error) {
	return m.keys.Peek(key, m.clock.Now(), n), nil
}

func (m *Mem) Reserve(_ context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	now := m.clock.Now()
	res, rc := m.keys.Reserve(key, now, n, maxWait)
	if rc == nil {
		return res, now, nil, nil
	}
	return res, rc.At, func(now int64) { m.keys.Cancel(key, now, rc) }, nil
}

func (m *Mem) Reset(_ context.Context, key string) error {
	m.keys.Reset(key)
	return nil
}

// MemBuckets is Buckets in memory: an in-memory Limiter's keys, or a
// local fallback. With Create, a call stores the key's bucket even when
// it changed nothing, so that a KeyBucket's first call creates it.
type MemBuckets struct {
	Buckets keyed.Buckets
	Clock   keyed.Clock
	Create  bool
}

func (m MemBuckets) Update(_ context.Context, key string, f BucketFunc) (Buckets, error) {
	now := m.Clock.Now()
	m.Buckets.WithBucket(key, now, func(cfg *tokenbucket.Config, st tokenbucket.State) bool {
		return f(cfg, st, now) || m.Create
	})
	return m, nil
}

func (m MemBuckets) Replace(_ context.Context, key string, _ *tokenbucket.Config, _ tokenbucket.Strategy) error {
	return fmt.Errorf("sluice: KeyBucket.ReplaceConfiguration of key %s: an in-memory Limiter's keys follow its policy; give a key its own configuration with WithPolicyFor: %w",
		driver.QuoteKey(key), errors.ErrUnsupported)
}

// MemRecords is a Backend of keys kept as records in this process's
// memory (keyed.MapStore), decided by Codec as a store's are but with no
// engine between: no batching, deadline or breaker, which memory does not
// need. An in-memory Limiter with a policy per key (Plans) keeps its keys
// so, each record carrying its own policy; MemRecordBuckets serve their
// buckets.
type MemRecords struct {
	Recs  *keyed.MapStore
	Codec record.Codec
	Clock keyed.Clock
}

// update runs op on key's record at the clock's now, and keeps the
// record op returns when it changed it.
func (m *MemRecords) update(ctx context.Context, key string, op func(rec []byte, now int64) (next []byte, changed bool)) error {
	return m.Recs.Update(ctx, key, func(rec []byte) ([]byte, time.Duration, bool) {
		now := m.Clock.Now()
		next, changed := op(rec, now)
		if !changed {
			return nil, 0, false
		}
		return next, keyed.TTL(m.Codec.ExpiresAt(next), now), true
	})
}

func (m *MemRecords) Consume(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	err = m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		res, next, changed = m.Codec.Consume(rec, now, n)
		return next, changed
	})
	return res, err
}

func (m *MemRecords) Peek(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	err = m.update(ctx, key, func(rec []byte, now int64) ([]byte, bool) {
		res = m.Codec.Peek(rec, now, n)
		return nil, false
	})
	return res, err
}

func (m *MemRecords) Reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	var (
		res policy.Result
		rc  *policy.Receipt
		at  int64
	)
	err := m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		at = now
		res, rc, next, changed = m.Codec.Reserve(rec, now, n, maxWait)
		return next, changed
	})
	if rc == nil || err != nil {
		return res, at, nil, err
	}
	return res, rc.At, func(now int64) {
		_ = m.update(context.Background(), key, func(rec []byte, _ int64) ([]byte, bool) {
			return m.Codec.Cancel(rec, now, rc)
		})
	}, nil
}

func (m *MemRecords) Reset(ctx context.Context, key string) error { return m.Recs.Delete(ctx, key) }

// MemRecordBuckets is Buckets on M's records, decided by Codec, a bucket
// codec of the configuration of M's.
type MemRecordBuckets struct {
	M     *MemRecords
	Codec *record.Bucket
}

// Update runs f on key's bucket. The codec always has a configuration,
// so a key without state is a new bucket of it.
func (b MemRecordBuckets) Update(ctx context.Context, key string, f BucketFunc) (Buckets, error) {
	return b, b.M.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		next, changed, _ = b.Codec.Update(rec, now, f)
		return next, changed
	})
}

func (b MemRecordBuckets) Replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	return b.M.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		next, changed, _ = b.Codec.Replace(rec, now, cfg, inherit, nil)
		return next, changed
	})
}

// RecordLen is the keyed.Keys of a limiter with a policy per key in
// memory, whose Len counts the keys held as records in Recs.
type RecordLen struct {
	keyed.Keys
	Recs *keyed.MapStore
}

func (r RecordLen) Len() int { return r.Recs.Len() }
