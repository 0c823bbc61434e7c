package sluiceprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluiceprom"
)

// TestCollectorRedis counts a limiter's decisions on a real Redis, then
// while the server hangs: its store calls time out, the limiter fails
// open, and its circuit opens, after which the store is not called.
func TestCollectorRedis(t *testing.T) {
	url, pause := testserver.PausableRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	client := redis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	c := sluiceprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithStore(store),
		sluice.WithObserver(c.Observer("api")), sluice.WithStoreTimeout(200*time.Millisecond),
		sluice.WithStoreFailure(sluice.FailOpen), sluice.WithCircuitBreaker(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := func(n int) {
		t.Helper()
		for range n {
			if _, err := l.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}
	allow(3) // 2 allowed, 1 rejected
	pause(true)
	allow(3) // 2 store timeouts open the circuit; the third is not sent
	pause(false)

	want := `
# HELP sluice_decisions_total Decisions by limiter and outcome (allowed, rejected, error; and in sluice serve invalid: the caller's mistake, answered 400).
# TYPE sluice_decisions_total counter
sluice_decisions_total{limiter="api",outcome="allowed"} 5
sluice_decisions_total{limiter="api",outcome="error"} 0
sluice_decisions_total{limiter="api",outcome="rejected"} 1
# HELP sluice_store_errors_total Store calls that returned an error, by operation.
# TYPE sluice_store_errors_total counter
sluice_store_errors_total{op="delete"} 0
sluice_store_errors_total{op="update"} 2
# HELP sluice_store_failures_total Decisions a store failure decided, by limiter and the failure policy applied (fail_closed, fail_open, fail_local, fail_share).
# TYPE sluice_store_failures_total counter
sluice_store_failures_total{limiter="api",policy="fail_closed"} 0
sluice_store_failures_total{limiter="api",policy="fail_local"} 0
sluice_store_failures_total{limiter="api",policy="fail_open"} 3
sluice_store_failures_total{limiter="api",policy="fail_share"} 0
# HELP sluice_store_circuit_open 1 while a limiter's circuit breaker keeps calls from the store (open or half-open), 0 when closed.
# TYPE sluice_store_circuit_open gauge
sluice_store_circuit_open{limiter="api"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		sluiceprom.Decisions, sluiceprom.StoreErrors, sluiceprom.StoreFailures, sluiceprom.CircuitOpen); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != sluiceprom.StoreDuration {
			continue
		}
		for _, m := range mf.GetMetric() {
			if op := m.GetLabel()[0].GetValue(); op == "update" && m.GetHistogram().GetSampleCount() != 5 {
				t.Errorf("%s{op=update} count = %d, want 5: 3 answered, 2 timed out", sluiceprom.StoreDuration, m.GetHistogram().GetSampleCount())
			}
		}
	}
}
