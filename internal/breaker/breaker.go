// Package breaker is the circuit breaker in front of a Limiter's store:
// after a number of consecutive failed calls it stops asking the store,
// so that while the store is down or hangs every call gets the failure
// policy's answer at once instead of after a store timeout, and it lets
// one call through now and then (the probe) to find the store back. A
// Set keeps one breaker per partition of a store whose partitions fail
// on their own (the masters of a Redis Cluster).
package breaker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// ErrOpen is the error of a call the breaker kept from the store. It
// matches driver.ErrUnavailable: nothing was written.
var ErrOpen = fmt.Errorf("sluice: store circuit open: %w", driver.ErrUnavailable)

// State is the state of a breaker; sluice.CircuitState has the same
// values.
type State uint8

// The states.
const (
	Closed   State = iota // calls go to the store; the initial state
	Open                  // calls are answered at once, without the store
	HalfOpen              // one call, the probe, goes to the store
)

// The circuit stays open for MinOpen after it opens, and twice as long
// after each failed probe, up to MaxOpen: so a store that answers again is
// asked within MaxOpen (plus the probe's round trip), and a store that
// stays down gets one probe every MaxOpen from each breaker.
const (
	MinOpen = 50 * time.Millisecond
	MaxOpen = 500 * time.Millisecond
)

// Breaker is a circuit breaker. Its fast path, a closed circuit that has
// seen no failure, reads two atomics; state changes take mu. It is safe
// for simultaneous use by multiple goroutines.
type Breaker struct {
	threshold int64 // ≤ 0: off
	notify    func(State)
	now       func() time.Time

	failures atomic.Int64 // consecutive failed store calls
	tripped  atomic.Bool  // state != Closed

	mu      sync.Mutex
	state   State         // guarded by mu
	openFor time.Duration // guarded by mu; how long the last opening lasts
	until   time.Time     // guarded by mu; when an open circuit lets a probe through
	probe   uint64        // guarded by mu; the generation of the probe in flight
}

// New returns a breaker that opens after threshold consecutive failures
// (off when threshold ≤ 0) and tells notify, if not nil, of its state
// changes, in order and with the breaker locked.
func New(threshold int, notify func(State)) *Breaker {
	return &Breaker{threshold: int64(threshold), notify: notify, now: time.Now}
}

// Allow reports whether a call may go to the store: nil, with probe
// non-zero when the call is the probe of a half-open circuit (the caller
// then passes it to EndProbe), or ErrOpen.
func (b *Breaker) Allow() (probe uint64, err error) {
	if !b.tripped.Load() {
		return 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == Closed:
		return 0, nil
	case b.state == Open && !b.now().Before(b.until):
		b.probe++
		b.set(HalfOpen)
		return b.probe, nil
	}
	return 0, ErrOpen
}

// Blocking reports whether calls are being kept from the store: the
// circuit is open, or half-open with its probe in flight.
func (b *Breaker) Blocking() bool {
	if !b.tripped.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != Closed
}

// Refusing returns ErrOpen when the circuit is open, not half-open: calls
// that queued before it opened are then answered at once, while those
// queued behind a probe may follow it to the store.
func (b *Breaker) Refusing() error {
	if !b.tripped.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open {
		return ErrOpen
	}
	return nil
}

// Result records the outcome of a store call: nil, or a store failure.
func (b *Breaker) Result(err error) {
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
			b.set(Closed)
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
	case Closed:
		if n >= b.threshold {
			b.reopen()
		}
	case HalfOpen:
		b.reopen()
	}
}

// EndProbe ends the probe Allow returned: if no store call recorded its
// outcome (the probe never reached the store: its caller gave up while it
// was queued), the circuit opens again.
func (b *Breaker) EndProbe(probe uint64) {
	if probe == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == HalfOpen && b.probe == probe {
		b.reopen()
	}
}

// reopen opens the circuit for twice as long as the last time, within
// [MinOpen, MaxOpen]. It requires that b.mu is held.
func (b *Breaker) reopen() {
	b.openFor = min(max(2*b.openFor, MinOpen), MaxOpen)
	b.until = b.now().Add(b.openFor)
	b.set(Open)
}

// set moves to state s and tells notify. It requires that b.mu is held,
// so that notify sees the changes in order.
func (b *Breaker) set(s State) {
	if b.state == s {
		return
	}
	b.state = s
	b.tripped.Store(s != Closed)
	if b.notify != nil {
		b.notify(s)
	}
}
