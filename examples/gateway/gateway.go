// Package gateway is an example gateway in front of a streaming backend,
// a language model's in the way AI gateways sit in front of one: it
// limits the tokens each tenant may use per minute, although a request's
// cost is known only when its streamed answer ends. Each request holds an
// estimate (its max_tokens, as the client asks it) with
// httplimit.Limit.Settle; the gateway counts the tokens of the answer as
// they stream through, reports them with httplimit.Charge, and the hold is
// settled with that count when the answer ends, or when the client goes
// away. A tenant whose answers used more than was left owes the excess
// (sluice.Limiter.Charge's debt), and is refused until the refill has
// paid it.
//
// The backend streams one token per line. A real one streams server-sent
// events whose last one carries the usage; the counting is the only part
// that changes.
package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// maxEstimate is the largest max_tokens a request may ask for, and the
// estimate of one that asks for none.
const maxEstimate = 4096

// New returns the gateway to backend (a URL whose answers stream one
// token per line), limiting each tenant (header X-Tenant) by tokens, a
// limiter whose policy can owe tokens. A request's estimate is its
// max_tokens query parameter; it is held for holdFor, which should be
// longer than the longest answer.
func New(backend string, tokens *sluice.Limiter, holdFor time.Duration) (http.Handler, error) {
	m, err := httplimit.New([]httplimit.Limit{{
		Name:    "tokens",
		Limiter: tokens,
		Key:     httplimit.Header("X-Tenant"),
		Cost:    estimate,
		Settle:  holdFor,
	}})
	if err != nil {
		return nil, err
	}
	return m.Handler(&proxy{backend: backend}), nil
}

// estimate is a request's max_tokens, or maxEstimate when it asks none.
func estimate(r *http.Request) (int64, error) {
	s := r.URL.Query().Get("max_tokens")
	if s == "" {
		return maxEstimate, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > maxEstimate {
		return 0, fmt.Errorf("gateway: max_tokens must be 1 to %d, got %q", maxEstimate, s)
	}
	return n, nil
}

// proxy streams the backend's answer through, reporting each token.
type proxy struct{ backend string }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, p.backend+"?"+r.URL.RawQuery, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, "backend: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		// A token counts once the gateway has it, whether or not the
		// client is still there to read it: the backend produced it.
		httplimit.Charge(r, 1)
		if _, err := io.WriteString(w, lines.Text()+"\n"); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}
