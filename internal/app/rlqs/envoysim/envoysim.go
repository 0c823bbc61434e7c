// Package envoysim is a simulated Envoy rate_limit_quota filter, built on
// go-control-plane's generated stubs, for the tests and benchmarks of the
// Rate Limit Quota Service: it matches requests into buckets, reports
// their usage on one stream at its reporting interval (and at once for a
// bucket's first request), applies the assignments it receives as the
// filter documents them, and decides each request locally.
//
// Its behaviours are those docs/envoy.md recommends for a strict bound:
// no_assignment_behavior and expired_assignment_behavior both deny all.
package envoysim

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Envoy is one simulated Envoy with its stream. It is safe for
// simultaneous use.
type Envoy struct {
	domain string
	every  time.Duration
	now    func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	first   bool // the next report is the stream's first
	stream  rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // the stream's end, once done
	urgent  chan struct{}
	quiet   chan struct{} // closed by StopReports
	loop    chan struct{} // closed when reportLoop has returned

	// Counters, under mu.
	allowed, denied, reports, responses int64
}

// bucket is a bucket's state in the filter: its usage since the last
// report and its assignment.
type bucket struct {
	id              *rlqsv3.BucketId
	allowed, denied uint64
	lastReport      time.Time

	assigned bool
	strategy *typev3.RateLimitStrategy
	expires  time.Time // zero: never
	// The token bucket's state: tokens now, and the refill earned toward
	// the next one (token-nanoseconds), at last.
	tokens, maxTokens int64
	credit            time.Duration
	fill              time.Duration
	perFill           int64
	last              time.Time
}

// Dial opens the stream of an Envoy of domain on cc, which reports every
// interval; now is its clock (nil: time.Now). Close ends it.
func Dial(ctx context.Context, cc grpc.ClientConnInterface, domain string, every time.Duration, now func() time.Time) (*Envoy, error) {
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	e := &Envoy{domain: domain, every: every, now: now, buckets: map[string]*bucket{}, first: true,
		stream: stream, cancel: cancel, done: make(chan struct{}), urgent: make(chan struct{}, 1),
		quiet: make(chan struct{}), loop: make(chan struct{})}
	go e.receive()
	go e.reportLoop(ctx)
	return e, nil
}

// Close ends the stream, as an Envoy that goes away; the Envoy keeps
// deciding with the assignments it holds until they expire, as the
// filter does when its stream breaks.
func (e *Envoy) Close() {
	e.cancel()
	<-e.done
}

// StopReports stops the Envoy's reports, its stream staying open, so
// that a load test can count the reports sent once the server has
// answered them. It must be called once.
func (e *Envoy) StopReports() {
	close(e.quiet)
	<-e.loop
}

// Err returns why the stream ended, once it has (nil if by Close).
func (e *Envoy) Err() error {
	select {
	case <-e.done:
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.err
	default:
		return nil
	}
}

// Done is closed when the stream has ended.
func (e *Envoy) Done() <-chan struct{} { return e.done }

// Counts returns the requests allowed and denied so far, and the reports
// sent and responses received on the stream.
func (e *Envoy) Counts() (allowed, denied, reports, responses int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allowed, e.denied, e.reports, e.responses
}

// Request decides one request of the bucket with id, locally, and reports
// whether it was allowed.
func (e *Envoy) Request(id map[string]string) bool {
	now := e.now()
	key := label(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[key]
	if b == nil {
		b = &bucket{id: &rlqsv3.BucketId{Bucket: maps.Clone(id)}, lastReport: now}
		e.buckets[key] = b
		// The first request of a bucket subscribes it at once.
		select {
		case e.urgent <- struct{}{}:
		default:
		}
	}
	ok := b.decide(now)
	if ok {
		b.allowed++
		e.allowed++
	} else {
		b.denied++
		e.denied++
	}
	return ok
}

// decide applies b's assignment at now: without one, or once it has
// expired, the request is denied (no_assignment_behavior and
// expired_assignment_behavior of DENY_ALL).
func (b *bucket) decide(now time.Time) bool {
	if !b.assigned || (!b.expires.IsZero() && !now.Before(b.expires)) {
		return false
	}
	switch s := b.strategy.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		b.refill(now)
		if b.tokens > 0 {
			b.tokens--
			return true
		}
		return false
	case nil:
		return true // no strategy: allow all
	}
	return false
}

// refill adds the tokens earned since b.last at perFill tokens per whole
// second of fill, continuously, never past maxTokens: Envoy's rate is
// tokens_per_fill over the whole seconds of fill_interval (and infinite
// when those are 0).
func (b *bucket) refill(now time.Time) {
	d := now.Sub(b.last)
	b.last = now
	secs := int64(b.fill / time.Second)
	if secs == 0 {
		b.tokens = b.maxTokens
		return
	}
	if d > 0 {
		b.credit += time.Duration(int64(d) * b.perFill) // token-nanoseconds
	}
	per := time.Duration(secs) * time.Second
	n := int64(b.credit / per)
	b.credit %= per
	b.tokens += n
	if b.tokens >= b.maxTokens {
		b.tokens, b.credit = b.maxTokens, 0
	}
}

// sameBucket reports whether Envoy keeps its token bucket for an
// assignment of tb: max_tokens, tokens_per_fill and the nanoseconds of
// fill_interval equal (Envoy compares no more).
func sameBucket(old *typev3.RateLimitStrategy, tb *typev3.TokenBucket) bool {
	o := old.GetTokenBucket()
	return o != nil && o.GetMaxTokens() == tb.GetMaxTokens() && o.GetTokensPerFill().GetValue() == tb.GetTokensPerFill().GetValue() &&
		o.GetFillInterval().GetNanos() == tb.GetFillInterval().GetNanos()
}

// apply applies an action received at now, as Envoy's filter does: the
// assignment lives the whole seconds of its time to live from now, and a
// token bucket is new unless sameBucket.
func (e *Envoy) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	key := label(a.GetBucketId().GetBucket())
	if a.GetAbandonAction() != nil {
		delete(e.buckets, key)
		return
	}
	qa := a.GetQuotaAssignmentAction()
	b := e.buckets[key]
	if qa == nil || b == nil {
		return
	}
	live := b.assigned && (b.expires.IsZero() || now.Before(b.expires))
	var expires time.Time
	if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
		expires = now.Add(time.Duration(ttl.GetSeconds()) * time.Second)
	}
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	keep := live && tb != nil && sameBucket(b.strategy, tb)
	b.assigned, b.strategy, b.expires = true, qa.GetRateLimitStrategy(), expires
	if tb != nil && !keep {
		b.maxTokens, b.tokens, b.credit, b.last = int64(tb.GetMaxTokens()), int64(tb.GetMaxTokens()), 0, now
		b.fill, b.perFill = tb.GetFillInterval().AsDuration(), 1
		if tb.GetTokensPerFill() != nil {
			b.perFill = int64(tb.GetTokensPerFill().GetValue())
		}
	}
}

func (e *Envoy) receive() {
	defer close(e.done)
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			e.mu.Lock()
			if !errors.Is(err, io.EOF) && status.Code(err) != codes.Canceled && e.err == nil {
				e.err = err
			}
			e.mu.Unlock()
			e.cancel()
			return
		}
		now := e.now()
		e.mu.Lock()
		e.responses++
		for _, a := range resp.GetBucketAction() {
			e.apply(a, now)
		}
		e.mu.Unlock()
	}
}

func (e *Envoy) reportLoop(ctx context.Context) {
	defer close(e.loop)
	t := time.NewTicker(e.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.quiet:
			return
		case <-t.C:
		case <-e.urgent:
		}
		if err := e.report(); err != nil {
			e.cancel()
			return
		}
	}
}

// report sends the usage of every bucket since its last report.
func (e *Envoy) report() error {
	now := e.now()
	e.mu.Lock()
	msg := &rlqsv3.RateLimitQuotaUsageReports{}
	if e.first {
		msg.Domain, e.first = e.domain, false
	}
	for _, k := range slices.Sorted(maps.Keys(e.buckets)) {
		b := e.buckets[k]
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           b.id,
			TimeElapsed:        durationpb.New(now.Sub(b.lastReport)),
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.denied,
		})
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	if len(msg.BucketQuotaUsages) == 0 && msg.Domain == "" {
		e.mu.Unlock()
		return nil
	}
	e.reports++
	e.mu.Unlock()
	return e.stream.Send(msg)
}

// label is a bucket id as a map key.
func label(id map[string]string) string {
	var s []byte
	for _, k := range slices.Sorted(maps.Keys(id)) {
		s = append(s, k...)
		s = append(s, 0)
		s = append(s, id[k]...)
		s = append(s, 0)
	}
	return string(s)
}
