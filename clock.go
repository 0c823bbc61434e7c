package sluice

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/sleep"
)

// Clock is a bucket's time source.
//
// Now returns nanoseconds. Only differences between readings matter, except
// for aligned refill, whose grid is fixed in Unix time: that needs a clock
// whose IsWallClock is true, counting from the Unix epoch.
//
// A Clock must be safe for concurrent use.
type Clock interface {
	Now() int64
	IsWallClock() bool
}

// MonotonicClock returns the default clock: it reads the monotonic clock, so
// it never jumps when the system time is set, and starts at the Unix time of
// its first reading. It is not a wall clock.
func MonotonicClock() Clock { return monotonic }

var monotonic = newMonotonicClock()

type monotonicClock struct {
	base     time.Time // carries a monotonic reading
	baseNano int64
}

func newMonotonicClock() *monotonicClock {
	now := time.Now()
	return &monotonicClock{base: now, baseNano: now.UnixNano()}
}

// Now reads only the monotonic clock: time.Since takes a fast path for a
// base that carries a monotonic reading, which costs half of time.Now.
func (c *monotonicClock) Now() int64 { return c.baseNano + int64(time.Since(c.base)) }

func (*monotonicClock) IsWallClock() bool { return false }

// WallClock returns the system's wall clock in nanoseconds since the Unix
// epoch. Setting the system time moves it.
func WallClock() Clock { return wallClock{} }

type wallClock struct{}

func (wallClock) Now() int64        { return time.Now().UnixNano() }
func (wallClock) IsWallClock() bool { return true }

// Millis returns a clock that reads c truncated to whole milliseconds, the
// resolution Bucket4j's default time meter has.
func Millis(c Clock) Clock { return millisClock{c} }

type millisClock struct{ c Clock }

func (m millisClock) Now() int64 {
	t := m.c.Now()
	r := t % 1e6
	// Before the epoch, still round down, except in the last millisecond
	// above MinInt64, which rounds toward zero rather than wrap around.
	if r < 0 && t >= math.MinInt64+1e6 {
		r += 1e6
	}
	return t - r
}

func (m millisClock) IsWallClock() bool { return m.c.IsWallClock() }

// Sleeper waits on behalf of blocking calls.
//
// Sleep returns after d, or earlier with ctx.Err() when ctx is done. It must
// be safe for concurrent use.
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// TimerSleeper returns the default Sleeper, which waits on a time.Timer.
func TimerSleeper() Sleeper { return timerSleeper{} }

type timerSleeper struct{}

func (timerSleeper) Sleep(ctx context.Context, d time.Duration) error { return sleep.For(ctx, d) }

// FakeClock is a Clock and a Sleeper for tests: time moves only when told
// to, and a Sleep moves it forward by the duration slept instead of waiting.
// It is a wall clock, so aligned refill works on it. FakeClock is safe for
// concurrent use.
type FakeClock struct {
	mu    sync.Mutex
	now   int64
	slept time.Duration
}

// NewFakeClock returns a fake clock that reads start nanoseconds.
func NewFakeClock(start int64) *FakeClock { return &FakeClock{now: start} }

// Now returns the clock's reading.
func (c *FakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// IsWallClock reports true.
func (c *FakeClock) IsWallClock() bool { return true }

// Set sets the reading to t nanoseconds; it may go backwards.
func (c *FakeClock) Set(t int64) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d (backwards if d is negative).
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}

// Sleep advances the clock by d and records it, unless ctx is already done.
func (c *FakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now += int64(d)
	c.slept += d
	c.mu.Unlock()
	return nil
}

// Slept is the total of every Sleep so far.
func (c *FakeClock) Slept() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}
