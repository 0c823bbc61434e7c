package config_test

import (
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestOverrides: a limiter's version and its overrides, and which policy
// a key gets: its exact key's, else its longest prefix's, else the
// limiter's.
func TestOverrides(t *testing.T) {
	f, err := config.Load([]byte(`
limiters:
  free_window: {policy: fixed_window, limit: 10, interval: 1m}
  api:
    policy: token_bucket
    limit: 100
    rate: {interval: 1m, amount: 100}
    version: 3
    overrides:
      - {prefix: "free:", policy: fixed_window, limit: 10, interval: 1m}
      - {prefix: "free:trial:", policy: fixed_window, limit: 2, interval: 1m}
      - {key: "free:acme", policy: compound, limiters: [free_window, {policy: sliding_window, limit: 5, interval: 1s}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	api := f.Limiters["api"]
	if api.Version != 3 || len(api.Overrides) != 3 {
		t.Fatalf("api = version %d, %d overrides; want 3 and 3", api.Version, len(api.Overrides))
	}
	if o := api.Overrides[2]; o.Prefix || o.Key != "free:acme" || o.Line != 12 {
		t.Errorf("override 2 = %+v, want the key free:acme at line 12", o)
	}
	for _, tt := range []struct{ key, want string }{
		{"paid:bob", api.Policy.String()},
		{"free:bob", "fixed_window(limit=10, interval=1m0s)"},
		{"free:trial:bob", "fixed_window(limit=2, interval=1m0s)"},
		{"free:acme", api.Overrides[2].Policy.String()},
		{"free:acme2", "fixed_window(limit=10, interval=1m0s)"},
	} {
		if got := api.PolicyFor(tt.key).String(); got != tt.want {
			t.Errorf("PolicyFor(%q) = %s, want %s", tt.key, got, tt.want)
		}
	}
	if f.Limiters["free_window"].PolicyFunc() != nil || api.PolicyFunc() == nil {
		t.Error("PolicyFunc is nil exactly for a limiter without overrides: wrong")
	}
}
