package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/app/rlqs"
	"github.com/sluicehq/sluice/internal/app/server/page"
	"github.com/sluicehq/sluice/internal/app/simulate"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/app/tracing"
	"github.com/sluicehq/sluice/internal/metricnames"
	"github.com/sluicehq/sluice/internal/sleep"
)

// The bounds of API requests.
const (
	maxBody    = 64 << 10 // bytes of a request body
	maxKey     = 1024     // bytes of a key
	maxTokens  = 1 << 40  // tokens of one request
	maxWaitMax = 60_000   // max_wait_ms
)

// The error codes of the API, stable for clients to branch on.
const (
	codeInvalidRequest   = "invalid_request"
	codeAboveLimit       = "tokens_above_limit"
	codeTooLarge         = "request_too_large"
	codeUnknownLimiter   = "unknown_limiter"
	codeUnsupported      = "unsupported"
	codeStoreUnavailable = "store_unavailable"
	codeUnauthorized     = "unauthorized"
	codeNotFound         = "not_found"
	codeMethod           = "method_not_allowed"
	codeCancelled        = "cancelled"
	codeInternal         = "internal"
	codeBusy             = "busy"
	codeCrossOrigin      = "cross_origin"
	codeForbidden        = "forbidden"
	codePrecondition     = "precondition_failed"
)

// apiError is an API error response.
type apiError struct {
	status int
	Code   string `json:"code"`
	Msg    string `json:"message"`
}

// maxMessage bounds an error's message, in bytes, so that an answer
// never echoes a large input back.
const maxMessage = 300

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, Code: code, Msg: clip(fmt.Sprintf(format, args...), maxMessage)}
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// short quotes s for a message, cut to 64 bytes and with its length when
// longer: enough to recognise a name without echoing a large input.
func short(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q (%d bytes)", clip(s, 64), len(s))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]*apiError{"error": e})
}

// routes builds the server's handler.
func (s *Server) routes() http.Handler {
	api := http.NewServeMux()
	api.Handle("/api/v1/consume", s.decision("/api/v1/consume", s.consume))
	api.Handle("/api/v1/inspect", s.decision("/api/v1/inspect", s.inspect))
	api.Handle("/api/v1/reset", s.decision("/api/v1/reset", s.reset))
	api.Handle("/api/v1/reserve", s.decision("/api/v1/reserve", s.reserve))
	api.Handle("/api/v1/settle", s.decision("/api/v1/settle", s.settle))
	api.Handle("/api/v1/acquire", s.decision("/api/v1/acquire", s.acquire))
	api.Handle("/api/v1/release", s.decision("/api/v1/release", s.release))
	api.Handle("/api/v1/renew", s.decision("/api/v1/renew", s.renew))
	api.Handle("/api/v1/limiters", get(s.listLimiters))
	api.Handle("/api/v1/stats", get(s.stats))
	api.Handle("/api/v1/simulate", get(s.simulate))
	pr := s.planRoutes()
	api.Handle("/api/v1/plans", pr)
	api.Handle("/api/v1/plans/", pr)
	api.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "no API endpoint %s", r.URL.Path))
	})

	mux := http.NewServeMux()
	mux.Handle("/api/", s.auth(api, func(*Config) bool { return true }))
	mux.Handle("/metrics", s.auth(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}),
		func(c *Config) bool { return c.AuthMetrics }))
	mux.Handle("/healthz", get(func(w http.ResponseWriter, _ *http.Request) *apiError {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	}))
	mux.Handle("/readyz", get(s.ready))
	mux.Handle("/healthz/limiters", get(s.limiterHealth))
	mux.Handle("/", page.Handler())
	for _, r := range s.extra {
		if strings.Contains(r.pattern, "/api/") {
			api.Handle(r.pattern, r.h)
		} else {
			mux.Handle(r.pattern, r.h)
		}
	}
	// Health checks skip the bound on requests in progress, which leaves
	// them the connections reserved for them.
	others := s.admit(mux)
	return s.sameOrigin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/healthz/limiters":
			mux.ServeHTTP(w, r)
		default:
			others.ServeHTTP(w, r)
		}
	}))
}

// sameOrigin refuses the cross-origin requests of browsers that change
// state (any method but GET, HEAD and OPTIONS), unless their origin is
// one of server.allowed_origins: a web page must not consume or reset
// keys in its visitors' name. Clients that are not browsers send neither
// Sec-Fetch-Site nor Origin, and pass (http.CrossOriginProtection).
func (s *Server) sameOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.cur.Load().origins.Check(r); err != nil {
			writeError(w, errorf(http.StatusForbidden, codeCrossOrigin,
				"cross-origin browser requests that change state are refused; an operator may allow the origin in server.allowed_origins"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// admit runs h unless as many requests are in progress as the
// connections not reserved for health checks: it then answers 503 busy
// and closes the connection, without reading the request's body.
func (s *Server) admit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := s.cur.Load().cfg.HTTPLimits
		if s.admission.inFlight.Add(1) > l.MaxConnections-l.ReservedForHealth {
			s.admission.inFlight.Add(-1)
			s.metrics.busy.WithLabelValues("requests").Inc()
			condemn(r)
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			writeError(w, errorf(http.StatusServiceUnavailable, codeBusy,
				"the server has as many requests in progress as it takes; retry shortly"))
			return
		}
		defer s.admission.inFlight.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// handler is an endpoint that returns its error for the caller to write.
type handler func(w http.ResponseWriter, r *http.Request) *apiError

func method(m string, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, errorf(http.StatusMethodNotAllowed, codeMethod, "%s takes %s, not %s", r.URL.Path, m, r.Method))
			return
		}
		if e := h(w, r); e != nil {
			writeError(w, e)
		}
	})
}

func post(h handler) http.Handler { return method(http.MethodPost, h) }
func get(h handler) http.Handler  { return method(http.MethodGet, h) }

// decision is post(h), with a span for each request when tracing is on.
func (s *Server) decision(route string, h handler) http.Handler {
	if s.tracer == nil {
		return post(h)
	}
	return tracing.Handler(s.tracer, route, post(h))
}

// traceLimiter names the limiter of r's decision on r's span when
// tracing is on.
func (s *Server) traceLimiter(r *http.Request, name string) {
	if s.tracer != nil {
		trace.SpanFromContext(r.Context()).SetAttributes(tracing.LimiterKey.String(name))
	}
}

// auth lets a request through h when covered says its config leaves the
// endpoint open, or when the request satisfies the API's auth: one of the
// tokens as "Authorization: Bearer TOKEN" when there are tokens, and a
// client certificate that the client CA verifies when there is one.
func (s *Server) auth(h http.Handler, covered func(*Config) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := s.cur.Load()
		if !covered(snap.cfg) {
			h.ServeHTTP(w, r)
			return
		}
		if len(snap.tokens) > 0 && !snap.validToken(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "missing or wrong bearer token"))
			return
		}
		if !s.clientCertOK(r.TLS) {
			writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "a client certificate signed by the server's client CA is required"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// validToken reports whether header holds one of snap's tokens or one of
// its admin tokens, which may decide too.
func (snap *snapshot) validToken(header string) bool {
	if validToken(snap.tokens, header) {
		return true
	}
	_, ok := snap.adminName(header)
	return ok
}

// validToken compares the token of an Authorization value, "Bearer
// TOKEN", with every token in constant time, so that neither which token
// nor how much of one matched shows in the timing. The scheme is
// case-insensitive and may be followed by several spaces (RFC 9110
// §11.4, RFC 6750 §2.1); whitespace around the value is not part of it
// (RFC 9110 §5.5: HTTP strips it, and it is stripped from gRPC metadata
// too), so "Bearer TOKEN " is TOKEN. A token holds no whitespace.
func validToken(tokens [][]byte, header string) bool {
	scheme, got, ok := strings.Cut(strings.Trim(header, " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got = strings.TrimLeft(got, " ")
	match := 0
	for _, t := range tokens {
		match |= subtle.ConstantTimeCompare([]byte(got), t)
	}
	return match == 1
}

// decode decodes the JSON body of r into v, a pointer to a struct,
// strictly: at most maxBody bytes, valid Unicode, one object whose keys
// are v's fields' names exactly (encoding/json would take "LIMITER" for
// "limiter", and the last of duplicate keys).
func decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes", maxBody)
	case err != nil:
		return errorf(http.StatusBadRequest, codeInvalidRequest, "body: %v", err)
	}
	if err := checkUnicode(body); err != nil {
		return errorf(http.StatusBadRequest, codeInvalidRequest, "body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = checkKeys(body, v)
	if err == nil {
		err = dec.Decode(v)
	}
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		return errorf(http.StatusBadRequest, codeInvalidRequest, "body: %v", err)
	}
	return nil
}

// checkUnicode reports where body is not valid UTF-8, or has a \u escape
// of half a UTF-16 surrogate pair without the other half: encoding/json
// turns both into U+FFFD silently, which would make different keys one.
func checkUnicode(body []byte) error {
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		i++ // the escaped character: a second backslash is not an escape
		if i >= len(body) || body[i] != 'u' {
			continue
		}
		r, ok := hex4(body[i+1:])
		if !ok {
			continue // malformed: the decoder says so
		}
		switch {
		case r >= 0xd800 && r < 0xdc00: // a high half: a low half must follow
			if len(body) >= i+11 && body[i+5] == '\\' && body[i+6] == 'u' {
				if lo, ok := hex4(body[i+7:]); ok && lo >= 0xdc00 && lo < 0xe000 {
					i += 10
					continue
				}
			}
			return fmt.Errorf("\\u%04x at byte %d is half of a UTF-16 surrogate pair, without the other half", r, i-1)
		case r >= 0xdc00 && r < 0xe000:
			return fmt.Errorf("\\u%04x at byte %d is half of a UTF-16 surrogate pair, without the other half", r, i-1)
		}
		i += 4
	}
	return nil
}

// hex4 reads the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// checkKeys checks the keys of the object in body against the JSON names
// of v's fields, exactly, and refuses a key given twice. It leaves
// malformed JSON to the decoder.
func checkKeys(body []byte, v any) error {
	names := fieldNames(reflect.TypeOf(v).Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := make(map[string]bool, len(names))
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := t.(string)
		switch {
		case !names[k]:
			return fmt.Errorf("unknown field %s; the fields are case-sensitive", short(k))
		case seen[k]:
			return fmt.Errorf("field %s given twice", short(k))
		}
		seen[k] = true
		if err := dec.Decode(new(json.RawMessage)); err != nil {
			return nil
		}
	}
	return nil
}

var fieldNamesCache sync.Map // reflect.Type → map[string]bool

// fieldNames returns the JSON names of the fields of t, a struct type,
// those of its embedded structs included.
func fieldNames(t reflect.Type) map[string]bool {
	if m, ok := fieldNamesCache.Load(t); ok {
		return m.(map[string]bool)
	}
	m := make(map[string]bool)
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && !f.Anonymous && name != "-" && name != "" {
			m[name] = true
		}
	}
	fieldNamesCache.Store(t, m)
	return m
}

// keyRequest names a key of a limiter.
type keyRequest struct {
	Limiter string `json:"limiter"`
	Key     string `json:"key"`
}

// find validates the limiter and key of a request and returns the
// limiter from snap.
func (q keyRequest) find(snap *snapshot) (*limiter, *apiError) {
	switch {
	case q.Limiter == "":
		return nil, errorf(http.StatusBadRequest, codeInvalidRequest, "limiter is required")
	case q.Key == "":
		return nil, errorf(http.StatusBadRequest, codeInvalidRequest, "key is required")
	case len(q.Key) > maxKey:
		return nil, errorf(http.StatusBadRequest, codeInvalidRequest, "key must be at most %d bytes, got %d", maxKey, len(q.Key))
	}
	l, ok := snap.limiters[q.Limiter]
	if !ok {
		return nil, errorf(http.StatusNotFound, codeUnknownLimiter, "no limiter %s", short(q.Limiter))
	}
	return l, nil
}

// A keyCall is the body of a request for a key of a limiter: a pointer to
// a keyRequest or to a struct that embeds one.
type keyCall interface {
	find(snap *snapshot) (*limiter, *apiError)
}

// decodeCall decodes r's body into q and finds the limiter it names in
// the current snapshot: the preamble of the handlers of a key. It returns
// the snapshot with the limiter.
func (s *Server) decodeCall(w http.ResponseWriter, r *http.Request, q keyCall) (*snapshot, *limiter, *apiError) {
	if e := decode(w, r, q); e != nil {
		return nil, nil, e
	}
	snap := s.cur.Load()
	l, e := q.find(snap)
	if e != nil {
		return nil, nil, e
	}
	return snap, l, nil
}

// A tokenCall is a keyCall that asks for tokens.
type tokenCall interface {
	keyCall
	tokenCount() *int64
}

// decodeTokens is decodeCall for a request that asks for tokens, which it
// validates after the limiter and key and returns with them.
func (s *Server) decodeTokens(w http.ResponseWriter, r *http.Request, q tokenCall) (*snapshot, *limiter, int64, *apiError) {
	snap, l, e := s.decodeCall(w, r, q)
	if e != nil {
		return nil, nil, 0, e
	}
	n, e := tokens(q.tokenCount())
	if e != nil {
		return nil, nil, 0, e
	}
	return snap, l, n, nil
}

// maxWaitOf validates max_wait_ms, 0 (not waiting) to maxWaitMax.
func maxWaitOf(ms int64) (time.Duration, *apiError) {
	if ms < 0 || ms > maxWaitMax {
		return 0, errorf(http.StatusBadRequest, codeInvalidRequest, "max_wait_ms must be 0 to %d, got %d", maxWaitMax, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// tokens validates an optional token count, 1 when absent.
func tokens(n *int64) (int64, *apiError) {
	switch {
	case n == nil:
		return 1, nil
	case *n < 1 || *n > maxTokens:
		return 0, errorf(http.StatusBadRequest, codeInvalidRequest, "tokens must be 1 to %d, got %d", int64(maxTokens), *n)
	}
	return *n, nil
}

// Result is a decision as the API reports it. Durations are milliseconds,
// rounded up. A request that can never pass (it asks for more than the
// limit holds) is not a Result but a tokensAboveLimit error.
type Result struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	Limit        int64 `json:"limit"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	// WaitedMS is how long a consume with max_wait_ms waited.
	WaitedMS int64 `json:"waited_ms,omitempty"`
	// Shadow says that the limiter is in shadow mode (shadow: true), so
	// Allowed is true whatever its policy decided; ShadowRejected that
	// its policy refused the request, which took nothing.
	Shadow         bool `json:"shadow,omitempty"`
	ShadowRejected bool `json:"shadow_rejected,omitempty"`
}

func newResult(r sluice.Result) Result {
	return Result{Allowed: r.Allowed, Remaining: r.Remaining, Limit: r.Limit,
		RetryAfterMS: millis(r.RetryAfter), ResetAfterMS: millis(r.ResetAfter), Shadow: r.Shadow, ShadowRejected: r.ShadowRejected}
}

// millis is d in milliseconds rounded up, -1 for sluice.Never.
func millis(d time.Duration) int64 {
	if d == sluice.Never {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// tokensAboveLimit is a request for more tokens than its limiter can ever
// grant at once: a client's bug, which no wait cures. Policies tell it
// apart in two ways, as an argument error (fixed windows, Symfony's token
// bucket, compounds of them) or as a rejection that can never pass (the
// others); the API answers both with one 400.
type tokensAboveLimit struct {
	limiter       string
	tokens, limit int64
}

func (e *tokensAboveLimit) Error() string {
	return fmt.Sprintf("%d tokens can never pass limiter %q, whose limit is %d", e.tokens, e.limiter, e.limit)
}

// aboveLimit returns the error of the call of l for n tokens that
// answered res and err: a *tokensAboveLimit when n can never pass, else
// err.
func aboveLimit(l *limiter, n int64, res Result, err error) error {
	switch {
	case errors.Is(err, sluice.ErrTokensAboveLimit):
		return &tokensAboveLimit{l.name, n, l.limit}
	case err == nil && (!res.Allowed || res.ShadowRejected) && res.RetryAfterMS == millis(sluice.Never):
		return &tokensAboveLimit{l.name, n, res.Limit}
	}
	return err
}

// callerError reports whether err, of a limiter call, is the caller's
// mistake, which limiterError answers 400: a request that can never pass,
// an argument out of bounds, a wait on a policy that cannot wait.
func callerError(err error) bool {
	var argErr *sluice.ArgumentError
	var above *tokensAboveLimit
	return errors.As(err, &above) || errors.As(err, &argErr) || errors.Is(err, errors.ErrUnsupported)
}

// limiterError turns an error of a limiter call into an API error.
func (s *Server) limiterError(r *http.Request, err error) *apiError {
	var argErr *sluice.ArgumentError
	var storeErr *sluice.StoreError
	var above *tokensAboveLimit
	switch {
	case errors.As(err, &above):
		return errorf(http.StatusBadRequest, codeAboveLimit, "%v", err)
	case errors.As(err, &argErr):
		return errorf(http.StatusBadRequest, codeInvalidRequest, "%v", err)
	case errors.Is(err, errors.ErrUnsupported):
		return errorf(http.StatusBadRequest, codeUnsupported, "the limiter's policy cannot wait for tokens: %v", err)
	case errors.As(err, &storeErr):
		// The store's own message names the key, as the StoreError does,
		// and may quote the store's reply: the answer says what kind of
		// failure it was, and the outage log (the limiter's observer)
		// what failed and why, once an outage rather than once a request.
		return errorf(http.StatusServiceUnavailable, codeStoreUnavailable, "the store failed: %s (the server's log has the details)", storeFailure(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusServiceUnavailable, codeCancelled, "%v", err)
	}
	return errorf(http.StatusInternalServerError, codeInternal, "%v", err)
}

type consumeRequest struct {
	keyRequest
	Tokens    *int64 `json:"tokens"`
	MaxWaitMS int64  `json:"max_wait_ms"`
}

func (q *consumeRequest) tokenCount() *int64 { return q.Tokens }

// consume takes tokens for a key. Being limited is a 200 result with
// allowed false: the API answers the question it was asked. Asking for
// more than the limit is a 400, tokens_above_limit, for every policy.
func (s *Server) consume(w http.ResponseWriter, r *http.Request) *apiError {
	var q consumeRequest
	snap, l, n, e := s.decodeTokens(w, r, &q)
	if e != nil {
		return e
	}
	maxWait, e := maxWaitOf(q.MaxWaitMS)
	if e != nil {
		return e
	}
	var res Result
	var err error
	if maxWait > 0 {
		extendDeadlines(w, snap.cfg.HTTPLimits, maxWait)
		res, err = s.wait(r.Context(), l, q.Key, n, maxWait)
	} else {
		var sr sluice.Result
		sr, err = l.l.AllowN(r.Context(), q.Key, n)
		res = newResult(sr)
	}
	err = aboveLimit(l, n, res, err)
	if res.ShadowRejected { // let through, having taken nothing
		s.recordShadow(snap, l.name, q.Key, 0, 1, err)
	} else {
		s.record(snap, l.name, q.Key, n, res.Allowed, err)
	}
	if s.tracer != nil {
		trace.SpanFromContext(r.Context()).SetAttributes(tracing.LimiterKey.String(l.name), tracing.AllowedKey.Bool(res.Allowed))
	}
	if err != nil {
		return s.limiterError(r, err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// wait reserves n tokens that will be there within maxWait and sleeps
// until they are due. The answer is the reservation's decision, the one
// that took the tokens: remaining as the reservation left it, and
// reset_after_ms counted from the answer, after the wait. When ctx ends
// during the wait (the client went away, or the drain timeout of a
// shutdown passed), the tokens are given back.
func (s *Server) wait(ctx context.Context, l *limiter, key string, n int64, maxWait time.Duration) (Result, error) {
	r, err := l.l.ReserveN(ctx, key, n, maxWait)
	if err != nil {
		return Result{}, err
	}
	res := newResult(r.Result())
	if !r.OK() {
		return res, nil
	}
	if d := r.Delay(); d > 0 {
		s.metrics.Waiting.Inc()
		err := sleep.On(ctx, s.clock, d)
		s.metrics.Waiting.Dec()
		if err != nil {
			r.Cancel()
			return Result{}, err
		}
		res.ResetAfterMS = millis(max(r.Result().ResetAfter-d, 0))
		res.WaitedMS = millis(d)
	}
	return res, nil
}

// record counts a decision for the stats, the limiter's health, the hot
// keys (when key is not "") and the metrics.
func (s *Server) record(snap *snapshot, name, key string, n int64, allowed bool, err error) {
	if allowed || err != nil {
		s.recordShadow(snap, name, key, n, 0, err)
		return
	}
	s.recordDecision(snap, name, key, n, metricnames.Rejected, err)
}

// recordShadow records a decision that let its request through, n the
// tokens it took and shadowRejected the requests that a limiter in shadow
// mode let through although its policy refused them, which took nothing.
func (s *Server) recordShadow(snap *snapshot, name, key string, n, shadowRejected int64, err error) {
	outcome := metricnames.Allowed
	switch {
	case callerError(err):
		outcome = outcomeInvalid
	case err != nil:
		outcome = metricnames.Error
	default:
		if n > 0 {
			s.metrics.Tokens.WithLabelValues(name).Add(float64(n))
		}
		if shadowRejected > 0 {
			s.metrics.ShadowRejected.WithLabelValues(name).Add(float64(shadowRejected))
		}
	}
	s.recordDecision(snap, name, key, n, outcome, err)
}

// recordDecision counts a decision of outcome for the stats, the
// limiter's health, the hot keys and the decisions' metric.
func (s *Server) recordDecision(snap *snapshot, name, key string, n int64, outcome string, err error) {
	s.metrics.Decisions.WithLabelValues(name, outcome).Inc()
	now := s.now()
	if l, ok := snap.limiters[name]; ok {
		l.stats.record(now, snap.cfg.HealthWindow, n, outcome)
	}
	if key != "" && err == nil {
		s.hot.add(now, name, key)
	}
}

// observeCharge records a charge of the quota service.
func (s *Server) observeCharge(c rlqs.Charge) {
	if c.Err == nil && c.ShadowRejected > 0 {
		s.recordShadow(s.cur.Load(), c.Limiter, c.Key, c.Tokens-c.ShadowRejected, c.ShadowRejected, nil)
		return
	}
	s.record(s.cur.Load(), c.Limiter, c.Key, c.Tokens, c.Allowed, c.Err)
}

// shadow reports whether the limiter called name is in shadow mode now.
func (s *Server) shadow(name string) bool {
	l, ok := s.cur.Load().limiters[name]
	return ok && l.shadow
}

// observe records a decision of the Envoy service.
func (s *Server) observe(d envoyrls.Decision) {
	if d.Result.ShadowRejected && d.Err == nil {
		s.recordShadow(s.cur.Load(), d.Limiter, d.Key, 0, 1, nil)
		return
	}
	s.record(s.cur.Load(), d.Limiter, d.Key, d.Hits, d.Result.Allowed, d.Err)
}

type inspectRequest struct {
	keyRequest
	Tokens *int64 `json:"tokens"`
}

// Inspection is what inspect reports of a key.
type Inspection struct {
	Limiter string `json:"limiter"`
	Key     string `json:"key"`
	Policy  string `json:"policy"`
	// Result is what consuming the tokens asked for would decide now.
	Result Result `json:"result"`
	// Bucket is the key's bucket, for token-bucket policies.
	Bucket *BucketState `json:"bucket,omitempty"`
	// Debt is what the key owes (debt.go), for policies that can owe.
	Debt *int64 `json:"debt,omitempty"`
}

// BucketState is a token bucket's snapshot.
type BucketState struct {
	AvailableTokens    int64       `json:"available_tokens"`
	TimeToFullRefillMS int64       `json:"time_to_full_refill_ms"`
	Bandwidths         []Bandwidth `json:"bandwidths"`
}

// Bandwidth is one bandwidth of a bucket.
type Bandwidth struct {
	ID       string `json:"id,omitempty"`
	Capacity int64  `json:"capacity"`
	Tokens   int64  `json:"tokens"`
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) *apiError {
	var q inspectRequest
	_, l, e := s.decodeCall(w, r, &q)
	if e != nil {
		return e
	}
	s.traceLimiter(r, l.name)
	n, e := tokens(q.Tokens)
	if e != nil {
		return e
	}
	peek, err := l.l.PeekN(r.Context(), q.Key, n)
	if err := aboveLimit(l, n, newResult(peek), err); err != nil {
		return s.limiterError(r, err)
	}
	out := Inspection{Limiter: l.name, Key: q.Key, Policy: l.policyOf(q.Key).String(), Result: newResult(peek)}
	if c, err := l.l.Debt(r.Context(), q.Key); err == nil {
		out.Debt = &c.Debt
	} else if !errors.Is(err, errors.ErrUnsupported) {
		return s.limiterError(r, err)
	}
	if b, err := l.l.Bucket(q.Key); err == nil {
		snap, err := b.Snapshot(r.Context())
		if errors.Is(err, errors.ErrUnsupported) { // the key's own policy is not a token bucket (overrides)
			writeJSON(w, http.StatusOK, out)
			return nil
		}
		if err != nil {
			return s.limiterError(r, err)
		}
		bs := &BucketState{AvailableTokens: snap.AvailableTokens, TimeToFullRefillMS: millis(snap.TimeToFullRefill)}
		for i, bw := range snap.Config.Bandwidths {
			bs.Bandwidths = append(bs.Bandwidths, Bandwidth{ID: bw.ID(), Capacity: bw.Capacity(), Tokens: snap.Bandwidths[i]})
		}
		out.Bucket = bs
	} else if !errors.Is(err, errors.ErrUnsupported) {
		return s.limiterError(r, err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// simQueue is how long a simulation waits for one of those running to
// end, at most, before it is answered busy: the live page asks for a
// chart of every limiter at once, and a simulation takes at most about a
// quarter of a second.
const simQueue = 5 * time.Second

// simulate serves GET /api/v1/simulate, a chart of a limiter on a
// traffic pattern, unless server.simulate turns it off. At most
// max_concurrent simulations run at once; others wait their turn for up
// to simQueue.
func (s *Server) simulate(w http.ResponseWriter, r *http.Request) *apiError {
	c := s.cur.Load().cfg.Simulate
	if !c.Enabled {
		return errorf(http.StatusNotFound, codeNotFound, "GET /api/v1/simulate is turned off on this server (server.simulate.enabled)")
	}
	t := time.NewTimer(s.simQueue)
	defer t.Stop()
	select {
	case s.simSlots <- struct{}{}:
	case <-t.C:
		s.metrics.busy.WithLabelValues("simulations").Inc()
		w.Header().Set("Retry-After", "1")
		return errorf(http.StatusServiceUnavailable, codeBusy,
			"%d simulations are running, as many as server.simulate.max_concurrent allows; retry shortly", cap(s.simSlots))
	case <-r.Context().Done():
		return s.limiterError(r, r.Context().Err())
	}
	defer func() { <-s.simSlots }()
	simulate.Handler(s.Policy, int(min(c.MaxRequests, simulate.MaxRequests))).ServeHTTP(w, r)
	return nil
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) *apiError {
	var q keyRequest
	_, l, e := s.decodeCall(w, r, &q)
	if e != nil {
		return e
	}
	s.traceLimiter(r, l.name)
	if err := l.l.Reset(r.Context(), q.Key); err != nil {
		return s.limiterError(r, err)
	}
	writeJSON(w, http.StatusOK, struct {
		Limiter string `json:"limiter"`
		Key     string `json:"key"`
		Reset   bool   `json:"reset"`
	}{l.name, q.Key, true})
	return nil
}

// LimiterInfo describes a configured limiter.
type LimiterInfo struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
	Limit  int64  `json:"limit"`
	// Shadow says the limiter is in shadow mode (shadow: true).
	Shadow bool `json:"shadow,omitempty"`
}

func (s *Server) listLimiters(w http.ResponseWriter, _ *http.Request) *apiError {
	snap := s.cur.Load()
	out := make([]LimiterInfo, 0, len(snap.order))
	for _, name := range snap.order {
		l := snap.limiters[name]
		out = append(out, LimiterInfo{Name: name, Policy: l.policy.String(), Limit: l.limit, Shadow: l.shadow})
	}
	writeJSON(w, http.StatusOK, map[string]any{"limiters": out})
	return nil
}

// Stats is the stats endpoint's answer.
type Stats struct {
	UptimeSeconds float64        `json:"uptime_seconds"`
	Store         string         `json:"store"`
	Limiters      []LimiterStats `json:"limiters"`
	HotKeys       []HotKey       `json:"hot_keys"`
}

// LimiterStats are a limiter's counts since the server started or since a
// reload changed its policy. Tokens counts the tokens allowed decisions
// took.
//
// Errors are the decisions the store or the server failed, Invalid the
// requests the caller got wrong (answered 400). StoreFailing says that a
// store failure decided one of its decisions within the health window,
// under any store_failure, and CircuitOpen that its circuit breaker keeps
// its calls from the store now.
type LimiterStats struct {
	Name         string `json:"name"`
	Allowed      int64  `json:"allowed"`
	Rejected     int64  `json:"rejected"`
	Errors       int64  `json:"errors"`
	Invalid      int64  `json:"invalid"`
	Tokens       int64  `json:"tokens"`
	Degraded     bool   `json:"degraded"`
	StoreFailing bool   `json:"store_failing"`
	CircuitOpen  bool   `json:"circuit_open"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) *apiError {
	snap := s.cur.Load()
	now := s.now()
	out := Stats{
		UptimeSeconds: math.Round(now.Sub(s.started).Seconds()*1000) / 1000,
		Store:         redact(snap.cfg.Store),
		Limiters:      make([]LimiterStats, 0, len(snap.order)),
		HotKeys:       s.hot.top(now),
	}
	for _, name := range snap.order {
		l := snap.limiters[name]
		st := l.stats
		out.Limiters = append(out.Limiters, LimiterStats{
			Name: name, Allowed: st.allowed.Load(), Rejected: st.rejected.Load(),
			Errors: st.errors.Load(), Invalid: st.invalid.Load(), Tokens: st.tokens.Load(), Degraded: snap.degraded(name, now),
			StoreFailing: st.storeFailing(now, snap.cfg.HealthWindow), CircuitOpen: l.circuit.Load(),
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (snap *snapshot) degraded(name string, now time.Time) bool {
	c := snap.cfg
	return snap.limiters[name].stats.degraded(now, c.HealthWindow, c.HealthThreshold, c.HealthMinRequests)
}

// limiterHealth reports each limiter's health, as Resilience4j's rate
// limiter health indicator does. It answers 200 even when some are
// degraded: a limiter that rejects is doing its job, and the process
// should not be restarted for it.
func (s *Server) limiterHealth(w http.ResponseWriter, _ *http.Request) *apiError {
	snap := s.cur.Load()
	now := s.now()
	type health struct {
		Name     string `json:"name"`
		Degraded bool   `json:"degraded"`
	}
	status := "ok"
	out := make([]health, 0, len(snap.order))
	for _, name := range snap.order {
		d := snap.degraded(name, now)
		if d {
			status = "degraded"
		}
		out = append(out, health{name, d})
	}
	writeJSON(w, http.StatusOK, struct {
		Status   string   `json:"status"`
		Limiters []health `json:"limiters"`
	}{status, out})
	return nil
}

// ready checks that the store answers: its Ping when it has one, else an
// update that changes nothing. A store that has not passed its check
// since the start (Server.storeErr) is not ready, whatever a ping says.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) *apiError {
	if err := s.storeErr.Load(); err != nil {
		return errorf(http.StatusServiceUnavailable, codeStoreUnavailable, "the store has not answered since the start: %v", *err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cur.Load().cfg.StoreTimeout)
	defer cancel()
	start := time.Now()
	var err error
	if p, ok := s.store.Store.(storeurl.Pinger); ok {
		err = p.Ping(ctx)
	} else {
		err = s.store.Update(ctx, "sluice-readyz", func([]byte) ([]byte, time.Duration, bool) { return nil, 0, false })
	}
	s.metrics.StoreOp("ping").Observe(time.Since(start), err)
	if err != nil {
		return errorf(http.StatusServiceUnavailable, codeStoreUnavailable, "store: %v", err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}
