package httplimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func ExampleMiddleware() {
	clock := sluicetest.NewFakeClock(1_700_000_000 * int64(time.Second)) // for a reproducible output
	perClient, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	clientIP, err := httplimit.ClientIP()
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{
		{Name: "per-client", Limiter: perClient, Key: clientIP},
	}, httplimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	var rec *httptest.ResponseRecorder
	for range 3 {
		clock.Advance(10 * time.Second)
		rec = httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(rec, r)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"), strings.TrimSpace(rec.Body.String()))
	}
	fmt.Println(rec.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 "per-client";r=1;t=60  hello
	// 200 "per-client";r=0;t=50  hello
	// 429 "per-client";r=0;t=40 40 rate limit "per-client" exceeded, retry after 40 seconds
	// "per-client";q=2;w=60
}

func ExampleClientIP() {
	// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
	key, err := httplimit.ClientIP(httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.7:40000"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 2001:db8:1:2::99, 10.0.0.3") // the client forged 6.6.6.6
	fmt.Println(key(r))
	// Output: 2001:db8:1:2::/64 <nil>
}

// roundTripper is a fake provider without a network.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ExampleTransport() {
	clock := sluicetest.NewFakeClock(1_700_000_000 * int64(time.Second))
	// An SMS provider allows 100 requests a second to the whole fleet:
	// every process's limiter uses the same store (here in memory).
	limiter, err := sluice.NewLimiter(sluice.GCRA(100, 100, time.Second),
		sluice.WithStore(memstore.New()), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	sent := 0
	provider := roundTripper(func(r *http.Request) (*http.Response, error) {
		sent++
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}
		if sent == 1 { // it is busy anyway
			resp.StatusCode = http.StatusTooManyRequests
			resp.Header.Set("Retry-After", "30")
		}
		return resp, nil
	})
	tr, err := httplimit.NewTransport(limiter, httplimit.WithBase(provider), httplimit.WithMaxWait(10*time.Second),
		httplimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}

	resp, err := client.Post("https://sms.example/send", "text/plain", strings.NewReader("hi"))
	fmt.Println(resp.StatusCode, err) // returned as is, not retried
	_, err = client.Post("https://sms.example/send", "text/plain", strings.NewReader("hi"))
	var we *httplimit.WaitError
	fmt.Println(errors.As(err, &we), errors.Is(err, httplimit.ErrHeldBack), we.Wait)
	fmt.Println("sent:", sent)
	// Output:
	// 429 <nil>
	// true true 30s
	// sent: 1
}

func ExampleWithAdaptive() {
	clock := sluicetest.NewFakeClock(1_700_000_000 * int64(time.Second))
	store := memstore.New() // in production the fleet's shared store
	// The provider documents 100 a second, but takes fewer when busy,
	// and says so with a 503 (and no Retry-After).
	busy := true
	provider := roundTripper(func(r *http.Request) (*http.Response, error) {
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}
		if busy {
			resp.StatusCode = http.StatusServiceUnavailable
			busy = false
		}
		return resp, nil
	})
	limiter, err := sluice.NewLimiter(sluice.GCRA(100, 100, time.Second), // the documented ceiling
		sluice.WithStore(store), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	tr, err := httplimit.NewTransport(limiter, httplimit.WithBase(provider), httplimit.WithClock(clock),
		httplimit.WithAdaptive(httplimit.Adaptive{Store: store, Min: 1, Max: 100}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for range 3 {
		before := clock.Slept()
		resp, err := client.Get("https://api.example/v1/things")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "after waiting", clock.Slept()-before)
	}
	// Output:
	// 503 after waiting 0s
	// 200 after waiting 10ms
	// 200 after waiting 11.111111ms
}
