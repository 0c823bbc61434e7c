package server

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/app/rlqs/envoysim"
	"github.com/sluicehq/sluice/internal/app/tracing"
	"github.com/sluicehq/sluice/internal/testserver"
)

// The caller's span of the tests' requests, as its traceparent sends it.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// tracingYAML sends the server's spans to the receiver at addr.
func tracingYAML(addr string) string {
	return fmt.Sprintf("server:\n  tracing: {endpoint: %q, insecure: true}\n", addr)
}

// spanNamed returns the first span called name, if any.
func spanNamed(spans []testserver.Span, name string) (testserver.Span, bool) {
	i := slices.IndexFunc(spans, func(s testserver.Span) bool { return s.Name == name })
	if i < 0 {
		return testserver.Span{}, false
	}
	return spans[i], true
}

// childOf returns the first span called name whose parent is parent.
func childOf(spans []testserver.Span, name string, parent testserver.Span) (testserver.Span, bool) {
	i := slices.IndexFunc(spans, func(s testserver.Span) bool {
		return s.Name == name && s.TraceID == parent.TraceID && s.ParentSpanID == parent.SpanID
	})
	if i < 0 {
		return testserver.Span{}, false
	}
	return spans[i], true
}

// awaitDecision waits for the server span called name with a store call
// under it, and checks that the span continues the caller's trace (the
// traceparent of the tests' requests) with attrs among its attributes.
// It returns the store call's span and every span received.
func awaitDecision(t *testing.T, otlp *testserver.OTLP, name string, attrs map[string]string) (store testserver.Span, spans []testserver.Span) {
	t.Helper()
	var server testserver.Span
	spans = otlp.Await(t, name+" span with a store call under it", func(spans []testserver.Span) bool {
		var ok bool
		if server, ok = spanNamed(spans, name); !ok {
			return false
		}
		store, ok = childOf(spans, "store update", server)
		return ok
	})
	if server.TraceID != callerTrace || server.ParentSpanID != callerSpan || server.Kind != "SPAN_KIND_SERVER" {
		t.Errorf("%s span %+v, want a server span of trace %s under span %s", name, server, callerTrace, callerSpan)
	}
	for k, want := range attrs {
		if got := server.Attributes[k]; got != want {
			t.Errorf("%s span's %s = %q, want %q", name, k, got, want)
		}
	}
	return store, spans
}

// noValue fails t if a span's attribute holds value, a request's key or
// descriptor value, which spans must not carry.
func noValue(t *testing.T, spans []testserver.Span, value string) {
	t.Helper()
	for _, s := range spans {
		for k, v := range s.Attributes {
			if strings.Contains(v, value) {
				t.Errorf("span %s carries the request's value %q in its attribute %s=%q", s.Name, value, k, v)
			}
		}
	}
}

// TestTracingOff: without server.tracing, nothing traces and nothing
// wraps the store for it: a limiter's store is the timed view alone.
func TestTracingOff(t *testing.T) {
	s, _ := serve(t, limitersYAML, false)
	if s.tracer != nil || s.tracing != nil {
		t.Fatal("tracing is on without server.tracing")
	}
	if st := s.storeFor(s.base, "api"); fmt.Sprintf("%T", st) != "server.limiterDeleter" {
		t.Errorf("a limiter's store without tracing is a %T, want the limiterDeleter alone", st)
	}
}

// TestTracingConsume: a consume continues the trace of its traceparent
// header, with the limiter's name and the decision, and the store call
// under it is its child; neither span has the key.
func TestTracingConsume(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // milliseconds between exports, for a quick test
	otlp := testserver.NewOTLP(t)
	s, _ := serve(t, fixedYAML+tracingYAML(otlp.Addr), false)
	const key = "user-7f3a"
	code, out := call(t, s.Server, "POST", "/api/v1/consume", `{"limiter": "three", "key": "`+key+`"}`, "traceparent", traceparent)
	if code != 200 {
		t.Fatalf("consume = %d %v, want 200", code, out)
	}
	store, spans := awaitDecision(t, otlp, "POST /api/v1/consume", map[string]string{"sluice.limiter": "three", "sluice.allowed": "true",
		"http.response.status_code": "200", "http.route": "/api/v1/consume", "http.request.method": "POST"})
	if store.Kind != "SPAN_KIND_CLIENT" || store.Attributes["sluice.limiter"] != "three" || store.Attributes["sluice.store"] != "mem" || store.Service != "sluice" {
		t.Errorf("store span %+v, want a client span of limiter three on mem, of service sluice", store)
	}
	noValue(t, spans, key)
}

// TestTracingRLQSReport: each report of a quota stream has a span of
// its own, linked to the caller's span of the stream's metadata, and the
// limiter's store calls that answer it are its children; no span has the
// bucket's id.
func TestTracingRLQSReport(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	otlp := testserver.NewOTLP(t)
	const serverLine = "server: {auth: {open_metrics_with_request_values: true}}"
	if !strings.Contains(rlqsYAML, serverLine) {
		t.Fatalf("rlqsYAML has no line %q to add tracing to", serverLine)
	}
	yaml := strings.Replace(rlqsYAML, serverLine,
		fmt.Sprintf("server: {auth: {open_metrics_with_request_values: true}, tracing: {endpoint: %q, insecure: true}}", otlp.Addr), 1)
	_, gaddr := serve(t, yaml, true)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", traceparent)
	e, err := envoysim.Dial(ctx, mustInsecure(t, gaddr), "edge", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const tenant = "tenant-b81c"
	e.Request(map[string]string{"name": "api", "tenant": tenant})
	name := "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas report"
	var report testserver.Span
	spans := otlp.Await(t, "report span with a store call under it", func(spans []testserver.Span) bool {
		for _, s := range spans {
			if s.Name == name && s.Attributes["sluice.buckets"] == "1" {
				if _, ok := childOf(spans, "store update", s); ok {
					report = s
					return true
				}
			}
		}
		return false
	})
	if report.ParentSpanID != "" || !slices.Contains(report.Links, callerTrace+"-"+callerSpan) {
		t.Errorf("report span %+v, want a root linked to the caller's span %s-%s", report, callerTrace, callerSpan)
	}
	if report.Attributes["sluice.domain"] != "edge" {
		t.Errorf("report span's sluice.domain = %q, want edge", report.Attributes["sluice.domain"])
	}
	noValue(t, spans, tenant)
}

// TestE2ETracing: sluice serve on Redis, tracing to a receiver, answers
// one ShouldRateLimit whose metadata carries a traceparent: the receiver
// gets the call's server span, a child of the caller's span, and the
// Redis call under it as the server span's child. Neither has the
// descriptor's value.
func TestE2ETracing(t *testing.T) {
	otlp := testserver.NewOTLP(t)
	cfg := writeConfig(t, fmt.Sprintf(e2eConfig, testserver.SharedRedis(t))+tracingYAML(otlp.Addr))
	p := startSluiceEnv(t, []string{"OTEL_BSP_SCHEDULE_DELAY=50"}, "--config", cfg)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr := fmt.Sprintf("client-%d", time.Now().UnixNano()) // a value of its own on the shared Redis
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", traceparent)
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "e2e",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}},
		}},
	})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit = %v, %v, want OK", resp, err)
	}
	store, spans := awaitDecision(t, otlp, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", map[string]string{
		"sluice.domain": "e2e", "sluice.descriptors": "1", "sluice.overall_code": "OK", "rpc.system.name": "grpc", "rpc.response.status_code": "OK"})
	if store.Attributes["sluice.limiter"] != "three" || store.Attributes["sluice.store"] != "redis" || store.Error {
		t.Errorf("store span %+v, want a call of limiter three to redis, without error", store)
	}
	noValue(t, spans, addr)
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("sluice serve after SIGTERM exited with %v, want 0\nstderr:\n%s", err, p.stderr)
	}
}

// TestTracingReceiverAway: with its receiver away, the server decides
// as ever, and stops without error, its spans lost.
func TestTracingReceiverAway(t *testing.T) {
	s, _ := serve(t, fixedYAML+tracingYAML(testserver.ClosedAddr(t)), false) // its cleanup wants Serve to return nil
	if code, out := call(t, s.Server, "POST", "/api/v1/consume", `{"limiter": "three", "key": "k"}`); code != 200 || out["allowed"] != true {
		t.Errorf("consume with the receiver away = %d %v, want 200 allowed", code, out)
	}
}

// TestTracingDocLoads: docs/deploy.md's tracing example is a config
// that turns tracing on as its comments say.
func TestTracingDocLoads(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n## Tracing\n.*?```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/deploy.md has no yaml block under ## Tracing")
	}
	c, err := LoadConfig(m[1])
	if err != nil {
		t.Fatalf("LoadConfig(the Tracing section's example) = %v", err)
	}
	if want := (tracing.Config{Endpoint: "127.0.0.1:4317", Insecure: true, SampleRatio: 0.1, ServiceName: "sluice"}); c.Tracing == nil || *c.Tracing != want {
		t.Errorf("the example's tracing = %+v, want %+v", c.Tracing, want)
	}
}
