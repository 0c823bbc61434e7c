package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	sethhttp "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// middlewarePeer is an HTTP middleware limiting by client IP in memory,
// with its default headers, in a keyed regime.
type middlewarePeer struct {
	name string
	wrap func(tb testing.TB, r keyedRegime, next http.Handler) http.Handler
}

func sluiceMiddleware(name string, policy func(r keyedRegime) sluice.Policy) middlewarePeer {
	return middlewarePeer{"sluice-" + name, func(tb testing.TB, r keyedRegime, next http.Handler) http.Handler {
		tb.Helper()
		l, err := sluice.NewLimiter(policy(r))
		if err != nil {
			tb.Fatalf("NewLimiter: %v", err)
		}
		ip, err := httplimit.ClientIP()
		if err != nil {
			tb.Fatalf("ClientIP: %v", err)
		}
		m, err := httplimit.New([]httplimit.Limit{{Name: "ip", Limiter: l, Key: ip}})
		if err != nil {
			tb.Fatalf("httplimit.New: %v", err)
		}
		return m.Handler(next)
	}}
}

// middlewarePeers are sluice's httplimit (IETF RateLimit and
// RateLimit-Policy headers, its default) on a fixed window and on GCRA,
// sethvargo/go-limiter's httplimit on its memorystore (X-RateLimit-*
// headers, the reset as an HTTP date), ulule/limiter's stdlib middleware
// on its memory store (a fixed window; X-RateLimit-* headers), and
// throttled's HTTPRateLimiterCtx on GCRA and its map store (X-RateLimit-*
// headers), each keyed by the client's address as it parses RemoteAddr.
var middlewarePeers = []middlewarePeer{
	sluiceMiddleware("fixed_window", func(r keyedRegime) sluice.Policy { return sluice.FixedWindow(r.limit, r.interval) }),
	sluiceMiddleware("gcra", func(r keyedRegime) sluice.Policy { return sluice.GCRA(r.limit, r.limit, r.interval) }),
	{"sethvargo", func(tb testing.TB, r keyedRegime, next http.Handler) http.Handler {
		tb.Helper()
		st, err := memorystore.New(&memorystore.Config{Tokens: uint64(r.limit), Interval: r.interval})
		if err != nil {
			tb.Fatalf("memorystore.New: %v", err)
		}
		tb.Cleanup(func() { _ = st.Close(context.Background()) })
		m, err := sethhttp.NewMiddleware(st, sethhttp.IPKeyFunc())
		if err != nil {
			tb.Fatalf("NewMiddleware: %v", err)
		}
		return m.Handle(next)
	}},
	{"ulule", func(_ testing.TB, r keyedRegime, next http.Handler) http.Handler {
		l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: r.interval, Limit: r.limit})
		return ululehttp.NewMiddleware(l).Handler(next)
	}},
	{"throttled", func(tb testing.TB, r keyedRegime, next http.Handler) http.Handler {
		tb.Helper()
		st, err := memstore.NewCtx(0)
		if err != nil {
			tb.Fatalf("memstore.NewCtx: %v", err)
		}
		quota := throttled.RateQuota{MaxRate: throttledRate(r), MaxBurst: int(r.limit) - 1}
		g, err := throttled.NewGCRARateLimiterCtx(st, quota)
		if err != nil {
			tb.Fatalf("NewGCRARateLimiterCtx: %v", err)
		}
		h := &throttled.HTTPRateLimiterCtx{RateLimiter: g, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
		return h.RateLimit(next)
	}},
}

// nopWriter is a ResponseWriter that keeps the status and drops the body;
// its header map is cleared before each request, as a server gives each
// response a fresh one.
type nopWriter struct {
	h      http.Header
	status int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.status = code }

// clientRequests returns n GET requests from n client addresses, with a
// port as a server's RemoteAddr has.
func clientRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodGet, "/api", nil)
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:%d", i>>16&0xff, i>>8&0xff, i&0xff, 40000+i%20000)
		reqs[i] = r
	}
	return reqs
}

// BenchmarkMiddleware is a request through each middleware to a handler
// that writes 200, from the next of 1k client addresses in a uniformly
// random sequence, every address having made one request before the
// timer starts, serial and under RunParallel, in both keyed regimes:
// what a server pays to limit by IP, headers included. passed/op checks
// the regime.
func BenchmarkMiddleware(b *testing.B) {
	const clients = 1000
	reqs := clientRequests(clients)
	order := clientOrder(clients)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, r := range keyedRegimes {
		b.Run("regime="+r.name, func(b *testing.B) {
			for _, p := range middlewarePeers {
				b.Run("impl="+p.name, func(b *testing.B) {
					h := p.wrap(b, r, ok)
					// serve makes request i of the order on w and reports
					// whether it passed.
					serve := func(w *nopWriter, i int) bool {
						clear(w.h)
						w.status = 0
						h.ServeHTTP(w, reqs[order[i&(len(order)-1)]])
						return w.status == http.StatusOK
					}
					w := &nopWriter{h: http.Header{}}
					for _, req := range reqs {
						clear(w.h)
						h.ServeHTTP(w, req)
					}
					b.Run("mode=serial", func(b *testing.B) {
						b.ReportAllocs()
						cpu := cpuTime(b)
						passed, i := 0, 0
						for b.Loop() {
							if serve(w, i) {
								passed++
							}
							i++
						}
						b.ReportMetric(float64(cpuTime(b)-cpu)/float64(i), "cpu-ns/op")
						b.ReportMetric(float64(passed)/float64(i), "passed/op")
					})
					b.Run("mode=parallel", func(b *testing.B) {
						b.ReportAllocs()
						var start, passed atomic.Int64
						cpu := cpuTime(b)
						b.RunParallel(func(pb *testing.PB) {
							w := &nopWriter{h: http.Header{}}
							i := int(start.Add(int64(len(order) / 8)))
							var n int64
							for pb.Next() {
								if serve(w, i) {
									n++
								}
								i++
							}
							passed.Add(n)
						})
						b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
						b.ReportMetric(float64(passed.Load())/float64(b.N), "passed/op")
					})
				})
			}
		})
	}
}

// TestMiddlewareEquivalentConfigs shows that the middlewares pass the same
// requests in each regime: 20 clients, 50 requests each, back to back.
func TestMiddlewareEquivalentConfigs(t *testing.T) {
	const clients, calls = 20, 50
	reqs := clientRequests(clients)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, r := range keyedRegimes {
		want := clients * calls
		if r.limit == 1 {
			want = clients
		}
		for _, p := range middlewarePeers {
			h := p.wrap(t, r, ok)
			passed, limited := 0, 0
			for range calls {
				for _, req := range reqs {
					w := &nopWriter{h: http.Header{}}
					h.ServeHTTP(w, req)
					switch w.status {
					case http.StatusOK:
						passed++
					case http.StatusTooManyRequests:
						limited++
					default:
						t.Fatalf("%s, %s: status %d", r.name, p.name, w.status)
					}
				}
			}
			if passed != want || passed+limited != clients*calls {
				t.Errorf("%s, %s: %d passed and %d limited of %d, want %d passed", r.name, p.name, passed, limited, clients*calls, want)
			}
		}
	}
}

// clientOrder returns 1<<16 indexes drawn uniformly from [0, n) by a PRNG
// with a fixed seed, the same for every middleware.
func clientOrder(n int) []int {
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = rng.IntN(n)
	}
	return order
}
