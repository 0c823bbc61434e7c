package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/sluicetest"
)

// login answers 401 unless the password is "right".
var login = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Password") != "right" {
		http.Error(w, "wrong password", http.StatusUnauthorized)
		return
	}
	io.WriteString(w, "welcome")
})

func attempt(user, password string) *http.Request {
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("X-User", user)
	r.Header.Set("X-Password", password)
	return r
}

// TestLoginCountsFailures is issue 33's login endpoint: a limit that
// counts only 401s locks a user after 5 failed logins, and never counts
// a successful one.
func TestLoginCountsFailures(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	l := newLimiter(t, sluice.FixedWindow(5, 15*time.Minute), sluice.WithClock(clock))
	h := newMiddleware(t, []httplimit.Limit{{Name: "login", Limiter: l, Key: httplimit.Header("X-User"),
		CountIf: httplimit.Statuses(http.StatusUnauthorized)}}, httplimit.WithClock(clock)).Handler(login)
	steps := []struct {
		user, password string
		status         int
		rateLimit      string // the RateLimit header: the limit as it stands before the request counts
	}{
		{"alice", "wrong", 401, `"login";r=5;t=900`},
		{"alice", "wrong", 401, `"login";r=4;t=900`},
		{"alice", "right", 200, `"login";r=3;t=900`},
		{"alice", "right", 200, `"login";r=3;t=900`},
		{"alice", "wrong", 401, `"login";r=3;t=900`},
		{"alice", "right", 200, `"login";r=2;t=900`},
		{"alice", "wrong", 401, `"login";r=2;t=900`},
		{"alice", "wrong", 401, `"login";r=1;t=900`},
		{"alice", "wrong", 429, `"login";r=0;t=900`}, // 5 failures: locked
		{"alice", "right", 429, `"login";r=0;t=900`}, // even with the right password
		{"bob", "right", 200, `"login";r=5;t=900`},   // another user is not
		{"bob", "right", 200, `"login";r=5;t=900`},
	}
	for i, s := range steps {
		resp := serve(h, attempt(s.user, s.password))
		if resp.StatusCode != s.status || resp.Header.Get("RateLimit") != s.rateLimit {
			t.Errorf("step %d (%s, %s): %d, RateLimit %q; want %d, %q", i, s.user, s.password,
				resp.StatusCode, resp.Header.Get("RateLimit"), s.status, s.rateLimit)
		}
	}
	// The 5 failures alone were counted: the window is full, and its
	// successes left no trace.
	res, err := l.Peek(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed || res.Remaining != 0 {
		t.Errorf("alice's window = %+v, want full", res)
	}
	if res, _ := l.Peek(context.Background(), "bob"); res.Remaining != 4 {
		t.Errorf("bob's window = %+v, want untouched (4 left after a peek of 1)", res)
	}
	clock.Advance(15 * time.Minute)
	if resp := serve(h, attempt("alice", "right")); resp.StatusCode != 200 {
		t.Errorf("alice after the window: %d, want 200", resp.StatusCode)
	}
}

// TestCountIfStatus checks the status the counting sees: 200 for a
// handler that writes nothing or only a body, the final status after an
// informational one, and a flushed response's.
func TestCountIfStatus(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
		want    int
	}{
		{"nothing", func(http.ResponseWriter, *http.Request) {}, 200},
		{"body", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "x") }, 200},
		{"status", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(403) }, 403},
		{"early hints", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(103); w.WriteHeader(401) }, 401},
		{"flushed", func(w http.ResponseWriter, _ *http.Request) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush through the middleware: %v", err)
			}
			w.WriteHeader(500) // too late: 200 was sent
		}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var seen []int
			l := newLimiter(t, sluice.FixedWindow(10, time.Hour))
			h := newMiddleware(t, []httplimit.Limit{{Name: "api", Limiter: l, Key: httplimit.Header("X-User"),
				CountIf: func(status int) bool { seen = append(seen, status); return true }}}).Handler(tt.handler)
			serve(h, attempt("u", ""))
			if len(seen) != 1 || seen[0] != tt.want {
				t.Errorf("CountIf saw %v, want [%d]", seen, tt.want)
			}
			if res, _ := l.Peek(context.Background(), "u"); res.Remaining != 8 {
				t.Errorf("after one counted request, Peek = %+v, want 8 left", res)
			}
		})
	}
}

// TestCountIfClientGone counts the outcome of a request whose client
// hung up during the handler: hanging up must not escape the count.
func TestCountIfClientGone(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(10, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	r := attempt("mallory", "guess").WithContext(ctx)
	hangUp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cancel(); login(w, r) })
	h := newMiddleware(t, []httplimit.Limit{{Name: "login", Limiter: l, Key: httplimit.Header("X-User"),
		CountIf: httplimit.Statuses(401)}}).Handler(hangUp)
	serve(h, r)
	if res, _ := l.Peek(context.Background(), "mallory"); res.Remaining != 8 {
		t.Errorf("after a failed login whose client hung up, Peek = %+v, want it counted (8 left)", res)
	}
}

// TestShadowLimitPasses checks that a limit in shadow mode lets every
// request through and is left out of the rate-limit headers, beside one
// in force.
func TestShadowLimitPasses(t *testing.T) {
	ip, err := httplimit.ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	shadow := newLimiter(t, sluice.FixedWindow(1, time.Hour), sluice.WithShadow(true))
	api := newLimiter(t, sluice.FixedWindow(100, time.Hour))
	// The shadow limit's cost of 2 is above its limit, which a fixed
	// window refuses as an argument: in shadow mode, one more refusal.
	two := func(*http.Request) (int64, error) { return 2, nil }
	h := newMiddleware(t, []httplimit.Limit{{Name: "new", Limiter: shadow, Key: ip, Cost: two}, {Name: "api", Limiter: api, Key: ip}},
		httplimit.WithHeaders(httplimit.Draft11Headers|httplimit.XHeaders)).Handler(ok)
	for i := range 3 {
		resp := serve(h, get("192.0.2.1:4000"))
		if resp.StatusCode != 200 || strings.Contains(resp.Header.Get("RateLimit"), "new") ||
			resp.Header.Get("X-RateLimit-Limit") != "100" {
			t.Errorf("request %d: %d, RateLimit %q, X-RateLimit-Limit %q; want 200 and the api limit alone",
				i, resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("X-RateLimit-Limit"))
		}
	}
}

// TestLoginPenaltyBox is the login of issue 33: a penalty box around a
// window of 5 failures, counting only 401s. The attempt after the 5th
// failure starts the block, which then holds for the whole penalty, past
// the window's end; successful logins are never counted.
func TestLoginPenaltyBox(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	p := sluice.PenaltyBox(sluice.FixedWindow(5, 15*time.Minute), []time.Duration{time.Hour}, 24*time.Hour)
	l := newLimiter(t, p, sluice.WithClock(clock))
	h := newMiddleware(t, []httplimit.Limit{{Name: "login", Limiter: l, Key: httplimit.Header("X-User"),
		CountIf: httplimit.Statuses(http.StatusUnauthorized)}}, httplimit.WithClock(clock)).Handler(login)
	for i, s := range []struct {
		password string
		status   int
	}{
		{"wrong", 401}, {"right", 200}, {"wrong", 401}, {"right", 200}, {"wrong", 401},
		{"wrong", 401}, {"right", 200}, {"wrong", 401}, // 5 failures, 3 successes uncounted
		{"right", 429}, // the window is full: this refusal starts the block
	} {
		if resp := serve(h, attempt("alice", s.password)); resp.StatusCode != s.status {
			t.Fatalf("attempt %d (%s): %d, want %d", i, s.password, resp.StatusCode, s.status)
		}
	}
	// Past the window's end the block still holds, until the penalty ends.
	clock.Advance(15 * time.Minute)
	if resp := serve(h, attempt("alice", "right")); resp.StatusCode != 429 {
		t.Errorf("alice after the window, within the penalty: %d, want 429", resp.StatusCode)
	}
	if resp := serve(h, attempt("bob", "right")); resp.StatusCode != 200 {
		t.Errorf("bob: %d, want 200", resp.StatusCode)
	}
	clock.Advance(45*time.Minute - time.Nanosecond)
	if resp := serve(h, attempt("alice", "right")); resp.StatusCode != 429 {
		t.Errorf("alice 1 ns before the penalty ends: %d, want 429", resp.StatusCode)
	}
	clock.Advance(time.Nanosecond)
	if resp := serve(h, attempt("alice", "right")); resp.StatusCode != 200 {
		t.Errorf("alice when the penalty ends: %d, want 200", resp.StatusCode)
	}
}
