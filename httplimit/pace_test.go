package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/sluicetest"
)

// handlerTransport sends requests straight to a handler, in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, req)
	return w.Result(), nil
}

// paced runs a client that sends a request every step for run through rt,
// on clock, and counts the requests that got through; a hold-back of the
// Transport sleeps on the clock too.
func paced(t *testing.T, clock *sluicetest.FakeClock, rt http.RoundTripper, step, run time.Duration) (passed, refused int) {
	t.Helper()
	client := &http.Client{Transport: rt}
	end := clock.Now() + int64(run)
	for clock.Now() < end {
		resp, err := client.Get("http://provider.example/")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		resp.Body.Close()
		if clock.Now() >= end { // held back past the end of the run
			break
		}
		switch resp.StatusCode {
		case http.StatusOK:
			passed++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
		clock.Advance(step)
	}
	return passed, refused
}

// most is how many requests the policy lets through in run to a client
// that sends at most every step, each as soon as the policy allows it:
// after a refusal, exactly when RetryAfter says.
func most(t *testing.T, p sluice.Policy, step, run time.Duration) int {
	clock := sluicetest.NewFakeClock(t0)
	l := newLimiter(t, p, sluice.WithClock(clock))
	n := 0
	for end := clock.Now() + int64(run); clock.Now() < end; {
		r, err := l.Allow(context.Background(), "client")
		switch {
		case err != nil:
			t.Fatal(err)
		case r.Allowed:
			n++
			clock.Advance(step)
		default:
			clock.Advance(max(r.RetryAfter, step))
		}
	}
	return n
}

// TestTransportAgainstMiddleware runs the Transport against sluice's own
// middleware for every policy, for a client that would send every 10ms
// for 2 minutes: it gets through at least the most the policy lets
// through, less what the whole seconds of Retry-After cost, never more;
// and it is refused at most once per hold-back.
func TestTransportAgainstMiddleware(t *testing.T) {
	const step, run = 10 * time.Millisecond, 2 * time.Minute
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(5, 10*time.Second),
		sluice.AlignedFixedWindow(5, 10*time.Second),
		sluice.SlidingWindow(5, 10*time.Second),
		sluice.SlidingLog(5, 10*time.Second),
		sluice.TokenBucket(5, 1, 2*time.Second),
		sluice.LeakyBucket(5, 1, 2*time.Second),
		sluice.GCRA(5, 1, 2*time.Second),
		sluice.Shaper(1, 2*time.Second, 0),
		sluice.Compound(sluice.FixedWindow(5, 10*time.Second), sluice.TokenBucket(3, 1, 2*time.Second)),
		sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(5, 10*time.Second)}}),
		sluice.NoLimit(),
	} {
		t.Run(p.String(), func(t *testing.T) {
			provider := func(clock *sluicetest.FakeClock) http.Handler {
				m, err := httplimit.New([]httplimit.Limit{{Name: "api", Limiter: newLimiter(t, p, sluice.WithClock(clock)),
					Key: func(*http.Request) (string, error) { return "client", nil }}}, httplimit.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				return m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			}
			most := most(t, p, step, run)
			clock := sluicetest.NewFakeClock(t0)
			tr := newTransport(t, newLimiter(t, sluice.NoLimit(), sluice.WithClock(clock)),
				httplimit.WithBase(handlerTransport{provider(clock)}), httplimit.WithClock(clock))
			passed, refused := paced(t, clock, tr, step, run)
			t.Logf("%d of the %d the policy lets through, %d refused", passed, most, refused)
			// Retry-After is whole seconds: each hold-back may cost up to
			// a second of the policy's allowance.
			if slack := most / 10; passed < most-slack || passed > most {
				t.Errorf("the Transport got %d requests through in %v, want %d (the most the policy lets through) less at most %d",
					passed, run, most, slack)
			}
			if holds := int(run/time.Second) + 1; refused > holds {
				t.Errorf("the Transport had %d requests refused in %v, want at most one per hold-back, %d", refused, run, holds)
			}
		})
	}
}
