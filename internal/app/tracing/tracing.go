// Package tracing is sluice serve's OpenTelemetry tracing: the provider
// that server.tracing configures, which exports spans over OTLP/gRPC;
// the span of each store call; the server span of each HTTP decision;
// and the callers' W3C trace context, read from HTTP headers and gRPC
// metadata. The services (envoyrls, rlqs) start their own spans on the
// trace.Tracer they are given. docs/deploy.md ("Tracing") lists the
// spans for users.
//
// Nothing here runs when tracing is off: the server then neither wraps
// its store nor adds an interceptor, and the services skip their spans
// on a nil tracer.
package tracing

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/conffile"
)

// Config is the server.tracing section of sluice serve's config.
type Config struct {
	// Endpoint is the OTLP/gRPC receiver's host:port, such as a
	// collector's 127.0.0.1:4317. "" leaves it, and how to reach it, to
	// the exporter's standard environment variables
	// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// and the other OTEL_EXPORTER_OTLP_* ones), which the config's loader
	// then requires.
	Endpoint string
	// Insecure sends the spans in plaintext. Otherwise they go over TLS,
	// the receiver verified with the CAs of the PEM file CAFile, or with
	// the system's when CAFile is "".
	Insecure bool
	CAFile   string
	// SampleRatio is the fraction, in [0, 1], of the traces that start
	// here (of calls without a trace context) that are recorded; a call
	// whose caller sent one follows the caller's choice.
	SampleRatio float64
	// ServiceName is the resource's service.name.
	ServiceName string
}

// The defaults of a Config's fields.
const (
	DefaultSampleRatio = 1.0
	DefaultServiceName = "sluice"
)

// EndpointVariables are the environment variables that name the
// receiver when Config.Endpoint does not, the first set winning: the
// exporter reads them (and its other OTEL_EXPORTER_OTLP_* variables).
var EndpointVariables = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// maxAttributeBytes bounds the text of a span's attribute, unless
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT or OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT
// sets another bound.
const maxAttributeBytes = 256

// scope is the instrumentation scope of sluice serve's spans.
const scope = "github.com/sluicehq/sluice"

// The attributes of sluice's spans beyond OpenTelemetry's semantic
// conventions. None carries a key or a descriptor's value: those are
// the users' data (user ids, addresses, tokens).
const (
	LimiterKey     = attribute.Key("sluice.limiter")     // a limiter's name, or envoy/ratelimit, rlqs/fleet
	StoreKey       = attribute.Key("sluice.store")       // the store's URL scheme: redis, postgres, ...
	AllowedKey     = attribute.Key("sluice.allowed")     // a consume's decision
	DomainKey      = attribute.Key("sluice.domain")      // an Envoy request's domain
	DescriptorsKey = attribute.Key("sluice.descriptors") // the descriptors of a ShouldRateLimit
	OverallCodeKey = attribute.Key("sluice.overall_code")
	BucketsKey     = attribute.Key("sluice.buckets") // the bucket usages of an RLQS report
)

// Provider exports the spans of its Tracer. Make one with New; Shutdown
// flushes and stops it.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New returns the provider of c, whose spans go to c's receiver in
// batches: at most 2048 spans wait for their export, and those past it
// are dropped, so that a receiver that is slow or away costs the server
// no more than that. Export errors go to log, a line per failed batch;
// they are OpenTelemetry's process-wide error handler, which the last
// provider made sets.
func New(ctx context.Context, c Config, log *slog.Logger) (*Provider, error) {
	var opts []otlptracegrpc.Option
	if c.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(c.Endpoint))
	}
	switch {
	case c.Insecure:
		opts = append(opts, otlptracegrpc.WithInsecure())
	case c.CAFile != "":
		pool, err := conffile.CertPool(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tracing: ca_file: %w", err)
		}
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	case c.Endpoint != "":
		// The config's endpoint goes with the config's choice of TLS,
		// whatever OTEL_EXPORTER_OTLP_INSECURE says.
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("exporting traces failed", "err", err)
	}))
	// A client names the domain of its request: an attribute's text is
	// cut, so that one sending a long one cannot make spans as large.
	limits := sdktrace.NewSpanLimits()
	if limits.AttributeValueLengthLimit < 0 {
		limits.AttributeValueLengthLimit = maxAttributeBytes
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", c.ServiceName))),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
	)
	return &Provider{tp}, nil
}

// Tracer returns the tracer of sluice serve's spans.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer(scope) }

// Shutdown exports the spans still waiting, within ctx, and stops the
// provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	return nil
}

// propagator reads W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// Incoming returns ctx with the caller's span context, from the
// traceparent of ctx's incoming gRPC metadata, when there is one.
func Incoming(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return propagator.Extract(ctx, mdCarrier(md))
}

// mdCarrier is gRPC metadata as a propagation.TextMapCarrier; its keys
// are lower case, as propagation's are.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// UnaryInterceptor continues each call's caller's trace (Incoming).
func UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(Incoming(ctx), req)
}

// StreamInterceptor continues each stream's caller's trace (Incoming).
func StreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, incomingStream{ss, Incoming(ss.Context())})
}

type incomingStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s incomingStream) Context() context.Context { return s.ctx }

// RPC returns the attributes of the server span of a gRPC method
// (service/method, as in its full name without the leading slash).
func RPC(method string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("rpc.system.name", "grpc"), attribute.String("rpc.method", method)}
}

// EndRPC records err's gRPC status code on span, as the semantic
// conventions spell it (INVALID_ARGUMENT), and ends it. The status's
// message stays out: it may quote a request.
func EndRPC(span trace.Span, err error) {
	code := codeName(status.Code(err))
	span.SetAttributes(attribute.String("rpc.response.status_code", code))
	if code != "OK" {
		span.SetStatus(otelcodes.Error, code)
	}
	span.End()
}

// codeName is c's name in capitals, words apart with underscores:
// gRPC's String() of InvalidArgument is "InvalidArgument".
func codeName(c codes.Code) string {
	var b strings.Builder
	name := c.String()
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 && unicode.IsLower(rune(name[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// Handler returns h with a server span around each request, named
// "METHOD route", a child of the caller's span when the request's
// headers carry a traceparent. h may add attributes to the span of its
// request's context.
func Handler(t trace.Tracer, route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(otelcodes.Error, strconv.Itoa(sw.code))
		}
	})
}

// statusWriter remembers the status a handler writes.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap is for http.ResponseController, which sets a consume's write
// deadline.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Store returns st with a client span around each call, a child of the
// call's context's span: "store update" and "store delete", with the
// limiter's name and the store's scheme, never the key. It is a
// driver.Deleter when st is one, and passes st's partitions on
// (driver.Partitioner).
func Store(t trace.Tracer, st driver.Store, limiter, scheme string) driver.Store {
	s := spanStore{st: st, t: t, attrs: trace.WithAttributes(LimiterKey.String(limiter), StoreKey.String(scheme))}
	if _, ok := st.(driver.Deleter); ok {
		return spanDeleter{s}
	}
	return s
}

type spanStore struct {
	st    driver.Store
	t     trace.Tracer
	attrs trace.SpanStartEventOption
}

func (s spanStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	ctx, span := s.t.Start(ctx, "store update", trace.WithSpanKind(trace.SpanKindClient), s.attrs)
	err := s.st.Update(ctx, key, fn)
	endStore(span, err)
	return err
}

// Partition is st's partition of key, "" when it has none.
func (s spanStore) Partition(key string) string {
	if p, ok := s.st.(driver.Partitioner); ok {
		return p.Partition(key)
	}
	return ""
}

type spanDeleter struct{ spanStore }

func (s spanDeleter) Delete(ctx context.Context, key string) error {
	ctx, span := s.t.Start(ctx, "store delete", trace.WithSpanKind(trace.SpanKindClient), s.attrs)
	err := s.st.(driver.Deleter).Delete(ctx, key)
	endStore(span, err)
	return err
}

// endStore records the kind of a store call's error, if any, on its
// span, and ends it: the driver contract's kind, not the message, which
// may quote the key.
func endStore(span trace.Span, err error) {
	if err != nil {
		kind := errorKind(err)
		span.SetAttributes(attribute.String("error.type", kind))
		span.SetStatus(otelcodes.Error, kind)
	}
	span.End()
}

func errorKind(err error) string {
	switch {
	case errors.Is(err, driver.ErrConflict):
		return "conflict"
	case errors.Is(err, driver.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, driver.ErrIndeterminate):
		return "indeterminate"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return "other"
}
