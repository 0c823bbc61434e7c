// Package grpclimit applies sluice limiters to a gRPC server: the unary
// and stream interceptors of an Interceptor let a call through only when
// every one of its Limits allows it, and answer the others with
// RESOURCE_EXHAUSTED and the time to retry, in the status details
// (google.rpc.RetryInfo) and in trailer metadata that gRPC clients read.
//
// It is the gRPC twin of httplimit's Middleware: the same limits, keys
// (a client's address is keyed as httplimit keys it), costs and failure
// handling. docs/grpc.md describes it.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/limitcore"
	"github.com/sluicehq/sluice/internal/policy"
)

// Limit is one named limit of an Interceptor.
type Limit struct {
	// Name names the limit in rejections (the status message and its
	// QuotaFailure) and in errors. It is required, unique within an
	// Interceptor, and printable ASCII.
	Name string
	// Limiter decides. Required.
	Limiter *sluice.Limiter
	// Key returns the key a call is limited under. Required.
	Key KeyFunc
	// Cost returns the tokens a call takes; nil: 1 each.
	Cost CostFunc
	// Match reports whether the limit applies to calls of a full method
	// name ("/package.Service/Method"); nil applies it to every call.
	Match func(method string) bool
	// CountIf, when set, makes the limit count a call only when the code
	// of its answer satisfies it (Codes(codes.Unauthenticated) counts
	// failed logins alone): the call is checked before the handler
	// without taking anything (PeekN), refused if the limit would refuse
	// it now, and its cost is taken when the handler returns, if
	// CountIf(code) is true; the code of a handler's nil error is OK. The
	// cost is taken even when the call was cancelled, so that hanging up
	// does not escape the count; a limiter's error then is logged. nil
	// counts every call before the handler.
	CountIf func(code codes.Code) bool
	// Settle, when positive, makes the call's cost an estimate: it is
	// held for Settle (sluice.Limiter.Hold) and settled when the handler
	// returns, with the cost the handler reported with Charge (the
	// estimate when it reported none), as httplimit.Limit's Settle. The
	// limiter's policy must be able to owe tokens.
	Settle time.Duration
}

// chargeKey is the context key of a call's limitcore.CostReport.
type chargeKey struct{}

// Charge reports that the call of ctx cost n ≥ 0 tokens more, for the
// limits with Settle, as httplimit.Charge: the calls add up, and the total
// settles the call's hold when its handler returns. Outside such an
// interceptor it does nothing.
func Charge(ctx context.Context, n int64) {
	if rep, _ := ctx.Value(chargeKey{}).(*limitcore.CostReport); rep != nil {
		rep.Add(n)
	}
}

// Codes returns a CountIf that counts the calls answered with one of the
// given codes.
func Codes(cs ...codes.Code) func(code codes.Code) bool {
	set := append([]codes.Code(nil), cs...)
	return func(code codes.Code) bool {
		for _, c := range set {
			if c == code {
				return true
			}
		}
		return false
	}
}

// Call is what key and cost functions know of a call besides its
// context, which holds its peer and incoming metadata.
type Call struct {
	// Method is the full method name: "/package.Service/Method".
	Method string
	// Request is the request message of a unary call. It is nil for a
	// stream, which is limited once, when it opens, before any message is
	// read.
	Request any
}

// CostFunc returns the tokens a call takes from a Limit, for calls that
// weigh differently (a batch of 10 items costs 10). The cost must be
// positive: anything else, or an error, makes the Interceptor answer
// INTERNAL.
type CostFunc func(ctx context.Context, c Call) (int64, error)

// ConfigError reports an argument or option out of its bounds.
type ConfigError struct {
	Field string // e.g. "limits[1].Name", "WithIPv6Prefix"
	Value string // the value given
	Want  string // the bound it broke
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("grpclimit: %s = %s: %s", e.Field, e.Value, e.Want)
}

// Interceptor limits the calls to a gRPC server by one or more Limits:
// install its Unary and Stream methods as the server's interceptors. Make
// one with New; it is safe for simultaneous use by multiple goroutines.
type Interceptor struct {
	limits []Limit
	o      options
}

// New returns an interceptor that lets a call through only when every
// one of limits that matches it allows it. WithErrorCode and WithLogger
// apply. It returns a *ConfigError for a limit without a name, limiter or
// key function, for two limits of the same name, and for a bad option.
func New(limits []Limit, opts ...Option) (*Interceptor, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if p := limitcore.CheckLimits(len(limits), func(i int) (string, *sluice.Limiter, bool) {
		return limits[i].Name, limits[i].Limiter, limits[i].Key != nil
	}); p != nil {
		return nil, &ConfigError{Field: p.Field, Value: p.Value, Want: p.Want}
	}
	for i, l := range limits {
		if p := limitcore.CheckSettle(i, l.Settle, l.Limiter); p != nil {
			return nil, &ConfigError{Field: p.Field, Value: p.Value, Want: p.Want}
		}
	}
	return &Interceptor{limits: append([]Limit(nil), limits...), o: o}, nil
}

// Unary is a grpc.UnaryServerInterceptor: it calls handler only when the
// call passes every limit (see Stream for how they are asked).
func (in *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	trailer := func(md metadata.MD) {
		// It fails only outside a server's call, where there is no
		// trailer to set.
		_ = grpc.SetTrailer(ctx, md)
	}
	var buf [4]limitcore.Decision // on the stack for up to 4 limits
	c := Call{Method: info.FullMethod, Request: req}
	ds, err := in.limit(ctx, c, trailer, buf[:0])
	if err != nil {
		return nil, err
	}
	release := limitcore.Hold(ctx, ds)
	defer release()
	if limitcore.Holding(ds) {
		rep := new(limitcore.CostReport)
		defer in.settleHolds(ctx, ds, rep)
		ctx = context.WithValue(ctx, chargeKey{}, rep)
	}
	if !limitcore.Deferred(ds) {
		return handler(ctx, req)
	}
	resp, err := handler(ctx, req)
	in.countOutcome(ctx, c, ds, status.Code(err))
	return resp, err
}

// settleHolds settles the holds of ds with the cost the handler reported
// in rep, or at their estimates, on a context that the client's going
// away does not end.
func (in *Interceptor) settleHolds(ctx context.Context, ds []limitcore.Decision, rep *limitcore.CostReport) {
	limitcore.SettleHolds(ctx, ds, rep, func(ctx context.Context, i int, key string, n int64, err error) {
		in.o.logger.ErrorContext(ctx, "grpclimit: cost not settled", "limit", in.limits[i].Name, "key", key, "cost", n, "err", err)
	})
}

// chargedStream is a stream whose context carries its CostReport.
type chargedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s chargedStream) Context() context.Context { return s.ctx }

// Stream is a grpc.StreamServerInterceptor: it calls handler only when
// the stream passes every limit. A stream is one call, limited when it
// opens; its messages are not.
//
// For each limit that matches the call it computes the key and the cost,
// then asks the limiters. With one limit that is a single AllowN. With
// several it first peeks at every limiter, and rejects without taking
// anything when one of them would; only then does it take the call from
// each in turn. A call that a concurrent one overtook between the peek
// and the take can still be rejected by a later limit after the earlier
// ones took it: limits shared by several processes cannot be taken from
// atomically together.
//
// A limit with CountIf is only peeked at before handler, and takes the
// call's cost once handler returns, by its code (see Limit.CountIf). A
// limiter in shadow mode (sluice.WithShadow) lets every call through.
//
// A rejected call gets RESOURCE_EXHAUSTED (see docs/grpc.md for its
// details and trailer). A key function's ErrNoKey answers
// INVALID_ARGUMENT; any other error or panic of a key, cost or match
// function, or a cost that is not positive, answers INTERNAL; an error of
// a limiter (a store that failed, with sluice.FailClosed) answers
// WithErrorCode's code, UNAVAILABLE by default. Those are logged, and
// their messages do not say why. A panic in handler is not recovered.
//
// A limit whose policy holds slots (sluice.Concurrency) bounds the calls
// in flight: a call takes one slot, whatever its cost, and holds it until
// handler returns, a panic included, renewing it every third of its TTL
// meanwhile, so that a long stream holds its slot for as long as it
// lasts. When the call's context ends (the client went away, or its
// deadline passed) the renewals stop: a handler that never returns holds
// its slot at most one TTL more.
func (in *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	var buf [4]limitcore.Decision // on the stack for up to 4 limits
	c := Call{Method: info.FullMethod}
	ds, err := in.limit(ss.Context(), c, ss.SetTrailer, buf[:0])
	if err != nil {
		return err
	}
	release := limitcore.Hold(ss.Context(), ds)
	defer release()
	if limitcore.Holding(ds) {
		rep := new(limitcore.CostReport)
		defer in.settleHolds(ss.Context(), ds, rep)
		ss = chargedStream{ss, context.WithValue(ss.Context(), chargeKey{}, rep)}
	}
	if !limitcore.Deferred(ds) {
		return handler(srv, ss)
	}
	err = handler(srv, ss)
	in.countOutcome(ss.Context(), c, ds, status.Code(err))
	return err
}

// countOutcome takes the cost of the limits with CountIf that count code, the
// code of c's answer: a limiter's error can only be logged.
func (in *Interceptor) countOutcome(ctx context.Context, c Call, ds []limitcore.Decision, code codes.Code) {
	d, err := limitcore.Settle(ctx, ds, func(i int) bool { return in.limits[i].CountIf(code) })
	if err != nil {
		in.o.logger.ErrorContext(ctx, "grpclimit: call not counted", "limit", in.limits[d.Index].Name, "code", code.String(),
			"method", c.Method, "err", err)
	}
}

// limit decides c, appending its decisions to ds, which it returns: a
// nil error lets it through, its decisions holding the slots to release
// (limitcore.Hold) and the costs to settle; otherwise it returns the
// status error to answer, having set its trailer with setTrailer.
func (in *Interceptor) limit(ctx context.Context, c Call, setTrailer func(metadata.MD), ds []limitcore.Decision) ([]limitcore.Decision, error) {
	for i := range in.limits {
		l := &in.limits[i]
		match, key, cost, err := l.prepare(ctx, c)
		if err != nil {
			code, msg := codes.Internal, "grpclimit: the call could not be limited"
			if errors.Is(err, ErrNoKey) {
				code, msg = codes.InvalidArgument, "grpclimit: the call does not carry the key it is limited by"
			}
			return nil, in.fail(ctx, c, code, msg, err)
		}
		if match {
			ds = append(ds, limitcore.Decision{Index: i, Limiter: l.Limiter, Key: key, Cost: cost, Defer: l.CountIf != nil, HoldTTL: int64(l.Settle)})
		}
	}
	switch d, err := limitcore.Decide(ctx, ds); {
	case err != nil:
		return nil, in.limiterFailed(ctx, c, &in.limits[d.Index], err)
	case d != nil:
		return nil, in.reject(ds, d, setTrailer)
	}
	return ds, nil
}

// prepare runs l's match, key and cost functions on c, turning a panic in
// them into an error.
func (l *Limit) prepare(ctx context.Context, c Call) (match bool, key string, cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("grpclimit: limit %q: match, key or cost function panicked: %v\n%s", l.Name, v, debug.Stack())
		}
	}()
	if l.Match != nil && !l.Match(c.Method) {
		return false, "", 0, nil
	}
	if key, err = l.Key(ctx, c); err != nil {
		return false, "", 0, fmt.Errorf("grpclimit: limit %q: key: %w", l.Name, err)
	}
	cost = 1
	if l.Cost != nil {
		if cost, err = limitcore.Cost(l.Cost(ctx, c)); err != nil {
			return false, "", 0, fmt.Errorf("grpclimit: limit %q: %w", l.Name, err)
		}
	}
	return true, key, cost, nil
}

// limiterFailed answers a limiter's error: INTERNAL for an argument it
// refused, else the error code.
func (in *Interceptor) limiterFailed(ctx context.Context, c Call, l *Limit, err error) error {
	code, msg := in.o.errorCode, "grpclimit: the rate limiter is unavailable"
	if errors.Is(err, sluice.ErrInvalidArgument) {
		code, msg = codes.Internal, "grpclimit: the call could not be limited"
	}
	return in.fail(ctx, c, code, msg, fmt.Errorf("grpclimit: limit %q: %w", l.Name, err))
}

// fail logs err, at level Error for the server's errors, and returns the
// status of code with msg, which does not say why: the reasons are the
// server's.
func (in *Interceptor) fail(ctx context.Context, c Call, code codes.Code, msg string, err error) error {
	level := slog.LevelError
	if code == codes.InvalidArgument {
		level = slog.LevelInfo
	}
	in.o.logger.Log(ctx, level, "grpclimit: call not limited", "code", code.String(), "method", c.Method, "err", err)
	return status.Error(code, msg)
}

// The trailer metadata of a rejection.
const (
	// pushbackKey is gRPC's server pushback (gRFC A6): a client whose
	// retry policy covers RESOURCE_EXHAUSTED waits this many milliseconds
	// before it retries, and does not retry at all when it is negative.
	pushbackKey = "grpc-retry-pushback-ms"
	// retryAfterKey is HTTP's Retry-After, in whole seconds, for proxies
	// and clients that translate gRPC to HTTP.
	retryAfterKey = "retry-after"
)

// reject returns the RESOURCE_EXHAUSTED status of a call that the limit of
// worst rejected, the rejecting limit with the longest wait (see
// limitcore.Decide), and sets its trailer. When that limit can never pass
// the call, there is no wait to give: the pushback is -1, and neither
// RetryInfo nor retry-after is sent. The QuotaFailure lists every
// rejecting limit.
func (in *Interceptor) reject(ds []limitcore.Decision, worst *limitcore.Decision, setTrailer func(metadata.MD)) error {
	qf := &errdetails.QuotaFailure{}
	for i := range ds {
		d := &ds[i]
		if d.Res.Allowed {
			continue
		}
		desc := "the call is larger than the limit allows"
		if d.Res.RetryAfter != sluice.Never {
			desc = "retry after " + ceilMillis(d.Res.RetryAfter).String()
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: in.limits[d.Index].Name, Description: desc})
	}
	name := in.limits[worst.Index].Name
	details := []protoadapt.MessageV1{qf}
	var msg string
	if wait := worst.Res.RetryAfter; wait == sluice.Never {
		setTrailer(metadata.Pairs(pushbackKey, "-1"))
		msg = fmt.Sprintf("rate limit %q exceeded: the call is larger than the limit allows", name)
	} else {
		setTrailer(metadata.Pairs(
			pushbackKey, strconv.FormatInt(millis(wait), 10),
			retryAfterKey, strconv.FormatInt(limitcore.Seconds(wait), 10),
		))
		details = append([]protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}}, details...)
		msg = fmt.Sprintf("rate limit %q exceeded, retry after %v", name, ceilMillis(wait))
	}
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(details...)
	if err != nil { // cannot happen: the details are well-formed messages
		return status.Error(codes.ResourceExhausted, msg)
	}
	return st.Err()
}

// millis is d in whole milliseconds, rounded up: a client that waits
// that long never comes back early.
func millis(d time.Duration) int64 { return policy.CeilDiv(int64(d), int64(time.Millisecond)) }

// ceilMillis is d rounded up to a whole millisecond, for people to read.
// A d within a millisecond of the largest Duration is kept as it is.
func ceilMillis(d time.Duration) time.Duration {
	ms := millis(d)
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return d
	}
	return time.Duration(ms) * time.Millisecond
}
