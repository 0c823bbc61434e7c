package server

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

const debtYAML = `
limiters:
  tokens: {policy: token_bucket, limit: 1000, rate: {interval: 1 minute, amount: 1000}}
  slide: {policy: sliding_window, limit: 10, interval: 1 minute}
`

// TestReserveSettle runs issue 30's figures through the HTTP API: a token
// bucket of 1,000 a minute, reserve 100, settle 300, settle again,
// reserve 100 and settle 20, and a reservation of 50 left to expire.
func TestReserveSettle(t *testing.T) {
	s, clock := testServer(t, debtYAML)
	reserve := func(tokens, ttl string) map[string]any {
		t.Helper()
		code, out := call(t, s, "POST", "/api/v1/reserve", `{"limiter": "tokens", "key": "tenant", "tokens": `+tokens+`, "ttl_ms": `+ttl+`}`)
		if code != http.StatusOK || out["allowed"] != true || out["reservation"] == "" {
			t.Fatalf("reserve %s = %d %v, want allowed with a reservation", tokens, code, out)
		}
		return out
	}
	settle := func(id any, tokens string, settled bool, remaining float64) {
		t.Helper()
		code, out := call(t, s, "POST", "/api/v1/settle", `{"limiter": "tokens", "reservation": "`+id.(string)+`", "tokens": `+tokens+`}`)
		if code != http.StatusOK || out["settled"] != settled || out["remaining"] != remaining || out["debt"] != 0.0 {
			t.Fatalf("settle %s = %d %v, want settled %v, %v remaining, no debt", tokens, code, out, settled, remaining)
		}
	}
	r := reserve("100", "60000")
	if r["remaining"] != 900.0 {
		t.Fatalf("reserve 100 = %v, want 900 remaining", r)
	}
	settle(r["reservation"], "300", true, 700)
	settle(r["reservation"], "300", false, 700)
	r = reserve("100", "60000")
	settle(r["reservation"], "20", true, 680)
	reserve("50", "10000")
	clock.Advance(10 * time.Second)
	_, got := call(t, s, "POST", "/api/v1/inspect", `{"limiter": "tokens", "key": "tenant"}`)
	if got["debt"] != 0.0 || got["result"].(map[string]any)["remaining"] != 629.0 {
		t.Errorf("inspect after the reservation of 50 expired = %v, want 630 left (629 after the token inspected), no debt", got)
	}

	// A charge beyond what is left, through a settlement: the debt shows.
	r = reserve("600", "60000")
	code, out := call(t, s, "POST", "/api/v1/settle", `{"limiter": "tokens", "reservation": "`+r["reservation"].(string)+`", "tokens": 1130}`)
	if code != http.StatusOK || out["debt"] != 500.0 || out["remaining"] != 0.0 || out["retry_after_ms"] != 50000.0 {
		t.Errorf("settle 1130 of 630 left = %d %v, want a debt of 500, paid at the refill 50s on", code, out)
	}
	if _, got := call(t, s, "POST", "/api/v1/inspect", `{"limiter": "tokens", "key": "tenant"}`); got["debt"] != 500.0 {
		t.Errorf("inspect = %v, want debt 500", got)
	}
}

func TestReserveSettleBadInput(t *testing.T) {
	s, _ := testServer(t, debtYAML)
	for _, tt := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/api/v1/reserve", `{"limiter": "tokens", "key": "k", "tokens": 1}`, 400, codeInvalidRequest},
		{"/api/v1/reserve", `{"limiter": "tokens", "key": "k", "tokens": 1, "ttl_ms": 0}`, 400, codeInvalidRequest},
		{"/api/v1/reserve", `{"limiter": "tokens", "key": "k", "tokens": 0, "ttl_ms": 10}`, 400, codeInvalidRequest},
		{"/api/v1/reserve", `{"limiter": "tokens", "key": "k", "tokens": 1001, "ttl_ms": 10}`, 400, codeAboveLimit},
		{"/api/v1/reserve", `{"limiter": "slide", "key": "k", "tokens": 1, "ttl_ms": 10}`, 400, codeUnsupported},
		{"/api/v1/reserve", `{"limiter": "nope", "key": "k", "tokens": 1, "ttl_ms": 10}`, 404, codeUnknownLimiter},
		{"/api/v1/settle", `{"limiter": "tokens", "reservation": "x!", "tokens": 1}`, 400, codeInvalidRequest},
		{"/api/v1/settle", `{"limiter": "tokens", "reservation": "AAAAAAAAAAAA", "tokens": -1}`, 400, codeInvalidRequest},
		{"/api/v1/settle", `{"limiter": "tokens", "reservation": "AAAAAAAAAAAA"}`, 400, codeInvalidRequest},
		{"/api/v1/settle", `{"limiter": "tokens", "tokens": 1}`, 400, codeInvalidRequest},
	} {
		code, out := call(t, s, "POST", tt.path, tt.body)
		e, _ := out["error"].(map[string]any)
		if code != tt.status || e == nil || e["code"] != tt.code {
			t.Errorf("POST %s %s = %d %v, want %d %s", tt.path, tt.body, code, out, tt.status, tt.code)
		}
	}
}

// TestAlwaysCountedConfig: a config file's always_counted on a limiter
// that cannot owe tokens is an error at its line.
func TestAlwaysCountedConfig(t *testing.T) {
	_, err := LoadConfig([]byte(debtYAML + `envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: slide, always_counted: true}
`))
	if err == nil || !strings.Contains(err.Error(), `limiter "slide" cannot owe tokens`) || !strings.Contains(err.Error(), "line 8") {
		t.Errorf("LoadConfig = %v, want slide's refusal at line 8", err)
	}
	if _, err := LoadConfig([]byte(debtYAML + "envoy:\n  - domain: d\n    descriptors:\n      - {key: k, limiter: tokens, always_counted: true}\n")); err != nil {
		t.Errorf("LoadConfig of tokens always counted = %v", err)
	}
}
