package envoyrls_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/testserver/testredis"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestRedis: two services, as two sluice processes behind Envoy, share a
// token bucket in Redis: each answer counts what the other took.
func TestRedis(t *testing.T) {
	c, prefix := redisClient(t)
	const doc = `
envoy:
  - domain: edge
    descriptors:
      - {key: remote_address, limiter: per_ip}
`
	policies := map[string]sluice.Policy{"per_ip": sluice.TokenBucket(4, 1, time.Minute)}
	clock := sluicetest.NewFakeClock(start)
	var clients [2]*fixture
	for i := range clients {
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f := &fixture{clock: clock}
		d, limiters := f.config(t, doc, policies, nil, sluice.WithStore(s))
		f.limiters = limiters
		f.svc = envoyrls.New(d, lookup(limiters))
		f.client = serve(t, f.svc)
		clients[i] = f
	}
	r := req("edge", desc("remote_address", "10.0.0.1"))
	wants := []struct{ code, status string }{
		{"OK", "OK 4/UNKNOWN(per_ip) remaining=3 reset=1m0s"},
		{"OK", "OK 4/UNKNOWN(per_ip) remaining=2 reset=2m0s"},
		{"OK", "OK 4/UNKNOWN(per_ip) remaining=1 reset=3m0s"},
		{"OK", "OK 4/UNKNOWN(per_ip) remaining=0 reset=4m0s"},
		{"OVER_LIMIT", "OVER_LIMIT 4/UNKNOWN(per_ip) remaining=0 reset=1m0s"},
	}
	for i, want := range wants {
		code, got, _ := clients[i%2].call(t, r)
		check(t, fmt.Sprintf("call %d", i), code, want.code, got, []string{want.status})
	}
}

// TestRedisHotKey: two services, as two sluice processes, count one hot
// rate_limit key in Redis from many callers at once, on the real clock.
// Each window admits at most its limit, however the calls race: a call
// that loses compare-and-set races and retries decides on the clock it
// read before, by then often in the window before the stored one.
func TestRedisHotKey(t *testing.T) {
	c, prefix := redisClient(t)
	const limit = 10
	doc := fmt.Sprintf(`
envoy:
  - domain: d
    descriptors:
      - {key: k, rate_limit: {unit: second, requests_per_unit: %d}}
`, limit)
	var clients [2]rlsv3.RateLimitServiceClient
	for i := range clients {
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f := &fixture{clock: sluicetest.NewFakeClock(start)}
		d, _ := f.config(t, doc, nil, nil)
		clients[i] = serve(t, envoyrls.New(d, nil, envoyrls.WithStore(s)))
	}
	r := req("d", desc("k", "hot"))
	var ok, over, failed atomic.Int64
	first := time.Now()
	end := first.Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for time.Now().Before(end) {
				resp, err := clients[g%2].ShouldRateLimit(context.Background(), r)
				switch {
				case err != nil:
					failed.Add(1)
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					ok.Add(1)
				default:
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	windows := time.Now().Unix() - first.Unix() + 1
	t.Logf("%d ok, %d over the limit, %d failed, in %d windows", ok.Load(), over.Load(), failed.Load(), windows)
	if got, most := ok.Load(), limit*windows; got > most {
		t.Errorf("%d calls allowed in %d windows of %d: want at most %d", got, windows, limit, most)
	}
	if ok.Load() < limit {
		t.Errorf("%d calls allowed: want at least the limit %d, as one window at least ran whole", ok.Load(), limit)
	}
	if over.Load() == 0 {
		t.Error("no call over the limit: the load did not reach it")
	}
}

// redisClient is a client of the shared test Redis, closed with the test,
// and a key prefix of the test's own.
func redisClient(t *testing.T) (*redis.Client, string) {
	t.Helper()
	return testredis.Client(t), fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
}
