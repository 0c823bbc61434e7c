// Package envoyrls serves Envoy's global rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, on sluice
// limiters. The envoy: section of a server config file lists domains and
// trees of descriptors, as envoyproxy/ratelimit users write them; each
// descriptor of a request is matched against its domain's tree and decided
// by the limiter of the node it matches, which may have any sluice policy.
// docs/envoy.md describes the config, the matching rules, the key format
// and how results map to Envoy's response.
package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/policy"
)

// Bounds of what a request makes the service do.
const (
	// MaxDescriptors is the most descriptors one request may carry; each
	// costs a decision, so the bound caps the work of one call.
	MaxDescriptors = 64
	// MaxKeyLen is the longest key, in bytes, passed to a limiter. A
	// longer one (a long path, an oversized header) is cut to
	// MaxKeyLen-66 bytes followed by "%#" and the hex SHA-256 of the
	// whole key: rejecting it would let a client skip its limits (Envoy
	// lets requests through on errors by default), and the bound keeps
	// keys within every store's (MySQL's 255 bytes, with room for a
	// prefix). Escaped keys never contain "%#", so a cut key never equals
	// another key.
	MaxKeyLen = 200
)

// Lookup resolves a limiter name, of the file's limiters: section or of
// Domains.Inline, to the live limiter. It must be safe for simultaneous
// use.
type Lookup func(name string) (*sluice.Limiter, bool)

// Decision is one descriptor's decision by a limiter, reported to the
// observer of WithObserver, for instance for Prometheus metrics.
// Descriptors that match no limiter, or an unlimited one, are not decided
// and not reported.
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
	headers  [3]string // limit, remaining, reset; "" leaves one out
}

// Option configures a Service.
type Option func(*options)

// WithObserver makes the service call f with every descriptor's
// decision, synchronously, before it answers. f must be fast and safe for
// simultaneous use. The default is no observer.
func WithObserver(f func(Decision)) Option { return func(o *options) { o.observer = f } }

// WithLogger makes the service log to l: limiter errors (a store failure)
// at Warn, rejections in shadow mode at Info, invalid requests at Debug.
// The default, and a nil l, discard the logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithResponseHeaders names the headers that the service asks Envoy to add
// to the response (response_headers_to_add), with the limit, the
// remaining tokens and the seconds until reset of the most restrictive
// descriptor; an empty name leaves that header out. The defaults are
// envoyproxy/ratelimit's: RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset.
func WithResponseHeaders(limit, remaining, reset string) Option {
	return func(o *options) { o.headers = [3]string{limit, remaining, reset} }
}

// Service is Envoy's rate limit service on sluice limiters. It is safe for
// simultaneous use; Swap replaces its configuration while it serves.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts  options
	state atomic.Pointer[state]
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// state is one configuration: the domains, the limiters, and the units
// worked out from the limiters' policies.
type state struct {
	domains *Domains
	lookup  Lookup
	units   sync.Map // *sluice.Limiter → unit
}

// New returns a service that matches requests against d and decides them
// with the limiters of lookup. A nil d has no domains: every descriptor is
// then OK without a limit.
func New(d *Domains, lookup Lookup, opts ...Option) *Service {
	s := &Service{opts: options{
		logger:  slog.New(slog.DiscardHandler),
		headers: [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"},
	}}
	for _, o := range opts {
		o(&s.opts)
	}
	if s.opts.logger == nil {
		s.opts.logger = slog.New(slog.DiscardHandler)
	}
	s.Swap(d, lookup)
	return s
}

// Swap replaces the domains and the lookup at once, for a config reload;
// calls in flight finish on the old ones.
func (s *Service) Swap(d *Domains, lookup Lookup) {
	if lookup == nil {
		lookup = func(string) (*sluice.Limiter, bool) { return nil, false }
	}
	s.state.Store(&state{domains: d, lookup: lookup})
}

// Register registers the service on g.
func (s *Service) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// step is the plan for one descriptor of a request.
type step struct {
	node *node // nil: matches nothing
	key  string
	hits int64 // 0: check without taking
}

// ShouldRateLimit decides every descriptor of req, in order, each with the
// limiter of the node it matches, and counts each one even when another is
// over the limit, as envoyproxy/ratelimit does. The overall code is
// OVER_LIMIT when any descriptor not in shadow mode is.
//
// An invalid request (no domain, no descriptors, an entry without a key,
// more than MaxDescriptors, negative hits, a limit override) is
// InvalidArgument and counts nothing.
// A store failure of a limiter that fails closed is Unavailable, after
// the descriptors before it were counted; Envoy then applies its
// failure_mode_deny.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := s.state.Load()
	steps, err := st.plan(req)
	if err != nil {
		s.opts.logger.DebugContext(ctx, "envoyrls: invalid request", "domain", req.GetDomain(), "err", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(steps)),
	}
	tightest := -1 // the limited descriptor with the fewest remaining
	for i, sp := range steps {
		ds, err := s.decide(ctx, st, sp)
		if err != nil {
			if ctx.Err() == nil {
				s.opts.logger.WarnContext(ctx, "envoyrls: descriptor not decided",
					"domain", req.GetDomain(), "descriptor", i, "limiter", sp.node.limiter, "key", sp.key, "err", err)
			}
			return nil, errorStatus(fmt.Sprintf("descriptor %d (limiter %s)", i, sp.node.limiter), err)
		}
		resp.Statuses[i] = ds
		if ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if ds.CurrentLimit != nil && !sp.node.shadow &&
			(tightest < 0 || ds.LimitRemaining < resp.Statuses[tightest].LimitRemaining) {
			tightest = i
		}
	}
	if tightest >= 0 {
		resp.ResponseHeadersToAdd = s.headers(resp.Statuses[tightest])
	}
	return resp, nil
}

// plan validates req and matches its descriptors, before anything is
// counted.
func (st *state) plan(req *rlsv3.RateLimitRequest) ([]step, error) {
	switch {
	case req.GetDomain() == "":
		return nil, errors.New("envoyrls: domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, errors.New("envoyrls: descriptors must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return nil, fmt.Errorf("envoyrls: at most %d descriptors per request, got %d", MaxDescriptors, len(req.GetDescriptors()))
	}
	hits := max(int64(req.GetHitsAddend()), 1) // 0 is unset: one hit
	steps := make([]step, len(req.GetDescriptors()))
	entries := make([]entryRef, 0, 8)
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return nil, fmt.Errorf("envoyrls: descriptor %d: entries must not be empty", i)
		}
		if d.GetLimit() != nil {
			// Honouring it would need a policy per request; ignoring it
			// would enforce a limit other than the one Envoy asked for.
			return nil, fmt.Errorf("envoyrls: descriptor %d: limit overrides are not supported", i)
		}
		if d.GetIsNegativeHits() {
			return nil, fmt.Errorf("envoyrls: descriptor %d: negative hits are not supported: a limiter cannot give tokens back", i)
		}
		sp := step{hits: hits}
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt64 {
				return nil, fmt.Errorf("envoyrls: descriptor %d: hits_addend must be at most %d, got %d", i, int64(math.MaxInt64), h.GetValue())
			}
			sp.hits = int64(h.GetValue())
		}
		entries = entries[:0]
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, fmt.Errorf("envoyrls: descriptor %d: entry %d: key must not be empty", i, j)
			}
			entries = append(entries, entryRef{e.GetKey(), e.GetValue()})
		}
		sp.node = st.domains.match(req.GetDomain(), entries)
		if sp.node != nil && sp.node.limiter != "" {
			sp.key = limiterKey(req.GetDomain(), entries)
		}
		steps[i] = sp
	}
	return steps, nil
}

// decide decides one descriptor. Its errors are the limiter's.
func (s *Service) decide(ctx context.Context, st *state, sp step) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	switch {
	case sp.node == nil || (sp.node.limiter == "" && !sp.node.unlimited):
		// As envoyproxy/ratelimit: no limit, nothing remaining.
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	case sp.node.unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, nil
	}
	name := sp.node.limiter
	l, ok := st.lookup(name)
	if !ok {
		return nil, fmt.Errorf("envoyrls: limiter %q not found", name)
	}
	res, err := consume(ctx, l, sp.key, sp.hits)
	if s.opts.observer != nil {
		s.opts.observer(Decision{Limiter: name, Key: sp.key, Hits: sp.hits, Result: res, Shadow: sp.node.shadow, Err: err})
	}
	if err != nil {
		return nil, err
	}
	u := st.unit(l)
	ds := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clamp32(res.Limit), Unit: u.unit},
		LimitRemaining:     clamp32(res.Remaining),
		DurationUntilReset: durationpb.New(untilReset(res)),
	}
	if u.multiplier > 1 {
		ds.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(u.multiplier)
	}
	switch {
	case res.Allowed:
	case sp.node.shadow:
		s.opts.logger.InfoContext(ctx, "envoyrls: over limit in shadow mode", "limiter", name, "key", sp.key, "hits", sp.hits)
	default:
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return ds, nil
}

// consume takes hits tokens for key. With hits 0 it takes nothing and the
// result is the key's state now, allowed: no tokens always fit (as
// envoyproxy/ratelimit, whose check without hits is over the limit only
// when the count already is).
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
	res, err := l.Peek(ctx, key, 1)
	if res.Allowed && res.Remaining < math.MaxInt64 {
		res.Remaining++
	}
	return res, err
}

// untilReset is the descriptor's duration_until_reset: when the request
// passed, the time until the key's limit is whole again (the end of a
// fixed window, a full bucket); when it was rejected, the time until it
// could pass, or the former if it never can.
func untilReset(r sluice.Result) time.Duration {
	if r.Allowed || r.RetryAfter == sluice.Never {
		return r.ResetAfter
	}
	return r.RetryAfter
}

// headers returns the response headers for the descriptor ds.
func (s *Service) headers(ds *rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	d := ds.GetDurationUntilReset().AsDuration()
	secs := policy.CeilDiv(int64(d), int64(time.Second))
	values := [3]string{
		strconv.FormatUint(uint64(ds.GetCurrentLimit().GetRequestsPerUnit()), 10),
		strconv.FormatUint(uint64(ds.GetLimitRemaining()), 10),
		strconv.FormatInt(secs, 10),
	}
	var hs []*corev3.HeaderValue
	for i, name := range s.opts.headers {
		if name != "" {
			hs = append(hs, &corev3.HeaderValue{Key: name, Value: values[i]})
		}
	}
	return hs
}

// errorStatus turns a limiter's error into the call's status.
func errorStatus(what string, err error) error {
	var se *sluice.StoreError
	switch {
	case errors.As(err, &se):
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

// windows are the policies whose limit is a count per interval, which is
// what Envoy's requests_per_unit means.
// windowKinds are the policies whose limit is a count per interval, which
// Envoy's RateLimit unit can describe.
var windowKinds = []string{"fixed_window(", "sliding_window(", "sliding_log("}

// unitOf returns the unit of a window policy whose interval is a whole
// number of seconds: the longest unit that divides it, and how many of
// it.
func unitOf(p sluice.Policy) unit {
	s := p.String()
	if !slices.ContainsFunc(windowKinds, func(k string) bool { return strings.HasPrefix(s, k) }) {
		return unit{}
	}
	d := sluice.Window(p)
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

// limiterKey returns the key of a descriptor of domain: the domain and
// the entries, escaped, as "domain|key=value|key=value", cut to MaxKeyLen.
func limiterKey(domain string, entries []entryRef) string {
	var b strings.Builder
	b.WriteString(escape(domain))
	for _, e := range entries {
		b.WriteByte('|')
		b.WriteString(escape(e.key))
		b.WriteByte('=')
		b.WriteString(escape(e.value))
	}
	key := b.String()
	if len(key) <= MaxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return key[:MaxKeyLen-2-2*len(sum)] + "%#" + hex.EncodeToString(sum[:])
}

// escaper escapes the separators of the key format, and '%' itself, so
// that two different descriptors never make the same key.
var escaper = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")

func escape(s string) string { return escaper.Replace(s) }
