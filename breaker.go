package sluice

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/breaker"
)

// ErrCircuitOpen is the store failure of a call that a Limiter did not
// send to its store because the store's circuit is open: the last calls
// failed, and the limiter waits before it asks again (see
// WithCircuitBreaker). It matches driver.ErrUnavailable: nothing was
// written.
var ErrCircuitOpen = breaker.ErrOpen

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

// circuitStates maps the engine's breaker states to the public ones.
var circuitStates = [...]CircuitState{
	breaker.Closed:   CircuitClosed,
	breaker.Open:     CircuitOpen,
	breaker.HalfOpen: CircuitHalfOpen,
}

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
