package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// slotLimiters has a limiter that takes slots in each way a config can
// give it some: its policy, a penalty box around one, an override.
const slotLimiters = `limiters:
  calls: {policy: concurrency, limit: 5, ttl: 30s}
  boxed: {policy: penalty_box, limiter: calls, penalties: [1m]}
  api:
    policy: fixed_window
    limit: 100
    interval: 1m
    overrides: [{prefix: "slow:", policy: concurrency, limit: 2, ttl: 10s}]
  both: {policy: compound, limiters: [api, boxed]}
`

// TestSlotsNotForEnvoy: a limiter that takes slots, which only the HTTP
// API's release gives back, cannot serve Envoy's rate limit service nor
// its quota service, which never release: each request would keep its
// slot for the whole ttl. Each way to wire one is an error at the line
// that names it, or, where the config cannot express it, at the line
// that tries.
func TestSlotsNotForEnvoy(t *testing.T) {
	const (
		envoyMsg = "which Envoy's rate limit service never gives back: each request would hold its slot until the ttl lapses, " +
			"a limit per ttl instead of in flight; hold slots with the HTTP API's /api/v1/acquire and /api/v1/release, or httplimit or grpclimit"
		rlqsMsg = "which Envoy's rate limit quota service never gives back"
	)
	tests := []configErrorCase{
		{"envoy descriptor", slotLimiters + "envoy:\n  - domain: edge\n    descriptors: [{key: remote_address, limiter: calls}]\n",
			`config: envoy[0].descriptors[0].limiter (line 12): limiter "calls" takes slots (its policy is concurrency(limit=5, ttl=30s)), ` + envoyMsg},
		{"nested envoy descriptor", slotLimiters + `envoy:
  - domain: edge
    descriptors:
      - key: path
        descriptors:
          - key: remote_address
            limiter: calls
`, `config: envoy[0].descriptors[0].descriptors[0].limiter (line 16): limiter "calls" takes slots`},
		{"envoy penalty box", slotLimiters + "envoy:\n  - domain: edge\n    descriptors: [{key: user, limiter: boxed}]\n",
			`config: envoy[0].descriptors[0].limiter (line 12): limiter "boxed" takes slots (its policy is penalty_box(concurrency(limit=5, ttl=30s), penalties=[1m0s], forgive_after=0s))`},
		{"envoy override", slotLimiters + "envoy:\n  - domain: edge\n    descriptors: [{key: user, limiter: api}]\n",
			`config: envoy[0].descriptors[0].limiter (line 12): limiter "api" takes slots (its override for the prefix "slow:", at line 8, is concurrency(limit=2, ttl=10s))`},
		{"envoy compound of a penalty box", slotLimiters + "envoy:\n  - domain: edge\n    descriptors: [{key: user, limiter: both}]\n",
			`config: envoy[0].descriptors[0].limiter (line 12): limiter "both" takes slots (its policy is compound(`},
		// A compound cannot hold a concurrency member at all.
		{"compound of a concurrency", "limiters:\n  calls: {policy: concurrency, limit: 5, ttl: 30s}\n  both: {policy: compound, limiters: [calls]}\n" +
			"envoy:\n  - domain: edge\n    descriptors: [{key: user, limiter: both}]\n",
			`config: limiters.both (line 3): compound.limiters[0] must not hold slots`},
		// A descriptor names a limiter; it has no policy of its own.
		{"envoy inline policy", slotLimiters + "envoy:\n  - domain: edge\n    descriptors: [{key: user, policy: concurrency, limit: 5, ttl: 30s}]\n",
			`config: envoy[0].descriptors[0].policy (line 12): config error, unknown key 'policy'`},
		{"rlqs bucket", slotLimiters + "rlqs:\n  - domain: edge\n    buckets:\n      - {bucket: {name: api}, limiter: calls}\n",
			`config: rlqs[0].buckets[0].limiter (line 13): limiter "calls" takes slots (its policy is concurrency(limit=5, ttl=30s)), ` + rlqsMsg},
		{"rlqs penalty box", slotLimiters + "rlqs:\n  - domain: edge\n    buckets:\n      - {bucket: {name: api}, limiter: boxed}\n",
			`config: rlqs[0].buckets[0].limiter (line 13): limiter "boxed" takes slots (its policy is penalty_box(`},
		{"rlqs override", slotLimiters + "rlqs:\n  - domain: edge\n    buckets:\n      - {bucket: {name: api}, limiter: api}\n",
			`config: rlqs[0].buckets[0].limiter (line 13): limiter "api" takes slots (its override for the prefix "slow:", at line 8`},
	}
	checkConfigErrors(t, tests)
	// The same limiters serve the HTTP API.
	if _, err := LoadConfig([]byte(slotLimiters)); err != nil {
		t.Errorf("LoadConfig of the limiters alone = %v", err)
	}
}

// TestReloadSlotsForEnvoy: a reload that makes a limiter Envoy uses take
// slots is refused, and the running config stays.
func TestReloadSlotsForEnvoy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	good := "limiters:\n  calls: {policy: fixed_window, limit: 5, interval: 30s}\n" +
		"envoy:\n  - domain: edge\n    descriptors: [{key: remote_address, limiter: calls}]\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	s, log := newFromFile(t, path)
	bad := strings.Replace(good, "{policy: fixed_window, limit: 5, interval: 30s}", "{policy: concurrency, limit: 5, ttl: 30s}", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	s.reloadFile(true)
	if failed := testutil.ToFloat64(s.metrics.reloads.WithLabelValues("error")); failed != 1 {
		t.Errorf("reloads with an error = %v, want 1", failed)
	}
	if got := s.cur.Load().cfg.Limiters.Limiters["calls"].Policy.String(); got != "fixed_window(limit=5, interval=30s)" {
		t.Errorf("running policy of calls = %s, want the fixed window it had", got)
	}
	if want := `envoy[0].descriptors[0].limiter (line 5): limiter \"calls\" takes slots`; !strings.Contains(log.String(), want) {
		t.Errorf("log = %s, want the reload's error %s", log.String(), want)
	}
}
