package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/app/rlqs/envoysim"
	"github.com/sluicehq/sluice/internal/testserver"
)

// benchYAML is one limit of 20,000 requests a second (a burst of 40,000,
// so that a second's assignment fits), shared by Envoys
// through the rate limit quota service (domain quota) and decided per
// request through the classic API (domain classic).
const benchYAML = `
limiters:
  shared: {policy: bucket, limits: [{capacity: 40000, refill: {greedy: 20000, per: 1s}}]}
server: {auth: {open_metrics_with_request_values: true}} # bucket ids in /metrics
rlqs:
  - domain: quota
    assignment_ttl: 1s
    buckets:
      - {bucket: {name: api}, limiter: shared}
envoy:
  - domain: classic
    descriptors:
      - {key: name, limiter: shared}
`

// benchRun is how long each benchmark offers load, and benchEnvoys how
// many Envoys (or classic clients) offer it.
const (
	benchRun    = 2 * time.Second
	benchEnvoys = 4
)

func benchStores(b *testing.B) []struct{ name, store string } {
	return []struct{ name, store string }{
		{"memory", "store: mem://\n"},
		{"redis", "store: " + testserver.SharedRedis(b) + "\n"},
	}
}

// BenchmarkRLQSFleet: four simulated Envoys decide requests as fast as
// they can for two seconds, locally, on the token buckets the rate limit
// quota service assigns them, reporting every 150ms. It reports the
// requests decided and admitted per second, and the service's calls (the
// reports it answered) per admitted request. Run it with -benchtime 1x:
// each run lasts benchRun whatever b.N.
func BenchmarkRLQSFleet(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			_, gaddr := serveB(b, st.store+benchYAML)
			cc := mustInsecureB(b, gaddr)
			for range b.N {
				id := map[string]string{"name": "api", "run": fmt.Sprint(time.Now().UnixNano())}
				var envoys []*envoysim.Envoy
				for range benchEnvoys {
					e, err := envoysim.Dial(b.Context(), cc, "quota", 150*time.Millisecond, nil)
					if err != nil {
						b.Fatal(err)
					}
					envoys = append(envoys, e)
				}
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for _, e := range envoys {
					wg.Go(func() {
						for time.Since(start) < benchRun {
							for range 1000 {
								e.Request(id)
							}
						}
					})
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				var allowed, denied, reports int64
				for _, e := range envoys {
					a, d, r, _ := e.Counts()
					allowed, denied, reports = allowed+a, denied+d, reports+r
					e.Close()
				}
				b.ReportMetric(float64(allowed+denied)/el.Seconds(), "decided/s")
				b.ReportMetric(float64(allowed)/el.Seconds(), "admitted/s")
				b.ReportMetric(float64(reports)/el.Seconds(), "calls/s")
				b.ReportMetric(float64(reports)/float64(max(allowed, 1)), "calls/admitted")
			}
		})
	}
}

// BenchmarkClassicAPI: the same limit decided per request by Envoy's
// classic API (ShouldRateLimit), from four clients calling as fast as
// they can for two seconds: each decision is one call.
func BenchmarkClassicAPI(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			_, gaddr := serveB(b, st.store+benchYAML)
			cc := mustInsecureB(b, gaddr)
			client := rlsv3.NewRateLimitServiceClient(cc)
			for range b.N {
				req := &rlsv3.RateLimitRequest{Domain: "classic", Descriptors: []*rlcommon.RateLimitDescriptor{{
					Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "name", Value: fmt.Sprint("api-", time.Now().UnixNano())}},
				}}}
				var allowed, calls atomic.Int64
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range benchEnvoys * 4 { // 4 calls in flight per Envoy
					wg.Go(func() {
						for time.Since(start) < benchRun {
							resp, err := client.ShouldRateLimit(context.Background(), req)
							if err != nil {
								b.Error(err)
								return
							}
							calls.Add(1)
							if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
								allowed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(calls.Load())/el.Seconds(), "decided/s")
				b.ReportMetric(float64(allowed.Load())/el.Seconds(), "admitted/s")
				b.ReportMetric(float64(calls.Load())/el.Seconds(), "calls/s")
				b.ReportMetric(float64(calls.Load())/float64(max(allowed.Load(), 1)), "calls/admitted")
			}
		})
	}
}

// serveB is serve for benchmarks: a server of yaml with gRPC on loopback
// ports, stopped at the end; it returns the gRPC address.
func serveB(b *testing.B, yaml string) (*serving, string) {
	b.Helper()
	cfg, err := LoadConfig([]byte(yaml))
	if err != nil {
		b.Fatalf("LoadConfig = %v", err)
	}
	s, err := New(b.Context(), cfg)
	if err != nil {
		b.Fatalf("New = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, gln) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Serve = %v", err)
		}
	})
	return &serving{s, ln.Addr().String()}, gln.Addr().String()
}

func mustInsecureB(b *testing.B, addr string) *grpc.ClientConn {
	b.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}
