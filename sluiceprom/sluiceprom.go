// Package sluiceprom exports what sluice's limiters do as Prometheus
// metrics, under the names and labels that sluice serve uses, so that one
// dashboard and one set of alerts serve the library and the server:
//
//	metric                          type       labels
//	sluice_decisions_total          counter    limiter, outcome (allowed, rejected, error)
//	sluice_tokens_consumed_total    counter    limiter
//	sluice_store_duration_seconds   histogram  op (update, delete)
//	sluice_store_errors_total       counter    op
//	sluice_store_failures_total     counter    limiter, policy (fail_closed, fail_open, fail_local, fail_share)
//	sluice_store_circuit_open       gauge      limiter
//	sluice_waiting_callers          gauge      (none: blocking calls sleeping now, all limiters)
//	sluice_shadow_rejected_total    counter    limiter
//
// and, for the rate limiters of package resilience, Resilience4j's gauges
// under the names its Micrometer binding gives them:
//
//	resilience4j_ratelimiter_available_permissions  gauge  name
//	resilience4j_ratelimiter_waiting_threads        gauge  name
//
// A Collector is a prometheus.Collector: register it on a registry of
// your own, and give each limiter its Observer:
//
//	c := sluiceprom.New()
//	reg.MustRegister(c)
//	l, err := sluice.NewLimiter(p, sluice.WithObserver(c.Observer("api")))
//
// A limiter in shadow mode (sluice.WithShadow) lets every request through:
// each counts as outcome "allowed", and those its policy refused, which
// took nothing, count in sluice_shadow_rejected_total rather than in
// sluice_tokens_consumed_total.
//
// A decision that a store failure decided under FailClosed returns an
// error to its caller: it counts as outcome "error". An argument out of
// bounds is an error too, but it never reaches the observer, being the
// caller's mistake rather than the limiter's decision.
package sluiceprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metricnames"
	"github.com/sluicehq/sluice/internal/prommetrics"
)

// The names of the metrics, shared with sluice serve and sluiceotel.
const (
	Decisions     = metricnames.Decisions
	Tokens        = metricnames.Tokens
	StoreDuration = metricnames.StoreDuration
	StoreErrors   = metricnames.StoreErrors
	StoreFailures = metricnames.StoreFailures
	CircuitOpen   = metricnames.CircuitOpen
	Waiting       = metricnames.Waiting
	// ShadowRejected counts the requests a limiter in shadow mode let
	// through that its policy refused.
	ShadowRejected = metricnames.ShadowRejected

	AvailablePermissions = metricnames.AvailablePermissions
	WaitingThreads       = metricnames.WaitingThreads
)

// FailureLabel names a store failure policy as config files write it, the
// value of the policy label of sluice_store_failures_total.
func FailureLabel(f sluice.StoreFailure) string { return metricnames.FailureLabel(f) }

// RateLimiter is what the Resilience4j gauges read: *resilience.RateLimiter
// implements it.
type RateLimiter interface {
	AvailablePermissions() int64
	NumberOfWaitingCallers() int
}

// Collector holds the metrics of the limiters it observes. It is safe for
// concurrent use. Make one with New.
type Collector struct {
	m prommetrics.Limiters

	available *prometheus.Desc
	waiting   *prometheus.Desc

	// store holds the series of each store op, resolved once.
	store map[string]prommetrics.StoreOp

	limiters metricnames.RateLimiters
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a collector with no limiter yet. Its store series exist from
// the start at zero, so that alerts on a rate work before the first call.
func New() *Collector {
	a, w := metricnames.AvailablePermissionsFamily, metricnames.WaitingThreadsFamily
	c := &Collector{
		m:         prommetrics.New(),
		available: prometheus.NewDesc(a.Name, a.Help, a.Labels, nil),
		waiting:   prometheus.NewDesc(w.Name, w.Help, w.Labels, nil),
		store:     map[string]prommetrics.StoreOp{},
	}
	for _, op := range []string{sluice.StoreOpUpdate, sluice.StoreOpDelete} {
		c.store[op] = c.m.StoreOp(op)
	}
	return c
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.m.Collectors() {
		m.Describe(ch)
	}
	ch <- c.available
	ch <- c.waiting
}

// Collect sends every metric, reading the Resilience4j gauges now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.m.Collectors() {
		m.Collect(ch)
	}
	c.limiters.Each(func(name string, rl metricnames.RateLimiter) {
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, float64(rl.AvailablePermissions()), name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(rl.NumberOfWaitingCallers()), name)
	})
}

// Observer returns the observer of the limiter called limiter, for
// sluice.WithObserver (or resilience.WithObserver): the series of its
// decisions, tokens and failures exist from this call on, at zero. Limiters
// given the same name share their series. Its Observe allocates nothing.
func (c *Collector) Observer(limiter string) sluice.Observer {
	o := &observer{
		c:        c,
		allowed:  c.m.Decisions.WithLabelValues(limiter, metricnames.Allowed),
		rejected: c.m.Decisions.WithLabelValues(limiter, metricnames.Rejected),
		errored:  c.m.Decisions.WithLabelValues(limiter, metricnames.Error),
		tokens:   c.m.Tokens.WithLabelValues(limiter),
		circuit:  c.m.CircuitOpen.WithLabelValues(limiter),
		shadow:   c.m.ShadowRejected.WithLabelValues(limiter),
	}
	for f := sluice.FailClosed; f <= sluice.FailShare; f++ {
		o.failures[f] = c.m.StoreFailures.WithLabelValues(limiter, FailureLabel(f))
	}
	return o
}

// RateLimiter exports the gauges of a Resilience4j rate limiter as name,
// read at each scrape. A second call with the same name replaces the
// first. Give the limiter c.Observer(name) through resilience.WithObserver
// for its successful and failed acquisitions.
func (c *Collector) RateLimiter(name string, rl RateLimiter) { c.limiters.Set(name, rl) }

// Forget drops every series of the limiter called limiter, for one that no
// longer exists, so that a scrape stops reporting it. An Observer handed
// out for it before keeps counting into series no scrape shows.
func (c *Collector) Forget(limiter string) {
	c.m.Forget(limiter)
	c.limiters.Delete(limiter)
}

// observer is one limiter's series, resolved once, so that an event is an
// atomic add and no label lookup.
type observer struct {
	c                          *Collector
	allowed, rejected, errored prometheus.Counter
	tokens, shadow             prometheus.Counter
	circuit                    prometheus.Gauge
	failures                   [sluice.FailShare + 1]prometheus.Counter
}

func (o *observer) Observe(e sluice.Event) {
	switch e.Kind {
	case sluice.EventAllowed:
		o.allowed.Inc()
		o.tokens.Add(float64(e.Tokens))
	case sluice.EventRejected:
		if e.Shadow { // let through all the same
			o.allowed.Inc()
			o.shadow.Inc()
			return
		}
		o.rejected.Inc()
	case sluice.EventStoreCall:
		if s, ok := o.c.store[e.Op]; ok {
			s.Observe(e.Duration, e.Err)
		}
	case sluice.EventStoreFailure:
		if int(e.Failure) < len(o.failures) {
			o.failures[e.Failure].Inc()
		}
		if e.Failure == sluice.FailClosed {
			o.errored.Inc()
		}
	case sluice.EventWaiting:
		o.c.m.Waiting.Inc()
	case sluice.EventWaited, sluice.EventCancelled:
		o.c.m.Waiting.Dec()
	case sluice.EventCircuit:
		prommetrics.SetCircuit(o.circuit, e.Circuit)
	}
}
