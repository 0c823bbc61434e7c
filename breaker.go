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

// defaultCircuitFailures is how many store calls in a row must fail before
// a Limiter opens its circuit, unless WithCircuitBreaker says otherwise.
const defaultCircuitFailures = 5
