package envoyrls_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/redisstore"
)

// TestRedis: two services, as two sluice processes behind Envoy, share a
// token bucket in Redis: each answer counts what the other took.
func TestRedis(t *testing.T) {
	opt, err := redis.ParseURL(testserver.SharedRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	const doc = `
envoy:
  - domain: edge
    descriptors:
      - {key: remote_address, limiter: per_ip}
`
	policies := map[string]sluice.Policy{"per_ip": sluice.TokenBucket(4, 1, time.Minute)}
	clock := sluice.NewFakeClock(start)
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
