package httplimit

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Option configures New and NewTransport. Each says which of them it
// applies to; the other ignores it.
type Option func(*options)

type options struct {
	headers        HeaderStyle
	limitedStatus  int
	errorStatus    int
	problemDetails bool
	clock          sluice.Clock
	logger         *slog.Logger

	base     http.RoundTripper
	key      KeyFunc
	maxWait  time.Duration
	adaptive *Adaptive
}

// WithHeaders sets the rate-limit header styles of New's responses, one
// or several joined with |; 0 sends none. The default is Draft11Headers.
func WithHeaders(styles HeaderStyle) Option { return func(o *options) { o.headers = styles } }

// WithLimitedStatus sets the status of New's answer to a rejected request,
// in [400, 599]. The default is 429 Too Many Requests.
func WithLimitedStatus(code int) Option { return func(o *options) { o.limitedStatus = code } }

// WithErrorStatus sets the status of New's answer when a limiter fails
// (its store failed and it fails closed), in [400, 599]. The default is
// 503 Service Unavailable.
func WithErrorStatus(code int) Option { return func(o *options) { o.errorStatus = code } }

// WithProblemDetails makes New answer rejections and errors with an RFC
// 9457 application/problem+json body instead of text/plain. The default is
// false.
func WithProblemDetails(on bool) Option { return func(o *options) { o.problemDetails = on } }

// WithClock sets the wall clock that New's X-RateLimit-Reset and
// NewTransport's hold-back after a provider's Retry-After read, and that
// the Transport sleeps on for a hold-back when it has a Sleep method (see
// sluice.Clock; the limiter's own clock waits for its tokens). It must be
// a wall clock (IsWallClock); a *sluicetest.FakeClock is one. The default
// is sluice.WallClock(); nil keeps it.
func WithClock(c sluice.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets where New logs the requests it could not decide on (key
// and cost errors, limiter failures). The default is slog.Default(); nil
// keeps it.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithBase sets the RoundTripper that NewTransport's Transport sends
// through. The default is http.DefaultTransport; nil keeps it.
func WithBase(rt http.RoundTripper) Option { return func(o *options) { o.base = rt } }

// WithKey sets the key NewTransport's Transport limits an outbound request
// under. The default is the request URL's host (with its port, if the URL
// has one); nil keeps it.
func WithKey(k KeyFunc) Option { return func(o *options) { o.key = k } }

// WithMaxWait bounds how long NewTransport's Transport waits for a token
// and for a provider's hold-back to end, together; 0 waits not at all.
// The default is sluice.Never: only the request's context bounds the wait.
// It must not be negative.
func WithMaxWait(d time.Duration) Option { return func(o *options) { o.maxWait = d } }

func newOptions(opts []Option) (options, error) {
	o := options{
		headers:       Draft11Headers,
		limitedStatus: http.StatusTooManyRequests,
		errorStatus:   http.StatusServiceUnavailable,
		maxWait:       sluice.Never,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = sluice.WallClock()
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.base == nil {
		o.base = http.DefaultTransport
	}
	if o.key == nil {
		o.key = hostKey
	}
	switch {
	case o.headers&^allHeaders != 0:
		return o, &ConfigError{Field: "WithHeaders", Value: strconv.Itoa(int(o.headers)), Want: "must be a combination of Draft11Headers, EarlyDraftHeaders and XHeaders"}
	case o.limitedStatus < 400 || o.limitedStatus > 599:
		return o, &ConfigError{Field: "WithLimitedStatus", Value: strconv.Itoa(o.limitedStatus), Want: "must be in [400, 599]"}
	case o.errorStatus < 400 || o.errorStatus > 599:
		return o, &ConfigError{Field: "WithErrorStatus", Value: strconv.Itoa(o.errorStatus), Want: "must be in [400, 599]"}
	case !o.clock.IsWallClock():
		return o, &ConfigError{Field: "WithClock", Value: "a clock that is not a wall clock", Want: "must be a wall clock"}
	case o.maxWait < 0:
		return o, &ConfigError{Field: "WithMaxWait", Value: o.maxWait.String(), Want: "must not be negative"}
	}
	if o.adaptive != nil {
		return o, o.adaptive.check()
	}
	return o, nil
}

func hostKey(r *http.Request) (string, error) { return r.URL.Host, nil }
