// Package sluiceotel records what sluice's limiters do as OpenTelemetry
// metrics, on a metric.Meter of the caller's, under the names and
// attributes of sluice serve's Prometheus metrics (see package
// sluiceprom), so that dashboards work whichever way the numbers travel:
//
//	instrument                      kind             attributes
//	sluice_decisions_total          Int64Counter     limiter, outcome (allowed, rejected, error)
//	sluice_tokens_consumed_total    Int64Counter     limiter
//	sluice_store_duration_seconds   Float64Histogram op (update, delete); unit s
//	sluice_store_errors_total       Int64Counter     op
//	sluice_store_failures_total     Int64Counter     limiter, policy (fail_closed, fail_open, fail_local, fail_share)
//	sluice_store_circuit_open       Int64Gauge       limiter
//	sluice_waiting_callers          Int64UpDownCounter  (none)
//	resilience4j_ratelimiter_available_permissions  Int64ObservableGauge  name
//	resilience4j_ratelimiter_waiting_threads        Int64ObservableGauge  name
//
// The names keep Prometheus's suffixes (_total, _seconds) rather than
// OpenTelemetry's dotted style: the OpenTelemetry Prometheus exporter
// leaves a name that already ends in its suffix as it is, so the series
// come out as sluice serve's.
//
//	m, err := sluiceotel.New(provider.Meter("sluice"))
//	if err != nil { ... }
//	l, err := sluice.NewLimiter(p, sluice.WithObserver(m.Observer("api")))
package sluiceotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metricnames"
)

// RateLimiter is what the Resilience4j gauges read: *resilience.RateLimiter
// implements it.
type RateLimiter interface {
	AvailablePermissions() int64
	NumberOfWaitingCallers() int
}

// Metrics are the instruments of the limiters it observes. It is safe for
// concurrent use. Make one with New.
type Metrics struct {
	decisions     metric.Int64Counter
	tokens        metric.Int64Counter
	storeSeconds  metric.Float64Histogram
	storeErrors   metric.Int64Counter
	storeFailures metric.Int64Counter
	circuitOpen   metric.Int64Gauge
	waiting       metric.Int64UpDownCounter
	shadow        metric.Int64Counter

	// store holds the attributes of each store op, built once.
	store map[string][]metric.RecordOption
	// storeAdd is store's, for the counter.
	storeAdd map[string][]metric.AddOption

	limiters metricnames.RateLimiters
}

// New creates the instruments on meter. It returns the meter's errors
// (joined) when it refuses one.
func New(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{store: map[string][]metric.RecordOption{}, storeAdd: map[string][]metric.AddOption{}}
	desc := func(f metricnames.Family) metric.InstrumentOption { return metric.WithDescription(f.Help) }
	var errs [10]error
	m.decisions, errs[0] = meter.Int64Counter(metricnames.Decisions, desc(metricnames.DecisionsFamily))
	m.tokens, errs[1] = meter.Int64Counter(metricnames.Tokens, desc(metricnames.TokensFamily))
	m.storeSeconds, errs[2] = meter.Float64Histogram(metricnames.StoreDuration, desc(metricnames.StoreDurationFamily),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(metricnames.StoreBuckets()...))
	m.storeErrors, errs[3] = meter.Int64Counter(metricnames.StoreErrors, desc(metricnames.StoreErrorsFamily))
	m.storeFailures, errs[4] = meter.Int64Counter(metricnames.StoreFailures, desc(metricnames.StoreFailuresFamily))
	m.circuitOpen, errs[5] = meter.Int64Gauge(metricnames.CircuitOpen, desc(metricnames.CircuitOpenFamily))
	m.waiting, errs[8] = meter.Int64UpDownCounter(metricnames.Waiting, desc(metricnames.WaitingFamily))
	m.shadow, errs[9] = meter.Int64Counter(metricnames.ShadowRejected, desc(metricnames.ShadowRejectedFamily))
	_, errs[6] = meter.Int64ObservableGauge(metricnames.AvailablePermissions, desc(metricnames.AvailablePermissionsFamily),
		metric.WithInt64Callback(m.observe(func(rl metricnames.RateLimiter) int64 { return rl.AvailablePermissions() })))
	_, errs[7] = meter.Int64ObservableGauge(metricnames.WaitingThreads, desc(metricnames.WaitingThreadsFamily),
		metric.WithInt64Callback(m.observe(func(rl metricnames.RateLimiter) int64 { return int64(rl.NumberOfWaitingCallers()) })))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	for _, op := range []string{sluice.StoreOpUpdate, sluice.StoreOpDelete} {
		set := metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.Op, op)))
		m.store[op] = []metric.RecordOption{set}
		m.storeAdd[op] = []metric.AddOption{set}
	}
	return m, nil
}

// observe returns the callback of a Resilience4j gauge that value reads.
func (m *Metrics) observe(value func(metricnames.RateLimiter) int64) metric.Int64Callback {
	return func(_ context.Context, o metric.Int64Observer) error {
		m.limiters.Each(func(name string, rl metricnames.RateLimiter) {
			o.Observe(value(rl), metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.Name, name))))
		})
		return nil
	}
}

// RateLimiter records the gauges of a Resilience4j rate limiter as name,
// read at each collection. A second call with the same name replaces the
// first. Give the limiter m.Observer(name) through resilience.WithObserver
// for its successful and failed acquisitions.
func (m *Metrics) RateLimiter(name string, rl RateLimiter) { m.limiters.Set(name, rl) }

// Forget stops reading the gauges of the Resilience4j limiter called name.
func (m *Metrics) Forget(name string) { m.limiters.Delete(name) }

// Observer returns the observer of the limiter called limiter, for
// sluice.WithObserver (or resilience.WithObserver). Its attribute sets
// are built here, once, so that Observe allocates nothing in the SDK's
// fast path.
func (m *Metrics) Observer(limiter string) sluice.Observer {
	lim := attribute.String(metricnames.Limiter, limiter)
	add := func(kvs ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	}
	o := &observer{
		m:        m,
		allowed:  add(lim, attribute.String(metricnames.Outcome, metricnames.Allowed)),
		rejected: add(lim, attribute.String(metricnames.Outcome, metricnames.Rejected)),
		errored:  add(lim, attribute.String(metricnames.Outcome, metricnames.Error)),
		limiter:  add(lim),
		gauge:    []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(lim))},
	}
	for f := sluice.FailClosed; f <= sluice.FailShare; f++ {
		o.failures[f] = add(lim, attribute.String(metricnames.Policy, metricnames.FailureLabel(f)))
	}
	return o
}

// observer is one limiter's attribute sets.
type observer struct {
	m                          *Metrics
	allowed, rejected, errored []metric.AddOption
	limiter                    []metric.AddOption
	gauge                      []metric.RecordOption
	failures                   [sluice.FailShare + 1][]metric.AddOption
}

func (o *observer) Observe(e sluice.Event) {
	ctx := context.Background()
	switch e.Kind {
	case sluice.EventAllowed:
		o.m.decisions.Add(ctx, 1, o.allowed...)
		o.m.tokens.Add(ctx, e.Tokens, o.limiter...)
	case sluice.EventRejected:
		if e.Shadow { // let through all the same
			o.m.decisions.Add(ctx, 1, o.allowed...)
			o.m.shadow.Add(ctx, 1, o.limiter...)
			return
		}
		o.m.decisions.Add(ctx, 1, o.rejected...)
	case sluice.EventStoreCall:
		if opts, ok := o.m.store[e.Op]; ok {
			o.m.storeSeconds.Record(ctx, e.Duration.Seconds(), opts...)
			if e.Err != nil {
				o.m.storeErrors.Add(ctx, 1, o.m.storeAdd[e.Op]...)
			}
		}
	case sluice.EventStoreFailure:
		if int(e.Failure) < len(o.failures) {
			o.m.storeFailures.Add(ctx, 1, o.failures[e.Failure]...)
		}
		if e.Failure == sluice.FailClosed {
			o.m.decisions.Add(ctx, 1, o.errored...)
		}
	case sluice.EventWaiting:
		o.m.waiting.Add(ctx, 1)
	case sluice.EventWaited, sluice.EventCancelled:
		o.m.waiting.Add(ctx, -1)
	case sluice.EventCircuit:
		var v int64
		if e.Circuit != sluice.CircuitClosed {
			v = 1
		}
		o.m.circuitOpen.Record(ctx, v, o.gauge...)
	}
}
