//go:build linux

package page

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver"
)

// fakeAPI stands in for the JSON API of sluice serve. Each stats request
// is one poll: uptime advances by a second and the counts by fixed steps,
// so the rates the page shows are known whatever the number of polls.
type fakeAPI struct {
	status   map[string]int // path → status to answer with instead
	notReady string         // when set, /readyz answers 503 with this message

	mu    sync.Mutex
	polls int
	sims  []url.Values
}

type fakeLimiter struct {
	name, policy string
	limit        int
	// allowed and rejected are added at each poll; the i-th poll adds the
	// (i mod len)-th step.
	allowed, rejected []int
	errors            int
	degraded          bool
	storeFailing      bool
	circuitOpen       bool
}

// The api limiter is steady at 41 allowed and 6 rejected a second: 47
// decisions/s, 6 rejections/s, 12.8% rejected; its totals start at 1000
// allowed and 100 rejected.
// The policies are written as sluice serve writes them, the long ones of
// its built-in example included: the page must fit them.
var fakeLimiters = []fakeLimiter{
	{"api", "sliding_window(limit=100, interval=1m0s)", 100, []int{41}, []int{6}, 0, false, false, false},
	{"login", "sliding_log(limit=5, interval=15m0s)", 10, []int{2, 3, 1, 4}, []int{9, 14, 22, 11}, 3, true, false, false},
	{"search", "bucket(capacity=20 greedy(10 per 1s) id=burst)", 200, []int{120, 95, 150, 180, 130, 110, 160}, []int{0, 0, 4, 12, 0, 0, 2}, 0, true, true, false},
	{"checkout", "compound(sliding_window(limit=100, interval=1m0s), fixed_window(limit=3, interval=10s))", 3, []int{1}, []int{0}, 0, false, true, true},
	{"envoy:edge|path=/login|user", "fixed_window(limit=5, interval=1m0s, aligned)", 5, []int{2}, []int{1}, 0, false, false, false},
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if code := f.status[r.URL.Path]; code != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"code":"fake","message":"fake status %d"}}`, code)
		return
	}
	switch r.URL.Path {
	case "/readyz":
		if f.notReady != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":{"code":"store_unavailable","message":%q}}`, f.notReady)
			return
		}
		writeJSON(w, map[string]string{"status": "ready"})
	case "/api/v1/limiters":
		type limiter struct {
			Name   string `json:"name"`
			Policy string `json:"policy"`
			Limit  int    `json:"limit"`
		}
		var out struct {
			Limiters []limiter `json:"limiters"`
		}
		for _, l := range fakeLimiters {
			out.Limiters = append(out.Limiters, limiter{l.name, l.policy, l.limit})
		}
		writeJSON(w, out)
	case "/api/v1/stats":
		f.mu.Lock()
		f.polls++
		n := f.polls
		f.mu.Unlock()
		type stats struct {
			Name         string `json:"name"`
			Allowed      int    `json:"allowed"`
			Rejected     int    `json:"rejected"`
			Errors       int    `json:"errors"`
			Tokens       int    `json:"tokens"`
			Degraded     bool   `json:"degraded"`
			StoreFailing bool   `json:"store_failing"`
			CircuitOpen  bool   `json:"circuit_open"`
		}
		type hotKey struct {
			Limiter string `json:"limiter"`
			Key     string `json:"key"`
			Count   int    `json:"count"`
		}
		out := struct {
			Uptime   float64  `json:"uptime_seconds"`
			Store    string   `json:"store"`
			Limiters []stats  `json:"limiters"`
			HotKeys  []hotKey `json:"hot_keys"`
		}{Uptime: 3600 + 120 + float64(n), Store: "redis://10.0.0.5:6379/0"}
		for _, l := range fakeLimiters {
			s := stats{Name: l.name, Allowed: 1000, Rejected: 100, Errors: l.errors, Degraded: l.degraded,
				StoreFailing: l.storeFailing, CircuitOpen: l.circuitOpen}
			for i := range n {
				s.Allowed += l.allowed[i%len(l.allowed)]
				s.Rejected += l.rejected[i%len(l.rejected)]
			}
			s.Tokens = s.Allowed
			out.Limiters = append(out.Limiters, s)
		}
		out.HotKeys = []hotKey{
			{"api", "203.0.113.7", 1200 + 30*n},
			{"login", "user:<b>mallory</b>", 310 + 20*n},
			{"search", "2001:db8:12::/64", 95 + 9*n},
		}
		writeJSON(w, out)
	case "/api/v1/simulate":
		q := r.URL.Query()
		f.mu.Lock()
		f.sims = append(f.sims, q)
		f.mu.Unlock()
		if _, err := time.ParseDuration(q.Get("duration")); err != nil || q.Get("traffic") == "" {
			http.Error(w, "bad traffic or duration", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "image/svg+xml")
		fmt.Fprint(w, fakeChart)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeAPI) simulations() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sims)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// fakeChart is a small valid SVG shaped like a simulate chart: accepted
// bars, rejected bars on top, a level line.
const fakeChart = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 400 120" width="400" height="120">
<rect width="400" height="120" fill="#fff"/>
<g fill="#2e7d32"><rect x="20" y="40" width="30" height="60"/><rect x="60" y="60" width="30" height="40"/><rect x="100" y="60" width="30" height="40"/><rect x="140" y="60" width="30" height="40"/></g>
<g fill="#c62828"><rect x="20" y="10" width="30" height="30"/></g>
<polyline points="20,20 60,80 100,70 140,60 180,50" fill="none" stroke="#1565c0" stroke-width="2"/>
<line x1="10" y1="100" x2="390" y2="100" stroke="#333"/>
</svg>`

// newSite serves the page at "/" and api on the same origin, as sluice
// serve does.
func newSite(t *testing.T, api *fakeAPI) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", Handler())
	mux.Handle("/api/", api)
	mux.Handle("/readyz", api)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// chromium runs headless Chromium on url with args added; see
// testserver.Chromium.
func chromium(t *testing.T, url string, args ...string) []byte {
	t.Helper()
	return testserver.Chromium(t, url, args...)
}

var templateRE = regexp.MustCompile(`(?s)<template\b.*?</template>`)

// live returns the DOM Chromium dumped without the page's templates, whose
// contents Chromium prints too.
func live(dom []byte) string {
	return templateRE.ReplaceAllString(string(dom), "")
}

// element returns the first start tag in dom whose id attribute is id.
func element(t *testing.T, dom, id string) string {
	t.Helper()
	tag := regexp.MustCompile(`<[a-z0-9]+\b[^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(dom)
	if tag == "" {
		t.Fatalf("no element with id %q in the DOM", id)
	}
	return tag
}

var (
	cellRE  = regexp.MustCompile(`(?s)<t[hd]\b[^>]*>(.*?)</t[hd]>`)
	tagRE   = regexp.MustCompile(`<[^>]*>`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// rowCells returns the texts of the cells of the limiters table row of
// limiter name, as a user reads them: the texts of a cell's elements
// separated by a space.
func rowCells(t *testing.T, dom, name string) []string {
	t.Helper()
	tr := regexp.MustCompile(`(?s)<tr data-limiter="` + regexp.QuoteMeta(name) + `">(.*?)</tr>`).FindStringSubmatch(dom)
	if tr == nil {
		t.Fatalf("no row for limiter %q in the DOM", name)
	}
	var cells []string
	for _, c := range cellRE.FindAllStringSubmatch(tr[1], -1) {
		cells = append(cells, strings.TrimSpace(spaceRE.ReplaceAllString(tagRE.ReplaceAllString(c[1], " "), " ")))
	}
	return cells
}

func TestChromiumLivePage(t *testing.T) {
	api := &fakeAPI{}
	srv := newSite(t, api)
	dom := live(chromium(t, srv.URL+"/", "--dump-dom"))

	// Name and policy, limit; last poll: decisions/s, rejections/s,
	// rejected; totals: allowed, rejected, errors; health, sparkline (no
	// text). The totals grow by a poll's counts at each poll, so they are
	// checked against the rates: allowed = 1000 + 41 × polls.
	got := rowCells(t, dom, "api")
	if len(got) != 10 {
		t.Fatalf("api row = %q, want 10 cells", got)
	}
	want := []string{"api sliding_window(limit=100, interval=1m0s)", "100", "47", "6", "12.8%"}
	if !slices.Equal(got[:5], want) || got[7] != "0" || got[8] != "ok" || got[9] != "" {
		t.Errorf("api row = %q, want %q, totals, 0 errors, ok and a sparkline", got, want)
	}
	allowed, err1 := strconv.Atoi(strings.ReplaceAll(got[5], ",", ""))
	rejected, err2 := strconv.Atoi(strings.ReplaceAll(got[6], ",", ""))
	if polls := (allowed - 1000) / 41; err1 != nil || err2 != nil || polls < 2 || allowed != 1000+41*polls || rejected != 100+6*polls {
		t.Errorf("api totals = %q allowed, %q rejected; want 1000 + 41 and 100 + 6 a poll", got[5], got[6])
	}
	if got := rowCells(t, dom, "login"); len(got) != 10 || !strings.HasPrefix(got[0], "login ") || got[7] != "3" || got[8] != "degraded" {
		t.Errorf("login row = %q, want login with 3 errors, degraded", got)
	}
	// A store failing a limiter, or its circuit open, outranks its
	// rejections.
	if got := rowCells(t, dom, "search"); len(got) != 10 || !strings.HasPrefix(got[0], "search ") || got[8] != "store failing" {
		t.Errorf("search row = %q, want search, store failing", got)
	}
	if got := rowCells(t, dom, "checkout"); len(got) != 10 || got[8] != "circuit open" {
		t.Errorf("checkout row = %q, want circuit open", got)
	}
	if tag := element(t, dom, "readiness"); !strings.Contains(tag, "hidden") {
		t.Errorf("the not-ready note is shown for a ready server: %s", tag)
	}
	if ready := readyText(t, dom); ready != "ready" {
		t.Errorf("readiness = %q, want ready", ready)
	}
	// Every column says its unit.
	head := regexp.MustCompile(`(?s)<thead>(.*?)</thead>`).FindStringSubmatch(dom)
	if head == nil {
		t.Fatal("no table head in the DOM")
	}
	for _, unit := range []string{"Last poll", "Decisions per second", "Rejections per second", "Rejected, % of decisions",
		"Totals since the start", "Decisions per second, last 60 polls"} {
		if !strings.Contains(head[1], unit) {
			t.Errorf("the limiters' table head does not say %q:\n%s", unit, head[1])
		}
	}
	// And the totals of every limiter, in the table's foot.
	foot := regexp.MustCompile(`(?s)<tfoot\b([^>]*)>(.*?)</tfoot>`).FindStringSubmatch(dom)
	if foot == nil || strings.Contains(foot[1], "hidden") || !strings.Contains(foot[2], "All limiters") {
		t.Errorf("no row of totals over all limiters in the DOM")
	}
	if n := strings.Count(dom, `<svg class="spark"`); n != len(fakeLimiters) {
		t.Errorf("%d sparklines in the DOM, want %d", n, len(fakeLimiters))
	}
	for _, s := range []string{
		"redis://10.0.0.5:6379/0",
		"1h 02m",      // uptime
		"203.0.113.7", // hottest key
		"user:&lt;b&gt;mallory&lt;/b&gt;",
	} {
		if !strings.Contains(dom, s) {
			t.Errorf("DOM does not contain %q", s)
		}
	}
	if strings.Contains(dom, "<b>mallory") {
		t.Errorf("a hot key was written as HTML")
	}
	if tag := element(t, dom, "updated"); !strings.Contains(tag, "datetime=") {
		t.Errorf("last-updated time not set: %s", tag)
	}
	if tag := element(t, dom, "banner"); !strings.Contains(tag, "hidden") {
		t.Errorf("error banner shown: %s", tag)
	}
	if tag := element(t, dom, "auth"); !strings.Contains(tag, "hidden") {
		t.Errorf("token form shown: %s", tag)
	}

	imgs := regexp.MustCompile(`<img [^>]*>`).FindAllString(dom, -1)
	if len(imgs) != len(fakeLimiters) {
		t.Fatalf("%d simulate images in the DOM, want %d: %q", len(imgs), len(fakeLimiters), imgs)
	}
	for _, img := range imgs {
		if !strings.Contains(img, `src="blob:`) || strings.Contains(img, "hidden") || !strings.Contains(img, `alt="Chart of `) {
			t.Errorf("simulate image not shown: %s", img)
		}
	}
	var asked []string
	for _, q := range api.simulations() {
		asked = append(asked, q.Encode())
	}
	for _, l := range fakeLimiters {
		q := url.Values{"limiter": {l.name}, "traffic": {"steady 20/s"}, "duration": {"10s"}}.Encode()
		if !slices.Contains(asked, q) {
			t.Errorf("simulate not asked for %s; asked %q", q, asked)
		}
	}
}

// readyText is the text of the page's readiness in the header.
func readyText(t *testing.T, dom string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<dd id="ready"[^>]*>(.*?)</dd>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatal("no readiness in the DOM")
	}
	return strings.TrimSpace(tagRE.ReplaceAllString(m[1], ""))
}

// TestChromiumNotReady: when /readyz answers 503 (the store does not
// answer), the page says so and why, and every limiter's health says not
// ready: the page showed a green "ok" for each while every consume failed.
func TestChromiumNotReady(t *testing.T) {
	const why = "store: dial tcp 10.0.0.5:6379: connect: connection refused"
	srv := newSite(t, &fakeAPI{notReady: why})
	dom := live(chromium(t, srv.URL+"/", "--dump-dom"))
	if ready := readyText(t, dom); ready != "not ready" {
		t.Errorf("readiness = %q, want not ready", ready)
	}
	note := regexp.MustCompile(`(?s)<p id="readiness"([^>]*)>(.*?)</p>`).FindStringSubmatch(dom)
	if note == nil || strings.Contains(note[1], "hidden") || !strings.Contains(note[2], "HTTP 503: "+why) {
		t.Errorf("the not-ready note = %q, want it shown with /readyz's reason", note)
	}
	for _, l := range fakeLimiters {
		if got := rowCells(t, dom, l.name); len(got) != 10 || got[8] != "not ready" {
			t.Errorf("%s row = %q, want health not ready", l.name, got)
		}
	}
}

func TestChromiumServerTrouble(t *testing.T) {
	tests := []struct {
		name   string
		status map[string]int
		want   []string // in the DOM
		shown  []string // ids of elements that must not be hidden
	}{
		{
			name:   "stats fail",
			status: map[string]int{"/api/v1/stats": 503},
			want:   []string{"Cannot update: HTTP 503: fake status 503. Retrying every second.", "No data yet."},
			shown:  []string{"banner"},
		},
		{
			name:   "no simulate",
			status: map[string]int{"/api/v1/simulate": 404},
			want:   []string{"Simulation is not available on this server (HTTP 404: fake status 404)."},
		},
		{
			name:   "token needed",
			status: map[string]int{"/api/v1/limiters": 401, "/api/v1/stats": 401, "/api/v1/simulate": 401},
			want:   []string{"needs a bearer token", `<input id="token" type="password"`},
			shown:  []string{"auth"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newSite(t, &fakeAPI{status: tt.status})
			dom := live(chromium(t, srv.URL+"/", "--dump-dom"))
			for _, s := range tt.want {
				if !strings.Contains(dom, s) {
					t.Errorf("DOM does not contain %q", s)
				}
			}
			for _, id := range tt.shown {
				if tag := element(t, dom, id); strings.Contains(tag, "hidden") {
					t.Errorf("#%s hidden: %s", id, tag)
				}
			}
		})
	}
}

// layoutProbe is a page of the test's that shows the live page in a frame
// 1280 pixels wide, as a browser window of that width, and after the page
// has polled a few times writes what the frame laid out into its own DOM:
// the limiters table's box and scroll width, and each sparkline's box.
const layoutProbe = `<!doctype html>
<iframe id="f" src="/" style="width:1280px;height:900px;border:0"></iframe>
<pre id="out"></pre>
<script>
setTimeout(() => {
  const d = document.getElementById("f").contentDocument;
  const scroll = d.getElementById("limiters").closest(".scroll");
  const box = scroll.getBoundingClientRect();
  const sparks = [...d.querySelectorAll("svg.spark")].map((s) => s.getBoundingClientRect().right);
  document.getElementById("out").textContent = JSON.stringify({
    scrollWidth: scroll.scrollWidth, clientWidth: scroll.clientWidth, right: box.right,
    pageWidth: d.documentElement.scrollWidth, viewport: d.documentElement.clientWidth, sparks,
  });
}, 4000);
</script>`

// TestChromiumFitsAt1280 lays the page out at 1280 pixels with the long
// policy names of the built-in example: the limiters table does not
// scroll sideways and every sparkline is shown whole (the table scrolled
// and cut them).
func TestChromiumFitsAt1280(t *testing.T) {
	mux := http.NewServeMux()
	page := Handler()
	// The page forbids framing; the probe, of the same origin, needs it.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.Header().Set("Content-Security-Policy", strings.Replace(contentSecurityPolicy, "; frame-ancestors 'none'", "", 1))
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
	mux.HandleFunc("/probe", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, layoutProbe)
	})
	mux.Handle("/api/", &fakeAPI{})
	mux.Handle("/readyz", &fakeAPI{})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dom := string(chromium(t, srv.URL+"/probe", "--dump-dom", "--window-size=1400,1000"))
	m := regexp.MustCompile(`<pre id="out">(.*?)</pre>`).FindStringSubmatch(dom)
	if m == nil || m[1] == "" {
		t.Fatalf("the probe wrote nothing:\n%s", dom)
	}
	var got struct {
		ScrollWidth, ClientWidth, PageWidth, Viewport float64
		Right                                         float64
		Sparks                                        []float64
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &got); err != nil {
		t.Fatalf("probe output %q: %v", m[1], err)
	}
	if got.ScrollWidth > got.ClientWidth {
		t.Errorf("the limiters table is %v pixels wide in a box of %v: it scrolls sideways", got.ScrollWidth, got.ClientWidth)
	}
	if got.PageWidth > got.Viewport {
		t.Errorf("the page is %v pixels wide in a window of %v", got.PageWidth, got.Viewport)
	}
	if len(got.Sparks) != len(fakeLimiters) {
		t.Errorf("%d sparklines laid out, want %d", len(got.Sparks), len(fakeLimiters))
	}
	for i, right := range got.Sparks {
		if right > got.Right {
			t.Errorf("sparkline %d ends at %v, past the table's visible edge at %v", i, right, got.Right)
		}
	}
}

// TestChromiumScreenshot renders the page and keeps a screenshot to look
// at: in $SLUICE_SCREENSHOT_DIR if set, else in the temp dir.
func TestChromiumScreenshot(t *testing.T) {
	srv := newSite(t, &fakeAPI{})
	shot := filepath.Join(t.TempDir(), "page.png")
	chromium(t, srv.URL+"/", "--screenshot="+shot, "--window-size=1280,900")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if got, want := img.Bounds().Size(), (image.Point{1280, 900}); got != want {
		t.Errorf("screenshot size = %v, want %v", got, want)
	}
	if n := colors(img); n < 16 {
		t.Errorf("screenshot has %d colours, want a rendered page (16 or more)", n)
	}

	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(dir, "sluice-page.png")
	if err := os.WriteFile(keep, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the live page: %s", keep)
}

// colors counts the distinct colours of img, up to 1000.
func colors(img image.Image) int {
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
			if len(seen) >= 1000 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
