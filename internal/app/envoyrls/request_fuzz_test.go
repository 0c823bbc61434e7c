package envoyrls_test

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/sluicetest"
)

// FuzzShouldRateLimit: whatever a client sends, once it decodes as a
// RateLimitRequest, gets an answer with one status per descriptor, or a
// gRPC status, never a panic, through every kind of lookup: by key and
// value, by key alone, nested, wildcards with share_threshold and
// value_to_metric, detailed_metric, unlimited, replaces, a sluice limiter
// and the request's own limit override, with the headers and the dynamic
// metadata on.
func FuzzShouldRateLimit(f *testing.F) {
	const doc = `
envoy:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: k
        value: v
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5, name: five}
        descriptors:
          - key: n
            value_to_metric: true
            rate_limit: {unit: second, requests_per_unit: 1}
      - key: w
        value: "a*b"
        share_threshold: true
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: w
        value: "x*"
        value_to_metric: true
        share_threshold: true
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 7, replaces: [{name: five}]}
      - key: w
        value: "*"
        rate_limit: {unit: minute, requests_per_unit: 9}
      - key: u
        rate_limit: {unlimited: true}
      - key: l
        limiter: l
`
	set := envoyrls.DefaultSettings()
	set.ResponseHeaders, set.ResponseDynamicMetadata, set.AllowRequestLimits = true, true, true
	fx := &fixture{clock: sluicetest.NewFakeClock(start)}
	d, limiters := fx.config(f, doc, map[string]sluice.Policy{"l": sluice.FixedWindow(4, time.Minute)}, &set)
	svc := envoyrls.New(d, lookup(limiters), envoyrls.WithClock(fx.wall))
	for _, r := range []*rlsv3.RateLimitRequest{
		req("d", desc("k", "v", "n", "1"), desc("w", "aXb"), desc("w", "x1"), desc("w", "q")),
		req("d", desc("k", ""), desc("u", "1"), desc("l", "me"), desc()),
		req("d", hits(3, desc("k", "v"))),
		req("", desc("k", "v")),
		req("other", desc("k", "v")),
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &r) != nil {
			return // InvalidArgument before the service: TestMalformedRequest
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &r)
		if err != nil {
			return
		}
		if got, want := len(resp.GetStatuses()), len(r.GetDescriptors()); got != want {
			t.Fatalf("%d statuses for %d descriptors", got, want)
		}
		for i, s := range resp.GetStatuses() {
			if s == nil {
				t.Fatalf("status %d is nil", i)
			}
		}
		fx.clock.Advance(time.Second)
	})
}
