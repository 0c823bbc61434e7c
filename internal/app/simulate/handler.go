package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
)

// Handler serves GET ?limiter=NAME&traffic=SPEC[&duration=D][&slice=D] as
// an SVG chart of the limiter whose policy lookup returns. A spec may not
// replay files, which are the server's and not the caller's, and may make
// at most maxRequests requests, counted from the spec before any is made
// (a million take about a quarter of a second, docs/benchmarks.md).
// Errors are JSON, as the server's API writes them:
// {"error": {"code": ..., "message": ...}}.
func Handler(lookup func(name string) (sluice.Policy, bool), maxRequests int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		name := q.Get("limiter")
		p, ok := lookup(name)
		if !ok {
			httpError(w, http.StatusNotFound, "unknown_limiter", fmt.Sprintf("no limiter %q", name))
			return
		}
		t, err := parseTraffic(q.Get("traffic"), false)
		var o Options
		for _, d := range []struct {
			key string
			dst *time.Duration
		}{{"duration", &o.Duration}, {"slice", &o.Slice}} {
			if v := q.Get(d.key); v != "" && err == nil {
				if *d.dst, err = time.ParseDuration(v); err == nil && *d.dst <= 0 {
					err = fmt.Errorf("%s must be positive, got %s", d.key, v)
				}
			}
		}
		var rq *Requests
		if err == nil {
			if o.Duration == 0 {
				o.Duration = DefaultDuration(t)
			}
			rq, err = t.requests(o.Duration, maxRequests)
		}
		var rep *Report
		if err == nil {
			rep, err = Run(name, p, rq, o)
		}
		var b bytes.Buffer
		if err == nil {
			err = WriteSVG(&b, t.String(), []*Report{rep})
		}
		if err != nil {
			httpError(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(b.Bytes())
	})
}

func httpError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
