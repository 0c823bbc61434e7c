package envoyrls

import (
	"math"
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/metricnames"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// MaxStatKeys bounds the stat keys that get series of their own. Keys are
// bounded by the config, except where detailed_metric or value_to_metric
// put request values in them; past the bound, new keys are counted under
// key1 "_overflow" of their domain.
const MaxStatKeys = 10_000

// metrics are envoyproxy/ratelimit's per-descriptor stats as Prometheus
// counters, named as its default statsd-to-Prometheus mapping names them
// (ratelimit_service_rate_limit_total_hits and so on), with the labels
// domain, key1 (the stat key's first part after the domain) and key2 (the
// rest, "" when there is none). A nil *metrics counts nothing.
type metrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode, overLimitLocal *prometheus.CounterVec
	globalShadow                                                             prometheus.Counter
	ceiled                                                                   *prometheus.CounterVec // by domain

	mu   sync.Mutex
	keys map[string]*ruleStats
	max  int // MaxStatKeys, but for tests
}

// ruleStats are the counters of one stat key.
type ruleStats struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode, overLimitLocal prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	labels := []string{"domain", "key1", "key2"}
	vec := func(stat, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + stat, Help: help}, labels)
	}
	m := &metrics{
		totalHits:      vec("total_hits", "Hits of a descriptor's limit (envoyproxy/ratelimit's total_hits), by domain and stat key."),
		overLimit:      vec("over_limit", "Hits over a descriptor's limit (over_limit), by domain and stat key."),
		nearLimit:      vec("near_limit", "Hits past the near-limit ratio of a descriptor's limit but within it (near_limit), by domain and stat key."),
		withinLimit:    vec("within_limit", "Hits within a descriptor's limit (within_limit), by domain and stat key."),
		shadowMode:     vec("shadow_mode", "Hits over a descriptor's limit let through by its shadow mode (shadow_mode), by domain and stat key."),
		overLimitLocal: vec("over_limit_with_local_cache", "Hits over a limit found in the local cache (over_limit_with_local_cache), by domain and stat key."),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_global_shadow_mode",
			Help: "Requests over a limit answered OK by the global shadow mode (SHADOW_MODE).",
		}),
		keys: make(map[string]*ruleStats),
		max:  MaxStatKeys,
	}
	f := metricnames.RequestLimitsCeiledFamily
	m.ceiled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: f.Help}, f.Labels)
	reg.MustRegister(m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode, m.overLimitLocal, m.globalShadow, m.ceiled)
	return m
}

// statName is envoyproxy/ratelimit's clean-up of a stat name: ':' and '|'
// become '_', and so do the dots of an IPv4 address.
var (
	statReplacer = strings.NewReplacer(":", "_", "|", "_")
	ipv4         = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
)

func statName(s string) string {
	return ipv4.ReplaceAllStringFunc(statReplacer.Replace(s), func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// of returns the counters of statKey, a key of domain. A nil *metrics
// returns nil, whose methods count nothing.
func (m *metrics) of(domain, statKey string) *ruleStats {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.keys[statKey]; ok {
		return s
	}
	name := statName(statKey)
	rest := strings.TrimPrefix(name, statName(domain)+".")
	key1, key2, _ := strings.Cut(rest, ".")
	if len(m.keys) >= m.max {
		key1, key2 = "_overflow", ""
	}
	lv := []string{statName(domain), key1, key2}
	s := &ruleStats{
		totalHits:      m.totalHits.WithLabelValues(lv...),
		overLimit:      m.overLimit.WithLabelValues(lv...),
		nearLimit:      m.nearLimit.WithLabelValues(lv...),
		withinLimit:    m.withinLimit.WithLabelValues(lv...),
		shadowMode:     m.shadowMode.WithLabelValues(lv...),
		overLimitLocal: m.overLimitLocal.WithLabelValues(lv...),
	}
	if len(m.keys) < m.max {
		m.keys[statKey] = s
	}
	return s
}

func addTo(c prometheus.Counter, n uint64) {
	if n > 0 {
		c.Add(float64(min(n, math.MaxInt64)))
	}
}

func (s *ruleStats) add(field func(*ruleStats) prometheus.Counter, n uint64) {
	if s != nil {
		addTo(field(s), n)
	}
}

func totalHits(s *ruleStats) prometheus.Counter      { return s.totalHits }
func overLimit(s *ruleStats) prometheus.Counter      { return s.overLimit }
func nearLimit(s *ruleStats) prometheus.Counter      { return s.nearLimit }
func withinLimit(s *ruleStats) prometheus.Counter    { return s.withinLimit }
func shadowMode(s *ruleStats) prometheus.Counter     { return s.shadowMode }
func overLimitLocal(s *ruleStats) prometheus.Counter { return s.overLimitLocal }

// RequestValueStats returns where d's stats first take a request's
// values into their stat keys, and so into the key1 and key2 labels of
// their series: a descriptor with detailed_metric, or one with
// value_to_metric above a rate limit, or the allow_request_limits setting
// (a limit override's stat key is the request's entries). It returns nil
// when every stat key is the config's own. A request's values may be a
// user's name, a token, an address: whoever reads the series reads them.
func (d *Domains) RequestValueStats() *config.Error {
	if d == nil {
		return nil
	}
	if d.settings.AllowRequestLimits {
		return &config.Error{Path: "ratelimit.allow_request_limits",
			Msg: "a limit override's stat key holds the request's entries (allow_request_limits, SLUICE_ALLOW_REQUEST_LIMITS)"}
	}
	for _, doc := range d.docs {
		if at, key, ok := requestValued(doc.descriptors, nil); ok {
			return &config.Error{File: at.file, Path: yamlnode.Join(at.path, key), Line: at.line, Column: at.col,
				Msg: key + " puts the request's values in the rule's stat key"}
		}
	}
	return nil
}

// requestValued finds the first of descs whose stat keys take request
// values, and where that is said; vtm, when not nil, is the
// value_to_metric descriptor they are under.
func requestValued(descs []descriptorDoc, vtm *place) (at place, key string, ok bool) {
	for i := range descs {
		desc := &descs[i]
		from := vtm
		if desc.valueToMetric && from == nil {
			from = &desc.at
		}
		switch {
		case desc.rule != nil && desc.rule.detailed:
			return desc.at, "detailed_metric", true
		case desc.rule != nil && from != nil:
			return *from, "value_to_metric", true
		}
		if at, key, ok := requestValued(desc.children, from); ok {
			return at, key, true
		}
	}
	return place{}, "", false
}
