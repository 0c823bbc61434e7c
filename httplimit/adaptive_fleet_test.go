package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/redisstore"
)

// TestAdaptiveFleet is the fleet of the adaptive Transport: four senders,
// each with its own Transport, limiter and Redis client, share one Redis
// and push 32 requests at a time at a provider that takes 100 a second (a
// GCRA with a burst of 10, answering the rest 429 without Retry-After, so
// that the adaptive rate alone keeps the fleet off it). They
// start at Max, 400 a second, and must settle, by themselves, at what the
// provider takes: over a steady-state window of 20 s, counted by the
// provider's arrivals, the fleet sends within 10% of 100 a second and at
// most 5% of its requests are refused.
//
// It counts requests, not time: the window is the provider's, and a
// loaded machine that sends late only makes the fleet send less than it
// may, which the rate's lower bound would catch only if the machine could
// not send 90 requests a second at all.
func TestAdaptiveFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 30 s")
	}
	const (
		senders   = 4
		callers   = 8 // per sender
		providerQ = 100
		warmUp    = 10 * time.Second
		window    = 20 * time.Second
	)
	admit, err := sluice.NewLimiter(sluice.GCRA(10, providerQ, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type arrival struct {
		at      time.Time
		refused bool
	}
	var arrivals []arrival
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := admit.Allow(r.Context(), "provider")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		arrivals = append(arrivals, arrival{at: time.Now(), refused: !res.Allowed})
		mu.Unlock()
		if !res.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(provider.Close)

	url := testserver.Redis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, senders*callers)
	for range senders {
		rc := redis.NewClient(opt)
		t.Cleanup(func() { rc.Close() })
		store, err := redisstore.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		ceiling, err := sluice.NewLimiter(sluice.GCRA(1000, 1000, time.Second)) // far above the provider
		if err != nil {
			t.Fatal(err)
		}
		tr, err := httplimit.NewTransport(ceiling, httplimit.WithBase(&http.Transport{MaxIdleConnsPerHost: callers}),
			httplimit.WithAdaptive(httplimit.Adaptive{Store: store, Min: 10, Max: 400, Increase: 5}))
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, provider.URL, nil)
					if err != nil {
						errs <- err
						return
					}
					resp, err := client.Do(req)
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	}
	start := time.Now()
	from, to := start.Add(warmUp), start.Add(warmUp+window)
	for time.Now().Before(to.Add(100 * time.Millisecond)) {
		select {
		case err := <-errs:
			t.Fatalf("a sender's request failed: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var sent, refused, warmSent, warmRefused int
	for _, a := range arrivals {
		switch {
		case a.at.Before(from):
			warmSent++
			if a.refused {
				warmRefused++
			}
		case a.at.Before(to):
			sent++
			if a.refused {
				refused++
			}
		}
	}
	rate := float64(sent) / window.Seconds()
	t.Logf("warm-up %v: %d sent, %d refused; steady state %v: %d sent (%.1f/s), %d refused (%.2f%%), %d admitted (%.1f/s)",
		warmUp, warmSent, warmRefused, window, sent, rate, refused, 100*float64(refused)/float64(sent),
		sent-refused, float64(sent-refused)/window.Seconds())
	if rate < 0.9*providerQ || rate > 1.1*providerQ {
		t.Errorf("the fleet sent %.1f requests a second in its steady state, want within 10%% of %d", rate, providerQ)
	}
	if refused*100 > sent*5 {
		t.Errorf("the provider refused %d of the %d requests of the steady state, want at most 5%%", refused, sent)
	}
}
