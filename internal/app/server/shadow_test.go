package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// shadowYAML has a limiter and the same limiter in shadow mode.
const shadowYAML = `
limiters:
  strict: {policy: sliding_window, limit: 3, interval: 10s}
  strict_shadow: {policy: sliding_window, limit: 3, interval: 10s, shadow: true}
`

// scrape returns the value of the series line (name and labels, as
// /metrics writes them) of s's /metrics, or -1 when it has none.
func scrape(t *testing.T, s *Server, series string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestShadowLimiter is issue 33's test of shadow mode: a limiter marked
// shadow: true admits every request, answers that it was a shadow
// decision, and its would-have-refused metric equals what the same
// limiter without shadow refused on the same requests.
func TestShadowLimiter(t *testing.T) {
	s, clock := testServer(t, shadowYAML)
	if got := scrape(t, s, `sluice_shadow_rejected_total{limiter="strict_shadow"}`); got != 0 {
		t.Fatalf("sluice_shadow_rejected_total before any request = %v, want 0", got)
	}
	refused := 0
	for i := range 60 {
		clock.Advance(time.Duration(i%5) * 700 * time.Millisecond)
		body := fmt.Sprintf(`{"key": "user%d", "tokens": %d}`, i%3, 1+i%2)
		_, plain := call(t, s, "POST", "/api/v1/consume", `{"limiter": "strict", `+body[1:])
		code, shadow := call(t, s, "POST", "/api/v1/consume", `{"limiter": "strict_shadow", `+body[1:])
		if code != http.StatusOK {
			t.Fatalf("consume of the shadow limiter = %d %v", code, shadow)
		}
		wantRejected := plain["allowed"] == false
		if wantRejected {
			refused++
		}
		if shadow["allowed"] != true || shadow["shadow"] != true || (shadow["shadow_rejected"] == true) != wantRejected ||
			shadow["remaining"] != plain["remaining"] {
			t.Fatalf("request %d: shadow answer %v, want allowed, shadow, shadow_rejected %v, the remaining of %v", i, shadow, wantRejected, plain)
		}
	}
	if refused == 0 {
		t.Fatal("the limiter without shadow refused nothing: the test shows nothing")
	}
	for series, want := range map[string]float64{
		`sluice_shadow_rejected_total{limiter="strict_shadow"}`:              float64(refused),
		`sluice_decisions_total{limiter="strict",outcome="rejected"}`:        float64(refused),
		`sluice_decisions_total{limiter="strict_shadow",outcome="allowed"}`:  60,
		`sluice_decisions_total{limiter="strict_shadow",outcome="rejected"}`: 0,
	} {
		if got := scrape(t, s, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	_, out := call(t, s, "POST", "/api/v1/inspect", `{"limiter": "strict_shadow", "key": "user0", "tokens": 3}`)
	if res, _ := out["result"].(map[string]any); res["shadow"] != true || res["allowed"] != true {
		t.Errorf("inspect of the shadow limiter = %v, want a shadow decision, allowed", out)
	}
	_, list := call(t, s, "GET", "/api/v1/limiters", "")
	ls, _ := list["limiters"].([]any)
	if len(ls) != 2 || ls[0].(map[string]any)["shadow"] != nil || ls[1].(map[string]any)["shadow"] != true {
		t.Errorf("limiters = %v, want strict_shadow alone marked shadow", list)
	}
}

// TestCheckThenCharge is counting by outcome through the API, for a
// caller that decides after the fact: inspect checks a login attempt
// without taking anything, and only a failed one is charged with consume.
func TestCheckThenCharge(t *testing.T) {
	s, _ := testServer(t, `
limiters:
  login: {policy: fixed_window, limit: 5, interval: 15m}
`)
	attempt := func(fails bool) (admitted bool) {
		_, out := call(t, s, "POST", "/api/v1/inspect", `{"limiter": "login", "key": "alice"}`)
		if res, _ := out["result"].(map[string]any); res["allowed"] != true {
			return false
		}
		if fails {
			if _, out := call(t, s, "POST", "/api/v1/consume", `{"limiter": "login", "key": "alice"}`); out["allowed"] != true {
				t.Fatalf("charge of a failure the check admitted = %v", out)
			}
		}
		return true
	}
	for i := range 20 { // every fourth fails; successes are checked, never charged
		if got, want := attempt(i%4 == 0), i <= 16; got != want {
			t.Fatalf("attempt %d admitted %v, want %v: locked after the 5th failure, attempt 16", i, got, want)
		}
	}
}

// TestShadowRLQS: the quota service answers a bucket of a limiter in
// shadow mode ALLOW_ALL, and counts what Envoy reports on it beyond the
// limit in sluice_shadow_rejected_total.
func TestShadowRLQS(t *testing.T) {
	s, gaddr := serve(t, `
limiters:
  quota: {policy: fixed_window, limit: 10, interval: 1h, shadow: true}
server: {auth: {open_metrics_with_request_values: true}}
rlqs:
  - domain: edge
    buckets:
      - {bucket: {name: api}, limiter: quota}
`, true)
	cc, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []uint64{4, 25} {
		report := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "api"}}, NumRequestsAllowed: n}}}
		if i == 0 {
			report.Domain = "edge"
		}
		if err := st.Send(report); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rule := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule()
		if rule != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Fatalf("report %d: %v, want ALLOW_ALL", i, resp)
		}
	}
	// 4, then 25 of which 6 fit the limit of 10.
	if got := scrape(t, s.Server, `sluice_shadow_rejected_total{limiter="quota"}`); got != 19 {
		t.Errorf("sluice_shadow_rejected_total = %v, want 19", got)
	}
}
