package server

import (
	"strings"
	"testing"
)

// TestReloadVersions: a reload follows the versions of the library: a
// versioned limiter whose policies change must raise its version, and a
// raised version migrates the key once; per-key overrides apply through
// the API, chosen by the config alone.
func TestReloadVersions(t *testing.T) {
	const v1 = `limiters:
  api:
    policy: bucket
    limits: [{capacity: 10, refill: {greedy: 1, per: 1h}}]
    version: 1
    overrides:
      - {prefix: "vip:", policy: bucket, limits: [{capacity: 100, refill: {greedy: 1, per: 1h}}]}
      - {prefix: "w:", policy: fixed_window, limit: 5, interval: 1m}
`
	s, _ := testServer(t, v1)
	call(t, s, "POST", "/api/v1/consume", `{"limiter": "api", "key": "k", "tokens": 6}`)
	if _, got := call(t, s, "POST", "/api/v1/consume", `{"limiter": "api", "key": "vip:k", "tokens": 50}`); got["allowed"] != true {
		t.Errorf("consume 50 for a vip: key = %v, want allowed by its override's capacity 100", got)
	}
	_, got := call(t, s, "POST", "/api/v1/inspect", `{"limiter": "api", "key": "vip:k"}`)
	if p, _ := got["policy"].(string); !strings.Contains(p, "capacity=100") {
		t.Errorf("inspect of a vip: key names policy %v, want its override's (capacity 100)", got["policy"])
	}
	if _, got := call(t, s, "POST", "/api/v1/inspect", `{"limiter": "api", "key": "w:k"}`); got["bucket"] != nil || got["policy"] == nil {
		t.Errorf("inspect of a key whose override is a window = %v, want its policy and no bucket", got)
	}
	load := func(doc string) *Config {
		t.Helper()
		cfg, err := LoadConfig([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	sameVersion := strings.Replace(v1, "capacity: 10,", "capacity: 20,", 1)
	if err := s.Reload(load(sameVersion)); err == nil || !strings.Contains(err.Error(), "version stayed 1") {
		t.Errorf("Reload of changed policies under the same version = %v, want refused", err)
	}
	if err := s.Reload(load(strings.Replace(sameVersion, "version: 1", "version: 2", 1))); err != nil {
		t.Fatalf("Reload with version 2 = %v", err)
	}
	_, got = call(t, s, "POST", "/api/v1/inspect", `{"limiter": "api", "key": "k"}`)
	if b := got["bucket"].(map[string]any); b["available_tokens"] != 8.0 {
		t.Errorf("tokens after 4 of 10 became a capacity of 20 = %v, want 8 (proportionally)", b["available_tokens"])
	}
}
