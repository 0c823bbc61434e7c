package server

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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
