package rlqs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

var testLimiters = map[string]LimiterInfo{
	"api":     {Window: time.Minute},
	"short":   {Window: time.Second},
	"nolimit": {},
	"calls":   {Window: 30 * time.Second, Slots: "its policy is concurrency(limit=5, ttl=30s)"},
}

func decodeDoc(t testing.TB, doc string) (*Config, error) {
	t.Helper()
	return decodeWith(t, doc, testLimiters)
}

// decodeWith decodes the rlqs section of doc, whose limiters are lims.
func decodeWith(t testing.TB, doc string, lims map[string]LimiterInfo) (*Config, error) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	return Decode("rlqs", root.Content[0].Content[1], func(name string) (LimiterInfo, bool) {
		l, ok := lims[name]
		return l, ok
	})
}

func TestDecode(t *testing.T) {
	c, err := decodeDoc(t, `
rlqs:
  - domain: edge
    assignment_ttl: 10s
    abandon_after: 2 minutes
    unmatched: deny_all
    buckets:
      - {bucket: {name: api, tenant: "*"}, limiter: api}
      - {bucket: {name: blocked}, action: deny_all}
      - {bucket: {name: "*"}, action: allow_all}
`)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("edge")
	if d == nil || d.AssignmentTTL != 10*time.Second || d.AbandonAfter != 2*time.Minute || d.Unmatched != DenyAll || len(d.Rules) != 3 {
		t.Fatalf("Domain(edge) = %+v", d)
	}
	tests := []struct {
		id   map[string]string
		want string
	}{
		{map[string]string{"name": "api", "tenant": "a"}, "{name=api,tenant=*} → limiter api"},
		{map[string]string{"name": "api"}, "{name=*} → allow_all"},
		{map[string]string{"name": "blocked", "x": "y"}, "{name=blocked} → deny_all"},
	}
	for _, tt := range tests {
		if got := d.Match(tt.id); got == nil || got.String() != tt.want {
			t.Errorf("Match(%v) = %v, want %s", tt.id, got, tt.want)
		}
	}
	if got := d.Match(map[string]string{"other": "x"}); got != nil {
		t.Errorf("Match(other) = %v, want nil", got)
	}
	if c.Domain("nope") != nil || (*Config)(nil).Domain("edge") != nil {
		t.Error("Domain of an unknown domain is not nil")
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
		line            int
	}{
		{"not a list", "rlqs: {domain: edge}\n", "rlqs (line 1): must be a list", 1},
		{"no domain", "rlqs:\n  - buckets: [{bucket: {a: b}, action: allow_all}]\n", "domain", 2},
		{"empty domain", "rlqs:\n  - domain: ''\n    buckets: [{bucket: {a: b}, action: allow_all}]\n", "rlqs[0].domain (line 2): must not be empty", 2},
		{"duplicate domain", "rlqs:\n  - {domain: e, buckets: [{bucket: {a: b}, action: allow_all}]}\n  - {domain: e, buckets: [{bucket: {a: b}, action: allow_all}]}\n", "listed twice", 3},
		{"unknown key", "rlqs:\n  - domain: e\n    ttl: 1s\n    buckets: [{bucket: {a: b}, action: allow_all}]\n", "ttl", 3},
		{"ttl too short", "rlqs:\n  - domain: e\n    assignment_ttl: 100ms\n    buckets: [{bucket: {a: b}, action: allow_all}]\n", "rlqs[0].assignment_ttl (line 3): must be a whole number of seconds, at least 1s", 3},
		{"ttl not whole seconds", "rlqs:\n  - domain: e\n    assignment_ttl: 1500ms\n    buckets: [{bucket: {a: b}, action: allow_all}]\n", "Envoy reads only the seconds", 3},
		{"abandon before ttl", "rlqs:\n  - domain: e\n    abandon_after: 1s\n    buckets: [{bucket: {a: b}, action: allow_all}]\n", "must be at least assignment_ttl", 3},
		{"no buckets", "rlqs:\n  - domain: e\n    buckets: []\n", "at least one bucket rule", 3},
		{"empty bucket", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {}, action: allow_all}\n", "rlqs[0].buckets[0].bucket (line 4): must name at least one entry", 4},
		{"empty value", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: ''}, action: allow_all}\n", "rlqs[0].buckets[0].bucket.a (line 4): must not be empty", 4},
		{"both", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}, action: allow_all, limiter: api}\n", "either limiter or action", 4},
		{"neither", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}}\n", "either limiter or action", 4},
		{"bad action", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}, action: maybe}\n", "must be allow_all or deny_all", 4},
		{"unknown limiter", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}, limiter: nope}\n", "names no limiter", 4},
		{"no window", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}, limiter: nolimit}\n", "has no window", 4},
		{"limiter with slots", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}, action: allow_all}\n      - {bucket: {a: c}, limiter: calls}\n",
			`rlqs[0].buckets[1].limiter (line 5): limiter "calls" takes slots (its policy is concurrency(limit=5, ttl=30s)), which Envoy's rate limit quota service never gives back`, 5},
		{"ttl over half the window", "rlqs:\n  - domain: e\n    buckets:\n      - {bucket: {a: b}, limiter: short}\n", "at most half of it", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeDoc(t, tt.doc)
			var ye *yamlnode.Error
			if !errors.As(err, &ye) {
				t.Fatalf("Decode = %v, want a *yamlnode.Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) || ye.Line != tt.line {
				t.Errorf("Decode = %v (line %d), want %q at line %d", err, ye.Line, tt.want, tt.line)
			}
		})
	}
}
