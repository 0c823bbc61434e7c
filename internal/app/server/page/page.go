// Package page serves the live page of sluice serve: whether the server
// is ready (what /readyz answers, and why not), the configured limiters
// with their decisions and rejections per second at the last poll, their
// totals of allowed, rejected and failed decisions (and those of all
// limiters), their health (not ready, circuit open, store failing,
// degraded or ok), the hottest keys, and a simulate panel per limiter,
// updated about once a second. The limiters table fits a 1280-pixel
// window without scrolling.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary, with
// no build step and no assets from elsewhere. It reads the server's JSON
// API on the same origin (api/v1/limiters, api/v1/stats and
// api/v1/simulate, relative to the page) and readyz, so the server must
// mount them beside Handler.
package page

import (
	"bytes"
	"embed"
	"net/http"
	"time"
)

//go:embed assets
var assets embed.FS

// An asset is one embedded file and the Content-Type it is served with.
// The types are fixed here rather than looked up by extension because
// mime.TypeByExtension reads the host's mime.types, which may differ.
type asset struct {
	name        string
	contentType string
}

// routes maps each URL path the page answers to its file. The HTML refers
// to the others by relative URLs, so the page also works under a prefix
// removed with http.StripPrefix.
var routes = map[string]asset{
	"/":                {"assets/index.html", "text/html; charset=utf-8"},
	"/assets/page.css": {"assets/page.css", "text/css; charset=utf-8"},
	"/assets/page.js":  {"assets/page.js", "text/javascript; charset=utf-8"},
}

// contentSecurityPolicy lets the page load only its own files and talk only
// to its own origin. Hot keys are client input (IPs, API keys, headers);
// the script writes them with textContent, and this policy is the second
// line should that ever slip. blob: is for simulate charts, which the
// script fetches with the bearer token and shows from a blob URL.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns a handler that serves the live page at "/" and its
// assets under "/assets/", for GET and HEAD; any other path is 404 and any
// other method 405. Mount it at "/" of the server that serves the JSON API.
// The handler is safe for simultaneous use by multiple goroutines.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	a, ok := routes[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := assets.ReadFile(a.name)
	if err != nil { // the routes name embedded files, so only a broken build gets here
		http.Error(w, "page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The files change with the binary; no-cache makes a browser ask again
	// after an upgrade instead of mixing old script with new HTML.
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}
