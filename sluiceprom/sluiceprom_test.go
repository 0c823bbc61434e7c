package sluiceprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/observertest"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluiceprom"
	"github.com/sluicehq/sluice/sluicetest"
)

const t0 = observertest.T0

func TestCollector(t *testing.T) {
	c := sluiceprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	clock := observertest.Drive(t, c.Observer, func(name string, rl *resilience.RateLimiter) { c.RateLimiter(name, rl) })

	want := `
# HELP sluice_decisions_total Decisions by limiter and outcome (allowed, rejected, error; and in sluice serve invalid: the caller's mistake, answered 400).
# TYPE sluice_decisions_total counter
sluice_decisions_total{limiter="api",outcome="allowed"} 3
sluice_decisions_total{limiter="api",outcome="error"} 0
sluice_decisions_total{limiter="api",outcome="rejected"} 1
sluice_decisions_total{limiter="down",outcome="allowed"} 0
sluice_decisions_total{limiter="down",outcome="error"} 1
sluice_decisions_total{limiter="down",outcome="rejected"} 0
sluice_decisions_total{limiter="payments",outcome="allowed"} 2
sluice_decisions_total{limiter="payments",outcome="error"} 0
sluice_decisions_total{limiter="payments",outcome="rejected"} 1
# HELP sluice_tokens_consumed_total Tokens taken by allowed decisions, by limiter.
# TYPE sluice_tokens_consumed_total counter
sluice_tokens_consumed_total{limiter="api"} 4
sluice_tokens_consumed_total{limiter="down"} 0
sluice_tokens_consumed_total{limiter="payments"} 2
# HELP sluice_store_errors_total Store calls that returned an error, by operation.
# TYPE sluice_store_errors_total counter
sluice_store_errors_total{op="delete"} 0
sluice_store_errors_total{op="update"} 1
# HELP sluice_store_failures_total Decisions a store failure decided, by limiter and the failure policy applied (fail_closed, fail_open, fail_local, fail_share).
# TYPE sluice_store_failures_total counter
sluice_store_failures_total{limiter="api",policy="fail_closed"} 0
sluice_store_failures_total{limiter="api",policy="fail_local"} 0
sluice_store_failures_total{limiter="api",policy="fail_open"} 0
sluice_store_failures_total{limiter="api",policy="fail_share"} 0
sluice_store_failures_total{limiter="down",policy="fail_closed"} 1
sluice_store_failures_total{limiter="down",policy="fail_local"} 0
sluice_store_failures_total{limiter="down",policy="fail_open"} 0
sluice_store_failures_total{limiter="down",policy="fail_share"} 0
sluice_store_failures_total{limiter="payments",policy="fail_closed"} 0
sluice_store_failures_total{limiter="payments",policy="fail_local"} 0
sluice_store_failures_total{limiter="payments",policy="fail_open"} 0
sluice_store_failures_total{limiter="payments",policy="fail_share"} 0
# HELP sluice_store_circuit_open 1 while a limiter's circuit breaker keeps calls from the store (open or half-open), 0 when closed.
# TYPE sluice_store_circuit_open gauge
sluice_store_circuit_open{limiter="api"} 0
sluice_store_circuit_open{limiter="down"} 1
sluice_store_circuit_open{limiter="payments"} 0
# HELP resilience4j_ratelimiter_available_permissions The permissions a Resilience4j rate limiter has now, negative while permits are reserved ahead.
# TYPE resilience4j_ratelimiter_available_permissions gauge
resilience4j_ratelimiter_available_permissions{name="payments"} 0
# HELP resilience4j_ratelimiter_waiting_threads The callers a Resilience4j rate limiter holds waiting now.
# TYPE resilience4j_ratelimiter_waiting_threads gauge
resilience4j_ratelimiter_waiting_threads{name="payments"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		sluiceprom.Decisions, sluiceprom.Tokens, sluiceprom.StoreErrors, sluiceprom.StoreFailures, sluiceprom.CircuitOpen,
		sluiceprom.AvailablePermissions, sluiceprom.WaitingThreads); err != nil {
		t.Error(err)
	}

	// Latencies are the wall clock's: only their count is known. api made
	// 4 updates, down 1.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != sluiceprom.StoreDuration {
			continue
		}
		for _, m := range mf.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	if counts["update"] != 5 || counts["delete"] != 1 {
		t.Errorf("%s sample counts = %v, want update 5, delete 1", sluiceprom.StoreDuration, counts)
	}

	// A clock step refills the Resilience4j limiter: the gauge is read at
	// the scrape.
	clock.Advance(time.Second)
	if got := sample(t, reg, sluiceprom.AvailablePermissions, map[string]string{"name": "payments"}); got != 2 {
		t.Errorf("%s after a refresh = %v, want 2", sluiceprom.AvailablePermissions, got)
	}

	c.Forget("api")
	if n := testutil.CollectAndCount(c, sluiceprom.Decisions); n != 6 {
		t.Errorf("series of %s after Forget(api) = %d, want 6", sluiceprom.Decisions, n)
	}
}

// sample is the value of the counter or gauge called name with labels
// among what g gathers, or -1 when there is none.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

func TestObserverNoAllocs(t *testing.T) {
	c := sluiceprom.New()
	o := c.Observer("api")
	events := []sluice.Event{
		{Kind: sluice.EventAllowed, Tokens: 1},
		{Kind: sluice.EventRejected, Tokens: 1},
		{Kind: sluice.EventStoreCall, Op: sluice.StoreOpUpdate, Duration: time.Millisecond},
	}
	for _, e := range events {
		if allocs := testing.AllocsPerRun(100, func() { o.Observe(e) }); allocs != 0 {
			t.Errorf("Observe(%v) allocations = %v, want 0", e.Kind, allocs)
		}
	}
}

// BenchmarkObserver is the cost of counting an in-memory Limiter's
// decisions in Prometheus, beside none.
//
//	go test -run '^$' -bench Observer -count 10 ./sluiceprom
func BenchmarkObserver(b *testing.B) {
	b.Run("observer=none", func(b *testing.B) { observertest.BenchAllow(b) })
	b.Run("observer=prometheus", func(b *testing.B) {
		observertest.BenchAllow(b, sluice.WithObserver(sluiceprom.New().Observer("api")))
	})
}

// TestCollectorConcurrent: decisions from many goroutines are all
// counted, and exactly the limit is allowed.
func TestCollectorConcurrent(t *testing.T) {
	c := sluiceprom.New()
	l, err := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithObserver(c.Observer("api")))
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, calls = 8, 50
	done := make(chan struct{})
	for range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for range calls {
				if _, err := l.Allow(context.Background(), "k"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range goroutines {
		<-done
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	allowed := sample(t, reg, sluiceprom.Decisions, map[string]string{"outcome": "allowed"})
	rejected := sample(t, reg, sluiceprom.Decisions, map[string]string{"outcome": "rejected"})
	if allowed != 100 || rejected != goroutines*calls-100 {
		t.Errorf("allowed %v, rejected %v; want 100, %d", allowed, rejected, goroutines*calls-100)
	}
}

// gate is a clock that tells started when a call begins to sleep on it,
// and returns when release is closed.
type gate struct {
	sluice.Clock
	started, release chan struct{}
}

func (g gate) Sleep(ctx context.Context, _ time.Duration) error {
	g.started <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestWaitingCallers: sluice_waiting_callers counts the calls asleep now.
func TestWaitingCallers(t *testing.T) {
	c := sluiceprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	g := gate{sluicetest.NewFakeClock(t0), make(chan struct{}), make(chan struct{})}
	l, err := sluice.NewLimiter(sluice.TokenBucket(1, 1, time.Second),
		sluice.WithClock(g), sluice.WithObserver(c.Observer("api")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- l.WaitN(ctx, "k", 1, time.Minute) }()
		<-g.started
	}
	if got := sample(t, reg, sluiceprom.Waiting, nil); got != 2 {
		t.Errorf("%s with 2 calls asleep = %v, want 2", sluiceprom.Waiting, got)
	}
	g.release <- struct{}{} // one wakes
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel() // the other is cancelled
	<-done
	if got := sample(t, reg, sluiceprom.Waiting, nil); got != 0 {
		t.Errorf("%s after = %v, want 0", sluiceprom.Waiting, got)
	}
}

// TestShadowRejected counts a shadow limiter's decisions as allowed, and
// those its policy refused in sluice_shadow_rejected_total, as many as
// the same limiter without shadow mode rejects.
func TestShadowRejected(t *testing.T) {
	c := sluiceprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	clock := sluicetest.NewFakeClock(t0)
	p := sluice.FixedWindow(3, time.Second)
	shadow, err := sluice.NewLimiter(p, sluice.WithClock(clock), sluice.WithShadow(true), sluice.WithObserver(c.Observer("new")))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := sluice.NewLimiter(p, sluice.WithClock(clock), sluice.WithObserver(c.Observer("old")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5 {
		for _, l := range []*sluice.Limiter{shadow, plain} {
			if _, err := l.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{sluiceprom.ShadowRejected, map[string]string{"limiter": "new"}, 2},
		{sluiceprom.Decisions, map[string]string{"limiter": "old", "outcome": "rejected"}, 2},
		{sluiceprom.Decisions, map[string]string{"limiter": "new", "outcome": "allowed"}, 5},
		{sluiceprom.Decisions, map[string]string{"limiter": "new", "outcome": "rejected"}, 0},
		{sluiceprom.Tokens, map[string]string{"limiter": "new"}, 3},
	} {
		if got := sample(t, reg, s.name, s.labels); got != s.want {
			t.Errorf("%s%v = %v, want %v", s.name, s.labels, got, s.want)
		}
	}
}
