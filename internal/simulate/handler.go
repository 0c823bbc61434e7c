package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
)

// maxServedRequests bounds the simulations Handler runs, so that one query
// cannot hold a server's CPU for long: a million take about a quarter of a
// second (docs/benchmarks.md).
const maxServedRequests = 1_000_000

// Handler serves GET ?limiter=NAME&traffic=SPEC[&duration=D][&slice=D] as
// an SVG chart of the limiter whose policy lookup returns. A spec may not
// replay files, which are the server's and not the caller's, and may make
// at most a million requests. Errors are JSON, as the server's API writes
// them: {"error": {"code": ..., "message": ...}}.
func Handler(lookup func(name string) (sluice.Policy, bool)) http.Handler {
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
		var arrivals []int64
		if err == nil {
			if o.Duration == 0 {
				o.Duration = DefaultDuration(t)
			}
			arrivals, err = t.Arrivals(o.Duration)
		}
		if err == nil && len(arrivals) > maxServedRequests {
			err = fmt.Errorf("traffic: %d requests; a served simulation may have at most %d", len(arrivals), maxServedRequests)
		}
		var rep *Report
		if err == nil {
			rep, err = Run(name, p, &Requests{Times: arrivals}, o)
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
