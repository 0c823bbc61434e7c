// Package sluicetest is test support for code that uses sluice: a fake
// clock that also sleeps on its own time, and an Observer that counts what
// it is told. It is for tests; production code has no use for it.
package sluicetest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// FakeClock is a sluice.Clock for tests: time moves only when told to, and
// a Sleep moves it forward by the duration slept instead of waiting, so
// that the calls that wait (Wait, WaitN) run at once. It is a wall clock,
// so aligned refill works on it. FakeClock is safe for concurrent use.
//
// To test a wait that must really block (a context ending during it),
// hide Sleep: struct{ sluice.Clock }{clock} reads the fake time and
// sleeps on a timer.
type FakeClock struct {
	mu    sync.Mutex
	now   int64
	slept time.Duration
}

var _ sluice.Clock = (*FakeClock)(nil)

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

// Sleep advances the clock by d and records it, unless ctx is already
// done, when it returns ctx.Err().
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

// kinds bounds the event kinds a Counter counts; sluice's are fewer.
const kinds = 32

// Counter is a sluice.Observer that counts the events it is told: how
// many of each kind, their tokens and their durations, the store failures
// by the policy applied, and the circuit's openings. Its zero value is
// ready, and it is safe for concurrent use; one may observe many limiters.
type Counter struct {
	events, tokens, durations [kinds]atomic.Int64
	failures                  [sluice.FailShare + 1]atomic.Int64
	circuitOpened             atomic.Int64
}

var _ sluice.Observer = (*Counter)(nil)

// Observe counts e.
func (c *Counter) Observe(e sluice.Event) {
	if int(e.Kind) < kinds {
		c.events[e.Kind].Add(1)
		c.tokens[e.Kind].Add(e.Tokens)
		c.durations[e.Kind].Add(int64(e.Duration))
	}
	switch {
	case e.Kind == sluice.EventStoreFailure && int(e.Failure) < len(c.failures):
		c.failures[e.Failure].Add(1)
	case e.Kind == sluice.EventCircuit && e.Circuit == sluice.CircuitOpen:
		c.circuitOpened.Add(1)
	}
}

// Events is the number of events of kind k told so far.
func (c *Counter) Events(k sluice.EventKind) int64 {
	if int(k) >= kinds {
		return 0
	}
	return c.events[k].Load()
}

// Tokens is the total of the Tokens of the events of kind k: with
// sluice.EventAllowed the tokens taken, with sluice.EventRejected those
// refused, with sluice.EventCancelled those given back.
func (c *Counter) Tokens(k sluice.EventKind) int64 {
	if int(k) >= kinds {
		return 0
	}
	return c.tokens[k].Load()
}

// Duration is the total of the Durations of the events of kind k: with
// sluice.EventWaited the time slept, with sluice.EventDelayed the delays
// handed to reservations.
func (c *Counter) Duration(k sluice.EventKind) time.Duration {
	if int(k) >= kinds {
		return 0
	}
	return time.Duration(c.durations[k].Load())
}

// StoreFailures is the number of store failures met with the policy f.
func (c *Counter) StoreFailures(f sluice.StoreFailure) int64 {
	if int(f) >= len(c.failures) {
		return 0
	}
	return c.failures[f].Load()
}

// CircuitOpened is the number of times the circuit opened.
func (c *Counter) CircuitOpened() int64 { return c.circuitOpened.Load() }
