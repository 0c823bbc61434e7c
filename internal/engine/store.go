package engine

import (
	"context"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// Stored is a Limiter's keys in a store, as records of Codec.
type Stored struct {
	Store *keyed.Store
	Codec record.Codec
	Clock keyed.Clock
}

func (s *Stored) Consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	return s.Store.Consume(ctx, key, s.Codec, n)
}

func (s *Stored) Peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return s.Store.Peek(ctx, key, s.Codec, n)
}

func (s *Stored) Reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	at := s.Clock.Now()
	res, rc, err := s.Store.Reserve(ctx, key, s.Codec, n, maxWait)
	if rc == nil {
		return res, at, nil, err
	}
	return res, rc.At, func(now int64) { _ = s.Store.Cancel(context.Background(), key, s.Codec, now, rc) }, err
}

func (s *Stored) Reset(ctx context.Context, key string) error {
	return s.Store.Reset(ctx, key, s.Codec)
}

// StoredBuckets is Buckets in a store, as records of Codec.
type StoredBuckets struct {
	Store *keyed.Store
	Codec *record.Bucket
}

func (s StoredBuckets) Update(ctx context.Context, key string, f BucketFunc) (Buckets, error) {
	return s, s.Store.UpdateBucket(ctx, key, s.Codec, f)
}

func (s StoredBuckets) Replace(ctx context.Context, key string, cfg *tokenbucket.Config, inherit tokenbucket.Strategy) error {
	return s.Store.ReplaceBucket(ctx, key, s.Codec, cfg, inherit, nil)
}
