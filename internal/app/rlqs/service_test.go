package rlqs

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

const serviceDoc = `
rlqs:
  - domain: edge
    assignment_ttl: 1s
    abandon_after: 2s
    unmatched: allow_all
    buckets:
      - {bucket: {name: api}, limiter: api}
      - {bucket: {name: blocked}, action: deny_all}
`

// serviceLimiters are the limiters of serviceDoc: api's window is 2s.
var serviceLimiters = map[string]LimiterInfo{"api": {Window: 2 * time.Second}}

// fakeNow is a clock the tests move by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// fakeClock is f as a sluice.Clock.
type fakeClock struct{ f *fakeNow }

func (c fakeClock) Now() int64      { return c.f.now().UnixNano() }
func (fakeClock) IsWallClock() bool { return false }

type harness struct {
	svc   *Service
	cc    *grpc.ClientConn
	clock *fakeNow
	reg   *prometheus.Registry
	addr  string          // the server's
	api   *sluice.Limiter // the limiter api
}

// newHarness serves a Service of serviceDoc, whose limiter api allows 100
// requests per 2s (its window), 50 a second, on a loopback port.
func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	c, err := decodeWith(t, serviceDoc, serviceLimiters)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeNow{t: t0}
	l, err := sluice.NewLimiter(sluice.LeakyBucket(100, 50, time.Second), sluice.WithClock(fakeClock{clock}))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts = append([]Option{WithClock(clock.now), WithRegistry(reg)}, opts...)
	svc := New(c, func(name string) (*sluice.Limiter, bool) { return l, name == "api" }, opts...)
	// The windows of sluice serve's gRPC server, which bound what a
	// stream buffers of reports not yet read.
	g := grpc.NewServer(grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(1<<20))
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &harness{svc: svc, cc: cc, clock: clock, reg: reg, addr: ln.Addr().String(), api: l}
}

// dialFrom returns a new connection to the server from the loopback
// address ip (any of 127.0.0.0/8 is this host's), a peer of its own.
func (h *harness) dialFrom(t *testing.T, ip string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) })}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+h.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// members returns the members of the fleet of bucket id of domain edge on
// limiter api: in the service's memory, or in its fleet store.
func (h *harness) members(t *testing.T, id map[string]string) int {
	t.Helper()
	key, _ := bucketKey("edge", id)
	fk := driver.ShortKey("fleet|api|" + key)
	if h.svc.opts.fleets == nil {
		h.svc.fleetsMu.Lock()
		defer h.svc.fleetsMu.Unlock()
		fl := h.svc.fleets[fk]
		if fl == nil {
			return 0
		}
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return fl.f.Len()
	}
	var n int
	err := h.svc.opts.fleets.Update(t.Context(), fk, func(state []byte) ([]byte, time.Duration, bool) {
		n = decodeFleet(state, 0).Len()
		return nil, 0, false
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *harness) stream(t *testing.T) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(h.cc).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func use(id map[string]string, allowed, denied uint64, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: &rlqsv3.BucketId{Bucket: id}, NumRequestsAllowed: allowed, NumRequestsDenied: denied,
		TimeElapsed: durationpb.New(elapsed),
	}
}

func exchange(t *testing.T, s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, domain string, us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqsv3.RateLimitQuotaResponse {
	t.Helper()
	if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv = %v", err)
	}
	return resp
}

// describe is an action as text: "allow_all 200ms", "token_bucket 12 50/1s 1s", "abandon".
func describe(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	qa := a.GetQuotaAssignmentAction()
	ttl := qa.GetAssignmentTimeToLive().AsDuration().String()
	if tb := qa.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
		return fmt.Sprintf("token_bucket %d %d/%v %s", tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), ttl)
	}
	return strings.ToLower(qa.GetRateLimitStrategy().GetBlanketRule().String()) + " " + ttl
}

// TestAssignments: the actions for a limited bucket, a denied one and one
// no rule matches; an Envoy that leaves releases its share.
func TestAssignments(t *testing.T) {
	h := newHarness(t)
	a := h.stream(t)
	api := map[string]string{"name": "api"}
	resp := exchange(t, a, "edge",
		use(api, 0, 1, 0),
		use(map[string]string{"name": "blocked"}, 0, 1, 0),
		use(map[string]string{"other": "x"}, 0, 1, 0))
	var got []string
	for _, act := range resp.GetBucketAction() {
		got = append(got, describe(act))
	}
	// A lone Envoy has the whole limit: 50 a second, a burst of what a
	// quarter of a second earns.
	want := []string{"token_bucket 12 50/1s 1s", "deny_all 1s", "allow_all 1s"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("actions = %q, want %q", got, want)
	}

	// A second Envoy joins: nothing free until the first shrinks.
	b := h.stream(t)
	if got := describe(exchange(t, b, "edge", use(api, 0, 1, 0)).GetBucketAction()[0]); got != "deny_all 1s" {
		t.Fatalf("second Envoy's first action = %q, want deny_all", got)
	}
	h.clock.add(100 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 5, 0, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 6 25/1s 1s" {
		t.Fatalf("first Envoy's action once the second waits = %q, want half the limit", got)
	}
	if got := describe(exchange(t, b, "", use(api, 0, 5, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 6 25/1s 1s" {
		t.Fatalf("second Envoy's action = %q, want the other half", got)
	}
	// The second leaves: the first gets the whole limit back.
	b.CloseSend()
	if _, err := b.Recv(); err != io.EOF {
		t.Fatalf("Recv after CloseSend = %v, want io.EOF: the stream ends cleanly", err)
	}
	waitFor(t, func() bool { return h.svc.streamCount() == 1 })
	// Once the limiter has refilled (the second's tokens, taken for its
	// assignment, are spent):
	h.clock.add(1500 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 5, 0, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 12 50/1s 1s" {
		t.Fatalf("first Envoy's action once alone again = %q, want the whole limit", got)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.requests.WithLabelValues("edge", "name=api", "allowed")); got != 10 {
		t.Errorf("sluice_rlqs_requests_total{allowed} = %v, want 10", got)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.assignments.WithLabelValues("edge", "name=blocked", "deny_all")); got != 1 {
		t.Errorf("sluice_rlqs_assignments_total{deny_all} = %v, want 1", got)
	}
}

// TestUnpaidRenewal: when the limiter has not the tokens to renew the
// bucket in force (the classic API, another sluice or other Envoys spent
// them), the bucket gets no action and goes on, paid for until it
// expires, where it was denied at once; the next report that finds the
// tokens renews it. A new bucket gets as large a share as the tokens
// there pay for.
func TestUnpaidRenewal(t *testing.T) {
	h := newHarness(t)
	a := h.stream(t)
	api, other := map[string]string{"name": "api"}, map[string]string{"other": "x"}
	if got := describe(exchange(t, a, "edge", use(api, 0, 1, 0)).GetBucketAction()[0]); got != "token_bucket 12 50/1s 1s" {
		t.Fatalf("first action = %q, want the whole limit", got)
	}
	// 100ms later, something else spends what the limiter has left on
	// the bucket's key.
	h.clock.add(100 * time.Millisecond)
	key, _ := bucketKey("edge", api)
	res, err := h.api.Peek(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Remaining; n > 0 {
		if res, err := h.api.AllowN(t.Context(), key, n); err != nil || !res.Allowed {
			t.Fatalf("AllowN(%d) = %v, %v", n, res, err)
		}
	}
	resp := exchange(t, a, "", use(api, 5, 0, 100*time.Millisecond), use(other, 0, 1, 0))
	if n := len(resp.GetBucketAction()); n != 1 || describe(resp.GetBucketAction()[0]) != "allow_all 1s" {
		var got []string
		for _, act := range resp.GetBucketAction() {
			got = append(got, describe(act))
		}
		t.Fatalf("actions with the limiter spent = %q, want only the other bucket's: api's bucket goes on", got)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.assignments.WithLabelValues("edge", "name=api", "kept")); got != 1 {
		t.Errorf("sluice_rlqs_assignments_total{action=kept} = %v, want 1", got)
	}
	// The limiter refills: once it has the tokens (the bucket's extension
	// costs what it earns since it was last paid for, so here once it has
	// run out and a new one is due), the next report assigns it again.
	h.clock.add(1400 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 5, 0, 1400*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 12 50/1s 1s" {
		t.Fatalf("action once the limiter refilled = %q, want the bucket again", got)
	}
	// A second Envoy joins; the first takes its half, but the limiter has
	// not yet the tokens of the second's half: it gets a bucket as large
	// as those there pay for, not a denial.
	b := h.stream(t)
	exchange(t, b, "edge", use(api, 0, 1, 0))
	h.clock.add(100 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 5, 0, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 6 25/1s 1s" {
		t.Fatalf("first Envoy's action once the second waits = %q, want half", got)
	}
	act := exchange(t, b, "", use(api, 0, 5, 100*time.Millisecond)).GetBucketAction()[0]
	tb := act.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if rate := tb.GetTokensPerFill().GetValue(); tb == nil || rate == 0 || rate >= 25 {
		t.Fatalf("second Envoy's action = %q, want a token bucket of less than its half, 25/1s", describe(act))
	}
}

// TestAbandon: a bucket without requests for abandon_after is abandoned,
// and its share released.
func TestAbandon(t *testing.T) {
	h := newHarness(t)
	a := h.stream(t)
	api := map[string]string{"name": "api"}
	exchange(t, a, "edge", use(api, 0, 1, 0))
	h.clock.add(3 * time.Second)
	// Envoy still reports the bucket, without requests.
	exchange(t, a, "", use(api, 0, 0, 3*time.Second))
	resp, err := a.Recv() // the sweep's, within half a TTL
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(resp.GetBucketAction()[0]); got != "abandon" {
		t.Fatalf("action after abandon_after = %q, want abandon", got)
	}
	if n := h.members(t, api); n != 0 {
		t.Errorf("fleet members after the abandon = %d, want 0", n)
	}
}

// TestSilentStream: a stream without a report for abandon_after is ended,
// its buckets abandoned first.
func TestSilentStream(t *testing.T) {
	h := newHarness(t)
	a := h.stream(t)
	api := map[string]string{"name": "api"}
	exchange(t, a, "edge", use(api, 0, 1, 0))
	h.clock.add(3 * time.Second)
	resp, err := a.Recv()
	if err != nil || describe(resp.GetBucketAction()[0]) != "abandon" {
		t.Fatalf("Recv = %v, %v, want the bucket abandoned", resp, err)
	}
	if _, err := a.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Recv = %v, want DeadlineExceeded", err)
	}
	waitFor(t, func() bool { return h.svc.streamCount() == 0 })
	if got := testutil.ToFloat64(h.svc.opts.metrics.rejected.WithLabelValues("silent")); got != 1 {
		t.Errorf("sluice_rlqs_streams_refused_total{silent} = %v, want 1", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHostile: reports that break the protocol or the bounds end the
// stream with a typed status, and change nothing.
func TestHostile(t *testing.T) {
	api := map[string]string{"name": "api"}
	many := func(n int) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		var us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
		for i := range n {
			us = append(us, use(map[string]string{"name": "api", "i": strings.Repeat("x", i)}, 0, 1, 0))
		}
		return us
	}
	bigID := map[string]string{}
	for i := range MaxIDEntries + 1 {
		bigID[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name   string
		first  *rlqsv3.RateLimitQuotaUsageReports
		second *rlqsv3.RateLimitQuotaUsageReports
		code   codes.Code
		msg    string
	}{
		{"no domain", &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: many(1)}, nil, codes.InvalidArgument, "must name its domain"},
		{"domain changed", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}, &rlqsv3.RateLimitQuotaUsageReports{Domain: "other"}, codes.InvalidArgument, "differs from the stream's"},
		{"empty bucket id", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{}}}, nil, codes.InvalidArgument, "bucket_quota_usages[0]: bucket_id must have at least one entry"},
		{"too many entries", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(bigID, 0, 0, 0)}}, nil, codes.InvalidArgument, "at most 16"},
		{"id too long", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(map[string]string{"name": strings.Repeat("x", 5000)}, 0, 0, 0)}}, nil, codes.InvalidArgument, "bytes, at most 4096"},
		{"negative time", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(api, 0, 0, -time.Second)}}, nil, codes.InvalidArgument, "time_elapsed must be between 0"},
		{"counts past int64", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(api, 1<<63, 0, 0)}}, nil, codes.InvalidArgument, "request counts"},
		{"too many usages", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: many(11)}, nil, codes.InvalidArgument, "at most 10 bucket usages per report"},
		{"too many buckets", &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: many(5)}, &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: many(6)}, codes.ResourceExhausted, "at most 5 buckets per stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, WithLimits(Limits{MaxReportBuckets: 10, MaxBucketsPerStream: 5}))
			s := h.stream(t)
			if err := s.Send(tt.first); err != nil {
				t.Fatal(err)
			}
			if tt.second != nil {
				if len(tt.first.GetBucketQuotaUsages()) > 0 {
					if _, err := s.Recv(); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Send(tt.second); err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Recv()
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Recv = %v, want %v with %q", err, tt.code, tt.msg)
			}
			waitFor(t, func() bool { return h.svc.streamCount() == 0 })
			reason := "invalid"
			if tt.code == codes.ResourceExhausted {
				reason = "too_many_buckets"
			}
			if got := testutil.ToFloat64(h.svc.opts.metrics.rejected.WithLabelValues(reason)); got != 1 {
				t.Errorf("sluice_rlqs_streams_refused_total{%s} = %v, want 1", reason, got)
			}
			if n := h.members(t, map[string]string{"name": "api", "i": ""}); n != 0 {
				t.Errorf("fleet members after the refusal = %d, want 0", n)
			}
		})
	}
}

// TestMalformed: bytes that are no RateLimitQuotaUsageReports are
// InvalidArgument, not gRPC's Internal.
func TestMalformed(t *testing.T) {
	h := newHarness(t)
	desc := &grpc.StreamDesc{StreamName: "StreamRateLimitQuotas", ServerStreams: true, ClientStreams: true}
	s, err := h.cc.NewStream(t.Context(), desc, rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	// Field 1, the domain, as bytes that are not UTF-8.
	if err := s.SendMsg(wrapperspb.Bytes([]byte{0xff, 0xfe})); err != nil {
		t.Fatal(err)
	}
	err = s.RecvMsg(new(rlqsv3.RateLimitQuotaResponse))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RecvMsg = %v, want InvalidArgument", err)
	}
}

// TestStreamLimits: past the streams a connection may open, a stream is
// refused with ResourceExhausted.
func TestStreamLimits(t *testing.T) {
	h := newHarness(t, WithLimits(Limits{MaxStreamsPerConn: 2}))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Two streams stay open (until cancel) on the one connection.
	for range 2 {
		s, err := rlqsv3.NewRateLimitQuotaServiceClient(h.cc).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exchange(t, s, "edge", use(map[string]string{"other": "x"}, 0, 1, 0))
	}
	s := h.stream(t)
	s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"})
	if _, err := s.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third stream = %v, want ResourceExhausted", err)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.rejected.WithLabelValues("too_many_streams")); got != 1 {
		t.Errorf("sluice_rlqs_streams_refused_total{too_many_streams} = %v, want 1", got)
	}
}

// TestMetricsCap: past MaxBucketSeries, buckets share the _overflow series
// of their domain, and no object is made for them; a domain the config
// does not name is "_unknown", since any client can name one.
func TestMetricsCap(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	m.max = 2
	for _, b := range []string{"a", "b", "c", "d"} {
		m.of("edge", b, true).report(1, 0)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("edge", "_overflow", "allowed")); got != 2 {
		t.Errorf("overflow series = %v, want 2", got)
	}
	if got := testutil.CollectAndCount(m.requests); got != 6 {
		t.Errorf("series = %d, want 6 (a, b, _overflow; allowed and denied)", got)
	}
	if m.of("edge", "e", true) != m.of("edge", "f", true) {
		t.Errorf("two buckets past the cap got different series objects, want their domain's overflow one")
	}
	if n := testing.AllocsPerRun(100, func() { m.of("edge", "g", true) }); n != 0 {
		t.Errorf("a bucket past the cap allocates %v objects, want 0", n)
	}
	for i := range 100 {
		m.of(fmt.Sprint("made-up-", i), "x", false).report(1, 0)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("_unknown", "_overflow", "allowed")); got != 100 {
		t.Errorf("series of domains the config does not name = %v, want all 100 under _unknown", got)
	}
}

// TestSwap: a reload that turns a limited bucket into a denied one takes
// the next report's answer, and releases the bucket's share.
func TestSwap(t *testing.T) {
	h := newHarness(t)
	a := h.stream(t)
	api := map[string]string{"name": "api"}
	if got := describe(exchange(t, a, "edge", use(api, 0, 1, 0)).GetBucketAction()[0]); !strings.HasPrefix(got, "token_bucket") {
		t.Fatalf("first action = %q, want a token bucket", got)
	}
	c, err := decodeDoc(t, "rlqs:\n  - domain: edge\n    buckets:\n      - {bucket: {name: api}, action: deny_all}\n")
	if err != nil {
		t.Fatal(err)
	}
	h.svc.Swap(c, nil)
	h.clock.add(100 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 3, 0, 100*time.Millisecond)).GetBucketAction()[0]); got != "deny_all 2s" {
		t.Fatalf("action after the reload = %q, want deny_all 2s", got)
	}
	if n := h.members(t, api); n != 0 {
		t.Errorf("fleet members after the reload = %d, want 0", n)
	}
}

// TestSharedFleet: two services on one fleet store, as two sluice
// processes behind a load balancer, share a bucket's fleet: the Envoy on
// the second waits for the one on the first to shrink and its process to
// say so in the store, and they end with half each.
func TestSharedFleet(t *testing.T) {
	shared := memstore.New()
	h1 := newHarness(t, WithFleetStore(shared))
	h2 := newHarness(t, WithFleetStore(shared))
	api := map[string]string{"name": "api"}
	a, b := h1.stream(t), h2.stream(t)
	if got := describe(exchange(t, a, "edge", use(api, 0, 1, 0)).GetBucketAction()[0]); got != "token_bucket 12 50/1s 1s" {
		t.Fatalf("first Envoy's action = %q, want the whole limit", got)
	}
	if got := describe(exchange(t, b, "edge", use(api, 0, 1, 0)).GetBucketAction()[0]); got != "deny_all 1s" {
		t.Fatalf("second Envoy's action, on the other service = %q, want deny_all while the first holds all", got)
	}
	h1.clock.add(100 * time.Millisecond)
	h2.clock.add(100 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 5, 0, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 6 25/1s 1s" {
		t.Fatalf("first Envoy's action once the second waits = %q, want half", got)
	}
	// The first's smaller share reaches the store with its next report,
	// which rebalances the fleet: the second waits until then.
	if got := describe(exchange(t, b, "", use(api, 0, 5, 100*time.Millisecond)).GetBucketAction()[0]); got != "deny_all 1s" {
		t.Fatalf("second Envoy's action before the first's next report = %q, want deny_all", got)
	}
	h1.clock.add(100 * time.Millisecond)
	h2.clock.add(100 * time.Millisecond)
	if got := describe(exchange(t, a, "", use(api, 5, 0, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 6 25/1s 1s" {
		t.Fatalf("first Envoy's action = %q, want its half", got)
	}
	if got := describe(exchange(t, b, "", use(api, 0, 5, 100*time.Millisecond)).GetBucketAction()[0]); got != "token_bucket 6 25/1s 1s" {
		t.Fatalf("second Envoy's action = %q, want the other half", got)
	}
}

// FuzzReport: whatever bytes a stream sends, the report is refused with
// InvalidArgument or ResourceExhausted, or checked into usages within the
// bounds, and never panics.
func FuzzReport(f *testing.F) {
	seed, _ := proto.Marshal(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		use(map[string]string{"name": "api"}, 3, 1, time.Second),
	}})
	f.Add(seed, true)
	f.Add([]byte{0x0a, 0x00}, false)
	svc := New(nil, nil, WithLimits(Limits{MaxReportBuckets: 4, MaxBucketsPerStream: 8}))
	f.Fuzz(func(t *testing.T, data []byte, first bool) {
		in := new(rlqsv3.RateLimitQuotaUsageReports)
		if proto.Unmarshal(data, in) != nil {
			return // the stream handler answers InvalidArgument
		}
		st := &stream{id: "x", domain: "edge", buckets: map[string]*bucket{}}
		domain, us, err := svc.check(st, in, first)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Fatalf("check = %v, want InvalidArgument or ResourceExhausted", err)
			}
			return
		}
		if domain == "" || len(us) > 4 {
			t.Fatalf("check = domain %q, %d usages; want a domain and at most 4", domain, len(us))
		}
		for _, u := range us {
			if len(u.entries) == 0 || len(u.entries) > MaxIDEntries || u.elapsed < 0 || u.allowed > math.MaxInt64 {
				t.Fatalf("usage %+v past the bounds", u)
			}
		}
	})
}
