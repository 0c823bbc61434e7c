// Package rlqs serves Envoy's Rate Limit Quota Service (RLQS),
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas:
// each Envoy's rate_limit_quota filter groups requests into buckets,
// reports their usage on one stream, and enforces locally the assignments
// sluice sends back, so that sluice leaves the request path.
//
// The rlqs section of the config maps bucket ids to limiters. For each
// bucket, the Envoys reporting it share its limiter's limit: each gets a
// token bucket whose rate is its share (share.go's arithmetic, which sums
// to at most the limit), and every token such a bucket can admit before
// its assignment expires is taken from the limiter, on its store, when the
// assignment is sent. The limiter's own exactness therefore bounds what
// all Envoys admit together; docs/envoy.md states the bound.
package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/tracing"
)

// Limits bound what Envoys can make the service hold and do. A client is
// an IP address (called a peer in the code): every connection from one
// host, or from behind one NAT or proxy, is one client.
type Limits struct {
	// MaxStreams bounds the streams open at once on the server,
	// MaxStreamsPerConn those of one connection (one Envoy needs one) and
	// MaxStreamsPerClient those of one client, so that no client holds
	// them all.
	MaxStreams, MaxStreamsPerConn, MaxStreamsPerClient int
	// MaxBuckets bounds the buckets of all streams together,
	// MaxBucketsPerClient those of one client's streams, and
	// MaxBucketsPerStream those one stream may report.
	MaxBuckets, MaxBucketsPerClient, MaxBucketsPerStream int
	// MaxReportBuckets bounds the bucket usages of one report message.
	MaxReportBuckets int
	// MaxIDBytes bounds the bytes of a bucket id's keys and values.
	MaxIDBytes int
}

// DefaultLimits are the limits of a Service made without WithLimits.
var DefaultLimits = Limits{
	MaxStreams:          1024,
	MaxStreamsPerConn:   4,
	MaxStreamsPerClient: 64,
	MaxBuckets:          20_000,
	MaxBucketsPerClient: 5_000,
	MaxBucketsPerStream: 10_000,
	MaxReportBuckets:    1000,
	MaxIDBytes:          4096,
}

// MaxTimeElapsed is the longest time_elapsed a report may claim.
const MaxTimeElapsed = 24 * time.Hour

// Lookup resolves a limiter name of the file's limiters: section to the
// live limiter. It must be safe for simultaneous use.
type Lookup func(name string) (*sluice.Limiter, bool)

type options struct {
	observer func(Charge)
	logger   *slog.Logger
	now      func() time.Time
	metrics  *metrics
	limits   Limits
	fleets   driver.Store
	timeout  time.Duration
	tracer   trace.Tracer
	shadow   func(limiter string) bool
}

// Option configures a Service.
type Option func(*options)

// Charge is one call to a limiter for an assignment, reported to the
// observer of WithObserver, for instance for the limiter's metrics.
type Charge struct {
	// Limiter is the limiter's name, Key the bucket's key in it.
	Limiter, Key string
	// Tokens is what the assignment cost, Allowed whether the limiter
	// gave them.
	Tokens  int64
	Allowed bool
	// Err is the limiter's error, or nil.
	Err error
	// ShadowRejected is, for a limiter in shadow mode (WithShadow), how
	// many of the Tokens its policy would have refused: they were let
	// through, and took nothing.
	ShadowRejected int64
}

// WithObserver makes the service call f with every charge of a limiter,
// synchronously; f must be fast and safe for simultaneous use. The
// default is no observer.
func WithObserver(f func(Charge)) Option { return func(o *options) { o.observer = f } }

// WithShadow tells the service which limiters are in shadow mode (a
// limiter's shadow: true): a bucket whose rule names one is assigned
// ALLOW_ALL, and the requests Envoy reports on it are counted on the
// limiter, taken as far as it has tokens, the others reported to the
// observer as Charge.ShadowRejected. Its buckets join no fleet. The
// default has none; f must be safe for simultaneous use.
func WithShadow(f func(limiter string) bool) Option { return func(o *options) { o.shadow = f } }

// WithLogger makes the service log to l; the default discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock sets the clock of assignments and abandonment; the default is
// time.Now. The limiters keep their own clocks.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithRegistry registers the service's series (sluice_rlqs_*) on reg. The
// default counts nothing.
func WithRegistry(reg prometheus.Registerer) Option {
	return func(o *options) { o.metrics = newMetrics(reg) }
}

// WithFleetStore keeps each bucket's fleet (its Envoys, their demands and
// shares) in st, so that sluice processes sharing st share the fleets; by
// default the fleets are in this Service's memory alone, and live as long
// as their buckets. Give it the limiters' store when several processes
// share it.
func WithFleetStore(st driver.Store) Option { return func(o *options) { o.fleets = st } }

// WithStoreTimeout bounds each call to the fleet store; the default is
// sluice.DefaultStoreTimeout.
func WithStoreTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithTracer starts a span on t for each report a stream sends, with its
// domain and its number of bucket usages, never the buckets' ids; the
// store calls that answer it are its children. A report's span starts a
// trace of its own, linked to the span of the stream's context (the
// caller's, which the server reads from the stream's metadata): a stream
// lasts as long as its Envoy, and a trace of each of its reports under
// the span that opened it would grow for as long. The default, nil,
// traces nothing.
func WithTracer(t trace.Tracer) Option { return func(o *options) { o.tracer = t } }

// WithLimits replaces DefaultLimits; a field that is 0 keeps its default.
func WithLimits(l Limits) Option {
	return func(o *options) {
		d := DefaultLimits
		pick := func(v, def int) int {
			if v > 0 {
				return v
			}
			return def
		}
		o.limits = Limits{
			MaxStreams:          pick(l.MaxStreams, d.MaxStreams),
			MaxStreamsPerConn:   pick(l.MaxStreamsPerConn, d.MaxStreamsPerConn),
			MaxStreamsPerClient: pick(l.MaxStreamsPerClient, d.MaxStreamsPerClient),
			MaxBuckets:          pick(l.MaxBuckets, d.MaxBuckets),
			MaxBucketsPerClient: pick(l.MaxBucketsPerClient, d.MaxBucketsPerClient),
			MaxBucketsPerStream: pick(l.MaxBucketsPerStream, d.MaxBucketsPerStream),
			MaxReportBuckets:    pick(l.MaxReportBuckets, d.MaxReportBuckets),
			MaxIDBytes:          pick(l.MaxIDBytes, d.MaxIDBytes),
		}
	}
}

// Service is the rate limit quota service. It is safe for simultaneous
// use; Swap replaces its configuration while it serves.
type Service struct {
	opts  options
	state atomic.Pointer[state]
	nonce string        // this Service's part of stream ids
	ids   atomic.Uint64 // stream ids

	mu      sync.Mutex // guards the fields below
	streams int
	buckets int // of all streams
	perConn map[string]int
	peers   map[string]*peerUse

	fleetsMu sync.Mutex // guards fleets; taken before a fleet's mu
	fleets   map[string]*fleet
}

// peerUse is what one peer's streams hold.
type peerUse struct{ streams, buckets int }

// state is one configuration.
type state struct {
	cfg    *Config
	lookup Lookup
}

// New returns a service that maps the bucket ids of c's domains to the
// limiters of lookup. A nil c has no domains: every bucket is then
// allowed.
func New(c *Config, lookup Lookup, opts ...Option) *Service {
	s := &Service{
		opts:    options{now: time.Now, limits: DefaultLimits, timeout: sluice.DefaultStoreTimeout},
		perConn: map[string]int{},
		peers:   map[string]*peerUse{},
		fleets:  map[string]*fleet{},
	}
	for _, o := range opts {
		o(&s.opts)
	}
	// Stream ids are unique across the processes that share a fleet
	// store: a random nonce per Service, then a counter.
	var n [8]byte
	rand.Read(n[:])
	s.nonce = hex.EncodeToString(n[:])
	if s.opts.logger == nil {
		s.opts.logger = slog.New(slog.DiscardHandler)
	}
	s.Swap(c, lookup)
	return s
}

// Swap replaces the config and the lookup, for a reload. Streams keep
// their buckets; each report is answered with the config of its time.
func (s *Service) Swap(c *Config, lookup Lookup) {
	if lookup == nil {
		lookup = func(string) (*sluice.Limiter, bool) { return nil, false }
	}
	s.state.Store(&state{cfg: c, lookup: lookup})
}

// Register registers the service on g. The service decodes its reports
// itself, so that a malformed one is InvalidArgument, where gRPC's codec
// makes it Internal.
func (s *Service) Register(g *grpc.Server) { g.RegisterService(&serviceDesc, s) }

// rawReports is a report message as it came, not yet decoded, which
// gRPC's codec hands the bytes to (its Unmarshal never fails).
type rawReports struct{ b []byte }

func (r *rawReports) Reset()         { r.b = nil }
func (r *rawReports) String() string { return fmt.Sprintf("rlqs.rawReports(%d bytes)", len(r.b)) }
func (r *rawReports) ProtoMessage()  {}

// Unmarshal keeps a copy of b, which the codec reuses.
func (r *rawReports) Unmarshal(b []byte) error {
	r.b = append(r.b[:0], b...)
	return nil
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName,
	HandlerType: (*rlqsv3.RateLimitQuotaServiceServer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "StreamRateLimitQuotas",
		Handler:       streamHandler,
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: rlqsv3.RateLimitQuotaService_ServiceDesc.Metadata,
}

func streamHandler(srv any, ss grpc.ServerStream) error {
	recv := func() (*rlqsv3.RateLimitQuotaUsageReports, error) {
		raw := new(rawReports)
		if err := ss.RecvMsg(raw); err != nil {
			return nil, err
		}
		in := new(rlqsv3.RateLimitQuotaUsageReports)
		if err := proto.Unmarshal(raw.b, in); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "rlqs: malformed RateLimitQuotaUsageReports: %v", err)
		}
		return in, nil
	}
	send := func(r *rlqsv3.RateLimitQuotaResponse) error { return ss.SendMsg(r) }
	return srv.(*Service).serve(ss.Context(), recv, send)
}

var _ rlqsv3.RateLimitQuotaServiceServer = (*Service)(nil)

// StreamRateLimitQuotas serves one Envoy's stream until it ends: each
// report is answered with the assignments of the buckets it reports, and
// buckets without requests for their domain's abandon_after are
// abandoned. Its errors are gRPC statuses: InvalidArgument for a report
// that breaks the protocol or a bound, ResourceExhausted past the limits
// on streams and on the buckets of one stream. A new bucket past the
// limits of a peer's or all streams gets no action, and the stream goes
// on.
func (s *Service) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	return s.serve(stream.Context(), stream.Recv, stream.Send)
}

// stream is one Envoy's stream.
type stream struct {
	id     string
	peer   string // its client's IP address
	domain string
	send   func(*rlqsv3.RateLimitQuotaResponse) error // by serve's loop only

	mu      sync.Mutex // guards buckets
	buckets map[string]*bucket
}

// bucket is one bucket of a stream.
type bucket struct {
	id      *rlqsv3.BucketId // as Envoy sent it, for the answers
	key     string           // the limiter's key
	fl      *fleet           // nil when no limiter decides it
	limiter string           // the limiter's name, with fl
	abandon time.Duration    // its domain's abandon_after when it joined its fleet
	grant   *Grant           // the token bucket in force, or nil
	share   int64            // its share, tokens per window
	credit  int64            // tokens taken that no bucket sent can admit
	last    time.Time        // the last report
	active  time.Time        // the last report of some requests, or the first
	stats   *bucketStats
}

func (s *Service) serve(ctx context.Context, recv func() (*rlqsv3.RateLimitQuotaUsageReports, error), send func(*rlqsv3.RateLimitQuotaResponse) error) error {
	conn, host := "", ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		conn, host = p.Addr.String(), peerHost(p.Addr)
	}
	if err := s.admit(conn, host); err != nil {
		return err
	}
	s.opts.metrics.streamDelta(1)
	st := &stream{id: s.nonce + "-" + strconv.FormatUint(s.ids.Add(1), 10), peer: host, send: send, buckets: map[string]*bucket{}}
	defer func() {
		// The stream's context has ended: its shares are released on one
		// of their own.
		s.release(context.WithoutCancel(ctx), st)
		s.dismiss(conn, host)
		s.opts.metrics.streamDelta(-1)
	}()

	// Reports are read on a goroutine of their own, so that the loop
	// below also abandons idle buckets, and ends a silent stream, while
	// it waits for them; each only once the loop has answered the one
	// before, so that a client that does not read its answers makes the
	// stream hold no report beyond gRPC's flow-control window.
	type received struct {
		in  *rlqsv3.RateLimitQuotaUsageReports
		err error
	}
	reports := make(chan received)
	next := make(chan struct{}, 1)
	next <- struct{}{}
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			select {
			case <-next:
			case <-quit:
				return
			}
			in, err := recv()
			select {
			case reports <- received{in, err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	last := s.opts.now() // the last report
	sweep := time.NewTimer(s.sweepEvery(st))
	defer sweep.Stop()
	for first := true; ; {
		var resp *rlqsv3.RateLimitQuotaResponse
		reported := false
		select {
		case <-ctx.Done():
			return nil
		case r := <-reports:
			if r.err != nil {
				if errors.Is(r.err, io.EOF) || errors.Is(r.err, context.Canceled) || status.Code(r.err) == codes.Canceled {
					return nil // Envoy closed the stream, or went away
				}
				if status.Code(r.err) == codes.InvalidArgument {
					s.opts.metrics.refuse("invalid")
				}
				return r.err
			}
			var err error
			if resp, err = s.tracedAnswer(ctx, st, r.in, first); err != nil {
				if status.Code(err) == codes.InvalidArgument {
					s.opts.metrics.refuse("invalid")
				}
				return err
			}
			first, last, reported = false, s.opts.now(), true
		case <-sweep.C:
			resp = s.abandonIdle(ctx, st)
			// A stream that has not reported for abandon_after (its
			// buckets all abandoned above) holds a stream of the server's
			// bound for nothing: Envoy reports every reporting_interval,
			// buckets or not.
			if after := s.abandonAfter(st); s.opts.now().Sub(last) > after {
				sendAll(st.send, resp.GetBucketAction()) // best effort: the stream ends anyway
				s.opts.metrics.refuse("silent")
				return status.Errorf(codes.DeadlineExceeded, "rlqs: no report for %v (abandon_after)", after)
			}
			sweep.Reset(s.sweepEvery(st))
		}
		if err := sendAll(st.send, resp.GetBucketAction()); err != nil {
			return err
		}
		if reported {
			next <- struct{}{}
		}
	}
}

// MaxResponseBytes bounds the encoded bucket actions of one response
// message: a larger answer is sent as several messages, so that a stream
// whose client does not read holds at most one of them beyond gRPC's
// write quota of 64 KiB a stream.
const MaxResponseBytes = 32 << 10

// sendAll sends actions, if any, in messages of at most MaxResponseBytes
// (or one action, if larger).
func sendAll(send func(*rlqsv3.RateLimitQuotaResponse) error, actions []*rlqsv3.RateLimitQuotaResponse_BucketAction) error {
	for len(actions) > 0 {
		n, size := 0, 0
		for n < len(actions) {
			// A repeated field's entry costs its size, its tag and its
			// length, which takes at most 3 bytes below 2 MiB.
			size += proto.Size(actions[n]) + 4
			if n > 0 && size > MaxResponseBytes {
				break
			}
			n++
		}
		if err := send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions[:n:n]}); err != nil {
			return err
		}
		actions = actions[n:]
	}
	return nil
}

// sweepEvery is how often st's idle buckets are looked for: half its
// domain's assignment_ttl, or a second before its first report.
func (s *Service) sweepEvery(st *stream) time.Duration {
	if d := s.state.Load().cfg.Domain(st.domainName()); d != nil {
		return max(d.AssignmentTTL/2, 10*time.Millisecond)
	}
	return time.Second
}

// abandonAfter is st's domain's abandon_after.
func (s *Service) abandonAfter(st *stream) time.Duration {
	if d := s.state.Load().cfg.Domain(st.domainName()); d != nil {
		return d.AbandonAfter
	}
	return DefaultAbandonAfter
}

// peerHost returns the peer of a client address: its IP address, or the
// address itself when it has none (a Unix socket).
func peerHost(a net.Addr) string {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return a.String()
}

// admit counts a new stream of conn and peer, or refuses it past the
// limits. The per-peer bound comes before the total, so that one peer's
// streams never fill the server.
func (s *Service) admit(conn, peer string) error {
	l := s.opts.limits
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[peer]
	switch {
	case p != nil && p.streams >= l.MaxStreamsPerClient:
		s.opts.metrics.refuse("too_many_streams_per_client")
		return status.Errorf(codes.ResourceExhausted, "rlqs: at most %d streams per client address", l.MaxStreamsPerClient)
	case s.streams >= l.MaxStreams:
		s.opts.metrics.refuse("too_many_streams")
		return status.Errorf(codes.ResourceExhausted, "rlqs: at most %d streams at once", l.MaxStreams)
	case s.perConn[conn] >= l.MaxStreamsPerConn:
		s.opts.metrics.refuse("too_many_streams")
		return status.Errorf(codes.ResourceExhausted, "rlqs: at most %d streams per connection; an Envoy needs one", l.MaxStreamsPerConn)
	}
	if p == nil {
		p = &peerUse{}
		s.peers[peer] = p
	}
	s.streams++
	s.perConn[conn]++
	p.streams++
	return nil
}

// dismiss undoes admit, once the stream's buckets are released.
func (s *Service) dismiss(conn, peer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams--
	if s.perConn[conn]--; s.perConn[conn] <= 0 {
		delete(s.perConn, conn)
	}
	if p := s.peers[peer]; p != nil {
		if p.streams--; p.streams <= 0 && p.buckets <= 0 {
			delete(s.peers, peer)
		}
	}
}

// takeBucket counts a new bucket of a stream of peer, or reports false
// past MaxBucketsPerClient or MaxBuckets: the bucket is then refused, with
// no action (Envoy applies its no_assignment_behavior), and the stream
// goes on, since the bound is of other streams too.
func (s *Service) takeBucket(peer string) bool {
	l := s.opts.limits
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[peer]
	if p == nil { // a stream not admitted, in tests
		p = &peerUse{}
		s.peers[peer] = p
	}
	switch {
	case p.buckets >= l.MaxBucketsPerClient:
		s.opts.metrics.refuseBucket("too_many_buckets_per_client")
		return false
	case s.buckets >= l.MaxBuckets:
		s.opts.metrics.refuseBucket("too_many_buckets")
		return false
	}
	p.buckets++
	s.buckets++
	s.opts.metrics.bucketDelta(1)
	return true
}

// dropBucket undoes takeBucket.
func (s *Service) dropBucket(peer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buckets--
	s.opts.metrics.bucketDelta(-1)
	if p := s.peers[peer]; p != nil {
		p.buckets--
	}
}

// release takes every bucket of st out of its fleet: an Envoy that left
// releases its shares.
func (s *Service) release(ctx context.Context, st *stream) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, b := range st.buckets {
		s.leaveFleet(ctx, st, b)
		delete(st.buckets, k)
		s.dropBucket(st.peer)
	}
}

// leaveFleet takes b out of its fleet, if any. With a fleet store that
// fails, its member stays in the stored fleet until it expires,
// abandon_after later. It requires that st.mu is held.
func (s *Service) leaveFleet(ctx context.Context, st *stream, b *bucket) {
	if b.fl == nil {
		return
	}
	s.leave(ctx, b.fl, st.id)
	b.fl = nil
}

func (st *stream) domainName() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.domain
}

// abandonIdle returns the abandon actions of st's idle buckets, which it
// forgets.
func (s *Service) abandonIdle(ctx context.Context, st *stream) *rlqsv3.RateLimitQuotaResponse {
	now := s.opts.now()
	after := s.abandonAfter(st)
	st.mu.Lock()
	defer st.mu.Unlock()
	resp := &rlqsv3.RateLimitQuotaResponse{}
	keys := make([]string, 0)
	for k, b := range st.buckets {
		if now.Sub(b.active) > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		b := st.buckets[k]
		s.leaveFleet(ctx, st, b)
		delete(st.buckets, k)
		s.dropBucket(st.peer)
		b.stats.action(actionAbandon)
		resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
			},
		})
	}
	return resp
}

// usage is one checked bucket usage of a report.
type usage struct {
	id               *rlqsv3.BucketId
	key, label       string
	allowed, denied  uint64
	elapsed          time.Duration
	entries          map[string]string
	reportedRequests bool
}

// check checks a report against the protocol and the limits, before
// anything is counted, and returns its usages.
func (s *Service) check(st *stream, in *rlqsv3.RateLimitQuotaUsageReports, first bool) (string, []usage, error) {
	l := s.opts.limits
	domain := in.GetDomain()
	switch {
	case first && domain == "":
		return "", nil, status.Error(codes.InvalidArgument, "rlqs: the first report of a stream must name its domain")
	case !first && domain != "" && domain != st.domainName():
		return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: domain %q differs from the stream's %q: open another stream", domain, st.domainName())
	case len(in.GetBucketQuotaUsages()) > l.MaxReportBuckets:
		return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: at most %d bucket usages per report, got %d", l.MaxReportBuckets, len(in.GetBucketQuotaUsages()))
	}
	if !first {
		domain = st.domainName()
	}
	us := make([]usage, 0, len(in.GetBucketQuotaUsages()))
	for i, u := range in.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		switch {
		case len(id) == 0:
			return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: bucket_id must have at least one entry", i)
		case len(id) > MaxIDEntries:
			return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: bucket_id has %d entries, at most %d", i, len(id), MaxIDEntries)
		}
		size := 0
		for k, v := range id {
			size += len(k) + len(v)
		}
		if size > l.MaxIDBytes {
			return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: bucket_id has %d bytes, at most %d", i, size, l.MaxIDBytes)
		}
		var elapsed time.Duration
		if te := u.GetTimeElapsed(); te != nil {
			if err := te.CheckValid(); err != nil || te.AsDuration() < 0 || te.AsDuration() > MaxTimeElapsed {
				return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: time_elapsed must be between 0 and %v, got %v", i, MaxTimeElapsed, te)
			}
			elapsed = te.AsDuration()
		}
		if u.GetNumRequestsAllowed() > math.MaxInt64 || u.GetNumRequestsDenied() > math.MaxInt64 {
			return "", nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: request counts must be at most %d", i, int64(math.MaxInt64))
		}
		key, label := bucketKey(domain, id)
		us = append(us, usage{
			id: u.GetBucketId(), key: key, label: label, entries: id,
			allowed: u.GetNumRequestsAllowed(), denied: u.GetNumRequestsDenied(),
			elapsed:          elapsed,
			reportedRequests: u.GetNumRequestsAllowed()+u.GetNumRequestsDenied() > 0,
		})
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	fresh := 0
	seen := map[string]bool{}
	for _, u := range us {
		if st.buckets[u.key] == nil && !seen[u.key] {
			fresh++
			seen[u.key] = true
		}
	}
	if len(st.buckets)+fresh > l.MaxBucketsPerStream {
		s.opts.metrics.refuse("too_many_buckets")
		return "", nil, status.Errorf(codes.ResourceExhausted, "rlqs: at most %d buckets per stream", l.MaxBucketsPerStream)
	}
	if first {
		st.domain = domain
	}
	return domain, us, nil
}

// tracedAnswer is answer, in a span of its own when tracing is on.
func (s *Service) tracedAnswer(ctx context.Context, st *stream, in *rlqsv3.RateLimitQuotaUsageReports, first bool) (*rlqsv3.RateLimitQuotaResponse, error) {
	if s.opts.tracer == nil {
		return s.answer(ctx, st, in, first)
	}
	ctx, span := s.opts.tracer.Start(ctx, reportSpan, trace.WithNewRoot(), trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			append(tracing.RPC(reportMethod), tracing.BucketsKey.Int(len(in.GetBucketQuotaUsages())))...))
	resp, err := s.answer(ctx, st, in, first)
	span.SetAttributes(tracing.DomainKey.String(st.domainName()))
	tracing.EndRPC(span, err)
	return resp, err
}

// reportMethod is the quota service's gRPC method, and reportSpan the
// name of the span of one of its reports.
var (
	reportMethod = strings.TrimPrefix(rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName, "/")
	reportSpan   = reportMethod + " report"
)

// answer folds one report into the fleets and returns the assignments of
// its buckets, in its order.
func (s *Service) answer(ctx context.Context, st *stream, in *rlqsv3.RateLimitQuotaUsageReports, first bool) (*rlqsv3.RateLimitQuotaResponse, error) {
	domain, us, err := s.check(st, in, first)
	if err != nil {
		return nil, err
	}
	cur := s.state.Load()
	dom := cur.cfg.Domain(domain)
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, u := range us {
		if a := s.assign(ctx, cur, dom, domain, st, u); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	return resp, nil
}

// assign folds usage u of st into its bucket and returns the bucket's
// assignment, or nil when the store failed (Envoy's assignment then
// expires into its expired_assignment_behavior), when the limiter has not
// the tokens to extend the bucket in force (which goes on, paid for until
// it expires), or when a new bucket is past the bounds of takeBucket.
func (s *Service) assign(ctx context.Context, cur *state, dom *Domain, domain string, st *stream, u usage) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	now := s.opts.now()
	// The stream's lock is held throughout, the limiter's call included,
	// so that the sweep never abandons a bucket half assigned; only the
	// sweep waits on it.
	st.mu.Lock()
	defer st.mu.Unlock()
	b := st.buckets[u.key]
	if b == nil {
		if !s.takeBucket(st.peer) {
			return nil
		}
		b = &bucket{id: u.id, key: u.key, active: now, stats: s.opts.metrics.of(domain, u.label, dom != nil)}
		st.buckets[u.key] = b
	}
	b.stats.report(u.allowed, u.denied)
	// Envoy sends time_elapsed in whole seconds, which a reporting
	// interval below a few seconds makes 0 or half wrong: the time since
	// the bucket's last report on the stream is measured here instead,
	// the report's own serving only for the first.
	elapsed := u.elapsed
	if !b.last.IsZero() {
		elapsed = now.Sub(b.last)
	}
	b.last = now
	if u.reportedRequests {
		b.active = now
	}

	ttl := DefaultAssignmentTTL
	action := AllowAll
	var rule *Rule
	if dom != nil {
		ttl = dom.AssignmentTTL
		action = dom.Unmatched
		if rule = dom.Match(u.entries); rule != nil {
			action = rule.Action
		}
	}
	var l *sluice.Limiter
	if action == Limit {
		var ok bool
		if l, ok = cur.lookup(rule.Limiter); !ok {
			// A reload removed it between the match and now.
			action = dom.Unmatched
		}
	}
	if action == Limit && s.opts.shadow != nil && s.opts.shadow(rule.Limiter) {
		s.leaveFleet(ctx, st, b)
		b.grant, b.share, b.credit, b.limiter = nil, 0, 0, rule.Limiter
		if err := s.shadowCount(ctx, l, b, int64(min(u.allowed+u.denied, math.MaxInt64))); err != nil && ctx.Err() == nil {
			s.opts.logger.WarnContext(ctx, "rlqs: shadow bucket not counted", "domain", domain, "bucket", u.label, "err", err)
		}
		return s.blanket(b, typev3.RateLimitStrategy_ALLOW_ALL, ttl)
	}
	if action != Limit {
		s.leaveFleet(ctx, st, b)
		b.grant, b.share, b.credit = nil, 0, 0
		if action == DenyAll {
			return s.blanket(b, typev3.RateLimitStrategy_DENY_ALL, ttl)
		}
		return s.blanket(b, typev3.RateLimitStrategy_ALLOW_ALL, ttl)
	}

	window := l.Policy().Window()
	total := limitOf(l)
	fk := driver.ShortKey("fleet|" + rule.Limiter + "|" + u.key)
	joined := b.fl == nil || b.fl.key != fk
	if joined {
		// A new bucket, or a reload sent it to another limiter, whose
		// fleet it joins; the credit was taken from the other.
		s.leaveFleet(ctx, st, b)
		b.fl, b.limiter, b.abandon = s.fleetOf(fk), rule.Limiter, dom.AbandonAfter
		b.grant, b.share, b.credit = nil, 0, 0
	}
	used := int64(min(u.allowed+u.denied, math.MaxInt64))
	share := s.report(ctx, b.fl, st.id, joined, now, used, elapsed, window, b.abandon, total)

	// Envoy's clock starts the assignment when it arrives: the guard
	// covers a later arrival of this assignment than of the one it
	// extends (docs/envoy.md's bound).
	guard := ttl / 8
	until := now.Add(ttl + guard)
	if bk, ok := BucketFor(share, window, ttl); ok {
		if b.grant != nil {
			bk = Distinct(b.grant.Bucket, bk)
		}
		g, avail, err := s.charge(ctx, l, b, bk, now, until, guard)
		if err != nil {
			if ctx.Err() == nil {
				s.opts.logger.WarnContext(ctx, "rlqs: bucket not assigned", "domain", domain, "bucket", u.label, "err", err)
			}
			b.stats.action(actionNone)
			return nil
		}
		if g != nil {
			b.grant, b.share = g, share
			b.fl.hold(st.id, share)
			return s.tokenBucket(b, ttl)
		}
		// The bucket's tokens are not there (the others' assignments,
		// the classic API or another sluice on the same store spent
		// them). A bucket in force that is not larger than the share goes
		// on: extended if its extension can be paid, else as it is, with
		// no action, until the next report pays for it (it is paid for
		// until it expires). Otherwise, a new bucket as large as the
		// tokens there pay for; else Envoy is denied until the limit
		// refills (a larger bucket would hold more than the fleet now
		// gives it).
		if old := b.grant; old != nil && now.Before(old.Until) && b.share <= share {
			g, _, err := s.charge(ctx, l, b, old.Bucket, now, until, guard)
			if err == nil && g != nil {
				b.fl.hold(st.id, b.share)
				b.grant = g
				return s.tokenBucket(b, ttl)
			}
			b.fl.hold(st.id, b.share)
			b.stats.action(actionKept)
			return nil
		}
		if bk, part, ok := Affordable(b.grant, b.credit, share, avail, window, ttl, now, until, guard); ok {
			if g, _, err := s.charge(ctx, l, b, bk, now, until, guard); err == nil && g != nil {
				b.grant, b.share = g, part
				b.fl.hold(st.id, part)
				return s.tokenBucket(b, ttl)
			}
		}
	}
	b.fl.hold(st.id, 0)
	b.credit = satAdd(b.credit, Drop(b.grant, now, guard))
	b.grant, b.share = nil, 0
	return s.blanket(b, typev3.RateLimitStrategy_DENY_ALL, ttl)
}

// charge takes from l what renewing b's grant with bk until until costs,
// its credit paying first, and returns the renewed grant, or nil when the
// limiter refused: not enough tokens (it then returns those it has), or
// more at once than its capacity. Its error is the store's.
func (s *Service) charge(ctx context.Context, l *sluice.Limiter, b *bucket, bk Bucket, now, until time.Time, guard time.Duration) (*Grant, int64, error) {
	next, pay, credit := Renew(b.grant, b.credit, bk, now, until, guard)
	if pay > 0 {
		res, err := l.AllowN(ctx, b.key, pay)
		if s.opts.observer != nil {
			s.opts.observer(Charge{Limiter: b.limiter, Key: b.key, Tokens: pay, Allowed: err == nil && res.Allowed, Err: err})
		}
		switch {
		case err != nil && isTooMany(err):
			return nil, 0, nil
		case err != nil:
			return nil, 0, err
		case !res.Allowed:
			return nil, res.Remaining, nil
		}
		b.stats.charge(pay)
	}
	b.credit = credit
	return &next, 0, nil
}

// shadowCount counts the used requests of b, which Envoy let through, on
// l, a limiter in shadow mode: as many as it has tokens for are taken, and
// the others, which its policy would have refused, are reported to the
// observer as shadow rejections. A report is one call of many requests,
// which the policy takes or refuses whole, so a refusal is followed by a
// call for the tokens that are there.
func (s *Service) shadowCount(ctx context.Context, l *sluice.Limiter, b *bucket, used int64) error {
	if used == 0 {
		return nil
	}
	res, err := l.AllowN(ctx, b.key, used)
	taken := used
	switch {
	case err != nil && isTooMany(err): // more than the limit at once
		if res, err = l.Peek(ctx, b.key); err != nil {
			break
		}
		if !res.ShadowRejected { // a peek's Remaining is what 1 token would leave
			res.Remaining = satAdd(res.Remaining, 1)
		}
		res.ShadowRejected = true
	case err != nil:
	}
	if err == nil && res.ShadowRejected {
		taken = min(res.Remaining, used)
		if taken > 0 {
			if again, aerr := l.AllowN(ctx, b.key, taken); aerr != nil || again.ShadowRejected {
				taken = 0 // another client took them first
			}
		}
	}
	if s.opts.observer != nil {
		c := Charge{Limiter: b.limiter, Key: b.key, Tokens: used, Allowed: err == nil, Err: err}
		if err == nil {
			c.ShadowRejected = used - taken
		}
		s.opts.observer(c)
	}
	if err == nil && taken > 0 {
		b.stats.charge(taken)
	}
	return err
}

// tokenBucket returns the token-bucket assignment of b's grant.
func (s *Service) tokenBucket(b *bucket, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	b.stats.action(actionTokenBucket)
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    TokenBucketStrategy(b.grant.Bucket),
			},
		},
	}
}

// TokenBucketStrategy is the rate_limit_strategy of bucket b.
func TokenBucketStrategy(b Bucket) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(min(b.MaxTokens, MaxMaxTokens)),
		TokensPerFill: wrapperspb.UInt32(uint32(min(b.PerFill, MaxMaxTokens))),
		FillInterval:  durationpb.New(b.Fill),
	}}}
}

// blanket returns a blanket assignment of b.
func (s *Service) blanket(b *bucket, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	if rule == typev3.RateLimitStrategy_DENY_ALL {
		b.stats.action(actionDenyAll)
	} else {
		b.stats.action(actionAllowAll)
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}},
			},
		},
	}
}

// isTooMany reports whether err is a limiter's refusal of more tokens at
// once than its capacity.
func isTooMany(err error) bool {
	var ae *sluice.ArgumentError
	return errors.As(err, &ae) && ae.Arg == "tokens"
}

// limits caches the limit of each policy, by its text.
var limits sync.Map // string → int64

// limitOf returns l's limit, the tokens per Window the fleet shares,
// asked of an in-memory limiter of its policy so as not to touch the
// store.
func limitOf(l *sluice.Limiter) int64 {
	p := l.Policy()
	if v, ok := limits.Load(p.String()); ok {
		return v.(int64)
	}
	mem, err := sluice.NewLimiter(p)
	if err != nil {
		return 0
	}
	res, err := mem.Peek(context.Background(), "limit")
	if err != nil {
		return 0
	}
	limits.Store(p.String(), res.Limit)
	return res.Limit
}

// bucketKey returns the limiter key of a bucket id of domain, and the id
// as text: its entries sorted by key, escaped, as "k=v|k=v". The key is
// "rlqs|", the domain and that text, in its driver.ShortKey form.
func bucketKey(domain string, id map[string]string) (key, label string) {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(escape(k))
		b.WriteByte('=')
		b.WriteString(escape(id[k]))
	}
	label = b.String()
	// The "rlqs|" prefix keeps the keys apart from those of the envoy
	// section's descriptors, whose format is the same, on a shared limiter.
	return driver.ShortKey(keyPrefix + escape(domain) + "|" + label), label
}

// escaper escapes the separators of the key format, and '%' itself, so
// that two different ids never make the same key.
var escaper = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")

func escape(s string) string { return escaper.Replace(s) }

// bucketCount returns the buckets the streams hold, for tests.
func (s *Service) bucketCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buckets
}

// streamCount returns the streams open, for tests.
func (s *Service) streamCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}
