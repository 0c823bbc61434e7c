package grpclimit_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
)

// BenchmarkUnary is the interceptor's cost on a call that passes, with an
// in-memory limiter that never rejects, called directly (no transport).
func BenchmarkUnary(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(map[int]string{1: "one limit", 2: "two limits"}[n], func(b *testing.B) {
			var limits []grpclimit.Limit
			for i := range n {
				l, err := sluice.NewLimiter(sluice.NoLimit())
				if err != nil {
					b.Fatal(err)
				}
				limits = append(limits, grpclimit.Limit{Name: string(rune('a' + i)), Limiter: l, Key: grpclimit.Method})
			}
			in, err := grpclimit.New(limits)
			if err != nil {
				b.Fatal(err)
			}
			info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
			handler := func(ctx context.Context, req any) (any, error) { return req, nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := in.Unary(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
