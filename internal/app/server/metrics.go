package server

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/metricnames"
	"github.com/sluicehq/sluice/internal/prommetrics"
)

// metrics are the server's Prometheus metrics, on a registry of their own:
// the families it shares with sluiceprom, and its own.
type metrics struct {
	reg *prometheus.Registry
	prommetrics.Limiters
	reloads *prometheus.CounterVec // result
	refused *prometheus.CounterVec // api: connections closed at once, the listener being full
	busy    *prometheus.CounterVec // what: requests answered 503 busy
	swept   prometheus.Counter     // expired rows the store's sweep deleted
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), Limiters: prommetrics.New()}
	m.reloads = prommetrics.CounterVec(metricnames.Family{Name: "sluice_config_reloads_total",
		Help: "Config reloads by result (ok, error).", Labels: []string{"result"}})
	m.refused = prommetrics.CounterVec(metricnames.Family{Name: "sluice_connections_refused_total",
		Help:   "Connections closed as soon as accepted, the API (http, grpc) holding server.limits' max_connections that it could not close.",
		Labels: []string{"api"}})
	m.busy = prommetrics.CounterVec(metricnames.Family{Name: "sluice_busy_total",
		Help:   "HTTP requests answered 503 busy: requests (past max_connections less reserved_for_health in progress) or simulations (past server.simulate.max_concurrent).",
		Labels: []string{"what"}})
	m.swept = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_store_swept_rows_total",
		Help: "Expired rows that the store's background sweep deleted (PostgreSQL and MySQL: the store URL's sweep_interval).",
	})
	m.StoreErrors.WithLabelValues("sweep")
	for _, api := range []string{"http", "grpc"} {
		m.refused.WithLabelValues(api)
	}
	for _, what := range []string{"requests", "simulations"} {
		m.busy.WithLabelValues(what)
	}
	m.reg.MustRegister(m.Collectors()...)
	m.reg.MustRegister(m.reloads, m.refused, m.busy, m.swept,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Series exist from the start at zero, so that alerts on a rate or on
	// absence work before the first event.
	for _, op := range storeOps {
		m.StoreOp(op)
	}
	for _, result := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(result)
	}
	return m
}

// storeOps are the values of the op label of the store metrics.
var storeOps = []string{"update", "delete", "ping"}

// declare makes the series of snap's limiters exist at zero: their
// decisions by outcome, their tokens, their store failures under the
// failure policy snap configures and their circuits, closed: each
// limiter of snap is new, and so is its circuit breaker.
func (m *metrics) declare(snap *snapshot) {
	for _, name := range snap.order {
		for _, outcome := range outcomes {
			m.Decisions.WithLabelValues(name, outcome)
		}
		m.Tokens.WithLabelValues(name)
		m.StoreFailures.WithLabelValues(name, failureLabel(snap.cfg.StoreFailure))
		m.CircuitOpen.WithLabelValues(name).Set(0)
		if snap.limiters[name].shadow {
			m.ShadowRejected.WithLabelValues(name)
		}
	}
}

// outcomes are the values of the decisions' outcome label. invalid is
// the server's alone: the library's limiters refuse a caller's mistake
// before it reaches their observer.
var outcomes = []string{metricnames.Allowed, metricnames.Rejected, metricnames.Error, outcomeInvalid}

// outcomeInvalid is the outcome of a request the caller got wrong
// (answered 400: tokens_above_limit, unsupported),
// counted apart from error so that an alert on errors fires on the
// store's and the server's failures, not on a client's bug.
const outcomeInvalid = "invalid"

// failureLabel names a store failure policy as the config writes it.
func failureLabel(f sluice.StoreFailure) string { return metricnames.FailureLabel(f) }

// failureObserver counts a limiter's store failures, in the metrics and
// in its health window (stats), and keeps its circuit's state.
type failureObserver struct {
	limiter string
	m       *metrics
	stats   *stats
	circuit *atomic.Bool
	now     func() time.Time
	window  time.Duration // the health window
}

// Observe counts a store failure, and sets the limiter's circuit gauge
// and state when its circuit moves.
func (l failureObserver) Observe(e sluice.Event) {
	switch e.Kind {
	case sluice.EventStoreFailure:
		l.m.StoreFailures.WithLabelValues(l.limiter, failureLabel(e.Failure)).Inc()
		l.stats.storeFailure(l.now(), l.window)
	case sluice.EventCircuit:
		l.setCircuit(e.Circuit)
	}
}

// setCircuit sets the limiter's circuit gauge and state.
func (l failureObserver) setCircuit(s sluice.CircuitState) {
	l.circuit.Store(s != sluice.CircuitClosed)
	prommetrics.SetCircuit(l.m.CircuitOpen.WithLabelValues(l.limiter), s)
}

// limiterStore is a limiter's view of the server's store: its keys are
// prefixed with the limiter's name and a colon, so that limiters never
// share a key, and every call is timed.
type limiterStore struct {
	s      driver.Store
	prefix string
	update prommetrics.StoreOp
}

func (s limiterStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	start := time.Now()
	err := s.s.Update(ctx, s.prefix+key, fn)
	s.update.Observe(time.Since(start), err)
	return err
}

// Partition is the server's store's partition of the limiter's key (see
// driver.Partitioner), "" when the store has none, so that the limiter
// keeps a circuit breaker per partition of a Redis Cluster.
func (s limiterStore) Partition(key string) string {
	if p, ok := s.s.(driver.Partitioner); ok {
		return p.Partition(s.prefix + key)
	}
	return ""
}

// limiterDeleter is a limiterStore over a store that can delete.
type limiterDeleter struct {
	limiterStore
	delete prommetrics.StoreOp
}

func (s limiterDeleter) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := s.s.(driver.Deleter).Delete(ctx, s.prefix+key)
	s.delete.Observe(time.Since(start), err)
	return err
}

// newLimiterStore returns the store of the limiter called name: a
// driver.Deleter when s is one, since Limiter.Reset deletes through it.
func newLimiterStore(s driver.Store, name string, m *metrics) driver.Store {
	ls := limiterStore{s: s, prefix: name + ":", update: m.StoreOp("update")}
	if _, ok := s.(driver.Deleter); ok {
		return limiterDeleter{ls, m.StoreOp("delete")}
	}
	return ls
}

// stats are a limiter's counts since it was configured as it is, and the
// ring of recent decisions and store failures that its health is judged
// on. errors are the store's and the server's failures; invalid, the
// caller's mistakes. It is safe for concurrent use.
type stats struct {
	allowed, rejected, errors, invalid, tokens atomic.Int64

	mu    sync.Mutex
	slots [healthSlots]slot // slot i holds the decisions of period index%healthSlots
}

// healthSlots is how many periods the health window is cut into; the
// window slides by one period at a time.
const healthSlots = 10

type slot struct {
	index             int64 // the period, now/period
	allowed, rejected int64
	storeFailures     int64
}

// record counts a decision of the given outcome, taken at now with the
// health window window.
func (s *stats) record(now time.Time, window time.Duration, tokens int64, outcome string) {
	switch outcome {
	case metricnames.Error:
		s.errors.Add(1)
		return
	case outcomeInvalid:
		s.invalid.Add(1)
		return
	case metricnames.Allowed:
		s.allowed.Add(1)
		s.tokens.Add(tokens)
	default:
		s.rejected.Add(1)
	}
	s.mu.Lock()
	if sl := s.slot(now, window); outcome == metricnames.Allowed {
		sl.allowed++
	} else {
		sl.rejected++
	}
	s.mu.Unlock()
}

// storeFailure counts a decision that a store failure decided, at now.
func (s *stats) storeFailure(now time.Time, window time.Duration) {
	s.mu.Lock()
	s.slot(now, window).storeFailures++
	s.mu.Unlock()
}

// slot returns the slot of now, emptied if it held an older period. It
// requires that s.mu is held.
func (s *stats) slot(now time.Time, window time.Duration) *slot {
	idx := slotIndex(now, window)
	sl := &s.slots[idx%healthSlots]
	if sl.index != idx {
		*sl = slot{index: idx}
	}
	return sl
}

// slotIndex is the health period of now.
func slotIndex(now time.Time, window time.Duration) int64 {
	return now.UnixNano() / max(int64(window/healthSlots), 1)
}

// degraded reports whether, over the window before now, at least
// minRequests were decided and more than threshold of them rejected.
func (s *stats) degraded(now time.Time, window time.Duration, threshold float64, minRequests int64) bool {
	w := s.window(now, window)
	total := w.allowed + w.rejected
	return total > 0 && total >= minRequests && float64(w.rejected) > threshold*float64(total)
}

// storeFailing reports whether a store failure decided a decision over
// the window before now.
func (s *stats) storeFailing(now time.Time, window time.Duration) bool {
	return s.window(now, window).storeFailures > 0
}

// window sums the slots of the window before now.
func (s *stats) window(now time.Time, window time.Duration) slot {
	idx := slotIndex(now, window)
	var sum slot
	s.mu.Lock()
	for _, sl := range s.slots {
		if sl.index > idx-healthSlots && sl.index <= idx {
			sum.allowed += sl.allowed
			sum.rejected += sl.rejected
			sum.storeFailures += sl.storeFailures
		}
	}
	s.mu.Unlock()
	return sum
}

// hotKeys finds the keys with the most decisions over about the last
// minute, in bounded memory: each half-minute epoch counts keys with the
// Space-Saving algorithm (Metwally et al.) in at most hotCapacity
// counters, and the top is taken over the current and the previous epoch.
// Counts of keys that were evicted are overestimates, by at most the
// smallest count of the epoch. It is safe for concurrent use.
type hotKeys struct {
	mu    sync.Mutex
	epoch int64
	cur   counters
	prev  map[hotKey]int64
}

type hotKey struct{ limiter, key string }

// HotKey is a key's count of decisions, for the stats endpoint.
type HotKey struct {
	Limiter string `json:"limiter"`
	Key     string `json:"key"`
	Count   int64  `json:"count"`
}

const (
	hotCapacity = 128
	hotEpoch    = 30 * time.Second
	hotTop      = 10
)

func newHotKeys() *hotKeys {
	return &hotKeys{cur: newCounters(), prev: map[hotKey]int64{}}
}

// rotate moves to the epoch of now. It requires that h.mu is held.
func (h *hotKeys) rotate(now time.Time) {
	e := now.UnixNano() / int64(hotEpoch)
	switch {
	case e == h.epoch:
		return
	case e == h.epoch+1:
		h.prev = h.cur.counts()
	default:
		h.prev = map[hotKey]int64{}
	}
	h.cur = newCounters()
	h.epoch = e
}

// add counts a decision on key of limiter at now.
func (h *hotKeys) add(now time.Time, limiter, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rotate(now)
	h.cur.add(hotKey{limiter, key})
}

// counters are Space-Saving's counters as a min-heap on the count, so
// that the smallest, which a new key takes over when all are in use, is
// found at once rather than by a scan of all of them under the lock
// (BenchmarkHotKeys: 3.4µs a decision with the scan, on keys that mostly
// miss).
type counters struct {
	heap []hotCount
	pos  map[hotKey]int // the index of each key's counter in heap
}

type hotCount struct {
	key hotKey
	n   int64
}

func newCounters() counters {
	return counters{heap: make([]hotCount, 0, hotCapacity), pos: make(map[hotKey]int, hotCapacity)}
}

func (c *counters) add(k hotKey) {
	if i, ok := c.pos[k]; ok {
		c.heap[i].n++
		c.down(i)
		return
	}
	if len(c.heap) < hotCapacity {
		c.heap = append(c.heap, hotCount{k, 1})
		c.up(len(c.heap) - 1)
		return
	}
	// Space-Saving: the new key takes over the smallest counter.
	delete(c.pos, c.heap[0].key)
	c.heap[0].key = k
	c.heap[0].n++
	c.down(0)
}

// up and down move the counter at i to its place, shifting the ones on
// the way by one level: each move writes one position to the map.
func (c *counters) up(i int) {
	e := c.heap[i]
	for i > 0 {
		p := (i - 1) / 2
		if c.heap[p].n <= e.n {
			break
		}
		c.heap[i] = c.heap[p]
		c.pos[c.heap[i].key] = i
		i = p
	}
	c.heap[i] = e
	c.pos[e.key] = i
}

func (c *counters) down(i int) {
	e := c.heap[i]
	for {
		least := 2*i + 1
		if least >= len(c.heap) {
			break
		}
		if r := least + 1; r < len(c.heap) && c.heap[r].n < c.heap[least].n {
			least = r
		}
		if c.heap[least].n >= e.n {
			break
		}
		c.heap[i] = c.heap[least]
		c.pos[c.heap[i].key] = i
		i = least
	}
	c.heap[i] = e
	c.pos[e.key] = i
}

// counts returns the counts by key.
func (c *counters) counts() map[hotKey]int64 {
	m := make(map[hotKey]int64, len(c.heap))
	for _, e := range c.heap {
		m[e.key] = e.n
	}
	return m
}

// top returns the hotTop keys with the most decisions, most first.
func (h *hotKeys) top(now time.Time) []HotKey {
	h.mu.Lock()
	h.rotate(now)
	sum := make(map[hotKey]int64, len(h.cur.heap)+len(h.prev))
	for k, c := range h.prev {
		sum[k] += c
	}
	for _, e := range h.cur.heap {
		sum[e.key] += e.n
	}
	h.mu.Unlock()
	out := make([]HotKey, 0, len(sum))
	for k, c := range sum {
		out = append(out, HotKey{Limiter: k.limiter, Key: k.key, Count: c})
	}
	slices.SortFunc(out, func(a, b HotKey) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Limiter, b.Limiter), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(len(out), hotTop)]
}
