package sluice

import (
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Never is the wait reported for tokens that can never be had, for example
// more than a bandwidth's capacity: math.MaxInt64 nanoseconds, about 292
// years.
const Never = time.Duration(math.MaxInt64)

// Bucket is a token bucket in local memory: Bucket4j's model with one or
// more bandwidths, in exact integer arithmetic.
//
// Bucket is safe for simultaneous use by multiple goroutines. A call reads
// the clock once, before it takes the bucket's lock, so concurrent calls may
// reach the lock with slightly out-of-order times; a time before the last
// refill simply refills nothing. Make a Bucket with NewBucket; the zero
// Bucket is not usable.
type Bucket struct {
	clock    Clock
	observer Observer // nil when there is none

	mu      sync.Mutex
	cfg     *tokenbucket.Config
	limit   int64 // the smallest capacity of cfg, Result.Limit
	state   tokenbucket.State
	scratch tokenbucket.State // same length as state; holds a call's work until it is stored
}

// NewBucket returns a bucket with the configuration cfg, created now by its
// clock. WithClock and WithObserver apply; the other options are an
// *ArgumentError. It returns a *ConfigError when cfg breaks a rule,
// including aligned refill on a clock that is not a wall clock.
func NewBucket(cfg BucketConfig, opts ...Option) (*Bucket, error) {
	o, err := bucketOptions(opts)
	if err != nil {
		return nil, err
	}
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	clock, err := bucketClock(c, &o)
	if err != nil {
		return nil, err
	}
	b := &Bucket{clock: clock, observer: o.observer, cfg: c, limit: limitOf(c)}
	b.state = tokenbucket.New(c, b.clock.Now())
	b.scratch = make(tokenbucket.State, len(b.state))
	return b, nil
}

// checkInheritance returns the *ArgumentError of op's argument arg, a
// token inheritance that is none of the four.
func checkInheritance(op, arg string, t Inheritance) error {
	if t < InheritProportionally || t > InheritAdditive {
		return &ArgumentError{Op: op, Arg: arg, Value: t,
			Want: "must be InheritProportionally, InheritAsIs, InheritReset or InheritAdditive"}
	}
	return nil
}

// replacement validates the arguments of op, a ReplaceConfiguration on a
// bucket running on clock, and returns the compiled configuration.
func replacement(op string, cfg BucketConfig, inherit Inheritance, clock Clock) (*tokenbucket.Config, error) {
	if err := checkInheritance(op, "inherit", inherit); err != nil {
		return nil, err
	}
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	return c, checkClock(c, clock)
}

// bucketClock returns the clock of a bucket of cfg: o's, or the default
// (a monotonic clock, a wall clock for aligned refill). It returns the
// *ConfigError of aligned refill on a clock that is not a wall clock.
func bucketClock(cfg *tokenbucket.Config, o *options) (Clock, error) {
	clock := o.clock
	if clock == nil {
		clock = MonotonicClock()
		if hasAligned(cfg) {
			clock = WallClock()
		}
	}
	return clock, checkClock(cfg, clock)
}

func checkClock(cfg *tokenbucket.Config, c Clock) error {
	if !hasAligned(cfg) || c.IsWallClock() {
		return nil
	}
	for i, bw := range cfg.Bandwidths {
		if bw.Aligned {
			return &ConfigError{Rule: RuleAlignedNeedsWallClock, Bandwidth: i, ID: bw.ID,
				Msg: "intervally aligned refill needs a wall clock (WithClock(WallClock()))"}
		}
	}
	return nil
}

// apply runs req at now under the lock and stores the new state if the
// operation changed it. With snap it also takes a snapshot of the state
// after the operation, for Snapshot.
func (b *Bucket) apply(now int64, req tokenbucket.Request, snap *Snapshot) tokenbucket.Result {
	b.mu.Lock()
	copy(b.scratch, b.state)
	res, changed := tokenbucket.Apply(b.cfg, b.scratch, now, req)
	if changed {
		b.state, b.scratch = b.scratch, b.state
	}
	if snap != nil {
		after := b.scratch
		if changed {
			after = b.state
		}
		snap.fill(b.cfg, after, now)
	}
	b.mu.Unlock()
	return res
}

// argError turns the argument error a tokenbucket call reported into an
// *ArgumentError, or nil.
func argError(op string, res tokenbucket.Result, req tokenbucket.Request) error {
	switch res.Code {
	case tokenbucket.OK:
		return nil
	case tokenbucket.NonPositiveMaxWait:
		return &ArgumentError{Op: op, Arg: "maxWait", Value: time.Duration(req.MaxWait), Want: "must be positive"}
	case tokenbucket.ReservationOverflow:
		return &ArgumentError{Op: op, Arg: "tokens", Value: req.Tokens,
			Want: "can never be had: their wait overflows int64 nanoseconds"}
	}
	arg := "tokens"
	if req.Op == tokenbucket.OpConsumeAsMuchAsPossible {
		arg = "limit"
	}
	return &ArgumentError{Op: op, Arg: arg, Value: req.Tokens, Want: "must be positive"}
}

// Allow is shorthand for AllowN(1), which cannot fail.
func (b *Bucket) Allow() Result {
	r, _ := b.AllowN(1)
	return r
}

// AllowN takes n tokens if every bandwidth has them, and returns the
// decision: whether it took them, the tokens left, how long until n tokens
// would be there (Never when they exceed a capacity), how long until the
// bucket is full again, and the smallest capacity, for Retry-After and
// rate-limit headers. It is Bucket4j's tryConsumeAndReturnRemaining. It
// returns an *ArgumentError for n ≤ 0.
func (b *Bucket) AllowN(n int64) (Result, error) {
	return b.decide("Bucket.AllowN", n, false)
}

// Peek is shorthand for PeekN(1), which cannot fail.
func (b *Bucket) Peek() Result {
	r, _ := b.PeekN(1)
	return r
}

// PeekN reports what AllowN(n) would decide now, taking nothing. It is
// Bucket4j's estimateAbilityToConsume, whose remaining tokens are those
// there now: Remaining+n when Allowed, Remaining otherwise. It returns an
// *ArgumentError for n ≤ 0.
func (b *Bucket) PeekN(n int64) (Result, error) {
	return b.decide("Bucket.PeekN", n, true)
}

// decide runs AllowN, or PeekN with peek, at the clock's time under the
// lock.
func (b *Bucket) decide(op string, n int64, peek bool) (Result, error) {
	now := b.clock.Now()
	req := tokenbucket.Request{Op: tokenbucket.OpTryConsumeAndReturnRemaining, Tokens: n}
	b.mu.Lock()
	copy(b.scratch, b.state)
	res, changed := tokenbucket.Apply(b.cfg, b.scratch, now, req)
	if peek {
		giveBack(b.scratch, res, n)
		changed = false
	}
	if changed {
		b.state, b.scratch = b.scratch, b.state
	}
	limit := b.limit
	b.mu.Unlock()
	if res.Code != tokenbucket.OK {
		return Result{}, argError(op, res, req)
	}
	if !peek {
		notify(b.observer, res.Consumed, n)
	}
	return bucketResult(res, limit), nil
}

// giveBack undoes in st the n tokens that res took (tokenbucket.Consume's
// exact inverse), so that a peek leaves st refilled and nothing more; a
// peek stores nothing, as Bucket4j's estimate does not.
func giveBack(st tokenbucket.State, res tokenbucket.Result, n int64) {
	if res.Consumed {
		for i := range st {
			st[i].Size += n
		}
	}
}

// bucketResult is the Result of a bucket decision of
// OpTryConsumeAndReturnRemaining, limit being the smallest capacity.
func bucketResult(res tokenbucket.Result, limit int64) Result {
	return Result{
		Allowed:    res.Consumed,
		Remaining:  res.Remaining,
		RetryAfter: time.Duration(res.WaitForRefill),
		ResetAfter: time.Duration(res.WaitForReset),
		Limit:      limit,
	}
}

// TryConsume takes n tokens if every bandwidth has them, and reports whether
// it did: AllowN without the numbers, which it does not compute, for the
// hot path that allocates nothing. It returns an *ArgumentError for n ≤ 0.
func (b *Bucket) TryConsume(n int64) (bool, error) {
	return b.tryConsume("Bucket.TryConsume", b.clock.Now(), n)
}

// TryConsumeAt is TryConsume at time t instead of the clock's reading, for
// callers that read the time themselves. t is taken as nanoseconds since the
// Unix epoch, so it should come from the same timeline as the bucket's clock
// (the default clocks count from the Unix epoch). Times beyond the int64
// range (before 1678 or after 2262) count as its bounds.
func (b *Bucket) TryConsumeAt(t time.Time, n int64) (bool, error) {
	return b.tryConsume("Bucket.TryConsumeAt", unixNano(t), n)
}

// tryConsume is the hot path: no request, no result struct, no copy call.
func (b *Bucket) tryConsume(op string, now, n int64) (bool, error) {
	if n <= 0 {
		return false, &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "must be positive"}
	}
	b.mu.Lock()
	ok := tokenbucket.TryConsume(b.cfg, b.state, b.scratch, now, n)
	b.mu.Unlock()
	if b.observer != nil {
		notify(b.observer, ok, n)
	}
	return ok, nil
}

// TryConsumeAsMuchAsPossible takes every available token and returns how
// many it took (0 when the bucket is empty or overdrawn).
func (b *Bucket) TryConsumeAsMuchAsPossible() int64 {
	n, _ := b.tryConsumeUpTo("Bucket.TryConsumeAsMuchAsPossible", math.MaxInt64)
	return n
}

// TryConsumeUpTo takes as many available tokens as it can, at most limit,
// and returns how many it took. It is Bucket4j's
// tryConsumeAsMuchAsPossible(limit). It returns an *ArgumentError for
// limit ≤ 0.
func (b *Bucket) TryConsumeUpTo(limit int64) (int64, error) {
	return b.tryConsumeUpTo("Bucket.TryConsumeUpTo", limit)
}

func (b *Bucket) tryConsumeUpTo(op string, limit int64) (int64, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeAsMuchAsPossible, Tokens: limit}
	res := b.apply(b.clock.Now(), req, nil)
	if res.Code != tokenbucket.OK {
		return 0, argError(op, res, req)
	}
	if res.Value > 0 {
		notify(b.observer, true, res.Value)
	}
	return res.Value, nil
}

// ConsumeIgnoringRateLimits takes n tokens whether or not they are there,
// overdrawing the bucket, and returns the time the caller would have had to
// wait for them (0 when they were there). It returns an *ArgumentError for
// n ≤ 0 or when that wait overflows, and then takes nothing.
func (b *Bucket) ConsumeIgnoringRateLimits(n int64) (time.Duration, error) {
	req := tokenbucket.Request{Op: tokenbucket.OpConsumeIgnoringRateLimits, Tokens: n}
	res := b.apply(b.clock.Now(), req, nil)
	if res.Code != tokenbucket.OK {
		return 0, argError("Bucket.ConsumeIgnoringRateLimits", res, req)
	}
	notify(b.observer, true, n)
	return time.Duration(res.Value), nil
}

// AddTokens adds n tokens to every bandwidth, up to its capacity; a
// bandwidth above capacity is brought down to it. Use it to give back tokens
// taken for work that then failed. It returns an *ArgumentError for n ≤ 0.
func (b *Bucket) AddTokens(n int64) error {
	return b.add(tokenbucket.OpAddTokens, "Bucket.AddTokens", n)
}

// ForceAddTokens adds n tokens to every bandwidth even past its capacity.
// While above capacity a bandwidth refills nothing, but keeps the surplus.
// It returns an *ArgumentError for n ≤ 0.
func (b *Bucket) ForceAddTokens(n int64) error {
	return b.add(tokenbucket.OpForceAddTokens, "Bucket.ForceAddTokens", n)
}

func (b *Bucket) add(op tokenbucket.Op, name string, n int64) error {
	req := tokenbucket.Request{Op: op, Tokens: n}
	return argError(name, b.apply(b.clock.Now(), req, nil), req)
}

// Reset fills every bandwidth to its capacity.
func (b *Bucket) Reset() {
	b.apply(b.clock.Now(), tokenbucket.Request{Op: tokenbucket.OpReset}, nil)
}

// AvailableTokens is the number of tokens that could be taken now: the
// least over the bandwidths. It is negative while the bucket is overdrawn.
func (b *Bucket) AvailableTokens() int64 {
	return b.apply(b.clock.Now(), tokenbucket.Request{Op: tokenbucket.OpAvailable}, nil).Value
}

// Snapshot returns the state of the bucket now, for diagnostics (Bucket4j's
// verbose results): its configuration, the tokens of each bandwidth and
// the time until it is full. It takes nothing.
func (b *Bucket) Snapshot() Snapshot {
	var s Snapshot
	b.apply(b.clock.Now(), tokenbucket.Request{Op: tokenbucket.OpAvailable}, &s)
	return s
}

// ReplaceConfiguration switches the bucket to cfg, carrying its tokens over
// by inherit.
//
// Bandwidths are matched by ID, as in Bucket4j: a new bandwidth takes over
// from the old one with the same ID, and a bandwidth without an ID from the
// old one without an ID while each configuration has at most one such
// bandwidth. There is no matching by position; an unmatched bandwidth starts
// as in a new bucket. A matched bandwidth keeps its last refill time, and
// its partly refilled token when both are greedy.
//
// It returns a *ConfigError when cfg is invalid and an *ArgumentError for
// an inherit that is none of the four, and then changes nothing.
func (b *Bucket) ReplaceConfiguration(cfg BucketConfig, inherit Inheritance) error {
	c, err := replacement("Bucket.ReplaceConfiguration", cfg, inherit, b.clock)
	if err != nil {
		return err
	}
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state = tokenbucket.Replace(b.cfg, b.state, now, c, tokenbucket.Strategy(inherit))
	b.scratch = make(tokenbucket.State, len(b.state))
	b.cfg, b.limit = c, limitOf(c)
	return nil
}
