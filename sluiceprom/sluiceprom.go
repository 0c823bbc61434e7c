// Package sluiceprom exports what sluice's limiters do as Prometheus
// metrics, under the names and labels that sluice serve uses, so that one
// dashboard and one set of alerts serve the library and the server:
//
//	metric                          type       labels
//	sluice_decisions_total          counter    limiter, outcome (allowed, rejected, error)
//	sluice_tokens_consumed_total    counter    limiter
//	sluice_store_duration_seconds   histogram  op (update, delete)
//	sluice_store_errors_total       counter    op
//	sluice_store_failures_total     counter    limiter, policy (fail_closed, fail_open, fail_local)
//	sluice_store_circuit_open       gauge      limiter
//	sluice_waiting_callers          gauge      (none: blocking calls sleeping now, all limiters)
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
// A decision that a store failure decided under FailClosed returns an
// error to its caller: it counts as outcome "error". An argument out of
// bounds is an error too, but it never reaches the observer, being the
// caller's mistake rather than the limiter's decision.
package sluiceprom

import (
	"cmp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metricnames"
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
	decisions     *prometheus.CounterVec
	tokens        *prometheus.CounterVec
	storeSeconds  *prometheus.HistogramVec
	storeErrors   *prometheus.CounterVec
	storeFailures *prometheus.CounterVec
	circuitOpen   *prometheus.GaugeVec
	waitingNow    prometheus.Gauge

	available *prometheus.Desc
	waiting   *prometheus.Desc

	// store holds the series of each store op, resolved once.
	store map[string]storeSeries

	mu       sync.Mutex
	limiters map[string]RateLimiter // guarded by mu
}

type storeSeries struct {
	seconds prometheus.Observer
	errors  prometheus.Counter
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a collector with no limiter yet. Its store series exist from
// the start at zero, so that alerts on a rate work before the first call.
func New() *Collector {
	c := &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Decisions,
			Help: metricnames.DecisionsHelp,
		}, []string{metricnames.Limiter, metricnames.Outcome}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Tokens,
			Help: metricnames.TokensHelp,
		}, []string{metricnames.Limiter}),
		storeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    StoreDuration,
			Help:    metricnames.StoreDurationHelp,
			Buckets: metricnames.StoreBuckets(),
		}, []string{metricnames.Op}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: StoreErrors,
			Help: metricnames.StoreErrorsHelp,
		}, []string{metricnames.Op}),
		storeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: StoreFailures,
			Help: metricnames.StoreFailuresHelp,
		}, []string{metricnames.Limiter, metricnames.Policy}),
		circuitOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: CircuitOpen,
			Help: metricnames.CircuitOpenHelp,
		}, []string{metricnames.Limiter}),
		waitingNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricnames.Waiting,
			Help: metricnames.WaitingHelp,
		}),
		available: prometheus.NewDesc(AvailablePermissions, metricnames.AvailablePermissionsHelp, []string{metricnames.Name}, nil),
		waiting:   prometheus.NewDesc(WaitingThreads, metricnames.WaitingThreadsHelp, []string{metricnames.Name}, nil),
		store:     map[string]storeSeries{},
		limiters:  map[string]RateLimiter{},
	}
	for _, op := range []string{sluice.StoreOpUpdate, sluice.StoreOpDelete} {
		c.store[op] = storeSeries{seconds: c.storeSeconds.WithLabelValues(op), errors: c.storeErrors.WithLabelValues(op)}
	}
	return c
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.tokens.Describe(ch)
	c.storeSeconds.Describe(ch)
	c.storeErrors.Describe(ch)
	c.storeFailures.Describe(ch)
	c.circuitOpen.Describe(ch)
	c.waitingNow.Describe(ch)
	ch <- c.available
	ch <- c.waiting
}

// Collect sends every metric, reading the Resilience4j gauges now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.tokens.Collect(ch)
	c.storeSeconds.Collect(ch)
	c.storeErrors.Collect(ch)
	c.storeFailures.Collect(ch)
	c.circuitOpen.Collect(ch)
	c.waitingNow.Collect(ch)
	type named struct {
		name string
		rl   RateLimiter
	}
	c.mu.Lock()
	rls := make([]named, 0, len(c.limiters))
	for name, rl := range c.limiters {
		rls = append(rls, named{name, rl})
	}
	c.mu.Unlock()
	// The limiters are read outside c.mu: each takes its own lock.
	slices.SortFunc(rls, func(a, b named) int { return cmp.Compare(a.name, b.name) })
	for _, n := range rls {
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, float64(n.rl.AvailablePermissions()), n.name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(n.rl.NumberOfWaitingCallers()), n.name)
	}
}

// Observer returns the observer of the limiter called limiter, for
// sluice.WithObserver (or resilience.WithObserver): the series of its
// decisions, tokens and failures exist from this call on, at zero. Limiters
// given the same name share their series. Its Observe allocates nothing.
func (c *Collector) Observer(limiter string) sluice.Observer {
	o := &observer{
		c:        c,
		allowed:  c.decisions.WithLabelValues(limiter, metricnames.Allowed),
		rejected: c.decisions.WithLabelValues(limiter, metricnames.Rejected),
		errored:  c.decisions.WithLabelValues(limiter, metricnames.Error),
		tokens:   c.tokens.WithLabelValues(limiter),
		circuit:  c.circuitOpen.WithLabelValues(limiter),
	}
	for f := sluice.FailClosed; f <= sluice.FailLocal; f++ {
		o.failures[f] = c.storeFailures.WithLabelValues(limiter, FailureLabel(f))
	}
	return o
}

// RateLimiter exports the gauges of a Resilience4j rate limiter as name,
// read at each scrape. A second call with the same name replaces the
// first. Give the limiter c.Observer(name) through resilience.WithObserver
// for its successful and failed acquisitions.
func (c *Collector) RateLimiter(name string, rl RateLimiter) {
	c.mu.Lock()
	c.limiters[name] = rl
	c.mu.Unlock()
}

// Forget drops every series of the limiter called limiter, for one that no
// longer exists, so that a scrape stops reporting it. An Observer handed
// out for it before keeps counting into series no scrape shows.
func (c *Collector) Forget(limiter string) {
	l := prometheus.Labels{metricnames.Limiter: limiter}
	c.decisions.DeletePartialMatch(l)
	c.tokens.DeletePartialMatch(l)
	c.storeFailures.DeletePartialMatch(l)
	c.circuitOpen.DeletePartialMatch(l)
	c.mu.Lock()
	delete(c.limiters, limiter)
	c.mu.Unlock()
}

// observer is one limiter's series, resolved once, so that an event is an
// atomic add and no label lookup.
type observer struct {
	c                          *Collector
	allowed, rejected, errored prometheus.Counter
	tokens                     prometheus.Counter
	circuit                    prometheus.Gauge
	failures                   [sluice.FailLocal + 1]prometheus.Counter
}

func (o *observer) Observe(e sluice.Event) {
	switch e.Kind {
	case sluice.EventAllowed:
		o.allowed.Inc()
		o.tokens.Add(float64(e.Tokens))
	case sluice.EventRejected:
		o.rejected.Inc()
	case sluice.EventStoreCall:
		if s, ok := o.c.store[e.Op]; ok {
			s.seconds.Observe(e.Duration.Seconds())
			if e.Err != nil {
				s.errors.Inc()
			}
		}
	case sluice.EventStoreFailure:
		if int(e.Failure) < len(o.failures) {
			o.failures[e.Failure].Inc()
		}
		if e.Failure == sluice.FailClosed {
			o.errored.Inc()
		}
	case sluice.EventWaiting:
		o.c.waitingNow.Inc()
	case sluice.EventWaited, sluice.EventCancelled:
		o.c.waitingNow.Dec()
	case sluice.EventCircuit:
		v := 0.0
		if e.Circuit != sluice.CircuitClosed {
			v = 1
		}
		o.circuit.Set(v)
	}
}
