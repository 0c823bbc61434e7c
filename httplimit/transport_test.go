package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// provider is a test server that counts the requests it sees and answers
// each with what respond says (200 when nil).
type provider struct {
	*httptest.Server
	mu      sync.Mutex
	seen    int
	methods []string
	respond func(n int, w http.ResponseWriter) // n counts from 1
}

func newProvider(t *testing.T, respond func(n int, w http.ResponseWriter)) *provider {
	p := &provider{respond: respond}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen++
		n := p.seen
		p.methods = append(p.methods, r.Method)
		p.mu.Unlock()
		if p.respond != nil {
			p.respond(n, w)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

func newTransport(t *testing.T, l *sluice.Limiter, opts ...httplimit.Option) *httplimit.Transport {
	t.Helper()
	tr, err := httplimit.NewTransport(l, opts...)
	if err != nil {
		t.Fatalf("NewTransport: %v", err)
	}
	return tr
}

// TestFleet: transports of several processes sharing one store never send
// the provider more than the limit, however many goroutines call them.
// The clock stands still while they race, so exactly the limit gets
// through and the rest fail without sending; a second later the refill
// does.
func TestFleet(t *testing.T) {
	const limit, fleet, callers, calls = 20, 4, 5, 6
	p := newProvider(t, nil)
	clock := sluicetest.NewFakeClock(t0)
	store := memstore.New()
	var transports []*httplimit.Transport
	for range fleet { // one limiter per process, all on the same store
		l := newLimiter(t, sluice.TokenBucket(limit, limit, time.Second), sluice.WithStore(store), sluice.WithClock(clock))
		transports = append(transports, newTransport(t, l, httplimit.WithMaxWait(0), httplimit.WithClock(clock)))
	}
	round := func() (sent, refused int64) {
		var wg sync.WaitGroup
		for _, tr := range transports {
			client := &http.Client{Transport: tr}
			for range callers {
				wg.Go(func() {
					for range calls {
						resp, err := client.Get(p.URL)
						var we *httplimit.WaitError
						switch {
						case err == nil:
							resp.Body.Close()
							atomic.AddInt64(&sent, 1)
						case errors.As(err, &we) && errors.Is(err, sluice.ErrMaxWaitExceeded):
							atomic.AddInt64(&refused, 1)
						default:
							t.Errorf("Get: %v", err)
						}
					}
				})
			}
		}
		wg.Wait()
		return sent, refused
	}
	for i := range 2 {
		sent, refused := round()
		if sent != limit || refused != fleet*callers*calls-limit {
			t.Errorf("round %d: %d sent, %d refused; want %d, %d", i, sent, refused, limit, fleet*callers*calls-limit)
		}
		if got := p.count(); got != limit*(i+1) {
			t.Errorf("round %d: the provider saw %d requests, want %d", i, got, limit*(i+1))
		}
		clock.Advance(time.Second)
	}
}

// TestTransportWaits: a request waits for its token within the maximum
// wait, and one that would wait longer is not sent.
func TestTransportWaits(t *testing.T) {
	p := newProvider(t, nil)
	clock := sluicetest.NewFakeClock(t0)
	l := newLimiter(t, sluice.TokenBucket(1, 1, time.Second), sluice.WithClock(clock))
	client := &http.Client{Transport: newTransport(t, l, httplimit.WithMaxWait(1500*time.Millisecond), httplimit.WithClock(clock))}
	for i := range 2 {
		resp, err := client.Get(p.URL)
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
		resp.Body.Close()
	}
	if clock.Slept() != time.Second || p.count() != 2 {
		t.Errorf("slept %v, provider saw %d; want 1s, 2", clock.Slept(), p.count())
	}
	// The bucket is empty and the token after the next one is 2s away.
	l.ReserveN(context.Background(), strings.TrimPrefix(p.URL, "http://"), 1, sluice.Never)
	body := &closeRecorder{Reader: strings.NewReader("hello")}
	req, _ := http.NewRequest("POST", p.URL, body)
	_, err := client.Do(req)
	var we *httplimit.WaitError
	if !errors.As(err, &we) || !errors.Is(err, sluice.ErrMaxWaitExceeded) || we.Wait != 2*time.Second || we.MaxWait != 1500*time.Millisecond {
		t.Fatalf("Post: %v, want a *WaitError of a 2s wait over 1.5s matching ErrMaxWaitExceeded", err)
	}
	if p.count() != 2 || !body.closed {
		t.Errorf("provider saw %d requests, body closed %v; want 2, true", p.count(), body.closed)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestTransportContext(t *testing.T) {
	p := newProvider(t, nil)
	l := newLimiter(t, sluice.NoLimit())
	client := &http.Client{Transport: newTransport(t, l)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.URL, nil)
	_, err := client.Do(req)
	var we *httplimit.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.Canceled) {
		t.Errorf("Get: %v, want a *WaitError matching context.Canceled", err)
	}
	if p.count() != 0 {
		t.Errorf("provider saw %d requests, want 0", p.count())
	}
}

// TestHoldBack: after a provider's signal, the next request to it waits
// for as long as the signal says, or fails at once without sending.
func TestHoldBack(t *testing.T) {
	now := time.Unix(0, t0)
	for _, tt := range []struct {
		name   string
		status int
		header []string
		want   time.Duration // 0: no hold-back
	}{
		{"429 Retry-After", 429, []string{"Retry-After", "5"}, 5 * time.Second},
		{"503 Retry-After", 503, []string{"Retry-After", "2"}, 2 * time.Second},
		{"429 Retry-After date", 429, []string{"Retry-After", now.Add(7 * time.Second).UTC().Format(http.TimeFormat)}, 7 * time.Second},
		{"429 Retry-After date past", 429, []string{"Retry-After", now.Add(-7 * time.Second).UTC().Format(http.TimeFormat)}, 0},
		{"429 without a signal", 429, nil, 0},
		{"200 Retry-After", 200, []string{"Retry-After", "5"}, 0},
		{"draft-11 r=0", 429, []string{"RateLimit", `"burst";r=3;t=1, "day";r=0;t=3`}, 3 * time.Second},
		{"draft-11 r>0", 429, []string{"RateLimit", `"burst";r=1;t=9`}, 0},
		// t is when the quota is back, not when the next request may go.
		{"draft-11 r=0 on a 200", 200, []string{"RateLimit", `"burst";r=0;t=10`}, 0},
		{"early draft", 503, []string{"RateLimit-Remaining", "0", "RateLimit-Reset", "4"}, 4 * time.Second},
		{"early draft remaining", 429, []string{"RateLimit-Remaining", "1", "RateLimit-Reset", "4"}, 0},
		{"early draft on a 200", 200, []string{"RateLimit-Remaining", "0", "RateLimit-Reset", "4"}, 0},
		{"X epoch on GitHub's 403", 403, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+6, 10)}, 6 * time.Second},
		{"X delta", 429, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "8"}, 8 * time.Second},
		{"X on a 200", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "8"}, 0},
		{"403 without a signal", 403, nil, 0},
		{"the longest reset wins", 429, []string{"RateLimit", `"a";r=0;t=9`, "RateLimit-Remaining", "0", "RateLimit-Reset", "4"}, 9 * time.Second},
		// draft-11: Retry-After takes precedence over the RateLimit fields.
		{"Retry-After wins", 429, []string{"Retry-After", "2", "RateLimit", `"a";r=0;t=9`}, 2 * time.Second},
		{"garbage", 429, []string{"Retry-After", "soon", "RateLimit", `"a";r=0;t=x`}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newProvider(t, func(n int, w http.ResponseWriter) {
				if n == 1 {
					for i := 0; i+1 < len(tt.header); i += 2 {
						w.Header().Set(tt.header[i], tt.header[i+1])
					}
					w.WriteHeader(tt.status)
				}
			})
			clock := sluicetest.NewFakeClock(t0)
			l := newLimiter(t, sluice.NoLimit())
			fast := &http.Client{Transport: newTransport(t, l, httplimit.WithMaxWait(0), httplimit.WithClock(clock))}
			resp, err := fast.Get(p.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d: the transport must return the provider's answer", resp.StatusCode, tt.status)
			}
			_, err = fast.Get(p.URL)
			var we *httplimit.WaitError
			switch {
			case tt.want == 0 && err != nil:
				t.Errorf("second Get: %v, want no hold-back", err)
			case tt.want > 0 && (!errors.As(err, &we) || !errors.Is(err, httplimit.ErrHeldBack) || we.Wait != tt.want):
				t.Errorf("second Get: %v, want a *WaitError of %v matching ErrHeldBack", err, tt.want)
			}
			if want := map[bool]int{true: 1, false: 2}[tt.want > 0]; p.count() != want {
				t.Errorf("provider saw %d requests, want %d", p.count(), want)
			}
		})
	}
}

// TestHoldBackWaits: within the maximum wait, a held-back request waits
// for the hold-back to end and is then sent; a 429 is never retried, POST
// or not.
func TestHoldBackWaits(t *testing.T) {
	p := newProvider(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "slow down")
		}
	})
	clock := sluicetest.NewFakeClock(t0)
	l := newLimiter(t, sluice.GCRA(10, 10, time.Second), sluice.WithClock(clock))
	client := &http.Client{Transport: newTransport(t, l, httplimit.WithMaxWait(time.Minute), httplimit.WithClock(clock))}
	resp, err := client.Post(p.URL, "text/plain", strings.NewReader("send SMS"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || string(body) != "slow down" || p.count() != 1 {
		t.Fatalf("POST: %d %q, provider saw %d; want the provider's 429 %q, and 1 request", resp.StatusCode, body, p.count(), "slow down")
	}
	resp, err = client.Get(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || clock.Slept() != 5*time.Second || p.count() != 2 {
		t.Errorf("GET: status %d after sleeping %v, provider saw %d; want 200 after 5s, 2", resp.StatusCode, clock.Slept(), p.count())
	}
	if got := strings.Join(p.methods, " "); got != "POST GET" {
		t.Errorf("provider saw %s, want POST GET", got)
	}
}

func TestNewTransportErrors(t *testing.T) {
	l := newLimiter(t, sluice.NoLimit())
	for _, tt := range []struct {
		l         *sluice.Limiter
		opts      []httplimit.Option
		wantField string
	}{
		{nil, nil, "limiter"},
		{l, []httplimit.Option{httplimit.WithMaxWait(-time.Second)}, "WithMaxWait"},
		{l, []httplimit.Option{httplimit.WithClock(sluice.MonotonicClock())}, "WithClock"},
	} {
		_, err := httplimit.NewTransport(tt.l, tt.opts...)
		var ce *httplimit.ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.wantField {
			t.Errorf("NewTransport: %v, want a *ConfigError of %s", err, tt.wantField)
		}
	}
}

// TestNewTransportNeedsReservations: a request waits for its token with
// Limiter.Wait, which needs a reservation once the token is not there at
// once. A policy that cannot reserve is refused when the Transport is made,
// by what its machine can do: a sliding window and a sliding log, and a
// compound with either among its members. NewTransport accepted them, and
// then every request on a store failed with an error matching errors.ErrUnsupported.
func TestNewTransportNeedsReservations(t *testing.T) {
	for _, tt := range []struct {
		p    sluice.Policy
		want bool
	}{
		{sluice.SlidingWindow(10, time.Second), false},
		{sluice.SlidingLog(10, time.Second), false},
		{sluice.Compound(sluice.TokenBucket(10, 10, time.Second), sluice.SlidingWindow(100, time.Minute)), false},
		{sluice.FixedWindow(10, time.Second), true},
		{sluice.AlignedFixedWindow(10, time.Second), true},
		{sluice.TokenBucket(10, 10, time.Second), true},
		{sluice.LeakyBucket(10, 10, time.Second), true},
		{sluice.GCRA(10, 10, time.Second), true},
		{sluice.Shaper(1, time.Second, 10), true},
		{sluice.Compound(sluice.TokenBucket(10, 10, time.Second), sluice.FixedWindow(100, time.Minute)), true},
		{sluice.NoLimit(), true},
	} {
		l := newLimiter(t, tt.p, sluice.WithStore(memstore.New()))
		tr, err := httplimit.NewTransport(l)
		if !tt.want {
			var ce *httplimit.ConfigError
			if !errors.As(err, &ce) || ce.Field != "limiter" || !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("NewTransport(%v) = %v, want a *ConfigError of limiter matching errors.ErrUnsupported", tt.p, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewTransport(%v) = %v", tt.p, err)
			continue
		}
		p := newProvider(t, nil)
		resp, err := (&http.Client{Transport: tr}).Get(p.URL)
		if err != nil {
			t.Errorf("%v: GET = %v", tt.p, err)
			continue
		}
		resp.Body.Close()
	}
}

// TestTransportKey: WithKey puts two hosts of one provider under one
// limit; without it each host has its own.
func TestTransportKey(t *testing.T) {
	a, b := newProvider(t, nil), newProvider(t, nil)
	send := func(opts ...httplimit.Option) (sent int) {
		clock := sluicetest.NewFakeClock(t0)
		l := newLimiter(t, sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
		client := &http.Client{Transport: newTransport(t, l, append(opts, httplimit.WithMaxWait(0), httplimit.WithClock(clock))...)}
		for _, p := range []*provider{a, b, a, b} {
			resp, err := client.Get(p.URL)
			if err == nil {
				resp.Body.Close()
				sent++
			} else if !errors.As(err, new(*httplimit.WaitError)) {
				t.Fatalf("Get: %v, want nil or a *WaitError", err)
			}
		}
		return sent
	}
	if got := send(); got != 4 {
		t.Errorf("by host: %d of 4 requests to two hosts sent, want 4 (2 each)", got)
	}
	sms := func(*http.Request) (string, error) { return "sms", nil }
	if got := send(httplimit.WithKey(sms)); got != 2 {
		t.Errorf("WithKey: %d of 4 requests sent, want 2 (one limit for both hosts)", got)
	}
}

// TestTransportDeadline: a request whose context's deadline comes before
// its token fails at once, matching context.DeadlineExceeded, without
// sleeping, sending or taking the token.
func TestTransportDeadline(t *testing.T) {
	p := newProvider(t, nil)
	clock := sluicetest.NewFakeClock(t0)
	l := newLimiter(t, sluice.TokenBucket(1, 1, time.Hour), sluice.WithClock(clock))
	client := &http.Client{Transport: newTransport(t, l, httplimit.WithClock(clock))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, want := range []bool{true, false} {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.URL, nil)
		resp, err := client.Do(req)
		if want {
			if err != nil {
				t.Fatalf("Get %d: %v", i, err)
			}
			resp.Body.Close()
			continue
		}
		var we *httplimit.WaitError
		if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, sluice.ErrMaxWaitExceeded) || we.Wait != time.Hour {
			t.Errorf("Get %d: %v, want a *WaitError of an hour's wait matching context.DeadlineExceeded", i, err)
		}
	}
	if p.count() != 1 || clock.Slept() != 0 {
		t.Errorf("provider saw %d requests, slept %v; want 1, 0", p.count(), clock.Slept())
	}
	if r, _ := l.PeekN(context.Background(), strings.TrimPrefix(p.URL, "http://"), 1); r.RetryAfter != time.Hour {
		t.Errorf("Peek after = %+v, want the token an hour away: the refused request took nothing", r)
	}
}
