package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/memstore"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// newProvider returns a provider that exports to otlp.
func newProvider(t *testing.T, otlp *testserver.OTLP) *Provider {
	t.Helper()
	p, err := New(t.Context(), Config{Endpoint: otlp.Addr, Insecure: true, SampleRatio: 1, ServiceName: "test"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	return p
}

// flush exports what p holds and stops it.
func flush(t *testing.T, p *Provider) {
	t.Helper()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

// find returns the span called name.
func find(t *testing.T, spans []testserver.Span, name string) testserver.Span {
	t.Helper()
	i := slices.IndexFunc(spans, func(s testserver.Span) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no span %q among %+v", name, spans)
	}
	return spans[i]
}

// partitioned is a store of partitions, a key's being its first byte.
type partitioned struct{ driver.Store }

func (partitioned) Partition(key string) string { return key[:1] }

// TestStore: a traced store's calls are client spans under the caller's,
// with the limiter and the store's scheme and never the key; it deletes
// when its store does, and passes the store's partitions on.
func TestStore(t *testing.T) {
	otlp := testserver.NewOTLP(t)
	p := newProvider(t, otlp)
	st := Store(p.Tracer(), memstore.New(), "api", "mem")
	ctx, parent := p.Tracer().Start(t.Context(), "caller")
	const key = "user-91c2"
	if err := st.Update(ctx, key, func([]byte) ([]byte, time.Duration, bool) { return []byte("x"), time.Minute, true }); err != nil {
		t.Fatalf("Update = %v", err)
	}
	d, ok := st.(driver.Deleter)
	if !ok {
		t.Fatal("a traced memstore cannot delete")
	}
	if err := d.Delete(ctx, key); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	parent.End()
	flush(t, p)
	spans := otlp.Await(t, "three spans", func(s []testserver.Span) bool { return len(s) >= 3 })
	caller := find(t, spans, "caller")
	for _, name := range []string{"store update", "store delete"} {
		s := find(t, spans, name)
		if s.TraceID != caller.TraceID || s.ParentSpanID != caller.SpanID || s.Kind != "SPAN_KIND_CLIENT" || s.Service != "test" {
			t.Errorf("%s span %+v, want a client span of service test under %+v", name, s, caller)
		}
		if s.Attributes["sluice.limiter"] != "api" || s.Attributes["sluice.store"] != "mem" || s.Error {
			t.Errorf("%s span's attributes %v (error %v), want limiter api on mem, no error", name, s.Attributes, s.Error)
		}
		for k, v := range s.Attributes {
			if strings.Contains(v, key) {
				t.Errorf("%s span carries the key in %s=%q", name, k, v)
			}
		}
	}

	if got := Store(p.Tracer(), partitioned{}, "api", "redis").(driver.Partitioner).Partition("k1"); got != "k" {
		t.Errorf("Partition(k1) through a traced store = %q, want the store's %q", got, "k")
	}
	if got := Store(p.Tracer(), struct{ driver.Store }{}, "api", "x").(driver.Partitioner).Partition("k1"); got != "" {
		t.Errorf("Partition(k1) of a traced store without partitions = %q, want \"\"", got)
	}
	if _, ok := Store(p.Tracer(), struct{ driver.Store }{}, "api", "x").(driver.Deleter); ok {
		t.Error("a traced store that cannot delete claims to")
	}
}

// TestErrorKind: a failed store call's span names the driver contract's
// kind of error, never its message, which may quote the key.
func TestErrorKind(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("redisstore: update %q: %w", "user-1", driver.ErrUnavailable), "unavailable"},
		{driver.ErrConflict, "conflict"},
		{fmt.Errorf("x: %w", driver.ErrIndeterminate), "indeterminate"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "deadline_exceeded"},
		{errors.New("user-1 is odd"), "other"},
	} {
		if got := errorKind(tt.err); got != tt.want {
			t.Errorf("errorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestCodeName: gRPC codes as the semantic conventions spell them.
func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{codes.OK: "OK", codes.InvalidArgument: "INVALID_ARGUMENT",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Unavailable: "UNAVAILABLE", codes.Code(99): "CODE(99)"} {
		if got := codeName(c); got != want {
			t.Errorf("codeName(%d) = %q, want %q", c, got, want)
		}
	}
}

// TestIncoming: a gRPC call's traceparent metadata is its caller's
// remote span; a call without one has no span.
func TestIncoming(t *testing.T) {
	ctx := Incoming(metadata.NewIncomingContext(t.Context(), metadata.Pairs("traceparent", traceparent)))
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != callerTrace || sc.SpanID().String() != callerSpan || !sc.IsRemote() || !sc.IsSampled() {
		t.Errorf("Incoming with traceparent %s = span context %+v, want the caller's, remote and sampled", traceparent, sc)
	}
	for _, ctx := range []context.Context{t.Context(), metadata.NewIncomingContext(t.Context(), metadata.Pairs("x", "y"))} {
		if sc := trace.SpanContextFromContext(Incoming(ctx)); sc.IsValid() {
			t.Errorf("Incoming without traceparent = %+v, want no span context", sc)
		}
	}
}

// TestHandler: a request's span continues its traceparent header and
// records its status, an error from 500 on.
func TestHandler(t *testing.T) {
	otlp := testserver.NewOTLP(t)
	p := newProvider(t, otlp)
	h := Handler(p.Tracer(), "/api/v1/consume", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trace.SpanFromContext(r.Context()).SetAttributes(LimiterKey.String("api"))
		// As a consume with max_wait_ms does: the controller must reach
		// the connection's writer through the span's.
		if err := http.NewResponseController(w).SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("SetWriteDeadline through the span's writer = %v", err)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	r := httptest.NewRequest(http.MethodPost, "/api/v1/consume", nil)
	r.Header.Set("traceparent", traceparent)
	h.ServeHTTP(httptest.NewRecorder(), r)
	flush(t, p)
	s := find(t, otlp.Await(t, "a span", func(s []testserver.Span) bool { return len(s) > 0 }), "POST /api/v1/consume")
	if s.TraceID != callerTrace || s.ParentSpanID != callerSpan || s.Kind != "SPAN_KIND_SERVER" || !s.Error {
		t.Errorf("span %+v, want an error server span under the caller's %s", s, callerSpan)
	}
	for k, want := range map[string]string{"http.response.status_code": "503", "http.route": "/api/v1/consume", "sluice.limiter": "api"} {
		if got := s.Attributes[k]; got != want {
			t.Errorf("span's %s = %q, want %q", k, got, want)
		}
	}
}

// TestNewBadCA: a CA file that cannot be read, or holds no certificate,
// stops the start.
func TestNewBadCA(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(t.TempDir(), "missing.pem"), empty} {
		_, err := New(t.Context(), Config{Endpoint: "127.0.0.1:4317", CAFile: path, SampleRatio: 1, ServiceName: "s"}, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "tracing: ca_file") {
			t.Errorf("New with ca_file %s = %v, want an error naming ca_file", path, err)
		}
	}
}
