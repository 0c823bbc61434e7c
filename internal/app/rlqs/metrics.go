package rlqs

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxBucketSeries bounds the buckets that get series of their own. Bucket
// ids may carry request values (a tenant, a client address); past the
// bound, new buckets are counted under bucket "_overflow" of their domain,
// as the envoy section's per-descriptor stats are past theirs. A domain
// that the config does not name is counted as domain "_unknown", since
// Envoys name it.
const MaxBucketSeries = 1000

// Labels of the series that stand for many.
const (
	overflowLabel = "_overflow"
	unknownLabel  = "_unknown"
)

// The actions of sluice_rlqs_assignments_total.
const (
	actionTokenBucket = "token_bucket"
	actionAllowAll    = "allow_all"
	actionDenyAll     = "deny_all"
	actionAbandon     = "abandon"
	actionNone        = "none" // the store failed: nothing sent
	actionKept        = "kept" // the renewal was not paid: nothing sent, the bucket in force goes on
)

// metrics are the service's Prometheus series. A nil *metrics counts
// nothing.
type metrics struct {
	requests, assignments, charged *prometheus.CounterVec
	rejected, bucketsRejected      *prometheus.CounterVec
	streams, liveBuckets           prometheus.Gauge

	mu       sync.Mutex
	buckets  map[[2]string]*bucketStats
	overflow map[string]*bucketStats // by domain label
	max      int                     // MaxBucketSeries, but for tests
}

// bucketStats are the series of one bucket.
type bucketStats struct {
	allowed, denied, charged prometheus.Counter
	assignments              *prometheus.CounterVec
	labels                   prometheus.Labels
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_requests_total",
			Help: "Requests Envoys reported for a rate limit quota bucket, by domain, bucket id and outcome (allowed, denied): what they decided themselves.",
		}, []string{"domain", "bucket", "outcome"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_assignments_total",
			Help: "Assignments sent for a rate limit quota bucket, by domain, bucket id and action (token_bucket, allow_all, deny_all, abandon; none when the store failed and nothing was sent; kept when the limiter had not the tokens to renew the bucket in force, which goes on, and nothing was sent).",
		}, []string{"domain", "bucket", "action"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_tokens_charged_total",
			Help: "Tokens taken from a bucket's limiter for the token buckets assigned to Envoys, by domain and bucket id.",
		}, []string{"domain", "bucket"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_streams_refused_total",
			Help: "Rate limit quota streams ended by sluice, by reason (invalid, too_many_streams, too_many_streams_per_client, too_many_buckets, silent: no report for abandon_after).",
		}, []string{"reason"}),
		bucketsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rlqs_buckets_refused_total",
			Help: "New rate limit quota buckets refused, answered with no action, by reason (too_many_buckets: the server's bound; too_many_buckets_per_client: one client address's).",
		}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rlqs_streams",
			Help: "Rate limit quota streams open, one per Envoy.",
		}),
		liveBuckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rlqs_buckets",
			Help: "Rate limit quota buckets held by the streams open, a bucket reported on two streams counting twice.",
		}),
		buckets:  map[[2]string]*bucketStats{},
		overflow: map[string]*bucketStats{},
		max:      MaxBucketSeries,
	}
	for _, r := range []string{"invalid", "too_many_streams", "too_many_streams_per_client", "too_many_buckets", "silent"} {
		m.rejected.WithLabelValues(r)
	}
	for _, r := range []string{"too_many_buckets", "too_many_buckets_per_client"} {
		m.bucketsRejected.WithLabelValues(r)
	}
	reg.MustRegister(m.requests, m.assignments, m.charged, m.rejected, m.bucketsRejected, m.streams, m.liveBuckets)
	return m
}

// of returns the series of bucket (its id as text) of domain, which the
// config names when known. Past the bound it makes nothing: the buckets
// share their domain's overflow series.
func (m *metrics) of(domain, bucket string, known bool) *bucketStats {
	if m == nil {
		return nil
	}
	if !known {
		domain = unknownLabel
	}
	k := [2]string{domain, bucket}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.buckets[k]; ok {
		return s
	}
	if len(m.buckets) < m.max {
		s := m.stats(domain, bucket)
		m.buckets[k] = s
		return s
	}
	s, ok := m.overflow[domain]
	if !ok {
		s = m.stats(domain, overflowLabel)
		m.overflow[domain] = s
	}
	return s
}

// stats makes the series of bucket of domain.
func (m *metrics) stats(domain, bucket string) *bucketStats {
	l := prometheus.Labels{"domain": domain, "bucket": bucket}
	return &bucketStats{
		allowed:     m.requests.WithLabelValues(domain, bucket, "allowed"),
		denied:      m.requests.WithLabelValues(domain, bucket, "denied"),
		charged:     m.charged.With(l),
		assignments: m.assignments.MustCurryWith(l),
		labels:      l,
	}
}

func (s *bucketStats) report(allowed, denied uint64) {
	if s == nil {
		return
	}
	add(s.allowed, allowed)
	add(s.denied, denied)
}

func (s *bucketStats) action(a string) {
	if s != nil {
		s.assignments.WithLabelValues(a).Inc()
	}
}

func (s *bucketStats) charge(n int64) {
	if s != nil && n > 0 {
		add(s.charged, uint64(n))
	}
}

func (m *metrics) refuse(reason string) {
	if m != nil {
		m.rejected.WithLabelValues(reason).Inc()
	}
}

func (m *metrics) refuseBucket(reason string) {
	if m != nil {
		m.bucketsRejected.WithLabelValues(reason).Inc()
	}
}

func (m *metrics) streamDelta(d float64) {
	if m != nil {
		m.streams.Add(d)
	}
}

func (m *metrics) bucketDelta(d float64) {
	if m != nil {
		m.liveBuckets.Add(d)
	}
}

func add(c prometheus.Counter, n uint64) {
	if n > 0 {
		c.Add(float64(min(n, math.MaxInt64)))
	}
}
