package sluice_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// The engine's paths that the bench module's side-by-side benchmarks do
// not reach: the other calls of a Bucket and of an in-memory Limiter, and
// a Limiter and a KeyBucket on a store (memstore, so that the figures are
// the engine's: batching, records, the circuit breaker). Compare runs of
// them with benchstat:
//
//	go test -run '^$' -bench Engine -count 10 . > new.txt

// BenchmarkEngineBucket is one call of a Bucket that refills faster than
// it is asked, on a fake clock that advances 2ns per call.
func BenchmarkEngineBucket(b *testing.B) {
	ops := []struct {
		name string
		call func(bk *sluice.Bucket) bool
	}{
		{"op=tryConsume", func(bk *sluice.Bucket) bool {
			ok, _ := bk.TryConsume(1)
			return ok
		}},
		{"op=allowN", func(bk *sluice.Bucket) bool {
			r, _ := bk.AllowN(1)
			return r.Allowed
		}},
		{"op=peekN", func(bk *sluice.Bucket) bool {
			r, _ := bk.PeekN(1)
			return r.Allowed
		}},
		{"op=reserveN", func(bk *sluice.Bucket) bool {
			r, _ := bk.ReserveN(1, 0)
			return r.OK()
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			clock := sluicetest.NewFakeClock(t0)
			bk, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
				sluice.Capacity(1000, sluice.Greedy(1e9, time.Second)),
			}}, sluice.WithClock(clock))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			allowed := 0
			for b.Loop() {
				clock.Advance(2)
				if op.call(bk) {
					allowed++
				}
			}
			b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
		})
	}
}

// engineLimiter returns a limiter of a fixed window of 100 per minute, or
// of a token bucket of 100 refilled 100 a minute, on a clock frozen at t0
// (so that no key expires), in memory or on a memstore.
func engineLimiter(b *testing.B, bucket, store bool) *sluice.Limiter {
	b.Helper()
	p := sluice.FixedWindow(100, time.Minute)
	if bucket {
		p = sluice.TokenBucket(100, 100, time.Minute)
	}
	opts := []sluice.Option{sluice.WithClock(sluicetest.NewFakeClock(t0))}
	if store {
		opts = append(opts, sluice.WithStore(memstore.New()))
	}
	l, err := sluice.NewLimiter(p, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkEngineLimiter is one call of a Limiter on one of 1000 keys,
// each of which has state already, in memory (mem) or on a memstore
// (store), from one goroutine (serial) or every P (parallel); a parallel
// run on one key (hot) is the store's batching.
func BenchmarkEngineLimiter(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	ops := []struct {
		name string
		call func(l *sluice.Limiter, key string) bool
	}{
		{"op=allow", func(l *sluice.Limiter, key string) bool {
			r, _ := l.Allow(ctx, key)
			return r.Allowed
		}},
		{"op=peekN", func(l *sluice.Limiter, key string) bool {
			r, _ := l.PeekN(ctx, key, 1)
			return r.Allowed
		}},
		{"op=reserveN", func(l *sluice.Limiter, key string) bool {
			r, _ := l.ReserveN(ctx, key, 1, 0)
			return r != nil && r.OK()
		}},
	}
	for _, where := range []string{"mem", "store"} {
		for _, policy := range []string{"fixed_window", "token_bucket"} {
			for _, op := range ops {
				name := "at=" + where + "/policy=" + policy + "/" + op.name
				b.Run(name+"/run=serial", func(b *testing.B) {
					l := engineLimiter(b, policy == "token_bucket", where == "store")
					for _, k := range keys {
						op.call(l, k)
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						op.call(l, keys[i%len(keys)])
						i++
					}
				})
				b.Run(name+"/run=parallel", func(b *testing.B) {
					l := engineLimiter(b, policy == "token_bucket", where == "store")
					for _, k := range keys {
						op.call(l, k)
					}
					var next atomic.Int64
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := int(next.Add(7919))
						for pb.Next() {
							op.call(l, keys[i%len(keys)])
							i += 31
						}
					})
				})
			}
		}
		b.Run("at="+where+"/policy=fixed_window/op=allow/run=hot", func(b *testing.B) {
			l := engineLimiter(b, false, where == "store")
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = l.Allow(ctx, "hot")
				}
			})
		})
	}
}

// BenchmarkEngineKeyBucket is one AllowN of a KeyBucket on a memstore,
// whose bucket refills faster than it is asked.
func BenchmarkEngineKeyBucket(b *testing.B) {
	ctx := context.Background()
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(1000, sluice.Greedy(1e9, time.Second))}}
	clock := sluicetest.NewFakeClock(t0)
	l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithStore(memstore.New()), sluice.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	kb, err := l.Bucket("k")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(2)
		if _, err := kb.AllowN(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}
