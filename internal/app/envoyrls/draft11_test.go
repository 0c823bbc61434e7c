package envoyrls_test

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
)

// TestDraft11Headers checks the exact RateLimit-Policy and RateLimit
// fields of draft11_response_headers: a member per descriptor with a
// limit, named by its limit's name or else its position, with its window
// (unit times unit_multiplier) and its reset in seconds; descriptors in
// shadow mode, either way, are left out.
func TestDraft11Headers(t *testing.T) {
	doc := `
envoy:
  - domain: d
    descriptors:
      - {key: big, rate_limit: {name: hourly, unit: hour, requests_per_unit: 100}}
      - {key: small, limiter: small}
      - {key: tiny, rate_limit: {unit: minute, requests_per_unit: 1}}
      - {key: multi, rate_limit: {name: "q\"x", unit: second, unit_multiplier: 30, requests_per_unit: 7}}
      - {key: watch, rate_limit: {unit: minute, requests_per_unit: 1}, shadow_mode: true}
      - {key: new, limiter: new}
      - {key: free, rate_limit: {unlimited: true}}
`
	policies := map[string]sluice.Policy{"small": sluice.TokenBucket(3, 1, 1500*time.Millisecond), "new": sluice.FixedWindow(1, time.Minute)}
	on := envoyrls.DefaultSettings()
	on.Draft11Headers = true
	both := on
	both.ResponseHeaders = true
	tests := []struct {
		name string
		set  *envoyrls.Settings
		r    *rlsv3.RateLimitRequest
		want string
	}{
		{"off by default", nil, req("d", desc("big", "x")), ""},
		{"named and by position", &on, req("d", desc("big", "x"), desc("small", "x"), hits(2, desc("tiny", "x"))),
			`RateLimit-Policy: "hourly";q=100;w=3600, "small";q=3;w=5, "2";q=1;w=60, ` +
				`RateLimit: "hourly";r=99;t=3600, "small";r=2;t=2, "2";r=0;t=60`},
		{"unit_multiplier and escaping", &on, req("d", desc("multi", "x")), `RateLimit-Policy: "q\"x";q=7;w=30, RateLimit: "q\"x";r=6;t=30`},
		{"shadow left out", &on, req("d", hits(3, desc("watch", "x")), hits(2, desc("new", "x")), desc("free", "x")), ""},
		{"beside the early ones", &both, req("d", desc("tiny", "y")),
			`RateLimit-Limit: 1, RateLimit-Remaining: 0, RateLimit-Reset: 60, RateLimit-Policy: "0";q=1;w=60, RateLimit: "0";r=0;t=60`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, doc, policies, tt.set)
			l, err := sluice.NewLimiter(policies["new"], sluice.WithClock(f.clock), sluice.WithShadow(true))
			if err != nil {
				t.Fatal(err)
			}
			f.limiters["new"] = l
			_, _, resp := f.call(t, tt.r)
			if got := headers(resp); got != tt.want {
				t.Errorf("headers\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
