package server

import (
	"errors"
	"fmt"
	"os"
	"strings"
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
			if n := testutil.ToFloat64(s.metrics.storeFailures.WithLabelValues("three", tt.failure)); n != 1 {
				t.Errorf("sluice_store_failures_total{limiter=three,policy=%s} = %v, want 1", tt.failure, n)
			}
			// Shutdown closes the store promptly even though it is down:
			// the client does not retry on its own (storeurl).
			start := time.Now()
			s.Close()
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("closing a store whose server is down took %v", d)
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
