package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/app/envoyrls"
)

// BenchmarkShouldRateLimit: the service's own work for the load test's
// request (one rate_limit descriptor of 100 a second, over 1000 values),
// on the in-memory store, without gRPC: what a decision costs besides the
// transport and the store's network.
func BenchmarkShouldRateLimit(b *testing.B) {
	const doc = `
envoy:
  - domain: load
    descriptors:
      - key: client
        rate_limit: {unit: second, requests_per_unit: 100}
`
	d, _ := new(fixture).config(b, doc, nil, nil)
	svc := envoyrls.New(d, nil)
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = req("load", desc("client", strconv.Itoa(i)))
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
