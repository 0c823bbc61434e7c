package page

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantType           string
		wantBody           string
	}{
		{"page", "GET", "/", 200, "text/html; charset=utf-8", "<h1>sluice"},
		{"page HEAD", "HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"style", "GET", "/assets/page.css", 200, "text/css; charset=utf-8", "--ink"},
		{"script", "GET", "/assets/page.js", 200, "text/javascript; charset=utf-8", "api/v1/stats"},
		{"index by name", "GET", "/index.html", 404, "text/plain; charset=utf-8", "404 page not found"},
		{"asset by file path", "GET", "/assets/index.html", 404, "text/plain; charset=utf-8", "404 page not found"},
		{"unknown", "GET", "/nope", 404, "text/plain; charset=utf-8", "404 page not found"},
		{"asset directory", "GET", "/assets/", 404, "text/plain; charset=utf-8", "404 page not found"},
		{"POST", "POST", "/", 405, "text/plain; charset=utf-8", "method not allowed"},
	}
	h := Handler()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.wantStatus {
				t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, rec.Code, tt.wantStatus)
			}
			if got := rec.Header().Get("Content-Type"); got != tt.wantType {
				t.Errorf("%s %s: Content-Type %q, want %q", tt.method, tt.path, got, tt.wantType)
			}
			if body := rec.Body.String(); !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s: body %.80q does not contain %q", tt.method, tt.path, body, tt.wantBody)
			}
		})
	}
}

func TestHandlerHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	want := map[string]string{
		"Content-Security-Policy": contentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-cache",
	}
	for k, v := range want {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("GET /: %s = %q, want %q", k, got, v)
		}
	}
	if rec.Header().Get("Content-Length") == "" {
		t.Errorf("GET /: no Content-Length")
	}
}

// TestEveryAssetServed checks that every embedded file has a route and
// that every file the HTML refers to is served.
func TestEveryAssetServed(t *testing.T) {
	routed := map[string]bool{}
	for _, a := range routes {
		routed[a.name] = true
	}
	err := fs.WalkDir(assets, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !routed[name] {
			t.Errorf("embedded file %s has no route", name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	html, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:href|src)="([^"]+)"`).FindAllStringSubmatch(string(html), -1)
	if len(refs) < 2 {
		t.Fatalf("index.html refers to %d files, want the stylesheet and the script", len(refs))
	}
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, ref := range refs {
		res, err := http.Get(srv.URL + "/" + ref[1])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s (from index.html): status %d, want 200", ref[1], res.StatusCode)
		}
	}
}

// TestNoExternalReferences keeps the page self-contained: no URL with a
// scheme and no protocol-relative URL anywhere in the embedded files, so
// the page never loads anything from elsewhere, even in a comment that
// later turns into code.
func TestNoExternalReferences(t *testing.T) {
	external := regexp.MustCompile(`(?i)https?://|["'(=\x60]\s*//`)
	files := 0
	err := fs.WalkDir(assets, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := assets.ReadFile(name)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := external.FindString(line); m != "" {
				t.Errorf("%s:%d: external reference %q in %q", name, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != len(routes) {
		t.Errorf("scanned %d files, want %d", files, len(routes))
	}
}
