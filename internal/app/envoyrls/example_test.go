package envoyrls_test

import (
	"context"
	"fmt"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
)

func ExampleService_ShouldRateLimit() {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(`
envoy:
  - domain: edge
    descriptors:
      - key: remote_address
        limiter: per_ip
`), &doc); err != nil {
		panic(err)
	}
	// The limiters: section of the same file, decoded by package config.
	limiters := map[string]*sluice.Limiter{}
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute))
	if err != nil {
		panic(err)
	}
	limiters["per_ip"] = l

	d, err := envoyrls.Decode("envoy", doc.Content[0].Content[1], func(name string) bool { return limiters[name] != nil })
	if err != nil {
		panic(err)
	}
	svc := envoyrls.New(d, func(name string) (*sluice.Limiter, bool) { l, ok := limiters[name]; return l, ok })

	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining())
	}
	// Output:
	// OK 2 MINUTE 1
	// OK 2 MINUTE 0
	// OVER_LIMIT 2 MINUTE 0
}
