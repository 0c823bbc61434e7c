// Package httplimit applies sluice limiters to HTTP: Middleware limits the
// requests a server accepts, with Retry-After and rate-limit headers, and
// Transport limits the requests a client sends to a provider that limits
// it in turn.
//
// docs/http.md describes both, with the headers each policy produces.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/limitcore"
)

// Limit is one named limit of a Middleware.
type Limit struct {
	// Name names the limit in the rate-limit headers and in errors. It is
	// required, unique within a Middleware, and printable ASCII.
	Name string
	// Limiter decides. Required.
	Limiter *sluice.Limiter
	// Key returns the key a request is limited under. Required.
	Key KeyFunc
	// Cost returns the tokens a request takes; nil: 1 each.
	Cost CostFunc
	// Window is the w of the RateLimit-Policy header. Zero means
	// the Window of the limiter's policy; a negative Window leaves w
	// out.
	Window time.Duration
	// CountIf, when set, makes the limit count a request only when its
	// response's status satisfies it (Statuses(401) counts failed logins
	// alone): the request is checked before the handler without taking
	// anything (PeekN), refused if the limit would refuse it now, and its
	// cost is taken after the handler when CountIf(status) is true (see
	// Handler). nil counts every request before the handler.
	CountIf func(status int) bool
	// Status is the status of the answer when this limit rejects a
	// request, in [400, 599], so that a spent quota can answer 402
	// Payment Required where a rate answers 429. Zero means
	// WithLimitedStatus's. The answer names the limit either way.
	Status int
	// Settle, when positive, makes the request's cost an estimate: it is
	// held for Settle (sluice.Limiter.Hold) and settled when the handler
	// returns, the response written, streamed or cut short by a client
	// that went away, with the cost the handler reported with Charge: the
	// difference is given back, or charged as debt. A handler that
	// reports none is settled at the estimate. The limiter's policy must
	// be able to owe tokens (docs/policies.md, "Debt").
	Settle time.Duration
}

// chargeKey is the context key of a request's limitcore.CostReport.
type chargeKey struct{}

// Charge reports that the request's handler cost n ≥ 0 tokens more, for
// the limits with Settle: the calls add up, so a handler that streams its
// answer may report as it goes, and the total settles the request's hold
// when the handler returns. Outside such a middleware it does nothing.
// It is safe for simultaneous use by multiple goroutines.
func Charge(r *http.Request, n int64) {
	if rep, _ := r.Context().Value(chargeKey{}).(*limitcore.CostReport); rep != nil {
		rep.Add(n)
	}
}

// Statuses returns a CountIf that counts the responses of the given
// status codes.
func Statuses(codes ...int) func(status int) bool {
	set := append([]int(nil), codes...)
	return func(status int) bool {
		for _, c := range set {
			if c == status {
				return true
			}
		}
		return false
	}
}

// CostFunc returns the tokens a request takes from a Limit, for requests
// that weigh differently (a batch of 10 items costs 10). The cost must be
// positive: anything else, or an error, makes the Middleware answer 500.
type CostFunc func(r *http.Request) (int64, error)

// ConfigError reports an argument or option out of its bounds.
type ConfigError struct {
	Field string // e.g. "limits[1].Name", "WithIPv6Prefix"
	Value string // the value given
	Want  string // the bound it broke

	err error // what Unwrap returns: a sentinel of package sluice, or nil
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("httplimit: %s = %s: %s", e.Field, e.Value, e.Want)
}

// Unwrap returns the sentinel error the bound is about, such as
// errors.ErrUnsupported, or nil.
func (e *ConfigError) Unwrap() error { return e.err }

// Middleware limits the requests to a handler by one or more Limits. Make
// one with New; it is safe for simultaneous use by multiple goroutines.
type Middleware struct {
	limits  []Limit
	windows []time.Duration // by limit; ≤ 0: no w
	names   []string        // by limit: its Name as a structured-field string
	o       options
	settles bool // some limit has Settle
}

// New returns a middleware that lets a request through only when every
// one of limits allows it. WithHeaders, WithLimitedStatus,
// WithErrorStatus, WithProblemDetails, WithClock and WithLogger apply. It
// returns a *ConfigError for a limit without a name, limiter or key
// function, for two limits of the same name, and for a bad option.
func New(limits []Limit, opts ...Option) (*Middleware, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if p := limitcore.CheckLimits(len(limits), func(i int) (string, *sluice.Limiter, bool) {
		return limits[i].Name, limits[i].Limiter, limits[i].Key != nil
	}); p != nil {
		return nil, &ConfigError{Field: p.Field, Value: p.Value, Want: p.Want}
	}
	for i, l := range limits {
		if l.Status != 0 && (l.Status < 400 || l.Status > 599) {
			return nil, &ConfigError{Field: fmt.Sprintf("limits[%d].Status", i), Value: strconv.Itoa(l.Status), Want: "must be 0 or in [400, 599]"}
		}
	}
	m := &Middleware{limits: append([]Limit(nil), limits...), windows: make([]time.Duration, len(limits)),
		names: make([]string, len(limits)), o: o}
	for i, l := range m.limits {
		if p := limitcore.CheckSettle(i, l.Settle, l.Limiter); p != nil {
			return nil, &ConfigError{Field: p.Field, Value: p.Value, Want: p.Want}
		}
		m.settles = m.settles || l.Settle > 0
		m.names[i] = sfString(l.Name)
		m.windows[i] = l.Window
		if l.Window == 0 {
			m.windows[i] = l.Limiter.Policy().Window()
		}
	}
	return m, nil
}

// Handler returns next limited by m.
//
// For each limit it computes the key and the cost, then asks the limiters.
// With one limit that is a single AllowN. With several it first peeks at
// every limiter, and rejects without taking anything when one of them
// would; only then does it take the request from each in turn. A request
// that a concurrent one overtook between the peek and the take can still
// be rejected by a later limit after the earlier ones took it: limits
// shared by several processes cannot be taken from atomically together.
//
// A limit with CountIf is only peeked at before next, and takes the
// request's cost after next returns when CountIf holds for the status
// next answered (200 when it wrote nothing, or only a body); its
// rate-limit headers, written before next, state it as it stands before
// the request is counted. next then writes to a ResponseWriter that
// records the status and forwards everything else, Flush included, and
// unwraps to the original for http.ResponseController. The cost is taken
// even when the client has gone, so that hanging up does not escape the
// count; a limiter's error then is logged, the response being sent. A
// panic in next counts nothing.
//
// A limiter in shadow mode (sluice.WithShadow) lets every request
// through, and is left out of the rate-limit headers: it is not in force.
//
// A key function's ErrNoKey answers 400, which names the missing header
// for Header's key; any other error or panic of a key
// or cost function, or a cost that is not positive, answers 500; an error
// of a limiter (a store that failed, with sluice.FailClosed) answers
// WithErrorStatus's code, 503 by default. Those responses carry no
// rate-limit headers. A panic in next is not recovered.
//
// A limit whose policy holds slots (sluice.Concurrency) bounds the
// requests in flight: a request takes one slot, whatever its cost, and
// holds it until next returns, a panic included, renewing it every third
// of its TTL meanwhile, so that a streamed response holds its slot for as
// long as it lasts. When the client goes away (the request's context
// ends) the renewals stop: a handler that never returns holds its slot
// at most one TTL more.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var space [4]limitcore.Decision // most middlewares have a limit or two
		ds := space[:]
		if len(m.limits) > len(ds) {
			ds = make([]limitcore.Decision, len(m.limits))
		}
		ds = ds[:len(m.limits)]
		for i := range m.limits {
			d := &ds[i]
			d.Index, d.Limiter, d.Defer, d.HoldTTL = i, m.limits[i].Limiter, m.limits[i].CountIf != nil, int64(m.limits[i].Settle)
			var err error
			if d.Key, d.Cost, err = keyAndCost(&m.limits[i], r); err != nil {
				m.keyFailed(w, r, i, err)
				return
			}
		}
		switch d, err := limitcore.Decide(r.Context(), ds); {
		case err != nil:
			m.limiterFailed(w, r, &m.limits[d.Index], err)
		case d != nil:
			m.reject(w, r, ds, d)
		default:
			defer limitcore.Hold(r.Context(), ds)()
			m.setHeaders(w.Header(), ds, -1)
			if m.settles {
				rep := new(limitcore.CostReport)
				defer m.settleHolds(r, ds, rep)
				r = r.WithContext(context.WithValue(r.Context(), chargeKey{}, rep))
			}
			if !limitcore.Deferred(ds) {
				next.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			m.countOutcome(r, ds, sw.statusOr200())
		}
	})
}

// countOutcome takes the cost of the limits with CountIf that count status, the
// status of the response to r, which has been sent: a limiter's error
// can only be logged.
func (m *Middleware) countOutcome(r *http.Request, ds []limitcore.Decision, status int) {
	d, err := limitcore.Settle(r.Context(), ds, func(i int) bool { return m.limits[i].CountIf(status) })
	if err != nil {
		m.o.logger.ErrorContext(r.Context(), "httplimit: response not counted", "limit", m.limits[d.Index].Name, "status", status,
			"method", r.Method, "path", r.URL.Path, "err", err)
	}
}

// statusWriter records the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int // the final status; 0 until written
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are informational: the final status follows
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the response, which sends its status.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the ResponseWriter it wraps, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusOr200 is the status written, or 200 when none was: what net/http
// sends for a handler that wrote nothing.
func (w *statusWriter) statusOr200() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// settleHolds settles the holds of ds with the cost the handler reported in
// rep, or at their estimates when it reported none. It runs when the
// handler has returned, even by a panic, and on a context that the
// client's going away does not end: the cost was incurred all the same.
func (m *Middleware) settleHolds(r *http.Request, ds []limitcore.Decision, rep *limitcore.CostReport) {
	limitcore.SettleHolds(r.Context(), ds, rep, func(ctx context.Context, i int, key string, n int64, err error) {
		m.o.logger.Log(ctx, slog.LevelError, "httplimit: cost not settled", "limit", m.limits[i].Name, "key", key, "cost", n, "err", err)
	})
}

// keyAndCost runs l's key and cost functions, turning a panic in them into
// an error. http.ErrAbortHandler keeps its meaning: it panics on.
func keyAndCost(l *Limit, r *http.Request) (key string, cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			err = fmt.Errorf("httplimit: limit %q: key or cost function panicked: %v\n%s", l.Name, v, debug.Stack())
		}
	}()
	if key, err = l.Key(r); err != nil {
		return "", 0, fmt.Errorf("httplimit: limit %q: key: %w", l.Name, err)
	}
	cost = 1
	if l.Cost != nil {
		if cost, err = limitcore.Cost(l.Cost(r)); err != nil {
			return "", 0, fmt.Errorf("httplimit: limit %q: %w", l.Name, err)
		}
	}
	return key, cost, nil
}

// limiterFailed answers a limiter's error: 500 for an argument it refused,
// else the error status.
func (m *Middleware) limiterFailed(w http.ResponseWriter, r *http.Request, l *Limit, err error) {
	status := m.o.errorStatus
	if errors.Is(err, sluice.ErrInvalidArgument) {
		status = http.StatusInternalServerError
	}
	m.fail(w, r, status, fmt.Errorf("httplimit: limit %q: %w", l.Name, err), nil)
}

// keyFailed answers an error of limit i's key or cost function: 400 for a
// request without its key, else 500. The 400 says what the request lacks
// when this package's key function found it missing (a header the client
// must send); the reasons of another key function may be the server's.
func (m *Middleware) keyFailed(w http.ResponseWriter, r *http.Request, i int, err error) {
	if !errors.Is(err, ErrNoKey) {
		m.fail(w, r, http.StatusInternalServerError, err, nil)
		return
	}
	var space [128]byte
	detail := append(append(space[:0], "the request has no key for rate limit "...), m.names[i]...)
	if nk := (*noKeyError)(nil); errors.As(err, &nk) {
		detail = append(append(detail, ": "...), nk.what...)
	}
	m.fail(w, r, http.StatusBadRequest, err, detail)
}

// fail logs err, at level Error for the server's errors, and answers
// status with detail, or without saying why when detail is nil.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, status int, err error, detail []byte) {
	level := slog.LevelError
	if status < 500 {
		level = slog.LevelInfo
	}
	m.o.logger.Log(r.Context(), level, "httplimit: request not limited", "status", status, "method", r.Method, "path", r.URL.Path, "err", err)
	if detail == nil {
		var space [64]byte
		detail = append(space[:0], http.StatusText(status)...)
	}
	m.writeBody(w, status, detail, "", -1)
}

// reject answers a request that the limit of worst rejected, the
// rejecting limit with the longest wait (see limitcore.Decide), with that
// limit's Status.
// Retry-After is that wait in whole seconds rounded up, and is left out
// when the limit can never pass the request.
func (m *Middleware) reject(w http.ResponseWriter, r *http.Request, ds []limitcore.Decision, worst *limitcore.Decision) {
	// The detail is written on the stack: a rejection is the answer an
	// abusive client gets most, and should cost little.
	var space [128]byte
	detail := append(append(space[:0], "rate limit "...), m.names[worst.Index]...)
	secs := int64(-1)
	if worst.Res.RetryAfter == sluice.Never {
		detail = append(detail, " exceeded: the request is larger than the limit allows"...)
	} else {
		secs = limitcore.Seconds(worst.Res.RetryAfter)
		detail = append(strconv.AppendInt(append(detail, " exceeded, retry after "...), secs, 10), " seconds"...)
	}
	m.setHeaders(w.Header(), ds, secs)
	status := m.limits[worst.Index].Status
	if status == 0 {
		status = m.o.limitedStatus
	}
	m.writeBody(w, status, detail, m.limits[worst.Index].Name, secs)
}

// problem is an RFC 9457 problem details object. Type is always
// "about:blank", so Title is the status text.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter *int64 `json:"retry_after,omitempty"`
}

// writeBody writes status with detail as text, or as a problem details
// object with the limit's name and the seconds to retry after (left out
// when "" or negative).
func (m *Middleware) writeBody(w http.ResponseWriter, status int, detail []byte, limit string, retryAfter int64) {
	h := w.Header()
	if !m.o.problemDetails {
		vals := []string{"text/plain; charset=utf-8", "nosniff"} // one allocation for both
		h["Content-Type"], h["X-Content-Type-Options"] = vals[0:1:1], vals[1:2:2]
		w.WriteHeader(status)
		w.Write(append(detail, '\n'))
		return
	}
	p := problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: string(detail), Limit: limit}
	if retryAfter >= 0 {
		p.RetryAfter = &retryAfter
	}
	body, _ := json.Marshal(p) // cannot fail: strings and integers
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
