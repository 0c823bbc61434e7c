package sluice

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// memRecords is a backend of keys kept as records in this process's
// memory (keyed.MapStore), decided by codec as a store's are but with no
// engine between: no batching, deadline or breaker, which memory does not
// need. An in-memory Limiter with a policy per key (plans.go) keeps its
// keys so, each record carrying its own policy; memRecordBuckets serve
// their buckets.
type memRecords struct {
	recs  *keyed.MapStore
	codec record.Codec
	clock Clock
}

// update runs op on key's record at the clock's now, and keeps the
// record op returns when it changed it.
func (m *memRecords) update(ctx context.Context, key string, op func(rec []byte, now int64) (next []byte, changed bool)) error {
	return m.recs.Update(ctx, key, func(rec []byte) ([]byte, time.Duration, bool) {
		now := m.clock.Now()
		next, changed := op(rec, now)
		if !changed {
			return nil, 0, false
		}
		return next, keyed.TTL(m.codec.ExpiresAt(next), now), true
	})
}

func (m *memRecords) consume(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	err = m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		res, next, changed = m.codec.Consume(rec, now, n)
		return next, changed
	})
	return res, err
}

func (m *memRecords) peek(ctx context.Context, key string, n int64) (res policy.Result, err error) {
	err = m.update(ctx, key, func(rec []byte, now int64) ([]byte, bool) {
		res = m.codec.Peek(rec, now, n)
		return nil, false
	})
	return res, err
}

func (m *memRecords) reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	var (
		res policy.Result
		rc  *policy.Receipt
		at  int64
	)
	err := m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		at = now
		res, rc, next, changed = m.codec.Reserve(rec, now, n, maxWait)
		return next, changed
	})
	if rc == nil || err != nil {
		return res, at, nil, err
	}
	return res, rc.At, func(now int64) {
		_ = m.update(context.Background(), key, func(rec []byte, _ int64) ([]byte, bool) {
			return m.codec.Cancel(rec, now, rc)
		})
	}, nil
}

func (m *memRecords) reset(ctx context.Context, key string) error { return m.recs.Delete(ctx, key) }

// memRecordBuckets is a bucketBackend on m's records, decided by codec,
// a bucket codec of the configuration of m's.
type memRecordBuckets struct {
	m     *memRecords
	codec *record.Bucket
}

// update runs f on key's bucket. The codec always has a configuration,
// so a key without state is a new bucket of it.
func (b memRecordBuckets) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	return b, b.m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		next, changed, _ = b.codec.Update(rec, now, f)
		return next, changed
	})
}

func (b memRecordBuckets) replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	return b.m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		next, changed, _ = b.codec.Replace(rec, now, cfg, inherit, nil)
		return next, changed
	})
}
