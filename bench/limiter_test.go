package bench

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// Keyed limiters: one limiter holding a state per key, as an HTTP middleware
// keeps one per user or IP address. Every implementation enforces the same
// limit, keyLimit per keyInterval with a burst of keyLimit, and reads its
// default clock (time.Now, or sluice's MonotonicClock).
const (
	keyLimit    = 100
	keyInterval = time.Minute

	// keyWidth is the length of every key: "user:" and 7 digits.
	keyWidth = len("user:") + 7
	// seqLen is the length of the pre-generated random key sequence, a
	// power of two; a run longer than seqLen decisions wraps around.
	seqLen = 1 << 22
	// memKeys is the number of keys BenchmarkLimiterMemory inserts.
	memKeys = 1_000_000
)

// appendKey appends key i of the key space, "user:" and i in 7 digits.
func appendKey(dst []byte, i int) []byte {
	dst = append(dst, "user:"...)
	var digits [7]byte
	for j := len(digits) - 1; j >= 0; j-- {
		digits[j] = byte('0' + i%10)
		i /= 10
	}
	return append(dst, digits[:]...)
}

// keyName returns key i in a string of its own (one 16-byte allocation).
func keyName(i int) string {
	var buf [keyWidth]byte
	return string(appendKey(buf[:0], i))
}

// keySeq returns seqLen keys drawn uniformly from the key space [0, n) by a
// PRNG with a fixed seed, so every implementation gets the same sequence:
// key i of the sequence is seq.at(i). The keys are laid out in sequence
// order in one string, so reading the next key touches memory the hardware
// has prefetched, the garbage collector has no pointer to scan in it, and no
// key shares its bytes with the copy the limiter stored at insertion (a
// request's key is a fresh string too), so a map compares bytes rather than
// pointers.
func keySeq(n int) keySequence {
	rng := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	sb.Grow(seqLen * keyWidth)
	var buf [keyWidth]byte
	for range seqLen {
		sb.Write(appendKey(buf[:0], rng.IntN(n)))
	}
	return keySequence(sb.String())
}

// keySequence is seqLen keys of keyWidth bytes, back to back.
type keySequence string

// at returns key i mod seqLen of the sequence, without allocating.
func (s keySequence) at(i int) string {
	j := (i & (seqLen - 1)) * keyWidth
	return string(s[j : j+keyWidth])
}

// keyed is one implementation under test. start returns a fresh limiter as
// a function deciding one request for a key, and a function that releases
// it (stops its goroutines). With frozen true, a sluice limiter reads a
// clock stopped at t0, so that no key's state expires; the peers always
// read their default clocks (their states outlive a benchmark anyway).
type keyed struct {
	name  string
	start func(tb testing.TB, frozen bool) (allow func(key string) (bool, error), stop func())
}

// sluiceKeyed is a sluice Limiter applying p, at its default clock
// (MonotonicClock) unless frozen.
func sluiceKeyed(name string, p sluice.Policy) keyed {
	return keyed{"sluice-" + name, func(tb testing.TB, frozen bool) (func(string) (bool, error), func()) {
		tb.Helper()
		var opts []sluice.Option
		if frozen {
			opts = append(opts, sluice.WithClock(sluicetest.NewFakeClock(t0.UnixNano())))
		}
		l, err := sluice.NewLimiter(p, opts...)
		if err != nil {
			tb.Fatalf("NewLimiter(%v): %v", p, err)
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			r, err := l.Allow(ctx, key)
			return r.Allowed, err
		}, func() {}
	}}
}

// keyedImpls are the implementations, sluice's policies first. Each
// enforces keyLimit per keyInterval on every key:
//   - sluice: every policy with limit 100 and interval (or refill) 1m; the
//     compound adds 1000 per hour to the fixed window;
//   - x/time/rate: a rate.Limiter of rate.Every(600ms) and burst 100 per
//     key, in a sync.Map (Load, then LoadOrStore on a miss, so an existing
//     key allocates nothing);
//   - throttled: GCRA with PerMin(100) and MaxBurst 99 (it admits MaxBurst+1
//     at once) on memstore.New(0), a plain map without LRU;
//   - sethvargo/go-limiter: memorystore with Tokens 100 per Interval 1m and
//     its default sweeper (every 6h);
//   - ulule/limiter: memory.NewStore() (prefix "limiter", cleanup every
//     30s) with Rate{Period: 1m, Limit: 100}.
var keyedImpls = []keyed{
	sluiceKeyed("fixed_window", sluice.FixedWindow(keyLimit, keyInterval)),
	sluiceKeyed("sliding_window", sluice.SlidingWindow(keyLimit, keyInterval)),
	sluiceKeyed("sliding_log", sluice.SlidingLog(keyLimit, keyInterval)),
	sluiceKeyed("token_bucket", sluice.TokenBucket(keyLimit, keyLimit, keyInterval)),
	sluiceKeyed("leaky_bucket", sluice.LeakyBucket(keyLimit, keyLimit, keyInterval)),
	sluiceKeyed("gcra", sluice.GCRA(keyLimit, keyLimit, keyInterval)),
	sluiceKeyed("compound", sluice.Compound(
		sluice.FixedWindow(keyLimit, keyInterval),
		sluice.FixedWindow(10*keyLimit, time.Hour))),
	{"xrate-syncmap", func(testing.TB, bool) (func(string) (bool, error), func()) {
		var m sync.Map
		every := rate.Every(keyInterval / keyLimit)
		return func(key string) (bool, error) {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(every, keyLimit))
			}
			return v.(*rate.Limiter).Allow(), nil
		}, func() {}
	}},
	{"throttled-memstore", func(tb testing.TB, _ bool) (func(string) (bool, error), func()) {
		tb.Helper()
		st, err := memstore.New(0)
		if err != nil {
			tb.Fatalf("memstore.New: %v", err)
		}
		quota := throttled.RateQuota{MaxRate: throttled.PerMin(keyLimit), MaxBurst: keyLimit - 1}
		g, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(st), quota)
		if err != nil {
			tb.Fatalf("NewGCRARateLimiterCtx: %v", err)
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			limited, _, err := g.RateLimitCtx(ctx, key, 1)
			return !limited, err
		}, func() {}
	}},
	{"sethvargo", func(tb testing.TB, _ bool) (func(string) (bool, error), func()) {
		tb.Helper()
		st, err := memorystore.New(&memorystore.Config{Tokens: keyLimit, Interval: keyInterval})
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
	{"ulule", func(testing.TB, bool) (func(string) (bool, error), func()) {
		l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: keyInterval, Limit: keyLimit})
		ctx := context.Background()
		return func(key string) (bool, error) {
			c, err := l.Get(ctx, key)
			return !c.Reached, err
		}, func() {} // its cleaner stops when the store is collected
	}},
}

var keyCounts = []struct {
	name string
	n    int
}{
	{"1", 1},
	{"1k", 1_000},
	{"1M", 1_000_000},
}

// BenchmarkLimiterKeys is one decision per iteration on the next key of a
// uniformly random sequence over n keys, at each implementation's default
// clock. Before the timer starts, every key of the space gets one decision,
// so the loop decides on existing keys: allocs/op is the cost of a
// decision on an existing key, not of an insertion (but for sluice's GCRA
// and leaky bucket, whose state at 100 per minute is worth nothing 600ms
// after a key's last hit and is dropped, so that on 1M keys part of their
// decisions recreate a key). With 100 per minute per
// key, the decisions on 1 key and on 1k keys are mostly rejections (each key
// gets thousands of calls per second); on 1M keys nearly all are allowed.
// allowed/op reports the fraction.
//
// The loop is b.Loop, not b.N: the setup (1M insertions) then runs once per
// benchmark rather than once per calibration round.
func BenchmarkLimiterKeys(b *testing.B) {
	for _, kc := range keyCounts {
		b.Run("keys="+kc.name, func(b *testing.B) {
			names := make([]string, kc.n)
			for i := range names {
				names[i] = keyName(i)
			}
			seq := keySeq(kc.n)
			for _, im := range keyedImpls {
				b.Run("impl="+im.name, func(b *testing.B) {
					allow, stop := im.start(b, false)
					defer stop()
					populate(b, allow, names)
					b.ReportAllocs()
					allowed, i := 0, 0
					for b.Loop() {
						ok, err := allow(seq.at(i))
						if err != nil {
							b.Fatalf("allow(%q): %v", seq.at(i), err)
						}
						if ok {
							allowed++
						}
						i++
					}
					b.ReportMetric(float64(allowed)/float64(i), "allowed/op")
				})
			}
		})
	}
}

// populate gives every key of names one decision. It is a function of its
// own so that profiles can leave it out (pprof -ignore populate).
func populate(b *testing.B, allow func(string) (bool, error), names []string) {
	b.Helper()
	for _, k := range names {
		if _, err := allow(k); err != nil {
			b.Fatalf("allow(%q): %v", k, err)
		}
	}
}

// liveHeap returns the bytes of live heap objects, after two collections:
// the first may leave objects that finalizers or the sweep release, which
// the second then frees.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// bytesPerKey starts a limiter of im (a sluice one on a frozen clock if
// frozen), gives each of n keys hits decisions, and returns the live heap the
// limiter grew by, per key. Each key is a fresh string, keyName(i), that
// nothing but the limiter keeps: what is counted is everything the limiter
// holds for a key, its copy of the key (a 16-byte allocation for the
// 12-byte key, or whatever copy the implementation makes instead) included.
func bytesPerKey(b *testing.B, im keyed, frozen bool, n, hits int) float64 {
	b.Helper()
	b.StopTimer()
	allow, stop := im.start(b, frozen)
	defer stop()
	before := liveHeap()
	b.StartTimer()
	for i := range n {
		key := keyName(i)
		for range hits {
			if _, err := allow(key); err != nil {
				b.Fatalf("allow(%q): %v", key, err)
			}
		}
	}
	b.StopTimer()
	after := liveHeap()
	runtime.KeepAlive(allow) // the limiter lives until after the measurement
	b.StartTimer()
	return (float64(after) - float64(before)) / float64(n)
}

// BenchmarkLimiterMemory reports B/key, the live heap bytes per idle key
// after memKeys distinct keys got one decision each. One iteration fills a
// fresh limiter with memKeys keys, so sec/op is the time of memKeys first
// decisions (the collections around them are not timed), and B/op and
// allocs/op are per memKeys insertions.
//
// sluice's limiters read a clock stopped at t0 here, so that every key is
// still held at the end: at 100 per minute a GCRA or leaky-bucket state is
// worth nothing 600ms after the key's last hit, and sluice drops such
// states while it inserts others, which would make B/key a figure of the
// fill's duration. The peers hold every key for at least the minute.
func BenchmarkLimiterMemory(b *testing.B) {
	for _, im := range keyedImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.ReportAllocs()
			var perKey float64
			for range b.N {
				perKey = bytesPerKey(b, im, true, memKeys, 1)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// BenchmarkLimiterLogBound reports B/key for sluice's sliding log after
// each of 10k keys got hits decisions within one interval, so the log's
// memory can be checked against its limit (100): the hits beyond the limit
// are rejected and not logged. It reads the real clock (MonotonicClock):
// on a frozen clock the log merges hits at the same nanosecond into one
// entry.
func BenchmarkLimiterLogBound(b *testing.B) {
	im := sluiceKeyed("sliding_log", sluice.SlidingLog(keyLimit, keyInterval))
	for _, hits := range []int{1, keyLimit, 10 * keyLimit} {
		b.Run("hits="+strconv.Itoa(hits), func(b *testing.B) {
			b.ReportAllocs()
			var perKey float64
			for range b.N {
				perKey = bytesPerKey(b, im, false, 10_000, hits)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
