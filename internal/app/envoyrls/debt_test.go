package envoyrls_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// TestAlwaysCounted: a descriptor whose hits are always counted, as Envoy
// reports a model's tokens at the end of a stream (apply_on_stream_done),
// charges them even beyond what is left. On a fresh key of a token bucket
// of 1,000 a minute, 1,500 hits leave a debt of 500: the answer is the
// usual OVER_LIMIT, every request is refused until the refill has paid
// the debt (checks of 0 hits, as the request path sends them, are over the
// limit while the key owes), and the first is admitted at exactly 1m, as
// conformance/vectors/debt.json states. The same hits on a descriptor
// without always_counted are dropped.
func TestAlwaysCounted(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: ai
    descriptors:
      - {key: tenant, limiter: tokens, always_counted: true}
      - {key: asked, limiter: tokens}
`, map[string]sluice.Policy{"tokens": sluice.TokenBucket(1000, 1000, time.Minute)}, nil)
	code, got, _ := f.call(t, req("ai", hits(1500, desc("tenant", "a"))))
	check(t, "1,500 hits always counted", code, "OVER_LIMIT", got, []string{"OVER_LIMIT 1000/UNKNOWN(tokens) remaining=0 reset=1m0s"})
	ds := f.takeDecisions()
	if len(ds) != 1 || ds[0].Hits != 1500 {
		t.Fatalf("decisions %+v, want one of 1,500 hits", ds)
	}
	c, err := f.limiters["tokens"].Debt(context.Background(), ds[0].Key)
	if err != nil || c.Debt != 500 {
		t.Fatalf("Debt of tenant a = %+v, %v; want 500", c, err)
	}
	for _, at := range []time.Duration{0, 30 * time.Second, time.Minute - 1} {
		f.clock.Set(start + int64(at))
		if code, got, _ := f.call(t, req("ai", hits(0, desc("tenant", "a")))); code != "OVER_LIMIT" {
			t.Fatalf("a request %v after the charge = %s %v, want OVER_LIMIT until the debt is paid", at, code, got)
		}
	}
	f.clock.Set(start + int64(time.Minute))
	code, got, _ = f.call(t, req("ai", hits(0, desc("tenant", "a"))))
	check(t, "a request at 1m", code, "OK", got, []string{"OK 1000/UNKNOWN(tokens) remaining=500 reset=1m0s"})
	code, got, _ = f.call(t, req("ai", hits(1, desc("tenant", "a"))))
	check(t, "a token at 1m", code, "OK", got, []string{"OK 1000/UNKNOWN(tokens) remaining=499 reset=1m0s"})

	// Asked, not always counted: 1,500 can never pass, and take nothing.
	code, got, _ = f.call(t, req("ai", hits(1500, desc("asked", "a"))))
	check(t, "1,500 hits asked", code, "OVER_LIMIT", got, []string{"OVER_LIMIT 1000/UNKNOWN(tokens) remaining=0 reset=1m0s"})
	ds = f.takeDecisions()
	if c, err := f.limiters["tokens"].Debt(context.Background(), ds[len(ds)-1].Key); err != nil || c.Debt != 0 || c.Remaining != 1000 {
		t.Errorf("the asked key after 1,500 hits = %+v, %v; want untouched", c, err)
	}
}

// TestAlwaysCountedErrors: always_counted is true beside a limiter that
// can owe tokens, or an error at its line.
func TestAlwaysCountedErrors(t *testing.T) {
	owes := map[string]bool{"tokens": true, "slide": false}
	for _, tt := range []struct{ doc, want string }{
		{"{key: k, limiter: slide, always_counted: true}", `envoy[0].descriptors[0].always_counted (line 4): limiter "slide" cannot owe tokens`},
		{"{key: k, limiter: tokens, always_counted: false}", "envoy[0].descriptors[0].always_counted (line 4): must be true"},
		{"{key: k, rate_limit: {unit: second, requests_per_unit: 1}, always_counted: true}", "envoy[0].descriptors[0].always_counted (line 4): needs a limiter"},
	} {
		var root yaml.Node
		if err := yaml.Unmarshal([]byte("envoy:\n  - domain: d\n    descriptors:\n      - "+tt.doc+"\n"), &root); err != nil {
			t.Fatal(err)
		}
		_, err := envoyrls.DecodeWith("envoy", root.Content[0].Content[1], func(n string) (envoyrls.LimiterInfo, bool) {
			o, ok := owes[n]
			return envoyrls.LimiterInfo{Owes: o}, ok
		})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.doc, err, tt.want)
		}
	}
}

// TestSlotsRefused: a descriptor's limiter that takes slots is an error
// at its line, wherever the descriptor is, with or without
// always_counted: Envoy never gives a slot back.
func TestSlotsRefused(t *testing.T) {
	limiters := map[string]envoyrls.LimiterInfo{"calls": {Slots: "its policy is concurrency(limit=5, ttl=30s)"}, "tokens": {Owes: true}}
	for _, tt := range []struct{ doc, want string }{
		{"- {key: k, limiter: calls}", `envoy[0].descriptors[0].limiter (line 4): limiter "calls" takes slots (its policy is concurrency(limit=5, ttl=30s)), which Envoy's rate limit service never gives back`},
		{"- {key: k, limiter: calls, always_counted: true}", `envoy[0].descriptors[0].limiter (line 4): limiter "calls" takes slots`},
		{"- {key: a, limiter: tokens}\n      - key: b\n        descriptors:\n          - {key: c, limiter: calls}",
			`envoy[0].descriptors[1].descriptors[0].limiter (line 7): limiter "calls" takes slots`},
	} {
		var root yaml.Node
		if err := yaml.Unmarshal([]byte("envoy:\n  - domain: d\n    descriptors:\n      "+tt.doc+"\n"), &root); err != nil {
			t.Fatal(err)
		}
		_, err := envoyrls.DecodeWith("envoy", root.Content[0].Content[1], func(n string) (envoyrls.LimiterInfo, bool) {
			l, ok := limiters[n]
			return l, ok
		})
		var ye *yamlnode.Error
		if !errors.As(err, &ye) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want a *yamlnode.Error containing %q", tt.doc, err, tt.want)
		}
	}
}
