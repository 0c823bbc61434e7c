// Package envoyrls serves Envoy's global rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, as
// envoyproxy/ratelimit does: it reads envoyproxy/ratelimit's config files
// as they are, and the envoy: section of a server config file in the same
// format, and answers as envoyproxy/ratelimit answers, field for field,
// with its settings. A descriptor of the envoy: section may instead name a
// sluice limiter, of any policy, which then decides it.
//
// docs/envoy.md describes the config, the matching rules and the answers,
// and every difference that remains from envoyproxy/ratelimit.
package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/outage"
	"github.com/sluicehq/sluice/internal/app/tracing"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/rlheader"
	"github.com/sluicehq/sluice/memstore"
)

// Bounds of what a request makes the service do.
const (
	// MaxDescriptors is the most descriptors one request may carry; each
	// costs a decision, so the bound caps the work of one call.
	MaxDescriptors = 64
	// MaxKeyLen is the longest key, in bytes, passed to a limiter or a
	// counter: a longer one (a long path, an oversized header) is passed
	// as its driver.ShortKey digest form, the stores' own rule, so that a
	// key's memory stays bounded in the in-memory store too. Rejecting it
	// would let a client skip its limits (Envoy lets requests through on
	// errors by default), and no digest form equals another key.
	MaxKeyLen = driver.MaxKeyLen
)

// Lookup resolves a limiter name of the file's limiters: section to the
// live limiter. It must be safe for simultaneous use.
type Lookup func(name string) (*sluice.Limiter, bool)

// Decision is one descriptor's decision by a sluice limiter, reported to
// the observer of WithObserver, for instance for Prometheus metrics.
// Descriptors that a rate_limit counts, that match nothing or that are
// unlimited are not reported: the service's own stats count them.
type Decision struct {
	// Limiter is the limiter's name.
	Limiter string
	// Key is the key the limiter decided on.
	Key string
	// Hits is the tokens asked for; 0 for a check that takes nothing.
	Hits int64
	// Result is the limiter's result; its zero value when Err is set.
	Result sluice.Result
	// Shadow reports a descriptor in shadow mode, whose rejection is
	// reported but not enforced.
	Shadow bool
	// Err is the limiter's error (for instance a *sluice.StoreError), or
	// nil.
	Err error
}

type options struct {
	observer func(Decision)
	logger   *slog.Logger
	store    driver.Store
	timeout  time.Duration
	failure  sluice.StoreFailure
	// localMaxKeys bounds localCounters (WithLocalMaxKeys).
	localMaxKeys int
	now          func() time.Time
	metrics      *metrics
	outage       *outage.Log
	tracer       trace.Tracer
}

// Option configures a Service.
type Option func(*options)

// WithObserver makes the service call f with every decision of a sluice
// limiter, synchronously, before it answers. f must be fast and safe for
// simultaneous use. The default is no observer.
func WithObserver(f func(Decision)) Option { return func(o *options) { o.observer = f } }

// WithLogger makes the service log to l: store and limiter errors at
// Warn, rejections in shadow mode at Info, invalid requests at Debug. The
// default, and a nil l, discard the logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithOutageLog counts the store failures of rate_limit descriptors in
// o, which logs an outage as a few lines, rather than a line each. The
// default is a Log of the service's logger and clock. A sluice limiter's
// failures are its observer's to report (sluice.WithObserver).
func WithOutageLog(o *outage.Log) Option { return func(opts *options) { opts.outage = o } }

// WithTracer starts a server span on t for each ShouldRateLimit, a
// child of the span of the call's context (the caller's, which the
// server reads from the call's metadata), with the request's domain and
// its number of descriptors, never their values; the store calls under
// it are its children. The default, nil, traces nothing.
func WithTracer(t trace.Tracer) Option { return func(o *options) { o.tracer = t } }

// WithStore keeps the windows of rate_limit descriptors in s. The default
// is a store in this process's memory.
func WithStore(s driver.Store) Option { return func(o *options) { o.store = s } }

// WithStoreTimeout bounds each call to the store; the default is
// sluice.DefaultStoreTimeout.
func WithStoreTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithStoreFailure says what a rate_limit descriptor gets when the store
// fails: an error (sluice.FailClosed, the default: Envoy then applies its
// failure_mode_deny), OK without counting (FailOpen), or a count in this
// process's memory (FailLocal). FailShare is an error, as FailClosed: the
// descriptors' windows keep no fleet to take a share of.
func WithStoreFailure(f sluice.StoreFailure) Option { return func(o *options) { o.failure = f } }

// WithLocalMaxKeys bounds the windows FailLocal counts in this process's
// memory while the store fails to n keys; the default, and n < 1, is no
// bound.
func WithLocalMaxKeys(n int) Option { return func(o *options) { o.localMaxKeys = n } }

// WithClock sets the clock of the windows; the default is time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithRegistry registers the service's stats, envoyproxy/ratelimit's
// per-descriptor counters, on reg. The default counts nothing.
func WithRegistry(reg prometheus.Registerer) Option {
	return func(o *options) { o.metrics = newMetrics(reg) }
}

// Service is Envoy's rate limit service. It is safe for simultaneous use;
// Swap replaces its configuration while it serves.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts  options
	state atomic.Pointer[state]
	// counters count the windows of rate_limit descriptors in the store;
	// localCounters in this process's memory, for FailLocal.
	counters, localCounters *counters
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// state is one configuration: the domains, the limiters, the units worked
// out from the limiters' policies, and the local cache of windows over
// their limit.
type state struct {
	domains *Domains
	lookup  Lookup
	units   sync.Map // *sluice.Limiter → unit
	over    *overLimitCache
}

// New returns a service that answers with d and decides descriptors that
// name a limiter with the limiters of lookup. A nil d has no domains:
// every descriptor is then OK without a limit.
func New(d *Domains, lookup Lookup, opts ...Option) *Service {
	s := &Service{opts: options{timeout: sluice.DefaultStoreTimeout, now: time.Now}}
	for _, o := range opts {
		o(&s.opts)
	}
	if s.opts.logger == nil {
		s.opts.logger = slog.New(slog.DiscardHandler)
	}
	if s.opts.outage == nil {
		s.opts.outage = outage.New(s.opts.logger, s.opts.now)
	}
	s.localCounters = newCounters(memstore.New(memstore.WithMaxKeys(s.opts.localMaxKeys)))
	s.counters = s.localCounters
	if s.opts.store != nil {
		s.counters = newCounters(s.opts.store)
	}
	s.Swap(d, lookup)
	return s
}

// Swap replaces the domains and the lookup at once, for a config reload;
// calls in flight finish on the old ones. The local cache of windows over
// their limit carries over while its size stays the same.
func (s *Service) Swap(d *Domains, lookup Lookup) {
	if lookup == nil {
		lookup = func(string) (*sluice.Limiter, bool) { return nil, false }
	}
	next := &state{domains: d, lookup: lookup}
	size := d.Settings().LocalCacheSizeInBytes
	if old := s.state.Load(); old != nil && old.over != nil && old.over.size == size {
		next.over = old.over
	} else {
		next.over = newOverLimitCache(size)
	}
	s.state.Store(next)
}

// Settings returns the settings the domains were loaded with; those of a
// nil *Domains are envoyproxy/ratelimit's defaults.
func (d *Domains) Settings() Settings {
	if d == nil {
		return DefaultSettings()
	}
	return d.settings
}

// Register registers the service on g. The service decodes its requests
// itself, so that a malformed one is InvalidArgument, where gRPC's codec
// makes it Internal: interceptors see a rawRequest.
func (s *Service) Register(g *grpc.Server) { g.RegisterService(&serviceDesc, s) }

// rawRequest is a RateLimitRequest as it came, decoded but not yet
// judged. It is a protobuf message of the legacy kind that decodes itself
// (its Unmarshal method), which gRPC's codec hands the bytes to: it keeps
// the decoding error for the handler to answer with, rather than fail.
type rawRequest struct {
	req rlsv3.RateLimitRequest
	err error
}

func (r *rawRequest) Reset()         { r.req, r.err = rlsv3.RateLimitRequest{}, nil }
func (r *rawRequest) String() string { return "envoyrls.rawRequest" }
func (r *rawRequest) ProtoMessage()  {}

// Unmarshal decodes b, which the codec reuses, at once: a copy of b kept
// for later would cost an allocation and a copy a call.
func (r *rawRequest) Unmarshal(b []byte) error {
	r.err = proto.Unmarshal(b, &r.req)
	return nil
}

// serviceDesc is rlsv3's, with a handler that decodes the request itself.
var serviceDesc = func() grpc.ServiceDesc {
	d := rlsv3.RateLimitService_ServiceDesc
	d.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimit}}
	return d
}()

func shouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := new(rawRequest)
	if err := dec(req); err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, req any) (any, error) {
		in := req.(*rawRequest)
		if in.err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "envoyrls: malformed RateLimitRequest: %v", in.err)
		}
		return srv.(*Service).ShouldRateLimit(ctx, &in.req)
	}
	if interceptor == nil {
		return handle(ctx, req)
	}
	return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}, handle)
}

// check is one descriptor of a request: its rule, what it asks and what
// it got.
type check struct {
	desc      *ratelimitv3.RateLimitDescriptor
	match     match
	hits      uint64
	unlimited bool
	key       string // the counter's or the limiter's key
	stats     *ruleStats
	status    *rlsv3.RateLimitResponse_DescriptorStatus
	reset     int64 // the seconds a reset header would show
	shadow    bool  // decided by a sluice limiter in shadow mode
	window    int64 // the seconds of its limit's window, 0 when it has none
}

// ShouldRateLimit answers req as envoyproxy/ratelimit does; docs/envoy.md
// describes the answer. Each descriptor is counted, in order, even when
// another is over its limit. A store failure, or a sluice limiter's
// error, fails the call after the descriptors before it were counted.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.opts.tracer == nil {
		return s.shouldRateLimit(ctx, req)
	}
	ctx, span := s.opts.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		append(tracing.RPC(spanName), tracing.DomainKey.String(req.GetDomain()), tracing.DescriptorsKey.Int(len(req.GetDescriptors())))...))
	resp, err := s.shouldRateLimit(ctx, req)
	if err == nil {
		span.SetAttributes(tracing.OverallCodeKey.String(resp.GetOverallCode().String()))
	}
	tracing.EndRPC(span, err)
	return resp, err
}

// spanName is the name of ShouldRateLimit's spans, its gRPC method.
var spanName = strings.TrimPrefix(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, "/")

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	switch {
	case req.GetDomain() == "":
		// envoyproxy/ratelimit answers these with a plain error, which
		// gRPC sends as Unknown.
		return nil, status.Error(codes.Unknown, "rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "envoyrls: at most %d descriptors per request, got %d", MaxDescriptors, len(req.GetDescriptors()))
	}
	st := s.state.Load()
	set := st.domains.Settings()
	// A request seldom has more than a few descriptors: their checks
	// live on the stack.
	var buf [4]check
	checks, err := s.plan(st, req, buf[:0])
	if err != nil {
		s.opts.logger.DebugContext(ctx, "envoyrls: invalid request", "domain", req.GetDomain(), "err", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.decide(ctx, st, req.GetDomain(), checks); err != nil {
		return nil, err
	}

	// One allocation for the response and, of one descriptor, its list.
	m := &struct {
		resp rlsv3.RateLimitResponse
		one  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	}{}
	resp := &m.resp
	if len(checks) == 1 {
		resp.Statuses = m.one[:]
	} else {
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))
	}
	least := uint32(math.MaxUint32)
	headers := -1 // the descriptor the headers describe
	var failed, quotaFailed, quotas int
	var passed []int
	for i, c := range checks {
		if set.ResponseHeaders && c.status.GetCurrentLimit() != nil && c.status.GetLimitRemaining() < least {
			headers, least = i, c.status.GetLimitRemaining()
		}
		if c.unlimited {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		resp.Statuses[i] = c.status
		quota := set.QuotaMode || (c.match.rule != nil && c.match.rule.quota)
		switch {
		case c.status.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT:
			passed = append(passed, i)
		case quota:
			quotaFailed++
		default:
			failed++
			headers, least = i, 0
		}
		if quota {
			quotas++
		}
	}
	// Over the limit when a rate limit is, or when every quota is.
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if failed > 0 || (quotas > 0 && quotas == quotaFailed) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if set.ResponseHeaders && headers >= 0 {
		c := checks[headers]
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: set.LimitHeader, Value: strconv.FormatUint(uint64(c.status.GetCurrentLimit().GetRequestsPerUnit()), 10)},
			{Key: set.RemainingHeader, Value: strconv.FormatUint(uint64(c.status.GetLimitRemaining()), 10)},
			{Key: set.ResetHeader, Value: strconv.FormatInt(c.reset, 10)},
		}
	}
	if set.Draft11Headers {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, draft11Headers(checks)...)
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && set.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		if s.opts.metrics != nil {
			s.opts.metrics.globalShadow.Inc()
		}
	}
	if set.ResponseDynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, checks, passed)
	}
	return resp, nil
}

// draft11Headers returns the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11 for checks: a member for each
// descriptor with a limit, but those in shadow mode (shadow_mode, or a
// sluice limiter's shadow: true), which are not in force. A member is
// named by its limit's name, or by the descriptor's position ("0", "1",
// ...) when the limit has none or one that is not printable ASCII; its w
// is the window of its limit in seconds (a unit times its
// unit_multiplier, or a sluice limiter's Window rounded up), and its t the
// seconds until its window resets, as DurationUntilReset rounded up.
// It returns nil when no descriptor has a member.
func draft11Headers(checks []check) []*corev3.HeaderValue {
	var policy, limit []byte
	n := 0
	for i := range checks {
		c := &checks[i]
		l := c.status.GetCurrentLimit()
		if c.unlimited || l == nil || c.shadow || (c.match.rule != nil && c.match.rule.shadow) {
			continue
		}
		name, ok := rlheader.Quote(l.GetName())
		if !ok || l.GetName() == "" {
			name = `"` + strconv.Itoa(i) + `"`
		}
		if n++; n > 1 {
			policy, limit = append(policy, ", "...), append(limit, ", "...)
		}
		policy = rlheader.AppendPolicy(policy, name, int64(l.GetRequestsPerUnit()), c.window)
		limit = rlheader.AppendRateLimit(limit, name, int64(c.status.GetLimitRemaining()), c.reset)
	}
	if n == 0 {
		return nil
	}
	return []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: string(policy)}, {Key: "RateLimit", Value: string(limit)}}
}

// plan matches every descriptor of req and works out its hits, before
// anything is counted: an unlimited rule's, and the rules that others
// replace, are left out. The checks are appended to buf.
func (s *Service) plan(st *state, req *rlsv3.RateLimitRequest, buf []check) ([]check, error) {
	root := st.domains.root(req.GetDomain())
	checks := append(buf[:0], make([]check, len(req.GetDescriptors()))...)
	replaced := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		c := check{desc: d, hits: max(uint64(req.GetHitsAddend()), 1)}
		if h := d.GetHitsAddend(); h != nil {
			c.hits = h.GetValue() // 0 checks without counting
		}
		if c.hits > math.MaxInt64 {
			return nil, fmt.Errorf("envoyrls: descriptor %d: hits_addend must be at most %d, got %d", i, int64(math.MaxInt64), c.hits)
		}
		if m := d.GetLimit().GetUnitMultiplier(); m != nil && m.GetValue() == 0 {
			// Envoy's API asks for more than 0; 0 would count per unit.
			return nil, fmt.Errorf("envoyrls: descriptor %d: the limit override's unit_multiplier must be at least 1, got 0", i)
		}
		if root != nil {
			c.match = lookup(req.GetDomain(), root, d, st.domains.Settings().AllowRequestLimits)
		}
		if c.match.ceiled && s.opts.metrics != nil {
			// Only a configured domain has a ceiling: the label's values are the config's.
			s.opts.metrics.ceiled.WithLabelValues(req.GetDomain()).Inc()
		}
		if r := c.match.rule; r != nil {
			if r.limiter == "" && !r.unlimited && unitSeconds(r.unit) == 0 {
				return nil, fmt.Errorf("envoyrls: descriptor %d: the limit override has no unit, or one Envoy does not define (%d)", i, r.unit)
			}
			if r.limiter == "" && r.window() > maxWindow {
				return nil, fmt.Errorf("envoyrls: descriptor %d: the limit override's unit_multiplier %d makes a window of %d s, more than the most, %d s",
					i, r.multiplier, r.window(), int64(maxWindow))
			}
			for _, name := range r.replaces {
				replaced[name] = true
			}
			if r.unlimited {
				c.unlimited, c.match = true, match{}
			}
		}
		checks[i] = c
	}
	for i := range checks {
		if r := checks[i].match.rule; r != nil && r.name != "" && replaced[r.name] {
			checks[i].match = match{}
		}
	}
	return checks, nil
}

// root returns the root of domain, or nil.
func (d *Domains) root(domain string) *node {
	if d == nil {
		return nil
	}
	return d.roots[domain]
}

// decide counts every check with a rule and sets every check's status, as
// envoyproxy/ratelimit's Redis cache does.
func (s *Service) decide(ctx context.Context, st *state, domain string, checks []check) error {
	set := st.domains.Settings()
	now := s.opts.now().Unix()
	for i := range checks {
		c := &checks[i]
		r := c.match.rule
		switch {
		case r == nil:
			c.status = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		case r.limiter != "":
			c.key = cut(descriptorKey("", domain, c.desc.GetEntries(), nil, 0))
		default:
			// The window's length is part of the key: a limit override may
			// count the same descriptor per minute in one request and per
			// hour in another, in windows that must not mix. Windows of the
			// same length (a minute, 60 seconds) are the same windows.
			c.key = cut(descriptorKey(set.CacheKeyPrefix, domain, c.desc.GetEntries(), c.match.share, r.window()))
		}
		c.stats = s.opts.metrics.of(domain, c.match.statKey)
		c.stats.add(totalHits, c.hits)
	}
	// Windows already over their limit in the local cache are not
	// counted again; with StopCacheKeyIncrementWhenOverlimit, they stop
	// the count of every other window of the request.
	var buf [2 * 8]bool // a request seldom has more than 8 descriptors
	flags := buf[:]
	if len(checks) > len(buf)/2 {
		flags = make([]bool, 2*len(checks))
	}
	localOver, goesOver := flags[:len(checks)], flags[len(checks):2*len(checks)]
	anyLocal := false
	for i, c := range checks {
		if c.isCounter() && st.over != nil && st.over.has(c.windowKey(now), now) {
			localOver[i], anyLocal = true, true
		}
	}
	// With StopCacheKeyIncrementWhenOverlimit and nothing in the local
	// cache, the windows are read first: when some would go over, only
	// those are counted.
	anyOver := false
	if set.StopCacheKeyIncrementWhenOverlimit && !anyLocal {
		for i, c := range checks {
			if !c.isCounter() {
				continue
			}
			count, err := s.count(ctx, c, now, 0)
			if err != nil {
				return s.storeError(ctx, domain, i, err)
			}
			if count+c.hits > uint64(c.match.rule.requestsPerUnit) {
				goesOver[i], anyOver = true, true
			}
		}
	}
	for i := range checks {
		c := &checks[i]
		switch {
		case c.match.rule == nil:
			continue
		case c.match.rule.limiter != "":
			if err := s.limit(ctx, st, c); err != nil {
				return err
			}
			continue
		case localOver[i]:
			c.stats.add(overLimit, c.hits)
			c.stats.add(overLimitLocal, c.hits)
			c.counterStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 0, now)
			if c.match.rule.shadow {
				c.status.Code = rlsv3.RateLimitResponse_OK
				c.stats.add(shadowMode, c.hits)
			}
			continue
		}
		n := c.hits
		if set.StopCacheKeyIncrementWhenOverlimit && (anyLocal || anyOver && !goesOver[i]) {
			n = 0
		}
		after, err := s.count(ctx, *c, now, n)
		if err != nil {
			return s.storeError(ctx, domain, i, err)
		}
		s.counted(st, c, after, now, set.NearLimitRatio)
	}
	return nil
}

// windowKey is the key of c's window at now, for the local cache: a
// window over its limit says nothing of the next one.
func (c check) windowKey(now int64) string {
	return c.key + "@" + strconv.FormatInt(windowStart(now, c.match.rule.window()), 10)
}

// domain names c's domain for the outage log: the first part of its
// rule's stat key.
func (c check) domain() string {
	d, _, _ := strings.Cut(c.match.rule.statKey, ".")
	return "domain " + d
}

// isCounter reports whether c is counted in a window.
func (c check) isCounter() bool { return c.match.rule != nil && c.match.rule.limiter == "" }

// count adds n hits to c's window at now, on the store or, when it fails
// and so configured, in memory, and returns the count after.
func (s *Service) count(ctx context.Context, c check, now int64, n uint64) (uint64, error) {
	length := c.match.rule.window()
	start := windowStart(now, length)
	deadline, callers := s.deadline(ctx)
	after, err := s.counters.add(ctx, c.key, start, length, now, n, deadline)
	if err != nil && callers && !time.Now().Before(deadline) {
		// The call's own deadline ended the store call: ctx's timer,
		// set for the same instant, may not have fired yet.
		<-ctx.Done()
	}
	if err == nil || ctx.Err() != nil {
		return after, err
	}
	switch s.opts.failure {
	case sluice.FailOpen:
		s.opts.outage.Failure(c.domain(), err)
		return n, nil
	case sluice.FailLocal:
		s.opts.outage.Failure(c.domain(), err)
		return s.localCounters.add(ctx, c.key, start, length, now, n, deadline)
	}
	return after, err
}

// deadline is when a store call for ctx must end: the store timeout from
// now, or the caller's own deadline when that is sooner (Envoy gives each
// call one of 20 ms by default), which callers reports.
func (s *Service) deadline(ctx context.Context) (deadline time.Time, callers bool) {
	d := time.Now().Add(s.opts.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd, true
	}
	return d, false
}

// storeError is the call's status when the store failed on descriptor i:
// the call's own end, or Unavailable, the store's timeout included.
func (s *Service) storeError(ctx context.Context, domain string, i int, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if s.opts.failure == sluice.FailClosed || s.opts.failure == sluice.FailShare {
		s.opts.outage.Failure("domain "+domain, err)
	}
	return status.Errorf(codes.Unavailable, "envoyrls: descriptor %d: %v", i, err)
}

// counted sets c's status from its window's count after its hits, and
// counts the stats, as envoyproxy/ratelimit's base limiter does: the
// count before is after less the hits asked for, even when fewer were
// added, in unsigned arithmetic.
func (s *Service) counted(st *state, c *check, after uint64, now int64, ratio float32) {
	r := c.match.rule
	before := after - c.hits
	limit := uint64(r.requestsPerUnit)
	near := uint64(math.Floor(float64(float32(limit) * ratio)))
	if after > limit {
		c.counterStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 0, now)
		if before >= limit {
			c.stats.add(overLimit, c.hits)
		} else {
			c.stats.add(overLimit, after-limit)
			c.stats.add(nearLimit, limit-max(near, before))
		}
		st.over.set(c.windowKey(now), now, r.window())
		if r.shadow {
			c.status.Code = rlsv3.RateLimitResponse_OK
			if before >= limit {
				c.stats.add(shadowMode, c.hits)
			} else {
				c.stats.add(shadowMode, after-limit)
			}
		}
		return
	}
	c.counterStatus(rlsv3.RateLimitResponse_OK, uint32(limit-after), now)
	if after > near {
		if before >= near {
			c.stats.add(nearLimit, c.hits)
		} else {
			c.stats.add(nearLimit, after-near)
		}
	}
	c.stats.add(withinLimit, c.hits)
}

// counterStatus sets the status of a counted descriptor.
func (c *check) counterStatus(code rlsv3.RateLimitResponse_Code, remaining uint32, now int64) {
	r := c.match.rule
	c.reset, c.window = untilReset(now, r.window()), r.window()
	// One allocation for the status and the two messages it points to.
	m := &struct {
		status rlsv3.RateLimitResponse_DescriptorStatus
		limit  rlsv3.RateLimitResponse_RateLimit
		reset  durationpb.Duration
	}{
		limit: rlsv3.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: r.requestsPerUnit, Unit: r.unit},
		reset: durationpb.Duration{Seconds: c.reset},
	}
	if r.multiplier > 1 {
		// Left out at 1, as envoyproxy/ratelimit, which has no multiplier,
		// answers.
		m.limit.UnitMultiplier = wrapperspb.UInt32(r.multiplier)
	}
	m.status = rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: &m.limit, LimitRemaining: remaining, DurationUntilReset: &m.reset}
	c.status = &m.status
}

// limit decides c with its sluice limiter.
func (s *Service) limit(ctx context.Context, st *state, c *check) error {
	name := c.match.rule.limiter
	l, ok := st.lookup(name)
	if !ok {
		return errorStatus("limiter "+name, fmt.Errorf("envoyrls: limiter %q not found", name))
	}
	hits := int64(c.hits)
	var res sluice.Result
	var err error
	switch {
	case c.match.rule.counted && hits > 0:
		var cost sluice.Cost
		cost, err = l.Charge(ctx, c.key, hits)
		res = cost.Result
	case c.match.rule.counted:
		// A check that takes nothing (hits_addend 0, as the request path
		// of a cost charged at the stream's end sends) is over the limit
		// while the key owes: the limit is already exceeded.
		var cost sluice.Cost
		cost, err = l.Debt(ctx, c.key)
		res = cost.Result
		res.Allowed = err == nil && cost.Debt == 0
	default:
		res, err = consume(ctx, l, c.key, hits)
	}
	if s.opts.observer != nil {
		s.opts.observer(Decision{Limiter: name, Key: c.key, Hits: hits, Result: res, Shadow: c.match.rule.shadow, Err: err})
	}
	if err != nil {
		// A store failure is the limiter's listener's to report, once an
		// outage rather than once a call; what else fails is the call's.
		if ctx.Err() == nil && !errors.As(err, new(*sluice.StoreError)) {
			s.opts.logger.WarnContext(ctx, "envoyrls: descriptor not decided", "limiter", name, "key", c.key, "err", err)
		}
		return errorStatus("limiter "+name, err)
	}
	u := st.unit(l)
	d := sluiceUntilReset(res)
	c.reset = policy.CeilDiv(int64(d), int64(time.Second))
	c.window = policy.CeilDiv(int64(l.Policy().Window()), int64(time.Second))
	c.status = &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clamp32(res.Limit), Unit: u.unit},
		LimitRemaining:     clamp32(res.Remaining),
		DurationUntilReset: durationpb.New(d),
	}
	if u.multiplier > 1 {
		c.status.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(u.multiplier)
	}
	// A limiter in shadow mode (shadow: true) lets through what its policy
	// refused: that is a descriptor's shadow mode.
	allowed := res.Allowed && !res.ShadowRejected
	c.shadow = res.Shadow
	c.stats.add(withinLimit, uint64(hits)*boolToUint(allowed))
	switch {
	case allowed:
	case c.match.rule.shadow || res.ShadowRejected:
		c.stats.add(overLimit, c.hits)
		c.stats.add(shadowMode, c.hits)
		s.opts.logger.InfoContext(ctx, "envoyrls: over limit in shadow mode", "limiter", name, "key", c.key, "hits", hits)
	default:
		c.stats.add(overLimit, c.hits)
		c.status.Code, c.status.LimitRemaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
	}
	return nil
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// consume takes hits tokens for key. With hits 0 it takes nothing and the
// result is the key's state now, allowed: no tokens always fit.
func consume(ctx context.Context, l *sluice.Limiter, key string, hits int64) (sluice.Result, error) {
	if hits == 0 {
		res, err := now(ctx, l, key)
		res.Allowed = err == nil
		return res, err
	}
	res, err := l.AllowN(ctx, key, hits)
	var ae *sluice.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "tokens" {
		return res, err
	}
	// More than the limit at once, which some policies refuse as an
	// argument: such a request can never pass, so it is over the limit
	// (as in envoyproxy/ratelimit), not an error Envoy might fail open on.
	res, err = now(ctx, l, key)
	res.Allowed, res.RetryAfter = false, sluice.Never
	return res, err
}

// now returns key's state without taking anything: Peek of one token,
// whose Remaining, when it would pass, counts that token as taken.
func now(ctx context.Context, l *sluice.Limiter, key string) (sluice.Result, error) {
	res, err := l.Peek(ctx, key)
	if res.Allowed && res.Remaining < math.MaxInt64 {
		res.Remaining++
	}
	return res, err
}

// sluiceUntilReset is a limiter descriptor's duration_until_reset: when
// the request passed, the time until the key's limit is whole again (the
// end of a fixed window, a full bucket); when it was rejected, the time
// until it could pass, or the former if it never can.
func sluiceUntilReset(r sluice.Result) time.Duration {
	if r.Allowed || r.RetryAfter == sluice.Never {
		return r.ResetAfter
	}
	return r.RetryAfter
}

// dynamicMetadata is the response's dynamic metadata, as
// envoyproxy/ratelimit sends it with RESPONSE_DYNAMIC_METADATA: the
// domain, the descriptors, the hits and the metadata of the descriptors
// that passed, the first one's value winning where two give a key.
func dynamicMetadata(req *rlsv3.RateLimitRequest, checks []check, passed []int) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if d.GetLimit() != nil {
			f["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, i := range passed {
		if md := checks[i].match.metadata; md != nil && checks[i].match.rule != nil {
			mergeStruct(merged, md)
		}
	}
	if len(merged.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field dst has keeps its value,
// except that two structs merge.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.GetFields()[k]
		switch {
		case !ok:
			dst.Fields[k] = v
		case cur.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(cur.GetStructValue(), v.GetStructValue())
		}
	}
}

// errorStatus turns a store's or a limiter's error into the call's status.
func errorStatus(what string, err error) error {
	var se *sluice.StoreError
	switch {
	case errors.As(err, &se), errors.Is(err, driver.ErrUnavailable), errors.Is(err, driver.ErrIndeterminate), errors.Is(err, driver.ErrConflict):
		return status.Errorf(codes.Unavailable, "envoyrls: %s: %v", what, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Internal, "envoyrls: %s: %v", what, err)
}

// unit is a limit's window in Envoy's terms: UNKNOWN when the policy has
// no window of a whole number of seconds.
type unit struct {
	unit       rlsv3.RateLimitResponse_RateLimit_Unit
	multiplier uint32
}

// unit returns the unit of l's policy, worked out once per limiter.
func (st *state) unit(l *sluice.Limiter) unit {
	if u, ok := st.units.Load(l); ok {
		return u.(unit)
	}
	u := unitOf(l.Policy())
	st.units.Store(l, u)
	return u
}

// envoyUnits are Envoy's units of fixed length, longest first.
var envoyUnits = []struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// unitOf returns the unit of a policy whose limit is a count per window
// (policyspec's CountsPerWindow), which Envoy's RateLimit unit can
// describe, when its window is a whole number of seconds: the longest unit
// that divides it, and how many of it.
func unitOf(p sluice.Policy) unit {
	if spec, ok := policyspec.Lookup(p.Kind()); !ok || !spec.CountsPerWindow {
		return unit{}
	}
	d := p.Window()
	for _, u := range envoyUnits {
		if n := d / u.d; d%u.d == 0 && n > 0 && n <= math.MaxUint32 {
			return unit{unit: u.u, multiplier: uint32(n)}
		}
	}
	return unit{}
}

// clamp32 fits a count into Envoy's uint32 fields.
func clamp32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// descriptorKey returns the key of a descriptor of domain: prefix, then
// the domain and the entries, escaped, as "domain|key=value|key=value",
// then "|unit" unless unit is 0. An entry whose share is not ""
// (share_threshold) has that pattern for its value.
func descriptorKey(prefix, domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, share []string, unit int64) string {
	var b strings.Builder
	n := len(prefix) + len(domain) + 21 // the unit's '|' and up to 20 digits
	for _, e := range entries {
		n += 2 + len(e.GetKey()) + len(e.GetValue())
	}
	b.Grow(n) // one allocation, unless escapes or a shared value lengthen it
	b.WriteString(prefix)
	b.WriteString(escape(domain))
	for i, e := range entries {
		b.WriteByte('|')
		b.WriteString(escape(e.GetKey()))
		b.WriteByte('=')
		if share != nil && share[i] != "" {
			b.WriteString(escape(share[i]))
		} else {
			b.WriteString(escape(e.GetValue()))
		}
	}
	if unit != 0 {
		b.WriteByte('|')
		var d [20]byte
		b.Write(strconv.AppendInt(d[:0], unit, 10))
	}
	return b.String()
}

// cut returns key as a store keeps it, its driver.ShortKey: key itself
// below MaxKeyLen bytes, else its start and digest.
func cut(key string) string { return driver.ShortKey(key) }

// escaper escapes the separators of the key format, and '%' itself, so
// that two different descriptors never make the same key.
var escaper = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")

func escape(s string) string { return escaper.Replace(s) }
