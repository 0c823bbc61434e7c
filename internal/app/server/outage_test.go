package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/sluicetest"
)

// breakable is a store that fails every call while broken is set, as an
// unreachable Redis does, and is its store otherwise: fault injection
// over the real in-memory store.
type breakable struct {
	driver.Store
	broken *atomic.Bool
}

func (b breakable) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if b.broken.Load() {
		return fmt.Errorf("breakable: update %s: %w: %w", driver.QuoteKey(key), driver.ErrUnavailable, errRefused)
	}
	return b.Store.Update(ctx, key, fn)
}

// errRefused is what a store's client says of a server that is gone.
var errRefused = errors.New("dial tcp 10.0.0.5:6379: connect: connection refused")

// TestStoreOutageLogged: under fail_closed, an outage of the store is a
// few log lines with counts and no client key: the first failure, one
// line per 10 s while it lasts, one when the store answers again. Before,
// every refused decision logged a line with its key (14,092 lines, 2.6
// MB, in 5 s at 2,800 requests a second).
func TestStoreOutageLogged(t *testing.T) {
	cfg, err := LoadConfig([]byte(`server: {store_failure: fail_closed}
limiters:
  three: {policy: fixed_window, limit: 1000000, interval: 1 minute}
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: three}
      - {key: c, rate_limit: {unit: minute, requests_per_unit: 1000000}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	var log testserver.Buffer
	clock := fakeTime{sluicetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())}
	s, err := New(t.Context(), cfg, withClock(clock, clock.now), WithLogger(slog.New(slog.NewTextHandler(&log, nil))),
		withStoreWrapper(func(st driver.Store) driver.Store { return breakable{st, &broken} }))
	if err != nil {
		t.Fatal(err)
	}
	envoy := serveGRPC(t, s)
	decide := func(i int) (httpCode int, envoyErrs int) {
		httpCode, _ = call(t, s, "POST", "/api/v1/consume", fmt.Sprintf(`{"limiter": "three", "key": "user-%d-secret"}`, i))
		for _, key := range []string{"k", "c"} {
			req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: fmt.Sprintf("envoy-%d-secret", i)}}}}}
			if _, err := envoy.ShouldRateLimit(t.Context(), req); err != nil {
				envoyErrs++
			}
		}
		return httpCode, envoyErrs
	}
	lines := func() []string {
		var out []string
		for l := range strings.Lines(log.String()) {
			if !strings.Contains(l, "reload") { // Serve's own lines
				out = append(out, l)
			}
		}
		return out
	}
	if code, errs := decide(0); code != 200 || errs != 0 {
		t.Fatalf("with the store up: consume %d, %d Envoy errors", code, errs)
	}
	before := len(lines())

	start := clock.now()
	broken.Store(true)
	const n = 1000 // 3,000 decisions over 5 s
	for i := range n {
		if code, errs := decide(i); code != 503 || errs != 2 {
			t.Fatalf("with the store down: consume %d, %d Envoy errors; want 503 and 2", code, errs)
		}
		clock.Advance(5 * time.Second / n)
	}
	if got := lines()[before:]; len(got) != 1 || !strings.Contains(got[0], "the store fails") || !strings.Contains(got[0], "connection refused") {
		t.Fatalf("%d failed decisions over 5 s logged %d lines, want 1 with the cause:\n%s", 3*n, len(got), strings.Join(got, ""))
	}
	clock.Advance(start.Add(10 * time.Second).Sub(clock.now()))
	decide(n)
	if got := lines()[before:]; len(got) != 2 || !strings.Contains(got[1], "the store still fails") || !strings.Contains(got[1], "failed_decisions=") {
		t.Fatalf("after 10 s of outage, logged:\n%s\nwant a second line with the counts", strings.Join(got, ""))
	}

	broken.Store(false)
	deadline := time.Now().Add(time.Minute) // the circuit breaker probes after 50-500 ms of real time
	for code, _ := decide(n); code != 200; code, _ = decide(n) {
		if time.Now().After(deadline) {
			t.Fatalf("consume still %d a minute after the store came back", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	clock.Advance(2 * time.Second)
	s.outage.Tick()
	got := lines()[before:]
	if len(got) != 3 || !strings.Contains(got[2], "the store answers again") {
		t.Errorf("after the store came back, logged:\n%s\nwant a last line saying so", strings.Join(got, ""))
	}
	if strings.Contains(log.String(), "secret") {
		t.Errorf("a client's key is in the log:\n%s", log.String())
	}
	t.Logf("%d lines:\n%s", len(got), strings.Join(got, ""))
}

// TestFailLocalKeysBounded: with a store other than mem:// under
// fail_local, server.limits.max_keys bounds the keys each limiter keeps
// in this process's memory while the store fails (shared among the
// limiters and the envoy section), so that new keys sent during an
// outage cannot grow the memory without bound. Before, max_keys was
// refused with any store but mem://, and the fallback held every key.
func TestFailLocalKeysBounded(t *testing.T) {
	cfg, err := LoadConfig([]byte(`server: {store_failure: fail_local, limits: {max_keys: 300}}
limiters:
  a: {policy: fixed_window, limit: 10, interval: 1 minute}
  b: {policy: token_bucket, limit: 10, rate: {amount: 1, interval: 1 second}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	broken.Store(true)
	s, err := New(t.Context(), cfg, withStoreWrapper(func(st driver.Store) driver.Store { return breakable{st, &broken} }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 1000 {
		for _, name := range []string{"a", "b"} {
			if code, body := call(t, s, "POST", "/api/v1/consume", fmt.Sprintf(`{"limiter": %q, "key": "k%d"}`, name, i)); code != 200 {
				t.Fatalf("consume %s k%d = %d %s, want 200 from the local fallback", name, i, code, body)
			}
		}
	}
	for _, name := range []string{"a", "b"} {
		l, _ := s.cur.Load().lookup(name)
		if n := l.Len(); n > 100 {
			t.Errorf("limiter %s holds %d keys in memory, want at most 300/3 = 100", name, n)
		}
	}
}

// TestVersionConflictLogged: a limiter's version conflict, which the
// library tells its observer rather than logs, is logged by the server
// with the limiter's name.
func TestVersionConflictLogged(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	obs := outageObserver{failureObserver: failureObserver{limiter: "api"}, log: log}
	obs.Observe(sluice.Event{Kind: sluice.EventVersionConflict, Err: errors.New("sluice: a key's stored configuration has version 3")})
	if out := logged.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "version 3") || !strings.Contains(out, "limiter=api") {
		t.Errorf("log = %q, want a warning naming the limiter and the version", out)
	}
}

// TestStoreFailure: every kind of store failure that the outage log
// counts has its words in an answer.
func TestStoreFailure(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("redis: %w", context.DeadlineExceeded), "no answer within the store timeout"},
		{fmt.Errorf("%w: dial", driver.ErrUnavailable), "the store is unavailable"},
		{sluice.ErrCircuitOpen, "the circuit breaker keeps calls from the store"},
		{fmt.Errorf("%w: EOF", driver.ErrIndeterminate), "the store's answer was lost"},
		{fmt.Errorf("%w: lost the race", driver.ErrConflict), "contention on the key"},
		{errors.New("disk full"), "an error of the store"},
	}
	for _, tt := range tests {
		if got := storeFailure(tt.err); got != tt.want {
			t.Errorf("storeFailure(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
