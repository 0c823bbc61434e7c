package server

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// BenchmarkHotKeys counts decisions on 1000 keys from every core, as the
// load test in docs/benchmarks.md makes them: most keys are not among the
// 128 counted, so each such decision replaces the smallest counter.
func BenchmarkHotKeys(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	h := newHotKeys()
	now := time.Unix(1e9, 0)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			h.add(now, "api", keys[i%len(keys)])
			i += 31
		}
	})
}

// TestCountersSpaceSaving feeds a skewed stream of 20,000 decisions on 2,000
// keys and checks Space-Saving's guarantees: every estimate is at least
// the key's true count and overestimates it by at most the smallest
// counter, every key seen more than n/capacity times is counted, and the
// heap and its index agree.
func TestCountersSpaceSaving(t *testing.T) {
	c := newCounters()
	truth := map[hotKey]int64{}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 20_000
	for range n {
		// Key i comes with weight about 1/(i+1): a few heavy keys and a
		// long tail.
		i := int(math.Exp(rng.Float64()*math.Log(2000))) - 1
		k := hotKey{"l", "k" + strconv.Itoa(i)}
		truth[k]++
		c.add(k)
	}
	if len(c.heap) != hotCapacity || len(c.pos) != hotCapacity {
		t.Fatalf("%d counters, %d positions; want %d of each", len(c.heap), len(c.pos), hotCapacity)
	}
	minCount := c.heap[0].n
	for i, e := range c.heap {
		if c.pos[e.key] != i {
			t.Errorf("pos[%v] = %d, want %d", e.key, c.pos[e.key], i)
		}
		if i > 0 && c.heap[(i-1)/2].n > e.n {
			t.Errorf("heap order broken at %d: parent %d > %d", i, c.heap[(i-1)/2].n, e.n)
		}
		if e.n < truth[e.key] || e.n > truth[e.key]+minCount {
			t.Errorf("%v counted %d, true count %d, smallest counter %d", e.key, e.n, truth[e.key], minCount)
		}
	}
	for k, v := range truth {
		if _, ok := c.pos[k]; v > n/hotCapacity && !ok {
			t.Errorf("%v seen %d times (more than %d) is not counted", k, v, n/hotCapacity)
		}
	}
}

// BenchmarkMemoryPerKey reports the heap the in-memory store of sluice
// serve holds per key, by policy: 100,000 keys of 16 bytes, each given one
// token, or a sliding log all of its limit (the limiter's name and ":"
// are added to each key), the store's
// map, entries and records included. docs/deploy.md quotes it, to size
// server.limits.max_keys. Run it once:
//
//	go test -run '^$' -bench MemoryPerKey -benchtime 1x ./internal/app/server
func BenchmarkMemoryPerKey(b *testing.B) {
	const keys = 100_000
	// The rates are slow enough that no key expires while the benchmark
	// runs; a sliding log is measured full, its largest.
	for _, tt := range []struct {
		name, policy string
		tokens       int
	}{
		{"fixed_window", "{policy: fixed_window, limit: 100, interval: 1 minute}", 1},
		{"sliding_window", "{policy: sliding_window, limit: 100, interval: 1 minute}", 1},
		{"sliding_log_5_full", "{policy: sliding_log, limit: 5, interval: 15 minutes}", 5},
		{"sliding_log_20_full", "{policy: sliding_log, limit: 20, interval: 1 minute}", 20},
		{"token_bucket", "{policy: token_bucket, limit: 50, rate: {interval: 1 hour, amount: 10}}", 1},
		{"leaky_bucket", "{policy: leaky_bucket, limit: 50, rate: {interval: 1 hour, amount: 10}}", 1},
		{"bucket_2_limits", "{policy: bucket, limits: [{capacity: 20, refill: {greedy: 10, per: 1h}}, {capacity: 1000, refill: {greedy: 1000, per: 1h}}]}", 1},
		{"gcra", "{policy: gcra, limit: 100, rate: {interval: 1 hour, amount: 100}}", 1},
		{"compound_2_windows", "{policy: compound, limiters: [{policy: fixed_window, limit: 100, interval: 1 minute}, {policy: fixed_window, limit: 1000, interval: 1 hour}]}", 1},
	} {
		b.Run(tt.name, func(b *testing.B) {
			ctx := context.Background()
			var perKey float64
			for b.Loop() {
				cfg, err := LoadConfig([]byte("limiters:\n  l: " + tt.policy + "\n"))
				if err != nil {
					b.Fatal(err)
				}
				const start = int64(1e18)
				clock := sluicetest.NewFakeClock(start)
				s, err := New(ctx, cfg, withClock(clock, func() time.Time { return time.Unix(0, start) }))
				if err != nil {
					b.Fatal(err)
				}
				l := s.cur.Load().limiters["l"].l
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range keys {
					key := string(strconv.AppendInt([]byte("user:")[:5], 10_000_000_000+int64(i), 10)) // 16 bytes
					for j := range tt.tokens {                                                         // a millisecond apart: a log entry each
						clock.Set(start + int64(j)*int64(time.Millisecond))
						if r, err := l.Allow(ctx, key); err != nil || !r.Allowed {
							b.Fatalf("Allow(%s) = %+v, %v", key, r, err)
						}
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / keys
				if n := s.store.Store.(*memstore.Store).Len(); n != keys {
					b.Fatalf("the store holds %d keys, want %d", n, keys)
				}
				runtime.KeepAlive(s)
				s.Close()
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
