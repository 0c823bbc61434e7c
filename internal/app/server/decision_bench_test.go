package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testserver"
)

// decisionYAML is a limit that never runs out in a benchmark, decided on
// the in-memory store, where the server's own cost shows most.
const decisionYAML = `
limiters:
  api: {policy: fixed_window, limit: 1000000000, interval: 1s}
envoy:
  - domain: bench
    descriptors:
      - {key: name, limiter: api}
`

// BenchmarkDecision: one decision through the server, a consume of the
// HTTP API (through its handler, without a connection) and a
// ShouldRateLimit over a gRPC connection on loopback, for the cost that
// the server adds to the limiter's: without tracing, with every call
// traced to a receiver in the process, and with tracing on but no call
// sampled (sample_ratio 0, callers that send no trace context).
func BenchmarkDecision(b *testing.B) {
	otlp := testserver.NewOTLP(b)
	for _, tracing := range []struct{ name, yaml string }{
		{"tracing=off", ""},
		{"tracing=on", tracingYAML(otlp.Addr)},
		{"tracing=unsampled", fmt.Sprintf("server:\n  tracing: {endpoint: %q, insecure: true, sample_ratio: 0}\n", otlp.Addr)},
	} {
		b.Run("http/"+tracing.name, func(b *testing.B) {
			s, _ := serveB(b, decisionYAML+tracing.yaml)
			const body = `{"limiter": "api", "key": "k"}`
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				s.handler.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/v1/consume", strings.NewReader(body)))
				if w.Code != http.StatusOK {
					b.Fatalf("consume = %d %s, want 200", w.Code, w.Body)
				}
			}
		})
		b.Run("grpc/"+tracing.name, func(b *testing.B) {
			_, gaddr := serveB(b, decisionYAML+tracing.yaml)
			client := rlsv3.NewRateLimitServiceClient(mustInsecureB(b, gaddr))
			req := rlRequest("name", "k")
			req.Domain = "bench"
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.ShouldRateLimit(context.Background(), req)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v, want OK", resp, err)
				}
			}
		})
	}
}
