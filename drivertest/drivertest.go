package drivertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Harness makes stores for the suite.
type Harness interface {
	// MakeStore returns a store, failing t or returning an error when it
	// cannot. Calls may return stores on the same backing server: the
	// suite gives every test keys of its own (t.Name() and a random
	// suffix), so it may also run against a server in use. A harness that
	// must close what it made registers that with t.Cleanup.
	MakeStore(ctx context.Context, t *testing.T) (driver.Store, error)
}

// HarnessFunc adapts a function to a Harness.
type HarnessFunc func(ctx context.Context, t *testing.T) (driver.Store, error)

// MakeStore returns f(ctx, t).
func (f HarnessFunc) MakeStore(ctx context.Context, t *testing.T) (driver.Store, error) {
	return f(ctx, t)
}

// TTLHarness is implemented by a harness whose stores expire states late,
// for instance because they keep expiries in whole seconds or remove
// expired states in a periodic sweep instead of when they are read.
type TTLHarness interface {
	Harness
	// TTLGranularity returns how long after its TTL a state may still be
	// read; the suite waits that much longer before it requires the state
	// gone. A negative granularity means the store may keep states any
	// time past their TTL: the suite then checks only that a state is
	// kept for its TTL.
	TTLGranularity() time.Duration
}

// ClockHarness is implemented by a harness whose stores measure TTLs on a
// clock the harness controls: a fake clock, or a server such as miniredis
// that expires keys only when told time has passed. The suite then moves
// time with Advance instead of sleeping.
type ClockHarness interface {
	Harness
	// Advance moves the clock of every store the harness made forward by
	// d, which is positive.
	Advance(d time.Duration)
}

// testTimeout bounds each test of the suite, so that a store that hangs
// fails the test instead of the whole run.
const testTimeout = time.Minute

// RunConformanceTests runs the conformance suite against the stores h
// makes, each test as a subtest of t that makes its own store.
func RunConformanceTests(t *testing.T, h Harness) {
	t.Helper()
	runDriverTests(t, h)
	runLimiterTests(t, h)
}

// env is what a test of the suite works with: a store made for it, the
// harness that made it and a context that ends with the test.
type env struct {
	ctx   context.Context
	store driver.Store
	h     Harness
	clock clock
}

// newEnv makes a store with h for t.
func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	s, err := h.MakeStore(ctx, t)
	if err != nil {
		t.Fatalf("MakeStore: %v", err)
	}
	if s == nil {
		t.Fatal("MakeStore returned a nil store and no error")
	}
	e := &env{ctx: ctx, store: s, h: h, clock: clock{start: time.Now()}}
	if ch, ok := h.(ClockHarness); ok {
		e.clock.adv = ch
	}
	return e
}

// key returns a key of t's own: t.Name(), the parts, and a random suffix.
func key(t *testing.T, parts ...any) string {
	t.Helper()
	return fmt.Sprintf("drivertest/%s/%v/%016x", t.Name(), parts, rand.Uint64())
}

// clock is the suite's view of the time the store measures TTLs on: the
// harness's clock when it is a ClockHarness, the real one otherwise.
type clock struct {
	adv   ClockHarness // nil: real time
	start time.Time
	mu    sync.Mutex
	moved time.Duration // guarded by mu; how far adv has been advanced
}

// now returns the current time on the store's clock.
func (c *clock) now() time.Time {
	if c.adv == nil {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start.Add(c.moved)
}

// sleep lets d pass on the store's clock.
func (c *clock) sleep(d time.Duration) {
	if c.adv == nil {
		time.Sleep(d)
		return
	}
	c.mu.Lock()
	c.moved += d
	c.mu.Unlock()
	c.adv.Advance(d)
}
