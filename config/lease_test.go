package config_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// TestLoadLease checks that a limiter's lease key is decoded for
// sluice.WithLease, apart from its policy.
func TestLoadLease(t *testing.T) {
	f, err := config.Load([]byte(`
limiters:
  api: &api
    policy: gcra
    limit: 100
    rate: {amount: 100, interval: 1s}
    lease: {min: 10, max: 1000, ttl: 1s}
  copy: *api
  exact: {policy: fixed_window, limit: 10, interval: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.Lease{Min: 10, Max: 1000, TTL: time.Second}
	for _, name := range []string{"api", "copy"} {
		l := f.Limiters[name]
		if l.Lease == nil || *l.Lease != want {
			t.Errorf("limiter %s: Lease = %v, want %v", name, l.Lease, want)
		}
		if l.Policy.Kind() != "gcra" {
			t.Errorf("limiter %s: policy %s, want a GCRA", name, l.Policy)
		}
	}
	if l := f.Limiters["exact"]; l.Lease != nil {
		t.Errorf("limiter exact: Lease = %v, want nil", l.Lease)
	}
}
