package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestAdaptiveTransport follows one Transport's adaptive rate on a fake
// clock: requests go a slot apart at Max, a 429 cuts the rate to 90% (a
// slot every 1/90 s), a response slower than SlowAfter cuts it again, and
// a wait longer than the maximum fails with ErrAdaptiveRate, unsent.
func TestAdaptiveTransport(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	var status atomic.Int64
	var delay atomic.Int64
	var seen atomic.Int64
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		clock.Advance(time.Duration(delay.Load()))
		w.WriteHeader(int(status.Load()))
	})
	tr := newTransport(t, newLimiter(t, sluice.NoLimit(), sluice.WithClock(clock)),
		httplimit.WithBase(handlerTransport{provider}), httplimit.WithClock(clock), httplimit.WithMaxWait(time.Second),
		httplimit.WithAdaptive(httplimit.Adaptive{Store: memstore.New(), Min: 10, Max: 100, Increase: 10, SlowAfter: 500 * time.Millisecond}))
	// get sends a request and returns how long it slept before going.
	get := func(code int) time.Duration {
		t.Helper()
		status.Store(int64(code))
		before := clock.Slept()
		req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("RoundTrip: %v", err)
		}
		resp.Body.Close()
		return clock.Slept() - before
	}
	for i, want := range []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond} {
		if got := get(200); got != want {
			t.Fatalf("request #%d at 100/s waited %v, want %v", i, got, want)
		}
	}
	get(http.StatusTooManyRequests) // sent in the slot reserved at 100/s, then cuts
	get(200)                        // the slot reserved before the cut
	if got, want := get(200), time.Duration(1_000_000_000_000/90_000); got != want {
		t.Errorf("after a 429 the slots are %v apart, want %v (90/s)", got, want)
	}
	// The rate gains 10/s a second since the cut: less than 1/s over
	// these few slots.
	within := func(what string, got time.Duration, rate int64) {
		t.Helper()
		if most, least := time.Duration(1e12/rate), time.Duration(1e12/(rate+1000)); got > most || got < least {
			t.Errorf("%s: slots %v apart, want from %v to %v (%d to %d mreq/s)", what, got, least, most, rate, rate+1000)
		}
	}
	within("a 503's slot", get(http.StatusServiceUnavailable), 90_000)
	get(200)
	within("after a 503", get(200), 81_000)

	// A slow answer cuts: the slots grow further apart than the rate
	// gained since would make them.
	delay.Store(int64(600 * time.Millisecond))
	get(200)
	delay.Store(0)
	get(200)
	if got, most := get(200), time.Duration(1_000_000_000_000/82_000); got <= most {
		t.Errorf("after an answer of 600ms the slots are %v apart, want more than %v", got, most)
	}

	// Requests that take their slots and do not sleep them out (as many
	// goroutines would) run the slots ahead: at 100/s, the 102nd within a
	// maximum wait of 1s is refused, unsent.
	frozen := frozenClock{clock}
	tr = newTransport(t, newLimiter(t, sluice.NoLimit(), sluice.WithClock(clock)),
		httplimit.WithBase(handlerTransport{provider}), httplimit.WithClock(frozen), httplimit.WithMaxWait(time.Second),
		httplimit.WithAdaptive(httplimit.Adaptive{Store: memstore.New(), Min: 10, Max: 100}))
	status.Store(200)
	before := seen.Load()
	for i := range 102 {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://provider.test/", nil)
		resp, err := tr.RoundTrip(req)
		if i < 101 {
			if err != nil {
				t.Fatalf("request #%d: %v", i, err)
			}
			resp.Body.Close()
			continue
		}
		var we *httplimit.WaitError
		if !errors.As(err, &we) || !errors.Is(err, httplimit.ErrAdaptiveRate) || we.Wait != 1010*time.Millisecond || we.MaxWait != time.Second {
			t.Fatalf("request #%d = %v, want a WaitError of ErrAdaptiveRate, a wait of 1.01s and MaxWait 1s", i, err)
		}
	}
	if got := seen.Load() - before; got != 101 {
		t.Errorf("the provider saw %d requests, want 101", got)
	}
}

// frozenClock is a FakeClock whose Sleep returns at once and leaves the
// time as it is.
type frozenClock struct{ *sluicetest.FakeClock }

func (frozenClock) Sleep(context.Context, time.Duration) error { return nil }

func TestAdaptiveConfig(t *testing.T) {
	l := newLimiter(t, sluice.NoLimit())
	st := memstore.New()
	for _, tc := range []struct {
		name  string
		a     httplimit.Adaptive
		field string
	}{
		{"no store", httplimit.Adaptive{Min: 1, Max: 2}, "WithAdaptive.Store"},
		{"min 0", httplimit.Adaptive{Store: st, Max: 2}, "WithAdaptive.Min"},
		{"max below min", httplimit.Adaptive{Store: st, Min: 3, Max: 2}, "WithAdaptive.Max"},
		{"max too large", httplimit.Adaptive{Store: st, Min: 3, Max: 1e9 + 1}, "WithAdaptive.Max"},
		{"increase above max", httplimit.Adaptive{Store: st, Min: 1, Max: 2, Increase: 3}, "WithAdaptive.Increase"},
		{"negative increase", httplimit.Adaptive{Store: st, Min: 1, Max: 2, Increase: -1}, "WithAdaptive.Increase"},
		{"backoff 100", httplimit.Adaptive{Store: st, Min: 1, Max: 2, Backoff: 100}, "WithAdaptive.Backoff"},
		{"negative slow", httplimit.Adaptive{Store: st, Min: 1, Max: 2, SlowAfter: -1}, "WithAdaptive.SlowAfter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.NewTransport(l, httplimit.WithAdaptive(tc.a))
			var ce *httplimit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Errorf("NewTransport(WithAdaptive(%+v)) = %v, want a ConfigError of %s", tc.a, err, tc.field)
			}
		})
	}
}
