package sluice

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/sleep"
)

// Clock is the time source of a Bucket, KeyBucket or Limiter (WithClock).
//
// Now returns nanoseconds. Only differences between readings matter, except
// for aligned refill, whose grid is fixed in Unix time: that needs a clock
// whose IsWallClock is true, counting from the Unix epoch.
//
// A clock that also has the method
//
//	Sleep(ctx context.Context, d time.Duration) error
//
// is what the calls that wait (Wait, WaitN) sleep on: its Sleep returns
// after d of its own time, or earlier with ctx.Err() when ctx is done. A
// fake clock (sluicetest.FakeClock) advances itself by d, so that waits in
// tests take no real time. A clock without Sleep is slept on a timer.
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

// Sleep sleeps on c, as c would be slept on (see Clock).
func (m millisClock) Sleep(ctx context.Context, d time.Duration) error { return sleep.On(ctx, m.c, d) }
