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
