package smooth

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sleep"
)

// Configuration rules of NewBursty, NewWarmingUp and SetRate, reported in
// sluice.ConfigError.Rule.
const (
	RuleNonPositiveRate     sluice.Rule = "non_positive_rate"     // permitsPerSecond ≤ 0 or NaN
	RuleNegativeWarmup      sluice.Rule = "negative_warmup"       // warmup < 0
	RuleBadColdFactor       sluice.Rule = "bad_cold_factor"       // coldFactor < 1, NaN or infinite
	RuleBadMaxBurst         sluice.Rule = "bad_max_burst"         // maxBurstSeconds < 0, NaN or infinite
	RuleOptionNotApplicable sluice.Rule = "option_not_applicable" // WithColdFactor on NewBursty, WithMaxBurstSeconds on NewWarmingUp
)

// Option configures NewBursty and NewWarmingUp.
type Option func(*options)

type options struct {
	clock           sluice.Clock
	maxBurstSeconds float64
	coldFactor      float64
	setBurst        bool
	setCold         bool
}

// WithClock sets the limiter's clock, which Acquire and TryAcquire also
// sleep on when it has a Sleep method (see sluice.Clock): a
// *sluicetest.FakeClock advances instead of waiting. The default is
// sluice.MonotonicClock. nil keeps the default.
func WithClock(c sluice.Clock) Option { return func(o *options) { o.clock = c } }

// WithMaxBurstSeconds sets how many seconds' worth of permits a bursty
// limiter stores while idle, ≥ 0 and finite; 0 disables bursts. The
// default is 1.0, the only value Guava's public API offers. NewWarmingUp
// refuses it.
func WithMaxBurstSeconds(s float64) Option {
	return func(o *options) { o.maxBurstSeconds, o.setBurst = s, true }
}

// WithColdFactor sets how many times slower than the stable rate a cold
// warming-up limiter starts, ≥ 1 and finite. The default is 3.0, the only
// value Guava's public API offers. NewBursty refuses it.
func WithColdFactor(f float64) Option {
	return func(o *options) { o.coldFactor, o.setCold = f, true }
}

// RateLimiter is Guava's RateLimiter: SmoothBursty (NewBursty) or
// SmoothWarmingUp (NewWarmingUp). It hands out permits at a stable rate,
// spacing requests evenly, and stores permits while idle.
//
// A request is never delayed by its own size: the next request pays for it.
// At 5 permits per second, Acquire(ctx, 10) on a fresh limiter returns at
// once and the following Acquire waits 2s. The first request is free.
//
// Its clock is Guava's: whole microseconds since creation, and waits are
// whole microseconds computed as Guava computes them (see the package doc
// for why in float64).
//
// RateLimiter is safe for simultaneous use by multiple goroutines. Make one
// with NewBursty or NewWarmingUp; the zero RateLimiter is not usable.
type RateLimiter struct {
	clock sluice.Clock
	start int64 // clock reading at creation, nanoseconds

	mu sync.Mutex
	g  guava
}

// NewBursty returns Guava's SmoothBursty at permitsPerSecond: it starts
// with no stored permits, stores up to maxBurstSeconds·permitsPerSecond of
// them while idle (WithMaxBurstSeconds, default 1.0), and spends them
// without waiting. permitsPerSecond may be +Inf, for no limit.
//
// It returns a *sluice.ConfigError (errors.Is sluice.ErrInvalidConfig) when
// permitsPerSecond ≤ 0 or NaN, for a bad maxBurstSeconds, and with
// WithColdFactor.
func NewBursty(permitsPerSecond float64, opts ...Option) (*RateLimiter, error) {
	o := options{maxBurstSeconds: 1.0}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkRate("permitsPerSecond", permitsPerSecond); err != nil {
		return nil, err
	}
	if b := o.maxBurstSeconds; b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
		return nil, configError(RuleBadMaxBurst, "maxBurstSeconds", formatFloat(b), "must be finite and not negative")
	}
	if o.setCold {
		return nil, &sluice.ConfigError{Rule: RuleOptionNotApplicable, Bandwidth: -1,
			Msg: "WithColdFactor applies only to NewWarmingUp"}
	}
	return newLimiter(o, guava{maxBurstSeconds: o.maxBurstSeconds}, permitsPerSecond), nil
}

// NewWarmingUp returns Guava's SmoothWarmingUp at permitsPerSecond with a
// warm-up period of warmup (truncated to whole microseconds, as Guava
// does). It starts cold: the first permits are spaced coldFactor times the
// stable interval apart (WithColdFactor, default 3.0), and the spacing
// falls along a ramp to the stable interval over warmup. Idle time cools it
// down again.
//
// With stable = 1s/permitsPerSecond and cold = coldFactor·stable, permits
// above threshold = 0.5·warmup/stable cost along the ramp, up to
// maxPermits = threshold + 2·warmup/(stable+cold), the number stored when
// cold; the limiter cools down by warmup/maxPermits per permit.
//
// permitsPerSecond may be +Inf, for no limit. With a warmup of 0 it never
// stores permits and spaces every request evenly; Guava's limiter instead
// becomes unlimited after its first idle moment (stored permits of 0/0).
//
// It returns a *sluice.ConfigError (errors.Is sluice.ErrInvalidConfig) when
// permitsPerSecond ≤ 0 or NaN, warmup < 0, for a bad coldFactor, and with
// WithMaxBurstSeconds.
func NewWarmingUp(permitsPerSecond float64, warmup time.Duration, opts ...Option) (*RateLimiter, error) {
	o := options{coldFactor: 3.0}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkRate("permitsPerSecond", permitsPerSecond); err != nil {
		return nil, err
	}
	if warmup < 0 {
		return nil, configError(RuleNegativeWarmup, "warmup", warmup.String(), "must not be negative")
	}
	if c := o.coldFactor; c < 1 || math.IsNaN(c) || math.IsInf(c, 0) {
		return nil, configError(RuleBadColdFactor, "coldFactor", formatFloat(c), "must be finite and at least 1")
	}
	if o.setBurst {
		return nil, &sluice.ConfigError{Rule: RuleOptionNotApplicable, Bandwidth: -1,
			Msg: "WithMaxBurstSeconds applies only to NewBursty"}
	}
	g := guava{warm: true, warmupPeriodMicros: int64(warmup / time.Microsecond), coldFactor: o.coldFactor}
	return newLimiter(o, g, permitsPerSecond), nil
}

func newLimiter(o options, g guava, permitsPerSecond float64) *RateLimiter {
	if o.clock == nil {
		o.clock = sluice.MonotonicClock()
	}
	l := &RateLimiter{clock: o.clock, start: o.clock.Now(), g: g}
	l.g.setRate(permitsPerSecond, 0)
	return l
}

// Acquire takes permits, sleeping until they are the caller's, and returns
// how long it slept: whole microseconds, 0 when they were there at once.
//
// The permits are reserved before the sleep. When ctx ends during it,
// Acquire returns ctx.Err() and the permits stay reserved (Guava's
// reservations cannot be taken back; later callers already queue behind
// them). A ctx already done returns ctx.Err() and takes nothing. It returns
// an *sluice.ArgumentError for permits ≤ 0.
func (l *RateLimiter) Acquire(ctx context.Context, permits int64) (time.Duration, error) {
	if permits <= 0 {
		return 0, nonPositive("smooth.RateLimiter.Acquire", permits)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	micros := l.g.reserve(permits, l.nowMicros())
	l.mu.Unlock()
	d := microsToDuration(micros)
	if d > 0 {
		if err := sleep.On(ctx, l.clock, d); err != nil {
			return 0, err
		}
	}
	return d, nil
}

// TryAcquire takes permits if they will be the caller's within timeout,
// and reports whether it did. The timeout is truncated to whole
// microseconds, and a negative one counts as 0. A request succeeds iff the
// limiter's next free ticket is no later than now + timeout (equality
// succeeds); it then reserves the permits and, as in Guava, sleeps until
// they are the caller's. A refused request takes nothing and returns at
// once.
//
// When ctx ends during the sleep, TryAcquire returns false and ctx.Err(),
// and the permits stay reserved, as in Acquire. It returns an
// *sluice.ArgumentError for permits ≤ 0.
func (l *RateLimiter) TryAcquire(ctx context.Context, permits int64, timeout time.Duration) (bool, error) {
	if permits <= 0 {
		return false, nonPositive("smooth.RateLimiter.TryAcquire", permits)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	timeoutMicros := max(int64(timeout/time.Microsecond), 0)
	l.mu.Lock()
	now := l.nowMicros()
	if !l.g.canAcquire(now, timeoutMicros) {
		l.mu.Unlock()
		return false, nil
	}
	micros := l.g.reserve(permits, now)
	l.mu.Unlock()
	if d := microsToDuration(micros); d > 0 {
		if err := sleep.On(ctx, l.clock, d); err != nil {
			return false, err
		}
	}
	return true, nil
}

// SetRate changes the stable rate to permitsPerSecond. Stored permits are
// scaled by the ratio of the new maximum to the old one; a request already
// served keeps the wait it imposed on the next one, which pays the old
// rate. It returns a *sluice.ConfigError when permitsPerSecond ≤ 0 or NaN,
// and then changes nothing.
func (l *RateLimiter) SetRate(permitsPerSecond float64) error {
	if err := checkRate("permitsPerSecond", permitsPerSecond); err != nil {
		return err
	}
	l.mu.Lock()
	l.g.setRate(permitsPerSecond, l.nowMicros())
	l.mu.Unlock()
	return nil
}

// Rate returns the stable rate in permits per second, as Guava's getRate
// computes it from the stable interval.
func (l *RateLimiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.g.rate()
}

// nowMicros is Guava's clock: whole microseconds since creation, truncated
// toward zero.
func (l *RateLimiter) nowMicros() int64 {
	now := l.clock.Now()
	d := now - l.start
	// Saturate when the clock moved by more than the int64 range.
	if (d < now) != (l.start > 0) {
		if l.start > 0 {
			d = math.MinInt64
		} else {
			d = math.MaxInt64
		}
	}
	return d / 1000
}

// microsToDuration converts µs to a Duration, saturating at about 292
// years.
func microsToDuration(micros int64) time.Duration {
	if micros > math.MaxInt64/1000 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(micros) * time.Microsecond
}

func checkRate(field string, r float64) error {
	if r > 0 { // false for NaN
		return nil
	}
	return configError(RuleNonPositiveRate, field, formatFloat(r), "must be positive")
}

func configError(rule sluice.Rule, field, value, msg string) error {
	return &sluice.ConfigError{Rule: rule, Bandwidth: -1, Field: field, Value: value, Msg: msg}
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func nonPositive(op string, n int64) error {
	return &sluice.ArgumentError{Op: op, Arg: "permits", Value: n, Want: "must be positive"}
}
