package testserver

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// OTLP is an OpenTelemetry receiver of traces over OTLP/gRPC (the
// collector's TraceService), run in the test's process on a free
// 127.0.0.1 port without TLS. It keeps every span it receives, for tests
// of what a program exports. Make one with NewOTLP.
type OTLP struct {
	collectortrace.UnimplementedTraceServiceServer
	// Addr is where it listens, "127.0.0.1:PORT".
	Addr string

	mu    sync.Mutex
	spans []Span
}

// Span is a received span, its ids in lower-case hex as in a
// traceparent; ParentSpanID is "" for a root.
type Span struct {
	Name                          string
	TraceID, SpanID, ParentSpanID string
	Kind                          string // SPAN_KIND_SERVER, SPAN_KIND_CLIENT, ...
	// Attributes are the span's, each value formatted as its text.
	Attributes map[string]string
	// Service is its resource's service.name.
	Service string
	// Links are the spans it links to, as TRACEID-SPANID.
	Links []string
	// Error is whether its status is an error.
	Error bool
}

// NewOTLP starts a receiver for tb and stops it when tb ends.
func NewOTLP(tb testing.TB) *OTLP {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testserver: otlp: %v", err)
	}
	o := &OTLP{Addr: ln.Addr().String()}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, o)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Serve(ln) // returns when stopped
	}()
	tb.Cleanup(func() {
		g.Stop()
		<-done
	})
	return o
}

// Export keeps the spans of req.
func (o *OTLP) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attributes(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind().String(),
					Attributes: attributes(s.GetAttributes()), Service: service, Error: s.GetStatus().GetCode() == 2, // STATUS_CODE_ERROR
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetTraceId())+"-"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	o.mu.Lock()
	o.spans = append(o.spans, got...)
	o.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetDoubleValue())
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns the spans received so far, in their order of arrival.
func (o *OTLP) Spans() []Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Span(nil), o.spans...)
}

// Await polls the spans received until ok says they are complete, and
// returns them; it fails tb if they are not within a minute, a bound on
// exports batched every few seconds, not a measure of speed. what says
// what was awaited, for the failure.
func (o *OTLP) Await(tb testing.TB, what string, ok func([]Span) bool) []Span {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		spans := o.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, fmt.Sprintf("%s (%s/%s parent %q)", s.Name, s.TraceID, s.SpanID, s.ParentSpanID))
			}
			tb.Fatalf("testserver: otlp: no %s within a minute; received %d spans: %s", what, len(spans), strings.Join(names, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
