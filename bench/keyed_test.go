package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
)

// The keyed regimes, configured identically for every implementation, as
// limit tokens in bursts of up to limit, refilled at one per limit/interval:
//
//   - allow never runs dry: a burst of 5e8 per key (more than a benchmark
//     makes calls) refilled at one token per 10s, so that a token-bucket or
//     GCRA state stays alive between two hits on a key of 1M (throttled
//     stores burst×emission interval in a time.Duration: 5e8×10s fits);
//   - reject is 1 per hour: each key's first call (before the timer) is
//     allowed, every timed call is rejected.
//
// All read their default clocks. Equivalence is shown by
// TestKeyedEquivalentConfigs.
type keyedRegime struct {
	name     string
	limit    int64
	interval time.Duration // the time to earn limit tokens
	// keys is how many keys the run decides on, for a floor that sizes a
	// table to them; 0 when the run does not say.
	keys int
}

var keyedRegimes = []keyedRegime{
	{name: "allow", limit: 5e8, interval: 5e8 * 10 * time.Second},
	{name: "reject", limit: 1, interval: time.Hour},
}

// keyedPeer is an implementation of a keyed regime: start returns its
// decision function and a stop. An error (throttled gives up after 10
// compare-and-swap conflicts on one key) is counted, not fatal.
type keyedPeer struct {
	name  string
	start func(tb testing.TB, r keyedRegime) (allow func(key string) (bool, error), stop func())
}

func sluicePeer(name string, policy func(r keyedRegime) sluice.Policy) keyedPeer {
	return keyedPeer{"sluice-" + name, func(tb testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		tb.Helper()
		l, err := sluice.NewLimiter(policy(r))
		if err != nil {
			tb.Fatalf("NewLimiter: %v", err)
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			res, err := l.Allow(ctx, key)
			return res.Allowed, err
		}, func() {}
	}}
}

// keyedPeers are sluice's four fixed-state policies, a compound of two of
// them (a fixed window and GCRA, both of the regime's limit) and the peers:
// x/time/rate per key in a sync.Map (Load, then LoadOrStore on a miss),
// throttled v2's GCRA on its plain-map memstore (no LRU; MaxBurst is the
// burst minus one, as GCRA admits MaxBurst+1 at once), and
// sethvargo/go-limiter's memorystore (default sweep).
var keyedPeers = []keyedPeer{
	sluicePeer("fixed_window", func(r keyedRegime) sluice.Policy { return sluice.FixedWindow(r.limit, r.interval) }),
	sluicePeer("sliding_window", func(r keyedRegime) sluice.Policy { return sluice.SlidingWindow(r.limit, r.interval) }),
	sluicePeer("token_bucket", func(r keyedRegime) sluice.Policy {
		return sluice.TokenBucket(r.limit, 1, r.interval/time.Duration(r.limit))
	}),
	sluicePeer("gcra", func(r keyedRegime) sluice.Policy { return sluice.GCRA(r.limit, r.limit, r.interval) }),
	sluicePeer("compound", func(r keyedRegime) sluice.Policy {
		return sluice.Compound(sluice.FixedWindow(r.limit, r.interval), sluice.GCRA(r.limit, r.limit, r.interval))
	}),
	{"xrate-syncmap", func(_ testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		var m sync.Map
		every := rate.Every(r.interval / time.Duration(r.limit))
		return func(key string) (bool, error) {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(every, int(r.limit)))
			}
			return v.(*rate.Limiter).Allow(), nil
		}, func() {}
	}},
	{"throttled-memstore", func(tb testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		tb.Helper()
		st, err := memstore.New(0)
		if err != nil {
			tb.Fatalf("memstore.New: %v", err)
		}
		quota := throttled.RateQuota{MaxRate: throttledRate(r), MaxBurst: int(r.limit) - 1}
		g, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(st), quota)
		if err != nil {
			tb.Fatalf("NewGCRARateLimiterCtx: %v", err)
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			limited, _, err := g.RateLimitCtx(ctx, key, 1)
			return !limited && err == nil, err
		}, func() {}
	}},
	{"sethvargo", func(tb testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		tb.Helper()
		st, err := memorystore.New(&memorystore.Config{Tokens: uint64(r.limit), Interval: r.interval})
		if err != nil {
			tb.Fatalf("memorystore.New: %v", err)
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
				_, _, _, ok, err := st.Take(ctx, key)
				return ok, err
			}, func() {
				if err := st.Close(ctx); err != nil {
					tb.Errorf("memorystore Close: %v", err)
				}
			}
	}},
}

// keyedFloors are not limiters: they are what any exact keyed limiter that
// reads the clock once and keeps its keys under a lock pays in this
// benchmark's loop, run serially beside the peers to show how much of a
// peer's time a limiter can save at most. floor-clock reads the monotonic
// clock (as time.Since does) and nothing else; floor-clock-map also writes
// the time under a sync.Mutex to the key's entry in a Go map, a store of the
// key and one word of state, with no policy and no result.
var keyedFloors = append([]keyedPeer{
	{"floor-clock", func(testing.TB, keyedRegime) (func(string) (bool, error), func()) {
		start := time.Now()
		var last time.Duration
		return func(string) (bool, error) {
			last = time.Since(start)
			return last >= 0, nil
		}, func() {}
	}},
	{"floor-clock-map", func(testing.TB, keyedRegime) (func(string) (bool, error), func()) {
		start := time.Now()
		var mu sync.Mutex
		m := make(map[string]time.Duration)
		return func(key string) (bool, error) {
			now := time.Since(start)
			mu.Lock()
			m[key] = now
			mu.Unlock()
			return true, nil
		}, func() {}
	}},
}, casFloors...)

// throttledRate is one token per interval/limit.
func throttledRate(r keyedRegime) throttled.Rate {
	return throttled.PerDuration(1, r.interval/time.Duration(r.limit))
}

// BenchmarkKeyed is one decision per call on the next key of a uniformly
// random sequence over n keys, every key having had one decision before
// the timer starts, serial and under RunParallel (each goroutine walks the
// sequence from its own offset), in both regimes. Run with -cpu 2 for the
// parallel figures. allowed/op checks the regime; cpu-ns/op is the
// process's CPU time per decision (see cpuTime). The floors run serially
// only: one lock for every key would measure contention, not a floor.
func BenchmarkKeyed(b *testing.B) {
	for _, kc := range keyCounts {
		b.Run("keys="+kc.name, func(b *testing.B) {
			names := make([]string, kc.n)
			for i := range names {
				names[i] = keyName(i)
			}
			seq := keySeq(kc.n)
			for _, r := range keyedRegimes {
				r.keys = kc.n
				b.Run("regime="+r.name, func(b *testing.B) {
					for i, p := range append(keyedPeers, keyedFloors...) {
						floor := i >= len(keyedPeers)
						b.Run("impl="+p.name, func(b *testing.B) {
							allow, stop := p.start(b, r)
							defer stop()
							for _, k := range names {
								if _, err := allow(k); err != nil {
									b.Fatalf("allow(%q): %v", k, err)
								}
							}
							b.Run("mode=serial", func(b *testing.B) {
								b.ReportAllocs()
								cpu := cpuTime(b)
								allowed, errs, i := 0, 0, 0
								for b.Loop() {
									ok, err := allow(seq.at(i))
									if ok {
										allowed++
									}
									if err != nil {
										errs++
									}
									i++
								}
								b.ReportMetric(float64(cpuTime(b)-cpu)/float64(i), "cpu-ns/op")
								b.ReportMetric(float64(allowed)/float64(i), "allowed/op")
								b.ReportMetric(float64(errs)/float64(i), "errors/op")
							})
							if floor {
								return
							}
							b.Run("mode=parallel", func(b *testing.B) {
								b.ReportAllocs()
								var start, allowed, errs atomic.Int64
								cpu := cpuTime(b)
								b.RunParallel(func(pb *testing.PB) {
									i := int(start.Add(seqLen / 8))
									var n, e int64
									for pb.Next() {
										ok, err := allow(seq.at(i))
										if ok {
											n++
										}
										if err != nil {
											e++
										}
										i++
									}
									allowed.Add(n)
									errs.Add(e)
								})
								b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
								b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
								b.ReportMetric(float64(errs.Load())/float64(b.N), "errors/op")
							})
						})
					}
				})
			}
		})
	}
}

// cpuTime is the CPU time the process has used, user and system, in ns.
// Per decision (cpu-ns/op) it is what a decision costs the machine,
// garbage collection included, and it moves less than sec/op when other
// processes load a shared machine: time spent waiting for a CPU is not
// in it.
func cpuTime(b *testing.B) int64 {
	d, ok := processCPU()
	if !ok {
		b.Fatal("cannot read the process's CPU time on this system")
	}
	return int64(d)
}

// BenchmarkKeyedMemory reports B/key, the live heap per idle key after
// 1M keys (12 bytes each) got one decision each in the reject regime, whose
// one-per-hour refill keeps every state alive: everything the limiter
// holds for a key, its copy of the key included.
func BenchmarkKeyedMemory(b *testing.B) {
	r := keyedRegimes[1]
	for _, p := range keyedPeers {
		b.Run("impl="+p.name, func(b *testing.B) {
			b.ReportAllocs()
			var perKey float64
			for range b.N {
				perKey = heapPerKey(b, p, r, memKeys)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

func heapPerKey(b *testing.B, p keyedPeer, r keyedRegime, n int) float64 {
	b.Helper()
	b.StopTimer()
	allow, stop := p.start(b, r)
	defer stop()
	before := liveHeap()
	b.StartTimer()
	for i := range n {
		if _, err := allow(keyName(i)); err != nil {
			b.Fatalf("allow(%q): %v", keyName(i), err)
		}
	}
	b.StopTimer()
	after := liveHeap()
	if ok, _ := allow(keyName(0)); ok {
		b.Fatalf("%s: key 0 allowed twice in an hour", p.name)
	}
	b.StartTimer()
	return (float64(after) - float64(before)) / float64(n)
}

// TestKeyedEquivalentConfigs shows that the implementations admit the
// same calls in each regime: on fresh keys, called back to back, the
// allow regime admits every call and the reject regime the first call of
// each key only. (The peers read their own clocks, so the timeline is the
// real one; both regimes are far from any refill within the test.)
func TestKeyedEquivalentConfigs(t *testing.T) {
	const keys, calls = 50, 400
	for _, r := range keyedRegimes {
		t.Run(r.name, func(t *testing.T) {
			want := keys * calls
			if r.limit == 1 {
				want = keys
			}
			for _, p := range append(keyedPeers, casFloors...) {
				allow, stop := p.start(t, r)
				got := 0
				for k := range keys {
					for range calls {
						ok, err := allow("key:" + strconv.Itoa(k))
						if err != nil {
							t.Fatalf("%s: %v", p.name, err)
						}
						if ok {
							got++
						}
					}
				}
				stop()
				if got != want {
					t.Errorf("%s admitted %d of %d calls on %d keys, want %d", p.name, got, keys*calls, keys, want)
				}
			}
		})
	}
}
