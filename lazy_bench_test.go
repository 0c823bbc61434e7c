package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkLazyBucketPerKey is what a key costs a keyed use of a lazily
// configured bucket: making the key's bucket and its first call (which
// supplies the configuration) on an in-memory store; allocations per key.
func BenchmarkLazyBucketPerKey(b *testing.B) {
	ctx := context.Background()
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(100, time.Minute)}}
	supply := func(context.Context) (sluice.BucketConfig, error) { return cfg, nil }
	b.Run("NewLazyStoreBucket", func(b *testing.B) {
		s := newMapStore()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			kb, err := sluice.NewLazyStoreBucket(s, "k"+strconv.Itoa(i), supply)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := kb.Allow(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("LazyBuckets", func(b *testing.B) {
		s := newMapStore()
		p, err := sluice.NewLazyBuckets(s, func(context.Context, string) (sluice.BucketConfig, error) { return cfg, nil })
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := p.Bucket("k" + strconv.Itoa(i)).Allow(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The floor: a keyed limiter's first call on a new key of the same
	// store, which supplies nothing.
	b.Run("StoreLimiter", func(b *testing.B) {
		l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithStore(newMapStore()))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := l.Allow(ctx, "k"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
