package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

const slotsYAML = `
limiters:
  calls: {policy: concurrency, limit: 2, ttl: 10s}
  three: {policy: fixed_window, limit: 3, interval: 1 minute}
`

func TestSlotAPI(t *testing.T) {
	s, clock := testServer(t, slotsYAML)
	acquire := func(body string) map[string]any {
		t.Helper()
		code, out := call(t, s, "POST", "/api/v1/acquire", body)
		if code != http.StatusOK {
			t.Fatalf("acquire %s = %d %v, want 200", body, code, out)
		}
		return out
	}
	a := acquire(`{"limiter": "calls", "key": "k"}`)
	b := acquire(`{"limiter": "calls", "key": "k", "ttl_ms": 5000}`)
	if a["allowed"] != true || a["ttl_ms"] != 10000.0 || b["allowed"] != true || b["ttl_ms"] != 5000.0 || b["remaining"] != 0.0 {
		t.Fatalf("two acquisitions = %v, %v; want both allowed, TTLs 10000 and 5000 ms", a, b)
	}
	if c := acquire(`{"limiter": "calls", "key": "k"}`); c["allowed"] != false || c["slot"] != nil || c["retry_after_ms"] != 5000.0 {
		t.Fatalf("a third acquisition = %v; want refused, no slot, retry_after_ms 5000", c)
	}
	release := fmt.Sprintf(`{"limiter": "calls", "slot": %q}`, a["slot"])
	if code, out := call(t, s, "POST", "/api/v1/release", release); code != http.StatusOK || out["allowed"] != true || out["remaining"] != 1.0 {
		t.Fatalf("release = %d %v; want 200, allowed, remaining 1", code, out)
	}
	if _, out := call(t, s, "POST", "/api/v1/release", release); out["allowed"] != false {
		t.Fatalf("second release = %v; want allowed false: not held", out)
	}
	clock.Advance(4 * time.Second)
	renew := fmt.Sprintf(`{"limiter": "calls", "slot": %q, "ttl_ms": 2000}`, b["slot"])
	if code, out := call(t, s, "POST", "/api/v1/renew", renew); code != http.StatusOK || out["allowed"] != true || out["slot"] != b["slot"] {
		t.Fatalf("renew = %d %v; want 200, allowed, the same slot", code, out)
	}
	clock.Advance(2 * time.Second) // b, renewed to +6s... and no further: lapsed
	if _, out := call(t, s, "POST", "/api/v1/renew", renew); out["allowed"] != false {
		t.Fatalf("renew of a lapsed slot = %v; want allowed false", out)
	}
	if c := acquire(`{"limiter": "calls", "key": "k", "max_wait_ms": 1000}`); c["allowed"] != true {
		t.Fatalf("acquire after the slots were freed = %v; want allowed", c)
	}

	for _, tc := range []struct{ path, body, code string }{
		{"/api/v1/acquire", `{"limiter": "calls", "key": "k", "ttl_ms": 11000}`, codeInvalidRequest},
		{"/api/v1/acquire", `{"limiter": "calls", "key": "k", "ttl_ms": -1}`, codeInvalidRequest},
		{"/api/v1/acquire", `{"limiter": "calls", "key": "k", "max_wait_ms": 60001}`, codeInvalidRequest},
		{"/api/v1/acquire", `{"limiter": "calls"}`, codeInvalidRequest},
		{"/api/v1/acquire", `{"limiter": "three", "key": "k"}`, codeUnsupported},
		{"/api/v1/acquire", `{"limiter": "nope", "key": "k"}`, codeUnknownLimiter},
		{"/api/v1/release", `{"limiter": "calls"}`, codeInvalidRequest},
		{"/api/v1/release", `{"limiter": "calls", "slot": "k"}`, codeInvalidRequest},
		{"/api/v1/release", `{"limiter": "calls", "slot": "-3/k"}`, codeInvalidRequest},
		{"/api/v1/renew", `{"limiter": "calls", "slot": "12/k", "ttl_ms": 20000}`, codeInvalidRequest},
		{"/api/v1/renew", `{"limiter": "calls", "slot": "12/k", "bogus": 1}`, codeInvalidRequest},
	} {
		code, out := call(t, s, "POST", tc.path, tc.body)
		e, _ := out["error"].(map[string]any)
		if code/100 != 4 || e["code"] != tc.code {
			t.Errorf("POST %s %s = %d %v; want a 4xx %s", tc.path, tc.body, code, out, tc.code)
		}
	}
}
