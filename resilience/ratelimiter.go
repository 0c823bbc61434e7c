package resilience

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/policy/resilience4j"
	"github.com/sluicehq/sluice/internal/sleep"
)

// Configuration rules of the RateLimiter and the TimeLimiter, reported in
// sluice.ConfigError.Rule. A non-positive LimitRefreshPeriod is reported as
// sluice.RuleNonPositivePeriod.
const (
	RuleNonPositiveLimitForPeriod sluice.Rule = "non_positive_limit_for_period"
	RuleNegativeTimeout           sluice.Rule = "negative_timeout"
)

// Config configures a RateLimiter. Every field is required: the zero Config
// is invalid. DefaultConfig returns Resilience4j's defaults.
type Config struct {
	// LimitForPeriod is the number of permissions each cycle brings, ≥ 1.
	LimitForPeriod int64
	// LimitRefreshPeriod is the length of a cycle, ≥ 1ns.
	LimitRefreshPeriod time.Duration
	// Timeout is how long a caller may wait for permissions, ≥ 0. With 0,
	// a caller gets permissions only if they are there at once.
	Timeout time.Duration
}

// DefaultConfig returns Resilience4j's defaults: 50 permissions per 500ns
// cycle and a 5s timeout.
func DefaultConfig() Config {
	return Config{LimitForPeriod: 50, LimitRefreshPeriod: 500 * time.Nanosecond, Timeout: 5 * time.Second}
}

// validate returns a *sluice.ConfigError for the first field out of bounds.
func (c Config) validate() error {
	switch {
	case c.LimitForPeriod < 1:
		return &sluice.ConfigError{Rule: RuleNonPositiveLimitForPeriod, Bandwidth: -1,
			Field: "LimitForPeriod", Value: strconv.FormatInt(c.LimitForPeriod, 10), Msg: "must be positive"}
	case c.LimitRefreshPeriod < 1:
		return &sluice.ConfigError{Rule: sluice.RuleNonPositivePeriod, Bandwidth: -1,
			Field: "LimitRefreshPeriod", Value: c.LimitRefreshPeriod.String(), Msg: "must be positive"}
	case c.Timeout < 0:
		return &sluice.ConfigError{Rule: RuleNegativeTimeout, Bandwidth: -1,
			Field: "Timeout", Value: c.Timeout.String(), Msg: "must not be negative"}
	}
	return nil
}

// Option configures New.
type Option func(*options)

type options struct {
	clock    sluice.Clock
	failFast bool
	observer sluice.Observer
}

// WithClock sets the limiter's clock, which AcquirePermission also sleeps
// on when it has a Sleep method (see sluice.Clock): a
// *sluicetest.FakeClock advances instead of waiting. The default is
// sluice.MonotonicClock. nil keeps the default.
func WithClock(c sluice.Clock) Option { return func(o *options) { o.clock = c } }

// WithFailFast sets whether AcquirePermission refuses at once when the
// permits would take longer than the timeout. The default, false, is
// Resilience4j's: such a caller is parked for the whole timeout and then
// refused, so that callers the limiter refuses are slowed down as much as
// those it serves, the backpressure Resilience4j's users rely on. With
// true, it returns false at once, leaving the caller free to do something
// else.
func WithFailFast(on bool) Option { return func(o *options) { o.failFast = on } }

// WithObserver sets an observer told of the limiter's decisions, as
// Resilience4j's event publisher tells of successful and failed
// acquisitions: sluice.EventAllowed and sluice.EventRejected with the
// permits asked for, then sluice.EventDelayed for a reservation's wait,
// sluice.EventWaiting and sluice.EventWaited around AcquirePermission's
// sleep for its permits, and sluice.EventCancelled for permits given back
// when the context ended during it (a caller parked for the timeout
// before a refusal is counted by NumberOfWaitingCallers, not by events). A refusal by the context's deadline (a *sluice.MaxWaitError)
// is a failed acquisition too. The default is none; nil keeps it.
// Package sluiceprom's and sluiceotel's observers count these events, and
// read the gauges AvailablePermissions and NumberOfWaitingCallers.
func WithObserver(obs sluice.Observer) Option { return func(o *options) { o.observer = obs } }

// RateLimiter is Resilience4j's AtomicRateLimiter, in integer nanoseconds.
//
// Cycles of LimitRefreshPeriod are counted from the limiter's creation (its
// clock's reading in New), not from the Unix epoch. At the start of every
// call the permissions left are refreshed: after k whole cycles they become
// min(permissions + k·LimitForPeriod, LimitForPeriod), so unused
// permissions never pile up beyond one cycle's worth, and debt is repaid by
// the cycles that pass. n permits need no wait when at least n are left;
// otherwise the wait is the time to the next cycle plus
// ceil((n - permissions - LimitForPeriod)/LimitForPeriod) whole cycles, so n
// may exceed LimitForPeriod. A caller whose wait is at most the timeout
// (equality included) has its permits subtracted at once, which can make
// the permissions negative; a caller whose wait is longer takes nothing.
// A wait that does not fit in int64 nanoseconds is never granted.
//
// RateLimiter is safe for simultaneous use by multiple goroutines. Make one
// with New; the zero RateLimiter is not usable.
type RateLimiter struct {
	clock    sluice.Clock
	failFast bool
	observer sluice.Observer // nil when there is none
	waiting  atomic.Int64    // callers sleeping in AcquirePermission

	mu    sync.Mutex
	cfg   Config
	m     resilience4j.Config
	state resilience4j.State
}

// New returns a rate limiter with the configuration cfg, created now by its
// clock, with a full cycle's permissions. It returns a *sluice.ConfigError
// (errors.Is sluice.ErrInvalidConfig) when LimitForPeriod < 1,
// LimitRefreshPeriod < 1ns or Timeout < 0.
func New(cfg Config, opts ...Option) (*RateLimiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = sluice.MonotonicClock()
	}
	m := machine(cfg)
	return &RateLimiter{
		clock:    o.clock,
		failFast: o.failFast,
		observer: o.observer,
		cfg:      cfg,
		m:        m,
		state:    resilience4j.New(m, o.clock.Now()),
	}, nil
}

func machine(cfg Config) resilience4j.Config {
	return resilience4j.Config{Limit: cfg.LimitForPeriod, Period: int64(cfg.LimitRefreshPeriod)}
}

// AcquirePermission takes n permits, waiting for a later cycle if they will
// be there within the timeout, and reports whether it took them.
//
// With enough permissions left it returns true at once. When the wait is at
// most the timeout, it reserves the permits at once and sleeps for the
// wait. When the wait would exceed the timeout it takes nothing and, as
// Resilience4j does, sleeps for the whole timeout before it returns false;
// WithFailFast(true) makes it return false at once instead.
//
// When ctx has a deadline sooner than its sleep, it returns a
// *sluice.MaxWaitError (matching context.DeadlineExceeded) at once and
// takes nothing, rather than sleep until the deadline. When ctx ends
// during the sleep, it returns ctx.Err(), and permits it reserved are
// given back, as far as the callers that reserved after it allow (see
// the package resilience4j's Cancel); Resilience4j keeps them spent on
// interruption. A ctx already done returns ctx.Err() and takes nothing.
// It returns an *sluice.ArgumentError for n ≤ 0.
func (l *RateLimiter) AcquirePermission(ctx context.Context, n int64) (bool, error) {
	if n <= 0 {
		return false, nonPositive("resilience.RateLimiter.AcquirePermission", n)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l.mu.Lock()
	timeout := int64(l.cfg.Timeout)
	bound, byDeadline := timeout, false
	if dl, ok := ctx.Deadline(); ok {
		if left := int64(time.Until(dl)); left < timeout {
			bound, byDeadline = max(left, 0), true
		}
	}
	before := l.state
	wait, ok := l.m.Acquire(&l.state, l.clock.Now(), n, bound)
	after := l.state
	l.mu.Unlock()
	if !ok {
		l.observe(sluice.EventRejected, n, 0)
		switch {
		case byDeadline && (wait <= timeout || !l.failFast && timeout > 0):
			return false, &sluice.MaxWaitError{Tokens: n, Wait: time.Duration(wait), MaxWait: time.Duration(bound), Deadline: true}
		case l.failFast || timeout == 0:
			return false, nil
		}
		// Parked for the whole timeout, as Resilience4j parks a caller it
		// will refuse.
		if err := l.sleep(ctx, time.Duration(timeout)); err != nil {
			return false, err
		}
		return false, nil
	}
	l.observe(sluice.EventAllowed, n, 0)
	if wait == 0 {
		return true, nil
	}
	l.observe(sluice.EventWaiting, n, time.Duration(wait))
	if err := l.sleep(ctx, time.Duration(wait)); err != nil {
		l.mu.Lock()
		l.m.Cancel(&l.state, l.clock.Now(), before, after, n)
		l.mu.Unlock()
		l.observe(sluice.EventCancelled, n, 0)
		return false, err
	}
	l.observe(sluice.EventWaited, 0, time.Duration(wait))
	return true, nil
}

// observe tells the observer, when there is one, of an event of kind with
// n permits or the duration d.
func (l *RateLimiter) observe(kind sluice.EventKind, n int64, d time.Duration) {
	if l.observer != nil {
		l.observer.Observe(sluice.Event{Kind: kind, Tokens: n, Duration: d})
	}
}

// sleep sleeps d on the limiter's clock, counted as a waiting caller.
func (l *RateLimiter) sleep(ctx context.Context, d time.Duration) error {
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	return sleep.On(ctx, l.clock, d)
}

// ReservePermission reserves n permits that will be there within the
// timeout and returns how long the caller must wait before using them (0
// when they are there at once). It never sleeps: the caller waits itself.
// The permits are subtracted at once, so later callers queue behind.
//
// When the wait would exceed the timeout it takes nothing and returns a
// *sluice.MaxWaitError (errors.Is sluice.ErrMaxWaitExceeded) carrying the
// wait, where Resilience4j returns -1. It returns an *sluice.ArgumentError
// for n ≤ 0.
func (l *RateLimiter) ReservePermission(n int64) (time.Duration, error) {
	if n <= 0 {
		return 0, nonPositive("resilience.RateLimiter.ReservePermission", n)
	}
	l.mu.Lock()
	timeout := int64(l.cfg.Timeout)
	wait, ok := l.m.Acquire(&l.state, l.clock.Now(), n, timeout)
	l.mu.Unlock()
	if !ok {
		l.observe(sluice.EventRejected, n, 0)
		return 0, &sluice.MaxWaitError{Tokens: n, Wait: time.Duration(wait), MaxWait: time.Duration(timeout)}
	}
	l.observe(sluice.EventAllowed, n, 0)
	if wait > 0 {
		l.observe(sluice.EventDelayed, 0, time.Duration(wait))
	}
	return time.Duration(wait), nil
}

// AvailablePermissions returns the permissions a caller would find now,
// after the cycle refresh: negative while permits are reserved ahead. It
// changes nothing.
func (l *RateLimiter) AvailablePermissions() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, _ := l.m.Peek(l.state, l.clock.Now(), 1)
	return p
}

// NanosToWait returns how long a caller would wait now for one permit: 0
// when one is there, or math.MaxInt64 nanoseconds when the wait does not fit
// in a Duration. It changes nothing.
func (l *RateLimiter) NanosToWait() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, w := l.m.Peek(l.state, l.clock.Now(), 1)
	return time.Duration(w)
}

// NumberOfWaitingCallers returns the number of AcquirePermission calls
// sleeping now: for their permits, or for the timeout before a refusal
// (Resilience4j's waiting-threads gauge counts both too).
func (l *RateLimiter) NumberOfWaitingCallers() int {
	return int(l.waiting.Load())
}

// Drain takes every permission available now, after the cycle refresh,
// leaving 0; permits reserved ahead (negative permissions) stay owed.
//
// Resilience4j's drainPermissions differs: it takes the count stored by the
// last call, so after idle cycles it leaves some (3 left, refreshed to 5,
// 2 remain), and with debt it erases the debt.
func (l *RateLimiter) Drain() {
	l.mu.Lock()
	l.m.Drain(&l.state, l.clock.Now())
	l.mu.Unlock()
}

// ChangeLimitForPeriod sets the permissions per cycle from the next cycle
// on: the permissions of the current cycle stay as they are, even above the
// new limit (10 → 3 with 8 left keeps 8 until the cycle ends). It returns
// an *sluice.ArgumentError for n ≤ 0 and then changes nothing.
func (l *RateLimiter) ChangeLimitForPeriod(n int64) error {
	if n <= 0 {
		return nonPositive("resilience.RateLimiter.ChangeLimitForPeriod", n)
	}
	l.mu.Lock()
	l.cfg.LimitForPeriod = n
	l.m = machine(l.cfg)
	l.mu.Unlock()
	return nil
}

// ChangeTimeout sets the timeout for later calls; callers already waiting
// are unaffected. It returns an *sluice.ArgumentError for d < 0 and then
// changes nothing.
func (l *RateLimiter) ChangeTimeout(d time.Duration) error {
	if d < 0 {
		return &sluice.ArgumentError{Op: "resilience.RateLimiter.ChangeTimeout", Arg: "timeout", Value: d, Want: "must not be negative"}
	}
	l.mu.Lock()
	l.cfg.Timeout = d
	l.mu.Unlock()
	return nil
}

// Config returns the limiter's configuration, with the changes made since
// New.
func (l *RateLimiter) Config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

func nonPositive(op string, n int64) error {
	return &sluice.ArgumentError{Op: op, Arg: "permits", Value: n, Want: "must be positive"}
}
