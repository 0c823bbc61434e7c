package server

import (
	"strings"
	"testing"
)

// TestLeaseKey checks a limiter's lease key in sluice serve: the limiter
// decides from leases, admitting its limit and no more, and a bad lease
// is an error at its line.
func TestLeaseKey(t *testing.T) {
	s, _ := testServer(t, `
limiters:
  leased: {policy: fixed_window, limit: 5, interval: 1 minute, lease: {min: 2, max: 4, ttl: 1s}}
`)
	allowed := 0
	for range 10 {
		code, out := call(t, s, "POST", "/api/v1/consume", `{"limiter": "leased", "key": "k"}`)
		if code != 200 {
			t.Fatalf("consume = %d %v, want 200", code, out)
		}
		if out["allowed"] == true {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("10 consumes of a leased limit of 5 admitted %d, want 5", allowed)
	}
	_, err := LoadConfig([]byte(`
limiters:
  leased: {policy: sliding_log, limit: 5, interval: 1 minute, lease: {min: 2, max: 4, ttl: 1s}}
`))
	if err == nil || !strings.Contains(err.Error(), "limiters.leased.lease (line 3): policy sliding_log cannot be leased") {
		t.Errorf("LoadConfig of a leased sliding log = %v, want the lease's error at line 3", err)
	}
}
