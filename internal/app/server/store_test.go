package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestStoreDown stops the Redis under a server: /readyz says so, and
// consume follows the configured failure policy and counts it.
func TestStoreDown(t *testing.T) {
	for _, tt := range []struct {
		failure string
		status  int
		code    string
	}{
		{"fail_closed", 503, codeStoreUnavailable},
		{"fail_open", 200, ""},
		{"fail_local", 200, ""},
	} {
		t.Run(tt.failure, func(t *testing.T) {
			url, stop, err := testserver.StartRedis(t.Context())
			if errors.As(err, new(*testserver.MissingError)) && os.Getenv("CI") != "true" {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			s, _ := testServer(t, fmt.Sprintf("store: %s\nserver: {store_timeout: 300ms, store_failure: %s}\n"+
				"limiters:\n  three: {policy: fixed_window, limit: 3, interval: 1 minute}\n", url, tt.failure))
			if code, _ := call(t, s, "GET", "/readyz", ""); code != 200 {
				t.Fatalf("/readyz with Redis up = %d", code)
			}
			if code, got := call(t, s, "POST", "/api/v1/consume", `{"limiter": "three", "key": "k"}`); code != 200 || got["allowed"] != true {
				t.Fatalf("consume with Redis up = %d %v", code, got)
			}

			stop()
			code, got := call(t, s, "GET", "/readyz", "")
			if e, _ := got["error"].(map[string]any); code != 503 || e["code"] != codeStoreUnavailable {
				t.Errorf("/readyz with Redis down = %d %v, want 503 %s", code, got, codeStoreUnavailable)
			}
			code, got = call(t, s, "POST", "/api/v1/consume", `{"limiter": "three", "key": "k"}`)
			if code != tt.status {
				t.Errorf("consume with Redis down = %d %v, want %d", code, got, tt.status)
			}
			if e, _ := got["error"].(map[string]any); tt.code != "" && (e == nil || e["code"] != tt.code) {
				t.Errorf("consume with Redis down = %v, want error code %s", got, tt.code)
			}
			if tt.code == "" && got["allowed"] != true {
				t.Errorf("consume with Redis down under %s = %v, want allowed", tt.failure, got)
			}
			// The answer does not echo the key: the caller sent it, and
			// the store's messages named it twice.
			if e, _ := got["error"].(map[string]any); e != nil {
				if msg, _ := e["message"].(string); strings.Contains(msg, `"k"`) || strings.Contains(msg, ":k") {
					t.Errorf("store failure message %q echoes the key", msg)
				}
			}
			if n := testutil.ToFloat64(s.metrics.StoreFailures.WithLabelValues("three", tt.failure)); n != 1 {
				t.Errorf("sluice_store_failures_total{limiter=three,policy=%s} = %v, want 1", tt.failure, n)
			}
			// A store failure is an error only where the caller gets one.
			wantErrors := 0.0
			if tt.code != "" {
				wantErrors = 1
			}
			if n := testutil.ToFloat64(s.metrics.Decisions.WithLabelValues("three", "error")); n != wantErrors {
				t.Errorf("sluice_decisions_total{limiter=three,outcome=error} = %v under %s, want %v", n, tt.failure, wantErrors)
			}
			// The stats say the store is failing the limiter, under every
			// failure policy; its circuit opens after 5 failures in a row.
			if st := limiterStats(t, s, "three"); st["store_failing"] != true || st["circuit_open"] != false {
				t.Errorf("stats of three after a store failure = %v, want store_failing and the circuit closed", st)
			}
			for range 4 {
				call(t, s, "POST", "/api/v1/consume", `{"limiter": "three", "key": "k"}`)
			}
			if st := limiterStats(t, s, "three"); st["store_failing"] != true || st["circuit_open"] != true {
				t.Errorf("stats of three after 5 store failures = %v, want store_failing and the circuit open", st)
			}
			if n := testutil.ToFloat64(s.metrics.CircuitOpen.WithLabelValues("three")); n != 1 {
				t.Errorf("sluice_store_circuit_open{limiter=three} = %v after 5 store failures, want 1", n)
			}
			// Shutdown closes the store even though it is down: the
			// client does not retry on its own (storeurl). What this
			// catches is a hang, so it waits with a generous deadline,
			// not a bound: closing takes microseconds.
			closed := make(chan struct{})
			go func() { s.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Errorf("closing a store whose server is down did not return within 30s")
			}
		})
	}
}

// TestReloadForgetsRemovedLimiters checks that a limiter a reload removes
// leaves no series behind in /metrics.
func TestReloadForgetsRemovedLimiters(t *testing.T) {
	s, _ := testServer(t, "limiters:\n  keep: {policy: no_limit}\n  gone: {policy: fixed_window, limit: 3, interval: 1 minute}\n")
	call(t, s, "POST", "/api/v1/consume", `{"limiter": "gone", "key": "k"}`)
	call(t, s, "POST", "/api/v1/consume", `{"limiter": "keep", "key": "k"}`)
	cfg, err := LoadConfig([]byte("limiters:\n  keep: {policy: no_limit}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	families, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var kept bool
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limiter" && l.GetValue() == "gone" {
					t.Errorf("%s still has a series for the removed limiter", f.GetName())
				}
				kept = kept || (l.GetName() == "limiter" && l.GetValue() == "keep" && strings.HasPrefix(f.GetName(), "sluice_decisions"))
			}
		}
	}
	if !kept {
		t.Error("the kept limiter lost its series too")
	}
}

// TestStartChecksStore: a store that answers no at start stops the start,
// whatever start_without_store says; a store that does not answer stops
// it with start_without_store false, and otherwise starts a server that
// says so loudly and is not ready. Before the check, all of them started
// ready-looking servers that failed each call ("script replied <nil>").
func TestStartChecksStore(t *testing.T) {
	redisURL := testserver.SharedRedis(t)
	pgURL := testserver.SharedPostgres(t)
	stopped := "redis://" + testserver.ClosedAddr(t) + "/0" // where a stopped Redis was
	const limiters = "limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n"
	refused := []struct{ name, yaml, want string }{
		{"redis db 99", "store: " + strings.TrimSuffix(redisURL, "/0") + "/99\n", "DB index is out of range"},
		{"postgres unknown database", "store: " + strings.Replace(pgURL, "/postgres?", "/nosuchdb?", 1) + "\n", `database "nosuchdb" does not exist`},
		{"redis down, not started without it", "store: " + stopped + "\nserver: {start_without_store: false}\n", "connection refused"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfig([]byte(tt.yaml + limiters))
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(t.Context(), cfg)
			if err == nil {
				s.Close()
				t.Fatalf("New = nil error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}

	t.Run("redis down, started without it", func(t *testing.T) {
		cfg, err := LoadConfig([]byte("store: " + stopped + "\n" + limiters))
		if err != nil {
			t.Fatal(err)
		}
		var log testserver.Buffer
		s, err := New(t.Context(), cfg, WithLogger(slog.New(slog.NewJSONHandler(&log, nil))))
		if err != nil {
			t.Fatalf("New = %v, want a server that starts without its store", err)
		}
		defer s.Close()
		code, got := call(t, s, "GET", "/readyz", "")
		e, _ := got["error"].(map[string]any)
		if msg, _ := e["message"].(string); code != 503 || !strings.Contains(msg, "has not answered since the start") {
			t.Errorf("/readyz = %d %v, want 503 saying the store has not answered", code, got)
		}
		if !strings.Contains(log.String(), `"level":"ERROR","msg":"the store is unreachable at start`) {
			t.Errorf("log = %s, want an error about the unreachable store", log.String())
		}
	})
}

// TestStoreAnswersLater starts a server whose store does not answer yet
// (a proxy to a real Redis that drops every connection), then lets the
// connections through: the server becomes ready on its own.
func TestStoreAnswersLater(t *testing.T) {
	redisURL := testserver.SharedRedis(t)
	target := strings.Split(strings.TrimPrefix(redisURL, "redis://"), "/")[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var up atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !up.Load() {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				r, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer r.Close()
				go io.Copy(r, c)
				io.Copy(c, r)
			}()
		}
	}()

	cfg, err := LoadConfig([]byte("store: redis://" + ln.Addr().String() + "/0\n" +
		"limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var log testserver.Buffer
	s, err := New(t.Context(), cfg, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	s.recheckEvery = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- s.Serve(ctx, httpLn, nil) }()
	defer func() {
		cancel()
		<-done
	}()
	if code, _ := call(t, s, "GET", "/readyz", ""); code != 503 {
		t.Fatalf("/readyz before the store answers = %d, want 503", code)
	}
	up.Store(true)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := call(t, s, "GET", "/readyz", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still not ready 20s after the store answers; log:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), "the store answers; ready") {
		t.Errorf("log = %s, want a line saying the store answers", log.String())
	}
}

// TestReloadErrorOncePerChange: a config file that fails to load is
// reported once per change of the file, not at every poll (it was read
// and logged again each second: 13 errors for two bad edits).
func TestReloadErrorOncePerChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		mtime = mtime.Add(time.Second) // a new stamp whatever the file system's resolution
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	good := "limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n"
	write(good)
	s, log := newFromFile(t, path)
	polls := func(n int) {
		for range n {
			s.reloadFile(false)
		}
	}
	counts := func() (ok, failed float64) {
		return testutil.ToFloat64(s.metrics.reloads.WithLabelValues("ok")), testutil.ToFloat64(s.metrics.reloads.WithLabelValues("error"))
	}
	steps := []struct {
		name       string
		edit       func()
		ok, failed float64
	}{
		{"first bad edit", func() { write("limiters: {api: {policy: nope}}\n") }, 0, 1},
		{"second bad edit", func() { write("limiters: [\n") }, 0, 2},
		{"bad file touched", func() { write("limiters: [\n") }, 0, 2},
		{"back to the running file", func() { write(good) }, 0, 2},
		{"bad again", func() { write("limiters: [\n") }, 0, 3},
		{"a new good file", func() { write(strings.Replace(good, "limit: 3", "limit: 4", 1)) }, 1, 3},
		{"bad once more", func() { write("limiters: [\n") }, 1, 4},
	}
	for _, st := range steps {
		st.edit()
		polls(6)
		if ok, failed := counts(); ok != st.ok || failed != st.failed {
			t.Errorf("after %s and 6 polls: reloads ok %v, error %v; want %v and %v", st.name, ok, failed, st.ok, st.failed)
		}
	}
	if n := strings.Count(log.String(), "reload failed"); n != 4 {
		t.Errorf("%d reload errors logged, want 4 (one per bad change):\n%s", n, log.String())
	}
	// A reload asked for (SIGHUP) tries again, and says so.
	s.reloadFile(true)
	if _, failed := counts(); failed != 5 {
		t.Errorf("a forced reload of the bad file: %v errors counted, want 5", failed)
	}
}

// TestMetricsFromStart: the counters of rare events exist at zero before
// the first one, with their label values, so that alerts on their rate or
// absence work from the start (they appeared only after a first event).
func TestMetricsFromStart(t *testing.T) {
	s, _ := testServer(t, "server: {store_failure: fail_open}\nlimiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n")
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`sluice_store_errors_total{op="update"} 0`,
		`sluice_store_errors_total{op="delete"} 0`,
		`sluice_store_errors_total{op="ping"} 0`,
		`sluice_store_errors_total{op="sweep"} 0`,
		`sluice_store_swept_rows_total 0`,
		`sluice_store_failures_total{limiter="api",policy="fail_open"} 0`,
		`sluice_config_reloads_total{result="ok"} 0`,
		`sluice_config_reloads_total{result="error"} 0`,
		`sluice_decisions_total{limiter="api",outcome="rejected"} 0`,
		`sluice_decisions_total{limiter="api",outcome="error"} 0`,
		`sluice_decisions_total{limiter="api",outcome="invalid"} 0`,
		`sluice_store_circuit_open{limiter="api"} 0`, // was missing until a circuit first opened
		`sluice_tokens_consumed_total{limiter="api"} 0`,
		`sluice_store_duration_seconds_count{op="update"} 0`,
	} {
		if !strings.Contains(w.Body.String(), want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}
}
