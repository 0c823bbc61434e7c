package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/reqkey"
	"github.com/sluicehq/sluice/internal/sleep"
)

// Transport is an http.RoundTripper for calling a provider that limits its
// clients: it takes a token from a sluice.Limiter before each request, so
// that a fleet of processes sharing the limiter's store stays within the
// provider's limit, and it holds back after the provider says so.
//
// Before sending, a request waits, within the maximum wait (WithMaxWait)
// and its context, first for any hold-back of its key to end and then for
// a token (Limiter.Wait). When either would take too long, or the
// context's deadline comes sooner, RoundTrip returns a *WaitError at once
// and sends nothing. When the context ends while it waits for its token,
// the token is given back.
//
// After a refusal (429, 503, or 403 as GitHub's rate limits answer) it
// holds further requests of that key back, in this process, until the
// provider says a request may go: Retry-After (delay seconds or an HTTP
// date) when the refusal has it, which takes precedence over the
// rate-limit fields as draft-ietf-httpapi-ratelimit-headers-11 says;
// otherwise until the quota resets by the fields that say it is spent (a
// RateLimit list member with r=0 until its t, RateLimit-Remaining: 0 until
// RateLimit-Reset, X-RateLimit-Remaining: 0 until X-RateLimit-Reset, a
// Unix time in seconds when it is at least 10^9, else seconds from now),
// the longest of them. A refusal with none of these holds nothing back.
//
// A response that went through holds nothing back, even with r=0: t is
// when the whole quota is back, not when the next request may go, and
// for a token bucket or a sliding window that is much sooner. The
// limiter paces those requests, and the provider's next refusal says how
// long to wait.
//
// With WithAdaptive, it also sends at most at a rate that the fleet
// shares through a store and adapts to the provider's answers (see
// Adaptive): each request first takes the next slot of that rate.
//
// Transport never retries: a 429 or 503 is returned to the caller as the
// provider sent it, whether or not the request was idempotent.
//
// Transport is safe for simultaneous use by multiple goroutines.
type Transport struct {
	limiter *sluice.Limiter
	o       options

	mu    sync.Mutex
	holds map[string]int64 // key → clock time (ns) until which nothing is sent
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a transport that takes one token from l, under the
// request's key, before each request. WithBase, WithKey, WithMaxWait,
// WithClock and WithAdaptive apply. l's policy must support reservations,
// since a request waits for its token with l.Wait: not SlidingWindow or
// SlidingLog, nor a Compound with either among its members. It returns a
// *ConfigError for a nil limiter, for one whose policy cannot reserve
// (matching errors.ErrUnsupported), and for a bad option. A key
// whose policy comes from sluice.WithPolicyFor is not checked here: one
// that cannot reserve fails its requests with an error matching errors.ErrUnsupported.
func NewTransport(l *sluice.Limiter, opts ...Option) (*Transport, error) {
	if l == nil {
		return nil, &ConfigError{Field: "limiter", Value: "nil", Want: "is required"}
	}
	if r, ok := l.Policy().(interface{ Reserves() bool }); ok && !r.Reserves() {
		return nil, &ConfigError{Field: "limiter", Value: l.Policy().String(),
			Want: "needs a policy that can reserve, to wait for its token", err: errors.ErrUnsupported}
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Transport{limiter: l, o: o, holds: map[string]int64{}}, nil
}

// ErrHeldBack is wrapped by a WaitError when the provider's hold-back
// would outlast the maximum wait.
var ErrHeldBack = errors.New("httplimit: provider asked to hold back")

// WaitError is RoundTrip's error for a request it did not send because it
// could not be let through within the maximum wait or its context.
type WaitError struct {
	// Key is the request's key.
	Key string
	// Wait is the wait the request would have needed; 0 when its context
	// ended; sluice.Never when the limiter can never grant it.
	Wait time.Duration
	// MaxWait is the wait it had left: WithMaxWait less any hold-back
	// already waited, and at most the time left until the context's
	// deadline.
	MaxWait time.Duration
	// Err is ErrHeldBack, the limiter's *sluice.MaxWaitError
	// (sluice.ErrMaxWaitExceeded, and context.DeadlineExceeded when the
	// bound was the context's deadline), or the context's error.
	Err error
}

func (e *WaitError) Error() string {
	if e.Wait == 0 {
		return fmt.Sprintf("httplimit: request for %q not sent: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("httplimit: request for %q not sent: it would wait %v, more than %v: %v", e.Key, e.Wait, e.MaxWait, e.Err)
}

// Unwrap returns Err.
func (e *WaitError) Unwrap() error { return e.Err }

// RoundTrip waits for req's turn and sends it through the base transport,
// as the Transport's doc says. It closes req's body when it does not send.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	key, err := t.o.key(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("httplimit: Transport key: %w", err)
	}
	maxWait, bound := t.o.maxWait, t.o.maxWait
	if dl, ok := ctx.Deadline(); ok {
		bound = max(min(bound, time.Until(dl)), 0)
	}
	if wait := t.heldFor(key, t.o.clock.Now()); wait > 0 {
		if wait > bound {
			closeBody(req)
			return nil, &WaitError{Key: key, Wait: wait, MaxWait: bound, Err: ErrHeldBack}
		}
		if err := sleep.On(ctx, t.o.clock, wait); err != nil {
			closeBody(req)
			return nil, &WaitError{Key: key, MaxWait: bound, Err: err}
		}
		maxWait -= wait
		bound -= wait
	}
	var epoch int64
	if t.o.adaptive != nil {
		e, wait, err := t.adaptiveWait(ctx, key, bound)
		if err != nil {
			closeBody(req)
			if _, ok := err.(*WaitError); ok {
				return nil, err
			}
			return nil, fmt.Errorf("httplimit: Transport adaptive rate: %w", err)
		}
		epoch = e
		maxWait -= wait
	}
	if err := t.wait(ctx, key, maxWait); err != nil {
		closeBody(req)
		var mw *sluice.MaxWaitError
		switch {
		case errors.As(err, &mw):
			return nil, &WaitError{Key: key, Wait: mw.Wait, MaxWait: mw.MaxWait, Err: err}
		case ctx.Err() != nil:
			return nil, &WaitError{Key: key, MaxWait: maxWait, Err: err}
		}
		return nil, fmt.Errorf("httplimit: Transport limiter: %w", err)
	}
	sent := t.o.clock.Now()
	resp, err := t.o.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	now := t.o.clock.Now()
	if a := t.o.adaptive; a != nil && (resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable || a.SlowAfter > 0 && time.Duration(now-sent) > a.SlowAfter) {
		// A cut the store could not take is lost: the next refusal cuts.
		_ = a.update(ctx, key, now, func(s aimd) (aimd, bool) { return a.cut(s, now, epoch) })
	}
	if d := holdBack(resp, now); d > 0 {
		t.hold(key, policy.SatAdd(now, int64(d)))
	}
	return resp, nil
}

// wait waits for key's token within maxWait: the limiter's Wait, or, for
// a maxWait of 0 (which Wait refuses: its maxWait must be positive), a
// reservation of the token only if it is there now, refused as Wait
// refuses a wait too long.
func (t *Transport) wait(ctx context.Context, key string, maxWait time.Duration) error {
	if maxWait > 0 {
		return t.limiter.Wait(ctx, key, maxWait)
	}
	r, err := t.limiter.Reserve(ctx, key, 0)
	switch {
	case err != nil:
		return err
	case !r.OK():
		return &sluice.MaxWaitError{Tokens: 1, Wait: r.Result().RetryAfter}
	}
	return nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// heldFor is how long key is held back from now (ns); it forgets a
// hold-back that has ended.
func (t *Transport) heldFor(key string, now int64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.holds[key]
	if !ok {
		return 0
	}
	if until <= now {
		delete(t.holds, key)
		return 0
	}
	return time.Duration(until - now)
}

// hold holds key back until the clock time until (ns), unless it is held
// longer already.
func (t *Transport) hold(key string, until int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if until > t.holds[key] {
		t.holds[key] = until
	}
}

// holdBack is how long resp asks further requests to be held back, at
// now (ns): 0 unless resp is a refusal; then its Retry-After, or without
// one the longest reset of a quota its fields say is spent.
func holdBack(resp *http.Response, now int64) time.Duration {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusForbidden:
	default:
		return 0
	}
	h := resp.Header
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if secs, ok := parseSeconds(v); ok {
			return seconds(secs)
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(time.Duration(policy.SatAdd(at.UnixNano(), -now)), 0)
		}
	}
	var d time.Duration
	for _, line := range h.Values("RateLimit") {
		for _, member := range reqkey.SplitQuoted(line, ',') {
			var r, t int64 = -1, -1
			for _, param := range reqkey.SplitQuoted(member, ';')[1:] {
				name, value, _ := strings.Cut(strings.TrimSpace(param), "=")
				if n, ok := parseSeconds(value); ok && name == "r" {
					r = n
				} else if ok && name == "t" {
					t = n
				}
			}
			if r == 0 && t > 0 {
				d = max(d, seconds(t))
			}
		}
	}
	if h.Get("RateLimit-Remaining") == "0" {
		if secs, ok := parseSeconds(h.Get("RateLimit-Reset")); ok {
			d = max(d, seconds(secs))
		}
	}
	if h.Get("X-RateLimit-Remaining") == "0" {
		if secs, ok := parseSeconds(h.Get("X-RateLimit-Reset")); ok {
			if secs >= 1e9 { // a Unix time: 10^9 s is 2001, and no provider holds back for 31 years
				d = max(d, time.Duration(policy.SatAdd(int64(seconds(secs)), -now)))
			} else {
				d = max(d, seconds(secs))
			}
		}
	}
	return d
}

// parseSeconds parses a non-negative integer.
func parseSeconds(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil && n >= 0
}

// seconds is s seconds as a Duration, saturating at sluice.Never.
func seconds(s int64) time.Duration {
	if s > int64(sluice.Never/time.Second) {
		return sluice.Never
	}
	return time.Duration(s) * time.Second
}
