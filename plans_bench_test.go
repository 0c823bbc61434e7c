package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkPolicyFor is a decision of an in-memory Limiter with a policy
// per key, on keys whose policy is cached, beside one with a single
// policy.
func BenchmarkPolicyFor(b *testing.B) {
	ctx := context.Background()
	free, paid := sluice.TokenBucket(1<<40, 1<<29, time.Second), sluice.TokenBucket(1<<41, 1<<29, time.Second)
	planOf := func(_ context.Context, key string) (sluice.Policy, error) {
		if key[len(key)-1] == '0' {
			return paid, nil
		}
		return nil, nil
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, tt := range []struct {
		name string
		opts []sluice.Option
	}{
		{"single", nil},
		{"perKey", []sluice.Option{sluice.WithPolicyFor(planOf)}},
	} {
		l, err := sluice.NewLimiter(free, tt.opts...)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			l.Allow(ctx, k)
		}
		b.Run(tt.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Allow(ctx, keys[i%len(keys)])
				i++
			}
		})
		b.Run(tt.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					l.Allow(ctx, keys[i%len(keys)])
					i++
				}
			})
		})
	}
}
