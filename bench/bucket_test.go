package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/juju/ratelimit"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// The two regimes, configured identically for every implementation.
//
// allowed: 1e9 tokens per second (one per nanosecond, the highest rate sluice
// accepts) and a burst of 1000. With the time supplied, the simulated clock
// advances allowedStep per call, which refills 2 tokens, so nearly every call
// is allowed; with a real clock a call takes far longer than 1ns, so the same
// holds.
//
// rejected: 1 token per second, a burst of 1, emptied before the timed loop.
// With the time supplied the clock advances rejectedStep per call, so one call
// in a million is allowed; with a real clock about one per second.
//
// Each benchmark reports allowed/op, the fraction of calls allowed, so the
// regime can be checked in the results.
const (
	allowedRate  = 1e9 // tokens per second
	allowedBurst = 1000
	allowedStep  = 2 * time.Nanosecond

	rejectedBurst = 1
	rejectedStep  = time.Microsecond
)

// t0 is the start of every supplied timeline. It carries no monotonic
// reading, so time.Time arithmetic on it is plain wall-clock arithmetic.
var t0 = time.Unix(1_700_000_000, 0)

// fakeTime is a settable time source shared by the peers that read the time
// through a callback (juju/ratelimit's Clock, throttled's memstore).
type fakeTime struct{ now time.Time }

func (f *fakeTime) Now() time.Time        { return f.now }
func (f *fakeTime) Sleep(d time.Duration) { f.now = f.now.Add(d) }

var _ ratelimit.Clock = (*fakeTime)(nil)

// sluiceConfig returns the sluice configuration for a regime, with one or
// three bandwidths. The first bandwidth is the limit shared with the peers;
// the other two have the same rate and larger capacities, so they never
// decide alone but every call still refills and checks them.
func sluiceConfig(b testing.TB, rejected bool, bandwidths int) sluice.BucketConfig {
	b.Helper()
	var bws []sluice.Bandwidth
	switch {
	case !rejected:
		bws = []sluice.Bandwidth{
			sluice.Capacity(allowedBurst, sluice.Greedy(allowedRate, time.Second)),
			sluice.Simple(1e9, time.Second),
			sluice.Simple(60e9, time.Minute),
		}
	default:
		bws = []sluice.Bandwidth{
			sluice.Capacity(rejectedBurst, sluice.Greedy(1, time.Second)).WithInitialTokens(0),
			sluice.Simple(60, time.Minute),
			sluice.Simple(3600, time.Hour),
		}
	}
	return sluice.BucketConfig{Bandwidths: bws[:bandwidths]}
}

func newSluice(b testing.TB, rejected bool, bandwidths int, opts ...sluice.Option) *sluice.Bucket {
	b.Helper()
	bk, err := sluice.NewBucket(sluiceConfig(b, rejected, bandwidths), opts...)
	if err != nil {
		b.Fatalf("NewBucket: %v", err)
	}
	return bk
}

// sluiceAllow is the boolean decision of x/time/rate's Allow on a sluice
// bucket: TryConsume(1), which computes no Result and allocates nothing.
func sluiceAllow(bk *sluice.Bucket) func() bool {
	return func() bool { ok, _ := bk.TryConsume(1); return ok }
}

func newXRate(rejected bool) *rate.Limiter {
	if rejected {
		return rate.NewLimiter(1, rejectedBurst)
	}
	return rate.NewLimiter(allowedRate, allowedBurst)
}

// newJuju returns a juju bucket; clock nil means the real clock.
func newJuju(rejected bool, clock ratelimit.Clock) *ratelimit.Bucket {
	if rejected {
		return ratelimit.NewBucketWithClock(time.Second, rejectedBurst, clock)
	}
	return ratelimit.NewBucketWithClock(time.Second/allowedRate, allowedBurst, clock)
}

// newThrottled returns a GCRA limiter on a plain-map memstore (maxKeys 0, no
// LRU); now nil means time.Now. MaxBurst is the burst minus one: GCRA allows
// MaxBurst+1 calls at one instant.
func newThrottled(b testing.TB, rejected bool, now func() time.Time) *throttled.GCRARateLimiterCtx {
	b.Helper()
	st, err := memstore.New(0)
	if err != nil {
		b.Fatalf("memstore.New: %v", err)
	}
	if now != nil {
		st.SetTimeNow(now)
	}
	quota := throttled.RateQuota{MaxRate: throttled.PerSec(allowedRate), MaxBurst: allowedBurst - 1}
	if rejected {
		quota = throttled.RateQuota{MaxRate: throttled.PerSec(1), MaxBurst: rejectedBurst - 1}
	}
	g, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(st), quota)
	if err != nil {
		b.Fatalf("NewGCRARateLimiterCtx: %v", err)
	}
	return g
}

const key = "k"

func throttledAllow(b testing.TB, g *throttled.GCRARateLimiterCtx) bool {
	limited, _, err := g.RateLimitCtx(context.Background(), key, 1)
	if err != nil {
		b.Fatalf("RateLimitCtx: %v", err)
	}
	return !limited
}

type regime struct {
	name     string
	rejected bool
	step     time.Duration
}

var regimes = []regime{
	{"allowed", false, allowedStep},
	{"rejected", true, rejectedStep},
}

// report records the fraction of calls allowed.
func report(b *testing.B, allowed int) {
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}

// BenchmarkAllowAt is one decision at a time the caller supplies. The loop
// only advances a time.Time by a fixed step; nothing reads the system clock.
// Buckets that start empty are drained at t0, before the timer starts.
func BenchmarkAllowAt(b *testing.B) {
	for _, r := range regimes {
		b.Run("regime="+r.name, func(b *testing.B) {
			b.Run("impl=xrate", func(b *testing.B) {
				lim := newXRate(r.rejected)
				if r.rejected {
					lim.AllowN(t0, rejectedBurst)
				}
				b.ReportAllocs()
				allowed := 0
				t := t0
				b.ResetTimer()
				for range b.N {
					t = t.Add(r.step)
					if lim.AllowN(t, 1) {
						allowed++
					}
				}
				report(b, allowed)
			})
			for _, n := range []int{1, 3} {
				name := "impl=sluice"
				if n == 3 {
					name = "impl=sluice3bw"
				}
				b.Run(name, func(b *testing.B) {
					bk := newSluice(b, r.rejected, n, sluice.WithClock(sluicetest.NewFakeClock(t0.UnixNano())))
					b.ReportAllocs()
					allowed := 0
					t := t0
					b.ResetTimer()
					for range b.N {
						t = t.Add(r.step)
						if ok, _ := bk.TryConsumeAt(t, 1); ok {
							allowed++
						}
					}
					report(b, allowed)
				})
			}
			b.Run("impl=juju", func(b *testing.B) {
				clk := &fakeTime{now: t0}
				tb := newJuju(r.rejected, clk)
				if r.rejected {
					tb.TakeAvailable(rejectedBurst)
				}
				b.ReportAllocs()
				allowed := 0
				b.ResetTimer()
				for range b.N {
					clk.now = clk.now.Add(r.step)
					if tb.TakeAvailable(1) == 1 {
						allowed++
					}
				}
				report(b, allowed)
			})
			b.Run("impl=throttled", func(b *testing.B) {
				clk := &fakeTime{now: t0}
				g := newThrottled(b, r.rejected, clk.Now)
				if r.rejected {
					throttledAllow(b, g)
				}
				b.ReportAllocs()
				allowed := 0
				b.ResetTimer()
				for range b.N {
					clk.now = clk.now.Add(r.step)
					if throttledAllow(b, g) {
						allowed++
					}
				}
				report(b, allowed)
			})
		})
	}
}

// BenchmarkAllow is one decision at the time each implementation's default
// clock reads: x/time/rate and juju call time.Now, throttled's memstore calls
// time.Now, sluice reads its MonotonicClock (time.Since a fixed base).
func BenchmarkAllow(b *testing.B) {
	for _, r := range regimes {
		b.Run("regime="+r.name, func(b *testing.B) {
			b.Run("impl=xrate", func(b *testing.B) {
				lim := newXRate(r.rejected)
				if r.rejected {
					lim.AllowN(time.Now(), rejectedBurst)
				}
				b.ReportAllocs()
				allowed := 0
				b.ResetTimer()
				for range b.N {
					if lim.Allow() {
						allowed++
					}
				}
				report(b, allowed)
			})
			for _, n := range []int{1, 3} {
				name := "impl=sluice"
				if n == 3 {
					name = "impl=sluice3bw"
				}
				b.Run(name, func(b *testing.B) {
					bk := newSluice(b, r.rejected, n)
					b.ReportAllocs()
					allowed := 0
					b.ResetTimer()
					for range b.N {
						if ok, _ := bk.TryConsume(1); ok {
							allowed++
						}
					}
					report(b, allowed)
				})
			}
			b.Run("impl=juju", func(b *testing.B) {
				tb := newJuju(r.rejected, nil)
				if r.rejected {
					tb.TakeAvailable(rejectedBurst)
				}
				b.ReportAllocs()
				allowed := 0
				b.ResetTimer()
				for range b.N {
					if tb.TakeAvailable(1) == 1 {
						allowed++
					}
				}
				report(b, allowed)
			})
			b.Run("impl=throttled", func(b *testing.B) {
				g := newThrottled(b, r.rejected, nil)
				if r.rejected {
					throttledAllow(b, g)
				}
				b.ReportAllocs()
				allowed := 0
				b.ResetTimer()
				for range b.N {
					if throttledAllow(b, g) {
						allowed++
					}
				}
				report(b, allowed)
			})
		})
	}
}

// runParallel calls allow from GOMAXPROCS goroutines on one shared limiter
// and reports the fraction allowed.
func runParallel(b *testing.B, allow func() bool) {
	b.ReportAllocs()
	var allowed atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := int64(0)
		for pb.Next() {
			if allow() {
				n++
			}
		}
		allowed.Add(n)
	})
	report(b, int(allowed.Load()))
}

// BenchmarkAllowParallel is BenchmarkAllow in the allowed regime, from every
// P at once on one shared limiter.
func BenchmarkAllowParallel(b *testing.B) {
	b.Run("regime=allowed", func(b *testing.B) {
		b.Run("impl=xrate", func(b *testing.B) {
			runParallel(b, newXRate(false).Allow)
		})
		b.Run("impl=sluice", func(b *testing.B) {
			runParallel(b, sluiceAllow(newSluice(b, false, 1)))
		})
		b.Run("impl=sluice3bw", func(b *testing.B) {
			runParallel(b, sluiceAllow(newSluice(b, false, 3)))
		})
		b.Run("impl=juju", func(b *testing.B) {
			tb := newJuju(false, nil)
			runParallel(b, func() bool { return tb.TakeAvailable(1) == 1 })
		})
		b.Run("impl=throttled", func(b *testing.B) {
			g := newThrottled(b, false, nil)
			// b.Fatal must not be called from RunParallel's goroutines, so
			// an error (CAS attempts exhausted) counts as not allowed and
			// is reported as errors/op.
			var errs atomic.Int64
			runParallel(b, func() bool {
				limited, _, err := g.RateLimitCtx(context.Background(), key, 1)
				if err != nil {
					errs.Add(1)
					return false
				}
				return !limited
			})
			b.ReportMetric(float64(errs.Load())/float64(b.N), "errors/op")
		})
	})
}

var sinkTime time.Time
var sinkDur time.Duration
var sinkInt int64

// BenchmarkClock is the cost of reading the time, which the default-clock
// benchmarks pay on top of the decision, and of the time step the AllowAt
// loops take.
func BenchmarkClock(b *testing.B) {
	b.Run("src=time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sinkTime = time.Now()
		}
	})
	b.Run("src=time.Since", func(b *testing.B) {
		base := time.Now()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			sinkDur = time.Since(base)
		}
	})
	// The step every AllowAt loop takes; its cost is in each AllowAt figure.
	b.Run("src=Time.Add", func(b *testing.B) {
		b.ReportAllocs()
		t := t0
		for range b.N {
			t = t.Add(allowedStep)
		}
		sinkTime = t
	})
	b.Run("src=sluice.MonotonicClock", func(b *testing.B) {
		c := sluice.MonotonicClock()
		b.ReportAllocs()
		for range b.N {
			sinkInt = c.Now()
		}
	})
}

// BenchmarkWait is x/time/rate's Wait, and sluice's Bucket.Wait and an
// in-memory Limiter's Wait on one key, with the token there every time (the
// allowed regime's limits): the cost of a Wait that does not sleep, which
// is most of them for a client pacing itself below its limit.
func BenchmarkWait(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, wait func() error) {
		b.ReportAllocs()
		for b.Loop() {
			if err := wait(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("impl=xrate", func(b *testing.B) {
		lim := newXRate(false)
		run(b, func() error { return lim.Wait(ctx) })
	})
	b.Run("impl=sluice", func(b *testing.B) {
		bk := newSluice(b, false, 1)
		run(b, func() error { return bk.Wait(ctx, time.Second) })
	})
	b.Run("impl=sluice-limiter", func(b *testing.B) {
		// One token a nanosecond, the allowed regime's 1e9 a second.
		l, err := sluice.NewLimiter(sluice.TokenBucket(allowedBurst, 1, time.Second/allowedRate))
		if err != nil {
			b.Fatal(err)
		}
		run(b, func() error { return l.Wait(ctx, "client", time.Second) })
	})
}
