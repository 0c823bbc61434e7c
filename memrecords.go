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
// need. An in-memory Limiter keeps so the keys whose configuration is not
// its policy's: replaced buckets (replaced.go) and policies per key
// (plans.go). It is a bucketBackend too when codec is a *record.Bucket.
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

// bucket is the codec as a bucket's; memRecords is a bucketBackend only
// when it is one.
func (m *memRecords) bucket() *record.Bucket { return m.codec.(*record.Bucket) }

func (m *memRecords) updateBucket(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	var noConfig bool
	err := m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		next, changed, noConfig = m.bucket().Update(rec, now, f)
		return next, changed
	})
	if err == nil && noConfig {
		err = keyed.ErrNoConfig
	}
	return memRecordBuckets{m}, err
}

// memRecordBuckets is memRecords as a bucketBackend; its codec is a
// *record.Bucket.
type memRecordBuckets struct{ m *memRecords }

func (b memRecordBuckets) update(ctx context.Context, key string, f bucketFunc) (bucketBackend, error) {
	return b.m.updateBucket(ctx, key, f)
}

func (b memRecordBuckets) configuration(ctx context.Context, key string) (*tokenbucket.Config, error) {
	var cfg *tokenbucket.Config
	err := b.m.update(ctx, key, func(rec []byte, now int64) ([]byte, bool) {
		cfg = b.m.bucket().Configuration(rec, now)
		return nil, false
	})
	if err == nil && cfg == nil {
		err = keyed.ErrNoConfig
	}
	return cfg, err
}

func (b memRecordBuckets) replace(ctx context.Context, key string, cfg *tokenbucket.Config, strategy tokenbucket.Strategy, seen bucketSeen) error {
	var noConfig bool
	err := b.m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		next, changed, noConfig = b.m.bucket().Replace(rec, now, cfg, strategy, seen)
		return next, changed
	})
	if err == nil && noConfig {
		err = keyed.ErrNoConfig
	}
	return err
}
