package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// t0 is the fake clocks' start: a Unix time in nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

func newLimiter(t *testing.T, p sluice.Policy, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l, err := sluice.NewLimiter(p, opts...)
	if err != nil {
		t.Fatalf("NewLimiter(%v): %v", p, err)
	}
	return l
}

func newMiddleware(t *testing.T, limits []httplimit.Limit, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(limits, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// serve sends one request through h and returns the response.
func serve(h http.Handler, r *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Result()
}

func get(remoteAddr string, header ...string) *http.Request {
	r := httptest.NewRequest("GET", "/things", nil)
	r.RemoteAddr = remoteAddr
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

func ceilSec(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// headers are the response headers that the tests check.
var headers = []string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

func checkHeaders(t *testing.T, step int, got http.Header, want map[string]string) {
	t.Helper()
	for _, name := range headers {
		if g, w := got.Get(name), want[name]; g != w {
			t.Errorf("step %d: %s = %q, want %q", step, name, g, w)
		}
	}
}

// TestHeadersMatchResult sends requests through a middleware on a
// memstore-backed limiter and checks every header of every style against
// the Result of a twin in-memory limiter of the same policy on the same
// timeline.
func TestHeadersMatchResult(t *testing.T) {
	for _, tt := range []struct {
		p sluice.Policy
		w string // RateLimit-Policy's w, "" for none; "-" for no headers at all
	}{
		{sluice.FixedWindow(3, time.Second), "1"},
		{sluice.SlidingWindow(3, time.Second), "1"},
		{sluice.SlidingLog(3, time.Second), "1"},
		{sluice.TokenBucket(3, 1, 500*time.Millisecond), "2"},                                             // 1.5s to refill 3
		{sluice.LeakyBucket(3, 2, time.Second), "2"},                                                      // 1.5s to drain 3
		{sluice.GCRA(3, 2, time.Second), "2"},                                                             // 1.5s to earn 3
		{sluice.Shaper(5, time.Second, 2), "1"},                                                           // 0.6s to send 3, rounded up
		{sluice.Compound(sluice.FixedWindow(3, time.Second), sluice.TokenBucket(5, 1, time.Second)), "1"}, // the shorter member's
		{sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Simple(10, 10*time.Second),
			sluice.Capacity(3, sluice.Greedy(3, time.Second)),
		}}), "1"},
		{sluice.NoLimit(), "-"},
	} {
		t.Run(tt.p.String(), func(t *testing.T) {
			clock, twinClock := sluicetest.NewFakeClock(t0), sluicetest.NewFakeClock(t0)
			l := newLimiter(t, tt.p, sluice.WithClock(clock), sluice.WithStore(memstore.New()))
			twin := newLimiter(t, tt.p, sluice.WithClock(twinClock))
			key, err := httplimit.ClientIP()
			if err != nil {
				t.Fatal(err)
			}
			h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: key}},
				httplimit.WithHeaders(httplimit.Draft11Headers|httplimit.EarlyDraftHeaders|httplimit.XHeaders),
				httplimit.WithClock(clock)).Handler(ok)
			rejections := 0
			for step := range 16 {
				advance := time.Duration(step%3) * 90 * time.Millisecond
				clock.Advance(advance)
				twinClock.Advance(advance)
				resp := serve(h, get("192.0.2.1:1234"))
				res, err := twin.Allow(context.Background(), "192.0.2.1")
				if err != nil {
					t.Fatal(err)
				}
				wantStatus := http.StatusOK
				want := map[string]string{}
				if !res.Allowed {
					wantStatus = http.StatusTooManyRequests
					rejections++
					want["Retry-After"] = ceilSec(res.RetryAfter)
				}
				if tt.w != "-" {
					policy := `"api";q=` + strconv.FormatInt(res.Limit, 10)
					if tt.w != "" {
						policy += ";w=" + tt.w
					}
					remaining, limit := strconv.FormatInt(res.Remaining, 10), strconv.FormatInt(res.Limit, 10)
					want["RateLimit-Policy"] = policy
					want["RateLimit"] = `"api";r=` + remaining + ";t=" + ceilSec(res.ResetAfter)
					want["RateLimit-Limit"], want["RateLimit-Remaining"] = limit, remaining
					want["RateLimit-Reset"] = ceilSec(res.ResetAfter)
					want["X-RateLimit-Limit"], want["X-RateLimit-Remaining"] = limit, remaining
					want["X-RateLimit-Reset"] = strconv.FormatInt((twinClock.Now()+int64(res.ResetAfter)+int64(time.Second)-1)/int64(time.Second), 10)
				}
				if resp.StatusCode != wantStatus {
					t.Errorf("step %d: status %d, want %d (twin: %+v)", step, resp.StatusCode, wantStatus, res)
				}
				checkHeaders(t, step, resp.Header, want)
			}
			if tt.w != "-" && rejections == 0 {
				t.Errorf("no request was rejected: the test checks no rejection's headers")
			}
		})
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for _, tt := range []struct {
		name     string
		problem  bool
		wantType string
	}{
		{"text", false, "text/plain; charset=utf-8"},
		{"problem", true, "application/problem+json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			l := newLimiter(t, sluice.FixedWindow(1, 2*time.Second), sluice.WithClock(clock))
			h := newMiddleware(t, []httplimit.Limit{{Name: "per-user", Limiter: l, Key: httplimit.Header("X-User")}},
				httplimit.WithProblemDetails(tt.problem)).Handler(ok)
			if resp := serve(h, get("192.0.2.1:1", "X-User", "ann")); resp.StatusCode != http.StatusOK {
				t.Fatalf("first request: status %d, want 200", resp.StatusCode)
			}
			clock.Advance(800 * time.Millisecond) // RetryAfter 1.2s
			resp := serve(h, get("192.0.2.1:1", "X-User", "ann"))
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", resp.StatusCode)
			}
			if got := resp.Header.Get("Retry-After"); got != "2" {
				t.Errorf("Retry-After = %q, want \"2\"", got)
			}
			if got := resp.Header.Get("RateLimit"); got != `"per-user";r=0;t=2` {
				t.Errorf("RateLimit = %q, want %q", got, `"per-user";r=0;t=2`)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type = %q, want %q", got, tt.wantType)
			}
			if got, want := resp.Header.Get("X-Content-Type-Options"), map[bool]string{false: "nosniff"}[tt.problem]; got != want {
				t.Errorf("X-Content-Type-Options = %q, want %q", got, want)
			}
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			detail := `rate limit "per-user" exceeded, retry after 2 seconds`
			if !tt.problem {
				if got := body.String(); got != detail+"\n" {
					t.Errorf("body = %q, want %q", got, detail+"\n")
				}
				return
			}
			var p map[string]any
			if err := json.Unmarshal(body.Bytes(), &p); err != nil {
				t.Fatalf("body %q: %v", body.String(), err)
			}
			want := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": 429.0,
				"detail": detail, "limit": "per-user", "retry_after": 2.0}
			if fmt.Sprint(p) != fmt.Sprint(want) {
				t.Errorf("problem = %v, want %v", p, want)
			}
		})
	}
}

// TestRetryAfterNever: a request that can never pass, a cost above the
// limit, gets 429 without Retry-After for every policy, alone or beside
// another limit: the policies that refuse such a cost as an argument error
// (a fixed window, a token bucket) answer as those that reject it.
func TestRetryAfterNever(t *testing.T) {
	cost := func(*http.Request) (int64, error) { return 4, nil }
	for _, p := range []sluice.Policy{
		sluice.SlidingWindow(3, time.Second),
		sluice.FixedWindow(3, time.Second),
		sluice.TokenBucket(3, 1, time.Second),
		sluice.LeakyBucket(3, 1, time.Second),
		sluice.GCRA(3, 1, time.Second),
		sluice.Compound(sluice.FixedWindow(3, time.Second), sluice.SlidingWindow(10, time.Minute)),
	} {
		for _, limits := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/%d limits", p, limits), func(t *testing.T) {
				ls := []httplimit.Limit{{Name: "api", Limiter: newLimiter(t, p), Key: httplimit.Path, Cost: cost}}
				if limits == 2 {
					ls = append(ls, httplimit.Limit{Name: "other", Limiter: newLimiter(t, sluice.NoLimit()), Key: httplimit.Path})
				}
				h := newMiddleware(t, ls).Handler(ok)
				resp := serve(h, get("192.0.2.1:1"))
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("status %d, want 429", resp.StatusCode)
				}
				if got, ok := resp.Header["Retry-After"]; ok {
					t.Errorf("Retry-After = %q, want none", got)
				}
				if got := resp.Header.Get("RateLimit"); !strings.Contains(got, `"api";r=3`) {
					t.Errorf("RateLimit = %q, want the limit's 3 tokens left", got)
				}
				var body bytes.Buffer
				body.ReadFrom(resp.Body)
				if got, want := body.String(), "rate limit \"api\" exceeded: the request is larger than the limit allows\n"; got != want {
					t.Errorf("body = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestCost(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(10, time.Minute), sluice.WithClock(sluicetest.NewFakeClock(t0)))
	cost := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) }
	h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: httplimit.Method, Cost: cost}}).Handler(ok)
	for i, tt := range []struct {
		cost       string
		wantStatus int
		want       string
	}{
		{"4", 200, `"api";r=6;t=60`},
		{"7", 429, `"api";r=6;t=60`},
		{"6", 200, `"api";r=0;t=60`},
	} {
		resp := serve(h, get("192.0.2.1:1", "X-Cost", tt.cost))
		if resp.StatusCode != tt.wantStatus || resp.Header.Get("RateLimit") != tt.want {
			t.Errorf("step %d: cost %s: status %d, RateLimit %q; want %d, %q", i, tt.cost, resp.StatusCode, resp.Header.Get("RateLimit"), tt.wantStatus, tt.want)
		}
	}
}

// TestSeveralLimits: a request that one limit rejects takes nothing from
// the others, and the headers state every limit.
func TestSeveralLimits(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	perIP := newLimiter(t, sluice.FixedWindow(5, time.Minute), sluice.WithClock(clock))
	perUser := newLimiter(t, sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	ip, err := httplimit.ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	h := newMiddleware(t, []httplimit.Limit{
		{Name: "ip", Limiter: perIP, Key: ip},
		{Name: "user", Limiter: perUser, Key: httplimit.Header("X-User")},
	}, httplimit.WithHeaders(httplimit.Draft11Headers|httplimit.XHeaders), httplimit.WithClock(clock)).Handler(ok)
	for i, tt := range []struct {
		wantStatus int
		wantRL     string
		wantX      string // X-RateLimit-Remaining, of the most restrictive limit
	}{
		{200, `"ip";r=4;t=60, "user";r=1;t=60`, "1"},
		{200, `"ip";r=3;t=60, "user";r=0;t=60`, "0"},
		{429, `"ip";r=3;t=60, "user";r=0;t=60`, "0"}, // peeked: ip keeps 3
		{429, `"ip";r=3;t=60, "user";r=0;t=60`, "0"},
	} {
		resp := serve(h, get("192.0.2.1:1", "X-User", "ann"))
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("step %d: status %d, want %d", i, resp.StatusCode, tt.wantStatus)
		}
		checkHeaders(t, i, resp.Header, map[string]string{
			"RateLimit-Policy":      `"ip";q=5;w=60, "user";q=2;w=60`,
			"RateLimit":             tt.wantRL,
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": tt.wantX,
			"X-RateLimit-Reset":     strconv.FormatInt(t0/int64(time.Second)+60, 10),
			"Retry-After":           map[bool]string{true: "60"}[tt.wantStatus == 429],
		})
	}
	// Another user from the same address still has the address's 3.
	resp := serve(h, get("192.0.2.1:1", "X-User", "bob"))
	if got, want := resp.Header.Get("RateLimit"), `"ip";r=2;t=60, "user";r=1;t=60`; resp.StatusCode != 200 || got != want {
		t.Errorf("bob: status %d, RateLimit %q; want 200, %q", resp.StatusCode, got, want)
	}
}

func TestWindowOverride(t *testing.T) {
	for _, tt := range []struct {
		window time.Duration
		want   string
	}{
		{0, `"api";q=5;w=60`},                      // the policy's Window
		{-1, `"api";q=5`},                          // no w
		{1500 * time.Millisecond, `"api";q=5;w=2`}, // rounded up
	} {
		l := newLimiter(t, sluice.FixedWindow(5, time.Minute))
		h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: httplimit.Path, Window: tt.window}}).Handler(ok)
		if got := serve(h, get("192.0.2.1:1")).Header.Get("RateLimit-Policy"); got != tt.want {
			t.Errorf("Window %v: RateLimit-Policy = %q, want %q", tt.window, got, tt.want)
		}
	}
}

func TestNoHeaders(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(5, time.Minute))
	h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: httplimit.Path}}, httplimit.WithHeaders(0)).Handler(ok)
	resp := serve(h, get("192.0.2.1:1"))
	checkHeaders(t, 0, resp.Header, nil)
	if resp.StatusCode != 200 {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
}

func TestNameEscaped(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(5, time.Minute))
	h := newMiddleware(t, []httplimit.Limit{{Name: `a "b" \c`, Limiter: l, Key: httplimit.Path}}).Handler(ok)
	if got, want := serve(h, get("192.0.2.1:1")).Header.Get("RateLimit"), `"a \"b\" \\c";r=4;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
}

// TestManyLimits: more limits than the decisions kept on the stack, with
// names long enough that the fields outgrow their stack buffers.
func TestManyLimits(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	var ls []httplimit.Limit
	var policy, limit []string
	for i := range 6 {
		name := fmt.Sprintf("limit-%d-%s", i, strings.Repeat("x", 40))
		ls = append(ls, httplimit.Limit{Name: name, Limiter: newLimiter(t, sluice.FixedWindow(int64(2+i), time.Minute), sluice.WithClock(clock)), Key: httplimit.Path})
		policy = append(policy, fmt.Sprintf("%q;q=%d;w=60", name, 2+i))
		limit = append(limit, fmt.Sprintf("%q;r=%d;t=60", name, 1+i))
	}
	h := newMiddleware(t, ls, httplimit.WithHeaders(httplimit.Draft11Headers|httplimit.XHeaders), httplimit.WithClock(clock)).Handler(ok)
	resp := serve(h, get("192.0.2.1:1"))
	checkHeaders(t, 0, resp.Header, map[string]string{
		"RateLimit-Policy": strings.Join(policy, ", "), "RateLimit": strings.Join(limit, ", "),
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": strconv.FormatInt(t0/int64(time.Second)+60, 10),
	})
	serve(h, get("192.0.2.1:1"))
	if resp := serve(h, get("192.0.2.1:1")); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" {
		t.Errorf("third request: status %d, Retry-After %q; want 429 and 60", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestHeadersIndependent: the fields share one string and one slice, so
// a handler that adds to one of them must not change another.
func TestHeadersIndependent(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(5, time.Minute), sluice.WithClock(sluicetest.NewFakeClock(t0)))
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Ratelimit-Policy", "extra")
		w.Header().Add("X-Ratelimit-Limit", "extra")
	})
	h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: httplimit.Path}},
		httplimit.WithHeaders(httplimit.Draft11Headers|httplimit.XHeaders)).Handler(next)
	got := serve(h, get("192.0.2.1:1")).Header
	for name, want := range map[string][]string{
		"Ratelimit-Policy":      {`"api";q=5;w=60`, "extra"},
		"Ratelimit":             {`"api";r=4;t=60`},
		"X-Ratelimit-Limit":     {"5", "extra"},
		"X-Ratelimit-Remaining": {"4"},
	} {
		if !slices.Equal(got.Values(name), want) {
			t.Errorf("%s = %q, want %q", name, got.Values(name), want)
		}
	}
}

// TestAllocs bounds a request's allocations in the middleware with one
// limit keyed by ClientIP: the key of an IPv4 client is its RemoteAddr's
// text, the rate-limit fields cost two allocations, and a rejection's
// text body three more.
func TestAllocs(t *testing.T) {
	ip, err := httplimit.ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		limit  int64
		status int
		want   float64
	}{
		{"allowed", 1e9, 0, 2}, // ok writes its body: no WriteHeader
		{"rejected", 1, http.StatusTooManyRequests, 5},
	} {
		l := newLimiter(t, sluice.FixedWindow(tt.limit, time.Hour))
		h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: ip}}).Handler(ok)
		r := get("192.0.2.1:4000")
		w := &headerWriter{h: http.Header{}}
		h.ServeHTTP(w, r)
		got := testing.AllocsPerRun(100, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
		if w.status != tt.status {
			t.Fatalf("%s: status %d, want %d", tt.name, w.status, tt.status)
		}
		if got > tt.want {
			t.Errorf("%s: %v allocations a request, want at most %v", tt.name, got, tt.want)
		}
	}
}

// headerWriter is a ResponseWriter that allocates nothing of its own.
type headerWriter struct {
	h      http.Header
	status int
}

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(code int)        { w.status = code }

type stringer string

func (s stringer) String() string { return string(s) }

// TestRequestErrors: key and cost functions that fail or panic, and bad
// costs, answer 400 or 500 without calling the handler, and are logged.
// A 400 for a missing header says which header; a bare "Bad Request" left
// the client guessing. The other answers do not say why: the reasons are
// the server's.
func TestRequestErrors(t *testing.T) {
	fails := func(*http.Request) (string, error) { return "", errors.New("no database") }
	panics := func(*http.Request) (string, error) { panic("key boom") }
	cost := func(n int64) httplimit.CostFunc { return func(*http.Request) (int64, error) { return n, nil } }
	for _, tt := range []struct {
		name       string
		key        httplimit.KeyFunc
		cost       httplimit.CostFunc
		wantStatus int
		wantLog    string
		wantBody   string
	}{
		{"missing header", httplimit.Header("X-API-Key"), nil, 400, "header X-Api-Key is missing",
			`the request has no key for rate limit "api": header X-Api-Key is missing`},
		{"missing context value", httplimit.ContextValue(stringer("user")), nil, 400, "no context value for user",
			`the request has no key for rate limit "api"`},
		{"key error", fails, nil, 500, "no database", "Internal Server Error"},
		{"key panic", panics, nil, 500, "key boom", "Internal Server Error"},
		{"zero cost", httplimit.Path, cost(0), 500, "cost must be positive, got 0", "Internal Server Error"},
		{"negative cost", httplimit.Path, cost(-3), 500, "cost must be positive, got -3", "Internal Server Error"},
		{"cost error", httplimit.Path, func(*http.Request) (int64, error) { return 0, errors.New("bad batch") }, 500, "bad batch", "Internal Server Error"},
		{"cost panic", httplimit.Path, func(*http.Request) (int64, error) { panic("cost boom") }, 500, "cost boom", "Internal Server Error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			l := newLimiter(t, sluice.FixedWindow(5, time.Minute))
			called := false
			next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })
			h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: tt.key, Cost: tt.cost}},
				httplimit.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))).Handler(next)
			resp := serve(h, get("192.0.2.1:1"))
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if called {
				t.Errorf("the handler was called")
			}
			if !strings.Contains(log.String(), tt.wantLog) {
				t.Errorf("log %q does not contain %q", log.String(), tt.wantLog)
			}
			if body, _ := io.ReadAll(resp.Body); string(body) != tt.wantBody+"\n" {
				t.Errorf("body %q, want %q", body, tt.wantBody+"\n")
			}
			checkHeaders(t, 0, resp.Header, nil)
		})
	}
}

// TestPanics: http.ErrAbortHandler from a key function, and any panic of
// the handler, go on up.
func TestPanics(t *testing.T) {
	l := newLimiter(t, sluice.NoLimit())
	abort := func(*http.Request) (string, error) { panic(http.ErrAbortHandler) }
	for _, tt := range []struct {
		name string
		key  httplimit.KeyFunc
		next http.Handler
		want any
	}{
		{"abort in key", abort, ok, http.ErrAbortHandler},
		{"handler panic", httplimit.Path, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler boom") }), "handler boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: tt.key}}).Handler(tt.next)
			defer func() {
				if got := recover(); got != tt.want {
					t.Errorf("panic %v, want %v", got, tt.want)
				}
			}()
			serve(h, get("192.0.2.1:1"))
		})
	}
}

// failingStore is a store that is down.
type failingStore struct{}

func (failingStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return fmt.Errorf("failingStore: %w", driver.ErrUnavailable)
}

func TestStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		failure    sluice.StoreFailure
		opts       []httplimit.Option
		wantStatus []int // of two requests, with a limit of 1
	}{
		{sluice.FailClosed, nil, []int{503, 503}},
		{sluice.FailClosed, []httplimit.Option{httplimit.WithErrorStatus(500)}, []int{500, 500}},
		{sluice.FailOpen, nil, []int{200, 200}},
		{sluice.FailLocal, nil, []int{200, 429}},
	} {
		t.Run(fmt.Sprint(tt.failure, tt.wantStatus), func(t *testing.T) {
			l := newLimiter(t, sluice.FixedWindow(1, time.Minute), sluice.WithStore(failingStore{}), sluice.WithStoreFailure(tt.failure))
			opts := append([]httplimit.Option{httplimit.WithLogger(slog.New(slog.DiscardHandler))}, tt.opts...)
			h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: httplimit.Path}}, opts...).Handler(ok)
			for i, want := range tt.wantStatus {
				resp := serve(h, get("192.0.2.1:1"))
				if resp.StatusCode != want {
					t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
				}
				if resp.StatusCode >= 500 {
					checkHeaders(t, i, resp.Header, nil)
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	l := newLimiter(t, sluice.NoLimit())
	for _, tt := range []struct {
		name      string
		limits    []httplimit.Limit
		opts      []httplimit.Option
		wantField string
	}{
		{"no limits", nil, nil, "limits"},
		{"no name", []httplimit.Limit{{Limiter: l, Key: httplimit.Path}}, nil, "limits[0].Name"},
		{"bad name", []httplimit.Limit{{Name: "a\nb", Limiter: l, Key: httplimit.Path}}, nil, "limits[0].Name"},
		{"same name", []httplimit.Limit{{Name: "a", Limiter: l, Key: httplimit.Path}, {Name: "a", Limiter: l, Key: httplimit.Path}}, nil, "limits[1].Name"},
		{"no limiter", []httplimit.Limit{{Name: "a", Key: httplimit.Path}}, nil, "limits[0].Limiter"},
		{"no key", []httplimit.Limit{{Name: "a", Limiter: l}}, nil, "limits[0].Key"},
		{"headers", []httplimit.Limit{{Name: "a", Limiter: l, Key: httplimit.Path}}, []httplimit.Option{httplimit.WithHeaders(8)}, "WithHeaders"},
		{"status", []httplimit.Limit{{Name: "a", Limiter: l, Key: httplimit.Path}}, []httplimit.Option{httplimit.WithLimitedStatus(200)}, "WithLimitedStatus"},
		{"error status", []httplimit.Limit{{Name: "a", Limiter: l, Key: httplimit.Path}}, []httplimit.Option{httplimit.WithErrorStatus(600)}, "WithErrorStatus"},
		{"clock", []httplimit.Limit{{Name: "a", Limiter: l, Key: httplimit.Path}}, []httplimit.Option{httplimit.WithClock(sluice.MonotonicClock())}, "WithClock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httplimit.New(tt.limits, tt.opts...)
			var ce *httplimit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.wantField {
				t.Errorf("New: %v, want a *ConfigError of %s", err, tt.wantField)
			}
		})
	}
}

// TestLimitStatus: a monthly quota answers 402 and a rate 429, each
// naming itself; a Status out of range is refused.
func TestLimitStatus(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	quota := newLimiter(t, sluice.Calendar(3, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), 1, 0), sluice.WithClock(clock))
	rate := newLimiter(t, sluice.FixedWindow(2, time.Second), sluice.WithClock(clock))
	m := newMiddleware(t, []httplimit.Limit{
		{Name: "monthly", Limiter: quota, Key: httplimit.Header("X-Customer"), Status: http.StatusPaymentRequired},
		{Name: "rate", Limiter: rate, Key: httplimit.Header("X-Customer")},
	}, httplimit.WithClock(clock), httplimit.WithProblemDetails(true))
	h := m.Handler(ok)
	// t0 is 2023-11-14T22:13:20Z: the month ends 16d 1h 46m 40s later.
	const monthLeft = 16*24*time.Hour + time.Hour + 46*time.Minute + 40*time.Second
	tests := []struct {
		advance time.Duration
		status  int
		limit   string // the limit the problem names
		retry   string
	}{
		{0, 200, "", ""},
		{0, 200, "", ""},
		{0, 429, "rate", "1"},
		{time.Second, 200, "", ""},
		{0, 402, "monthly", ceilSec(monthLeft - time.Second)},
	}
	for i, tt := range tests {
		clock.Advance(tt.advance)
		resp := serve(h, get("192.0.2.1:1234", "X-Customer", "c1"))
		var p struct{ Limit string }
		if resp.StatusCode != 200 {
			json.NewDecoder(resp.Body).Decode(&p)
		}
		if resp.StatusCode != tt.status || p.Limit != tt.limit || resp.Header.Get("Retry-After") != tt.retry {
			t.Errorf("step %d: %d, limit %q, Retry-After %q; want %d, %q, %q", i, resp.StatusCode, p.Limit,
				resp.Header.Get("Retry-After"), tt.status, tt.limit, tt.retry)
		}
	}
	for _, status := range []int{200, 600, -1} {
		_, err := httplimit.New([]httplimit.Limit{{Name: "a", Limiter: rate, Key: httplimit.Header("X-Customer"), Status: status}})
		var ce *httplimit.ConfigError
		if !errors.As(err, &ce) || ce.Field != "limits[0].Status" {
			t.Errorf("New with Status %d = %v, want a *ConfigError at limits[0].Status", status, err)
		}
	}
}

// TestPenaltyBoxLogin: a login endpoint behind a penalty box of 5 tries
// per 15 minutes: the 6th try locks the user out for the penalty, 10
// minutes, though the window ends sooner, and the answer says so; another
// user is not locked out.
func TestPenaltyBoxLogin(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	tries := newLimiter(t, sluice.PenaltyBox(sluice.FixedWindow(5, 15*time.Minute), []time.Duration{10 * time.Minute}, 0),
		sluice.WithClock(clock))
	h := newMiddleware(t, []httplimit.Limit{{Name: "login", Limiter: tries, Key: httplimit.Header("X-User")}},
		httplimit.WithClock(clock)).Handler(ok)
	login := func(user string) *http.Response { return serve(h, get("192.0.2.1:1234", "X-User", user)) }
	for i := range 5 {
		if resp := login("ann"); resp.StatusCode != 200 {
			t.Fatalf("try %d: %d, want 200", i, resp.StatusCode)
		}
	}
	clock.Advance(14 * time.Minute)
	if resp := login("ann"); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "600" {
		t.Errorf("6th try: %d, Retry-After %q; want 429, 600", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clock.Advance(2 * time.Minute) // the window is over, the block is not
	if resp := login("ann"); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "480" {
		t.Errorf("during the block: %d, Retry-After %q; want 429, 480", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := login("bob"); resp.StatusCode != 200 {
		t.Errorf("another user: %d, want 200", resp.StatusCode)
	}
	clock.Advance(8 * time.Minute)
	if resp := login("ann"); resp.StatusCode != 200 {
		t.Errorf("after the block: %d, want 200", resp.StatusCode)
	}
}
