package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/app/rlqs/envoysim"
	"github.com/sluicehq/sluice/internal/testserver"
)

// rlqsYAML is a limit of 200 requests a second (a burst of 400) that the
// Envoys of domain edge share through the rate limit quota service, with
// assignments of 1s, the shortest Envoy reads.
const rlqsYAML = `
limiters:
  quota: {policy: bucket, limits: [{capacity: 400, refill: {greedy: 200, per: 1s}}]}
server: {auth: {open_metrics_with_request_values: true}} # bucket ids in /metrics
rlqs:
  - domain: edge
    assignment_ttl: 1s
    abandon_after: 2s
    buckets:
      - {bucket: {name: api}, limiter: quota}
`

// TestRLQSFleet is the proof of docs/envoy.md's bound: three simulated
// Envoys, each on its own stream, send bucketed requests at rates that
// move between them, one of them goes away mid-run (its stream closed, its
// traffic going on under the assignment it holds), and all they admit
// together stays within what the limiter admits over the run: its burst
// and its rate for the run's length. It runs on memory, on Redis, and on
// two sluice servers sharing Redis, the Envoys split between them.
func TestRLQSFleet(t *testing.T) {
	redis := "store: " + testserver.SharedRedis(t) + "\n"
	for _, tt := range []struct {
		name    string
		store   string
		servers int
	}{
		{"memory", "store: mem://\n", 1},
		{"redis", redis, 1},
		{"two servers on redis", redis, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			var gaddrs []string
			var servers []*serving
			for range tt.servers {
				s, gaddr := serve(t, tt.store+rlqsYAML, true)
				gaddrs, servers = append(gaddrs, gaddr), append(servers, s)
			}
			res := runFleet(t, gaddrs, map[string]string{"name": "api", "run": fmt.Sprint(start.UnixNano())})
			end := time.Now()
			bound := 400 + int64(200*end.Sub(start).Seconds())
			t.Logf("admitted %d (bound %d over %v), per phase and Envoy %v; %d reports, %d responses",
				res.total, bound, end.Sub(start).Round(time.Millisecond), res.phases, res.reports, res.responses)
			if res.total > bound {
				t.Errorf("the fleet admitted %d requests, over the limiter's %d for the run", res.total, bound)
			}
			if res.total == 0 {
				t.Errorf("the fleet admitted nothing")
			}
			// The mechanism: every admitted request was paid for, by the
			// Envoys' assignments, in the limiter. Once every stream has
			// ended, so that no charge is half counted:
			for _, s := range servers {
				for deadline := time.Now().Add(30 * time.Second); sumMetric(t, s.metrics.reg, "sluice_rlqs_streams") > 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("streams still open 30s after the Envoys closed them")
					}
				}
			}
			var charged float64
			for _, s := range servers {
				charged += sumMetric(t, s.metrics.reg, "sluice_rlqs_tokens_charged_total")
			}
			t.Logf("the assignments took %v tokens from the limiter", charged)
			// The limiter's own metrics count the charges.
			var tokens float64
			for _, s := range servers {
				tokens += sumMetric(t, s.metrics.reg, "sluice_tokens_consumed_total")
			}
			if tokens != charged {
				t.Errorf("sluice_tokens_consumed_total = %v, want the %v charged", tokens, charged)
			}
			if int64(charged) < res.total || int64(charged) > bound {
				t.Errorf("the assignments were charged %v tokens, want between the %d admitted and the bound %d", charged, res.total, bound)
			}
			// B wanted 50/s, then 400/s: its share grew with its load.
			if b1, b2 := res.phases[0][1], res.phases[1][1]; b2 <= b1 {
				t.Errorf("Envoy B admitted %d in phase 2, when it asked for 8 times more, against %d in phase 1: no rebalance", b2, b1)
			}
		})
	}
}

type fleetResult struct {
	total              int64
	phases             [3][3]int64 // admitted per phase and Envoy
	reports, responses int64
}

// runFleet runs the fleet against the servers at gaddrs, Envoy i on
// server i modulo their number, in three phases of a second: the rates
// each Envoy asks for, per second, in each phase, are below; C closes its
// stream halfway through phase 2.
func runFleet(t *testing.T, gaddrs []string, id map[string]string) fleetResult {
	t.Helper()
	rates := [3][3]int{
		{400, 50, 200},
		{50, 400, 200},
		{300, 300, 200},
	}
	const phase = time.Second
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var envoys [3]*envoysim.Envoy
	for i := range envoys {
		cc := mustInsecure(t, gaddrs[i%len(gaddrs)])
		e, err := envoysim.Dial(ctx, cc, "edge", 200*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		envoys[i] = e
	}
	var res fleetResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := time.Now()
	for i, e := range envoys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			const tick = 5 * time.Millisecond
			var owed float64
			last := begin
			for {
				now := time.Now()
				el := now.Sub(begin)
				p := int(el / phase)
				if p >= len(rates) {
					return
				}
				if i == 2 && el >= phase+phase/2 {
					e.Close() // C goes away; its traffic goes on locally
				}
				// The requests of the time since the last tick, however
				// late it came on a busy machine: the load offered is
				// the rate asked for.
				owed += float64(rates[p][i]) * now.Sub(last).Seconds()
				last = now
				var n int64
				for ; owed >= 1; owed-- {
					if e.Request(id) {
						n++
					}
				}
				mu.Lock()
				res.phases[p][i] += n
				res.total += n
				mu.Unlock()
				time.Sleep(tick)
			}
		}()
	}
	wg.Wait()
	for _, e := range envoys {
		_, _, reports, responses := e.Counts()
		res.reports += reports
		res.responses += responses
		e.Close()
		if err := e.Err(); err != nil {
			t.Errorf("stream ended with %v", err)
		}
	}
	return res
}

// sumCounter returns the sum of the series of the counter name in reg.
func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestRLQSKeepsOthersKeys: on mem://, with max_keys a little over the
// keys other limiters use, an Envoy reporting 3,000 buckets (each a key of
// its limiter) evicts none of another limiter's keys, which would then
// start afresh: the quota service's keys are in a store of their own,
// bounded by its max_buckets.
func TestRLQSKeepsOthersKeys(t *testing.T) {
	s, gaddr := serve(t, `
store: mem://
server:
  auth: {open_metrics_with_request_values: true} # bucket ids in /metrics
  limits:
    max_keys: 1024
    rlqs: {max_buckets: 3000, max_buckets_per_client: 3000}
limiters:
  quota: {policy: bucket, limits: [{capacity: 400, refill: {greedy: 200, per: 1s}}]}
  other: {policy: fixed_window, limit: 10, interval: 1 hour}
rlqs:
  - domain: edge
    assignment_ttl: 1s
    buckets:
      - {bucket: {name: api}, limiter: quota}
`, true)
	const keys = 100
	for i := range keys {
		if code, out := call(t, s.Server, "POST", "/api/v1/consume", fmt.Sprintf(`{"limiter": "other", "key": "k%d", "tokens": 10}`, i)); code != 200 || out["allowed"] != true {
			t.Fatalf("consume 10 of k%d = %d %v, want allowed", i, code, out)
		}
	}
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(mustInsecure(t, gaddr)).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		msg := &rlqsv3.RateLimitQuotaUsageReports{}
		if r == 0 {
			msg.Domain = "edge"
		}
		for i := range 1000 {
			msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:          &rlqsv3.BucketId{Bucket: map[string]string{"name": "api", "i": fmt.Sprint(r, "-", i)}},
				NumRequestsDenied: 1})
		}
		if err := stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		// The answer may come in several messages.
		for got := 0; got < 1000; {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			got += len(resp.GetBucketAction())
		}
	}
	if got := sumMetric(t, s.metrics.reg, "sluice_rlqs_buckets"); got != 3000 {
		t.Fatalf("sluice_rlqs_buckets = %v, want 3000", got)
	}
	evicted := 0
	for i := range keys {
		// Its 10 are spent, unless it was evicted and started afresh.
		if _, out := call(t, s.Server, "POST", "/api/v1/consume", fmt.Sprintf(`{"limiter": "other", "key": "k%d"}`, i)); out["allowed"] != false {
			evicted++
		}
	}
	if evicted > 0 {
		t.Errorf("%d of other's %d keys were evicted by the quota service's buckets and started afresh", evicted, keys)
	}
}
