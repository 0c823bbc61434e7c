package sluice

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// ErrCircuitOpen is the store failure of a call that a Limiter did not
// send to its store because the store's circuit is open: the last calls
// failed, and the limiter waits before it asks again (see
// WithCircuitBreaker). It matches driver.ErrUnavailable: nothing was
// written.
var ErrCircuitOpen = fmt.Errorf("sluice: store circuit open: %w", driver.ErrUnavailable)

// CircuitState is the state of a Limiter's circuit breaker in front of its
// store.
type CircuitState uint8

// The circuit states.
const (
	// CircuitClosed: calls go to the store. It is the initial state.
	CircuitClosed CircuitState = iota
	// CircuitOpen: the store failed repeatedly; calls get the failure
	// policy's answer at once, without asking the store.
	CircuitOpen
	// CircuitHalfOpen: one call, the probe, goes to the store; the others
	// are answered as when open. The probe's success closes the circuit,
	// its failure opens it again for twice as long.
	CircuitHalfOpen
)

func (s CircuitState) String() string {
	switch s {
	case CircuitClosed:
		return "closed"
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("CircuitState(%d)", uint8(s))
}

// DefaultCircuitFailures is how many store calls in a row must fail before
// a Limiter opens its circuit, unless WithCircuitBreaker says otherwise.
const DefaultCircuitFailures = 5

// The circuit stays open for circuitMinOpen after it opens, and twice as
// long after each failed probe, up to circuitMaxOpen: so a store that
// answers again is asked within circuitMaxOpen (plus the probe's round
// trip), and a store that stays down gets one probe every circuitMaxOpen
// from each limiter.
const (
	circuitMinOpen = 50 * time.Millisecond
	circuitMaxOpen = 500 * time.Millisecond
)

// WithCircuitBreaker sets after how many consecutive failed store calls a
// Limiter stops asking its store, so that while the store is down or
// hangs every call gets the failure policy's answer (FailClosed,
// FailOpen, FailLocal) at once instead of after a store timeout. The
// circuit then stays open 50ms, and after each failed probe twice as
// long, at most 500ms; a probe that succeeds closes it. The default, and
// n = 0, is DefaultCircuitFailures; n < 0 turns the breaker off.
//
// The breaker is the limiter's own, not shared with other limiters on
// the same store: each detects an outage after its own n failures, and
// reports its state changes to its StoreListener.
func WithCircuitBreaker(n int) Option { return func(o *options) { o.circuitFailures = n } }

// breaker is a Limiter's circuit breaker. Its fast path, a closed circuit
// that has seen no failure, reads two atomics; state changes take mu.
type breaker struct {
	threshold int64 // ≤ 0: off
	notify    func(CircuitState)
	now       func() time.Time

	failures atomic.Int64 // consecutive failed store calls
	tripped  atomic.Bool  // state != CircuitClosed

	mu      sync.Mutex
	state   CircuitState  // guarded by mu
	openFor time.Duration // guarded by mu; how long the last opening lasts
	until   time.Time     // guarded by mu; when an open circuit lets a probe through
	probe   uint64        // guarded by mu; the generation of the probe in flight
}

// newBreaker returns a breaker that opens after threshold failures (off
// when threshold ≤ 0) and tells notify, if not nil, of its state changes.
func newBreaker(threshold int, notify func(CircuitState)) *breaker {
	return &breaker{threshold: int64(threshold), notify: notify, now: time.Now}
}

// allow reports whether a call may go to the store: nil, with probe
// non-zero when the call is the probe of a half-open circuit (the caller
// then passes it to endProbe), or ErrCircuitOpen.
func (b *breaker) allow() (probe uint64, err error) {
	if !b.tripped.Load() {
		return 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == CircuitClosed:
		return 0, nil
	case b.state == CircuitOpen && !b.now().Before(b.until):
		b.probe++
		b.set(CircuitHalfOpen)
		return b.probe, nil
	}
	return 0, ErrCircuitOpen
}

// open reports whether calls are being kept from the store: the circuit
// is open, or half-open with its probe in flight.
func (b *breaker) open() bool {
	if !b.tripped.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != CircuitClosed
}

// refusing reports whether the circuit is open, not half-open: calls that
// queued before it opened are then answered at once, while those queued
// behind a probe may follow it to the store.
func (b *breaker) refusing() bool {
	if !b.tripped.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == CircuitOpen
}

// result records the outcome of a store call: nil, or a store failure.
func (b *breaker) result(err error) {
	if b.threshold <= 0 {
		return
	}
	if err == nil {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if b.tripped.Load() {
			b.mu.Lock()
			b.openFor = 0
			b.set(CircuitClosed)
			b.mu.Unlock()
		}
		return
	}
	n := b.failures.Add(1)
	if n < b.threshold && !b.tripped.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case CircuitClosed:
		if n >= b.threshold {
			b.reopen()
		}
	case CircuitHalfOpen:
		b.reopen()
	}
}

// endProbe ends the probe allow returned: if no store call recorded its
// outcome (the probe never reached the store: its caller gave up while it
// was queued), the circuit opens again.
func (b *breaker) endProbe(probe uint64) {
	if probe == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == CircuitHalfOpen && b.probe == probe {
		b.reopen()
	}
}

// reopen opens the circuit for twice as long as the last time, within
// [circuitMinOpen, circuitMaxOpen]. It requires that b.mu is held.
func (b *breaker) reopen() {
	b.openFor = min(max(2*b.openFor, circuitMinOpen), circuitMaxOpen)
	b.until = b.now().Add(b.openFor)
	b.set(CircuitOpen)
}

// set moves to state s and tells the listener. It requires that b.mu is
// held, so that the listener sees the changes in order.
func (b *breaker) set(s CircuitState) {
	if b.state == s {
		return
	}
	b.state = s
	b.tripped.Store(s != CircuitClosed)
	if b.notify != nil {
		b.notify(s)
	}
}
