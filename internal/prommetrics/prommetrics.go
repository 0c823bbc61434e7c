// Package prommetrics makes the Prometheus collectors of the families
// that sluiceprom's Collector and sluice serve both export, from their
// one definition in metricnames. It is apart from metricnames so that
// sluiceotel does not link the Prometheus client.
package prommetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metricnames"
)

// Limiters are the families of the limiters' decisions and store calls.
type Limiters struct {
	Decisions     *prometheus.CounterVec   // limiter, outcome
	Tokens        *prometheus.CounterVec   // limiter
	StoreSeconds  *prometheus.HistogramVec // op
	StoreErrors   *prometheus.CounterVec   // op
	StoreFailures *prometheus.CounterVec   // limiter, policy
	CircuitOpen   *prometheus.GaugeVec     // limiter
	Waiting       prometheus.Gauge
	// ShadowRejected counts what limiters in shadow mode would have
	// refused.
	ShadowRejected *prometheus.CounterVec // limiter
}

// New returns the families, with no series yet.
func New() Limiters {
	f := metricnames.StoreDurationFamily
	return Limiters{
		Decisions: CounterVec(metricnames.DecisionsFamily),
		Tokens:    CounterVec(metricnames.TokensFamily),
		StoreSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: f.Name, Help: f.Help, Buckets: metricnames.StoreBuckets(),
		}, f.Labels),
		StoreErrors:   CounterVec(metricnames.StoreErrorsFamily),
		StoreFailures: CounterVec(metricnames.StoreFailuresFamily),
		CircuitOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricnames.CircuitOpenFamily.Name, Help: metricnames.CircuitOpenFamily.Help,
		}, metricnames.CircuitOpenFamily.Labels),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricnames.WaitingFamily.Name, Help: metricnames.WaitingFamily.Help,
		}),
		ShadowRejected: CounterVec(metricnames.ShadowRejectedFamily),
	}
}

// CounterVec returns the counters of family f.
func CounterVec(f metricnames.Family) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: f.Help}, f.Labels)
}

// Collectors are the families, to register, or to describe and collect.
func (l *Limiters) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.Decisions, l.Tokens, l.StoreSeconds, l.StoreErrors, l.StoreFailures, l.CircuitOpen, l.Waiting, l.ShadowRejected}
}

// Forget drops every series of the limiter called limiter, so that a
// scrape stops reporting a limiter that no longer exists.
func (l *Limiters) Forget(limiter string) {
	labels := prometheus.Labels{metricnames.Limiter: limiter}
	l.Decisions.DeletePartialMatch(labels)
	l.Tokens.DeletePartialMatch(labels)
	l.StoreFailures.DeletePartialMatch(labels)
	l.CircuitOpen.DeletePartialMatch(labels)
	l.ShadowRejected.DeletePartialMatch(labels)
}

// StoreOp is the series of one store operation, looked up once: a lookup
// by label costs a hash and a lock on every call. Making it makes its
// series exist, at zero.
type StoreOp struct {
	seconds prometheus.Observer
	errors  prometheus.Counter
}

// StoreOp returns the series of the store operation op.
func (l *Limiters) StoreOp(op string) StoreOp {
	return StoreOp{l.StoreSeconds.WithLabelValues(op), l.StoreErrors.WithLabelValues(op)}
}

// Observe counts a call of the operation that took d and returned err.
func (o StoreOp) Observe(d time.Duration, err error) {
	o.seconds.Observe(d.Seconds())
	if err != nil {
		o.errors.Inc()
	}
}

// SetCircuit sets a limiter's series of CircuitOpen to s: 1 while its
// circuit is open or half-open, 0 when closed.
func SetCircuit(g prometheus.Gauge, s sluice.CircuitState) {
	v := 0.0
	if s != sluice.CircuitClosed {
		v = 1
	}
	g.Set(v)
}
