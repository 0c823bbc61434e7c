//go:build unix

package server

import (
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestLivePageInChromium loads the live page of a real server, with the
// simulator's charts, in headless
// Chromium: the page shows the configured limiters, the key the test
// used, and a chart for each limiter.
func TestLivePageInChromium(t *testing.T) {
	cfg, err := LoadConfig(Example())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for range 30 {
		call(t, s, "POST", "/api/v1/consume", `{"limiter": "login", "key": "mallory"}`)
	}
	site := httptest.NewServer(s.handler)
	t.Cleanup(site.Close)

	dom := string(testserver.Chromium(t, site.URL+"/", "--dump-dom"))
	for _, name := range cfg.Limiters.Order {
		if !strings.Contains(dom, fmt.Sprintf(`<tr data-limiter="%s">`, name)) {
			t.Errorf("the page has no row for limiter %s", name)
		}
	}
	if !regexp.MustCompile(`<td[^>]*>\s*mallory\s*</td>`).MatchString(dom) {
		t.Error("the page does not show the hot key mallory")
	}
	charts := regexp.MustCompile(`<img [^>]*src="blob:[^>]*>`).FindAllString(dom, -1)
	if len(charts) < len(cfg.Limiters.Order) {
		t.Errorf("%d charts on the page, want one per limiter (%d)", len(charts), len(cfg.Limiters.Order))
	}
}

// TestLivePageStoreDown loads the live page of a server whose store does
// not answer, where /readyz answers 503 and every consume fails 503: the
// page says the server is not ready and why, and no limiter's health is
// "ok" (each showed a green "ok" badge).
func TestLivePageStoreDown(t *testing.T) {
	cfg, err := LoadConfig([]byte("store: redis://" + testserver.ClosedAddr(t) + "/0\n" +
		"server: {start_without_store: true, store_timeout: 200ms}\n" +
		"limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n  quiet: {policy: no_limit}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if code, got := call(t, s, "POST", "/api/v1/consume", `{"limiter": "api", "key": "k"}`); code != 503 {
		t.Fatalf("consume with the store down = %d %v, want 503", code, got)
	}
	site := httptest.NewServer(s.handler)
	t.Cleanup(site.Close)

	dom := string(testserver.Chromium(t, site.URL+"/", "--dump-dom"))
	ready := regexp.MustCompile(`(?s)<dd id="ready"[^>]*>(.*?)</dd>`).FindStringSubmatch(dom)
	if ready == nil || !strings.Contains(ready[1], "not ready") {
		t.Errorf("the page's readiness = %q, want not ready", ready)
	}
	note := regexp.MustCompile(`(?s)<p id="readiness"([^>]*)>(.*?)</p>`).FindStringSubmatch(dom)
	if note == nil || strings.Contains(note[1], "hidden") || !strings.Contains(note[2], "the store has not answered") {
		t.Errorf("the page's not-ready note = %q, want it shown with /readyz's reason", note)
	}
	for _, name := range cfg.Limiters.Order {
		row := regexp.MustCompile(`(?s)<tr data-limiter="` + name + `">(.*?)</tr>`).FindStringSubmatch(dom)
		if row == nil {
			t.Errorf("the page has no row for limiter %s", name)
			continue
		}
		if strings.Contains(row[1], `class="badge ok"`) || !strings.Contains(row[1], `class="badge bad"`) {
			t.Errorf("limiter %s's row shows no bad health badge with the store down:\n%s", name, row[1])
		}
	}
}
