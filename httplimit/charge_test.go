package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestCharge: a limit with Settle holds each request's estimate and
// settles it with what the handler reported: refunded below it, owed
// above it, the estimate when nothing is reported, and what was reported
// before a client went away.
func TestCharge(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	l, err := sluice.NewLimiter(sluice.TokenBucket(1000, 1000, time.Minute), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New([]httplimit.Limit{{
		Name: "tokens", Limiter: l, Key: httplimit.Header("X-Tenant"),
		Cost:   func(*http.Request) (int64, error) { return 100, nil }, // the estimate
		Settle: time.Minute,
	}})
	if err != nil {
		t.Fatal(err)
	}
	var report []int64 // what the next request's handler reports, chunk by chunk
	onChunk := func() {}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, n := range report {
			if r.Context().Err() != nil {
				return // the client went away: what was streamed is reported
			}
			w.Write([]byte("chunk\n"))
			w.(http.Flusher).Flush()
			httplimit.Charge(r, n)
			onChunk()
		}
	}))
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		report    []int64
		gone      bool // the client went away before the handler ran
		remaining int64
		debt      int64
	}{
		{"streamed 20 of an estimate of 100", []int64{5, 10, 5}, false, 980, 0},
		{"nothing reported: the estimate", nil, false, 880, 0},
		{"streamed 1,200: 320 owed", []int64{600, 600}, false, 0, 320},
	} {
		report = tt.report
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		r.Header.Set("X-Tenant", "a")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: status %d", tt.name, w.Code)
		}
		c, err := l.Debt(ctx, "a")
		if err != nil || c.Remaining != tt.remaining || c.Debt != tt.debt {
			t.Fatalf("%s: %+v, %v; want %d remaining, debt %d", tt.name, c, err, tt.remaining, tt.debt)
		}
	}
	// In debt: refused until the refill at 1m pays it.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant", "a")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("a request in debt: status %d, want 429", w.Code)
	}

	// A client that goes away after the first chunk: the handler stops,
	// and what it reported counts.
	report = []int64{30, 30, 30}
	cctx, cancel := context.WithCancel(ctx)
	onChunk = cancel
	r = httptest.NewRequest("GET", "/", nil).WithContext(cctx)
	r.Header.Set("X-Tenant", "b")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if c, _ := l.Debt(ctx, "b"); c.Remaining != 970 {
		t.Errorf("a client gone after a chunk of 30: %d remaining, want 970", c.Remaining)
	}
}

// TestChargeNeedsDebt: Settle on a limiter that cannot owe tokens is a
// *ConfigError.
func TestChargeNeedsDebt(t *testing.T) {
	l, err := sluice.NewLimiter(sluice.SlidingWindow(10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = httplimit.New([]httplimit.Limit{{Name: "n", Limiter: l, Key: httplimit.Header("X"), Settle: time.Minute}})
	var ce *httplimit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "limits[0].Settle" {
		t.Errorf("New with Settle on a sliding window = %v, want a *ConfigError of limits[0].Settle", err)
	}
}
