package sluiceotel_test

import (
	"context"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/observertest"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluiceotel"
)

// points flattens what reader collected into "name{k=v,...}" → value,
// a histogram's value being its count.
func points(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		sort.Strings(kv)
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("metric %s has data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := sluiceotel.New(provider.Meter("sluice"))
	if err != nil {
		t.Fatal(err)
	}

	clock := observertest.Drive(t, m.Observer, func(name string, rl *resilience.RateLimiter) { m.RateLimiter(name, rl) })

	want := map[string]float64{
		"sluice_decisions_total{limiter=api,outcome=allowed}":           3,
		"sluice_decisions_total{limiter=api,outcome=rejected}":          1,
		"sluice_decisions_total{limiter=down,outcome=error}":            1,
		"sluice_decisions_total{limiter=payments,outcome=allowed}":      2,
		"sluice_decisions_total{limiter=payments,outcome=rejected}":     1,
		"sluice_tokens_consumed_total{limiter=api}":                     4,
		"sluice_tokens_consumed_total{limiter=payments}":                2,
		"sluice_store_duration_seconds{op=update}":                      5,
		"sluice_store_duration_seconds{op=delete}":                      1,
		"sluice_store_errors_total{op=update}":                          1,
		"sluice_store_failures_total{limiter=down,policy=fail_closed}":  1,
		"sluice_store_circuit_open{limiter=down}":                       1,
		"resilience4j_ratelimiter_available_permissions{name=payments}": 0,
		"resilience4j_ratelimiter_waiting_threads{name=payments}":       0,
	}
	if got := points(t, reader); !reflect.DeepEqual(got, want) {
		t.Errorf("collected\n got %v\nwant %v", got, want)
	}

	clock.Advance(time.Second)
	if got := points(t, reader)["resilience4j_ratelimiter_available_permissions{name=payments}"]; got != 2 {
		t.Errorf("available permissions after a refresh = %v, want 2", got)
	}
}

// BenchmarkObserver is the cost of recording an in-memory Limiter's
// decisions with the OpenTelemetry SDK, beside none.
//
//	go test -run '^$' -bench Observer -count 10 ./sluiceotel
func BenchmarkObserver(b *testing.B) {
	b.Run("observer=none", func(b *testing.B) { observertest.BenchAllow(b) })
	b.Run("observer=otel", func(b *testing.B) {
		m, err := sluiceotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())).Meter("sluice"))
		if err != nil {
			b.Fatal(err)
		}
		observertest.BenchAllow(b, sluice.WithObserver(m.Observer("api")))
	})
}

// TestWaitingAndForget: sluice_waiting_callers goes up and down with the
// waits, and a forgotten Resilience4j limiter's gauges are no longer read.
func TestWaitingAndForget(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := sluiceotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("sluice"))
	if err != nil {
		t.Fatal(err)
	}
	o := m.Observer("api")
	o.Observe(sluice.Event{Kind: sluice.EventWaiting, Tokens: 1, Duration: time.Second})
	o.Observe(sluice.Event{Kind: sluice.EventWaiting, Tokens: 1, Duration: time.Second})
	o.Observe(sluice.Event{Kind: sluice.EventWaited, Duration: time.Second})
	rl, err := resilience.New(resilience.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	m.RateLimiter("payments", rl)
	m.Forget("payments")
	got := points(t, reader)
	want := map[string]float64{"sluice_waiting_callers{}": 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("collected %v, want %v", got, want)
	}
}
