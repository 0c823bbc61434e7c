package simulate

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

func TestHandler(t *testing.T) {
	f := loadLimiters(t)
	srv := httptest.NewServer(Handler(func(name string) (sluice.Policy, bool) {
		l, ok := f.Limiters[name]
		return l.Policy, ok
	}, 1_000_000))
	defer srv.Close()
	get := func(q url.Values) (*http.Response, string) {
		resp, err := http.Get(srv.URL + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	resp, body := get(url.Values{"limiter": {"fixed"}, "traffic": {"steady 20/s"}, "duration": {"5s"}})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(body, `id="panel-fixed"`) ||
		!strings.Contains(body, "accepted 50") {
		t.Errorf("chart: %d %s\n%.300s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	for _, tt := range []struct {
		q      url.Values
		status int
		code   string
		says   string
	}{
		{url.Values{"limiter": {"nope"}, "traffic": {"steady 1/s"}}, 404, "unknown_limiter", `no limiter "nope"`},
		{url.Values{"limiter": {"fixed"}, "traffic": {"trickle"}}, 400, "invalid_request", "unknown pattern"},
		{url.Values{"limiter": {"fixed"}, "traffic": {"steady 1/s; replay /etc/passwd"}}, 400, "invalid_request", "only for sluice simulate"},
		{url.Values{"limiter": {"fixed"}, "traffic": {"steady 1/s"}, "duration": {"-1s"}}, 400, "invalid_request", "duration must be positive"},
		{url.Values{"limiter": {"fixed"}, "traffic": {"steady 1/s"}, "slice": {"soon"}}, 400, "invalid_request", "invalid duration"},
		{url.Values{"limiter": {"fixed"}, "traffic": {"steady 100000/s"}, "duration": {"11s"}}, 400, "invalid_request", "at most 1000000"},
	} {
		resp, body := get(tt.q)
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != tt.status ||
			e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.says) {
			t.Errorf("%v: %d %s, want %d %s saying %q", tt.q, resp.StatusCode, body, tt.status, tt.code, tt.says)
		}
	}
}

// TestHandlerRefusesBeforeGenerating: a spec over the cap is refused from
// its count, before its arrivals are made: 49 million would take 392 MB
// of arrival times alone (1.45 GB with the growth of the slice). What the
// refusal allocated shows it, not how long it took.
func TestHandlerRefusesBeforeGenerating(t *testing.T) {
	f := loadLimiters(t)
	h := Handler(func(name string) (sluice.Policy, bool) {
		l, ok := f.Limiters[name]
		return l.Policy, ok
	}, 1_000_000)
	for _, spec := range []string{
		"steady 49000000/s",
		"burst 40000000 at 0s",
		"ramp 1/s to 98000000/s",
		"poisson 49000000/s",
		"steady 1/s; steady 48999999/s",
	} {
		q := url.Values{"limiter": {"fixed"}, "traffic": {spec}, "duration": {"1s"}}
		r := httptest.NewRequest("GET", "/?"+q.Encode(), nil)
		var before, after runtime.MemStats
		var w *httptest.ResponseRecorder
		runtime.ReadMemStats(&before)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, r)
		runtime.ReadMemStats(&after)
		if w.Code != 400 || !strings.Contains(w.Body.String(), "at most 1000000") {
			t.Errorf("%q: %d %s, want 400 saying at most 1000000", spec, w.Code, w.Body)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
			t.Errorf("%q: refusing it allocated %d bytes, want under 64 KiB", spec, alloc)
		}
	}
}
