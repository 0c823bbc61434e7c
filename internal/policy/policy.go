// Package policy is the contract every keyed rate-limiting policy meets: a
// pure state machine over a fixed-size state, with a compact versioned
// encoding, so that the in-memory store, every other store and the
// simulator run the same decisions.
//
// A policy package (internal/fixedwindow, internal/slidingwindow, ...)
// exports a Config that implements Machine[State] for its own State type.
// Time is nanoseconds, taken as a value; there is no clock, lock or I/O in a
// policy.
package policy

import (
	"errors"
	"math"
)

// Never is a wait for something that can never happen.
const Never = math.MaxInt64

// Code is an argument error found by a policy. A call that reports one
// changes nothing.
type Code uint8

// The argument errors.
const (
	OK                  Code = iota
	NonPositiveTokens        // n ≤ 0
	TokensAboveLimit         // n > the limit, where the policy treats that as an error rather than a rejection
	NonPositiveMaxWait       // a reservation's maxWait < 0
	ReserveNotSupported      // the policy cannot reserve (sliding log, sliding window, ...)
)

// Result is a policy's answer to one request.
type Result struct {
	Code    Code
	Allowed bool
	// Remaining is what a request could still take now, after this one
	// (never below 0).
	Remaining int64
	// RetryAfter is the time from now until the same request could be
	// allowed: 0 when allowed, Never when it never can be.
	RetryAfter int64
	// ResetAfter is the time from now until the limiter is back to the
	// state of an unused key.
	ResetAfter int64
	// Limit is the policy's limit, for headers.
	Limit int64
	// Wait is, for a granted reservation, the time from now until the
	// reserved tokens are the caller's.
	Wait int64
}

// Machine is a policy as a pure state machine over the state S.
//
// Every method takes the state by pointer; exists reports whether it holds
// a key's state or is the zero value of a key not seen yet (or expired).
// A method that returns changed=false must leave *s as it was given.
type Machine[S any] interface {
	// Consume decides whether n tokens may pass at now, taking them if so.
	Consume(s *S, exists bool, now, n int64) (res Result, changed bool)
	// Reserve takes n tokens that will be there within maxWait (Never for
	// no bound), possibly in the future, and returns the wait in Result.Wait.
	// A reservation that cannot be had within maxWait is refused
	// (Allowed=false, RetryAfter the wait it would need) and takes nothing.
	Reserve(s *S, exists bool, now, n, maxWait int64) (res Result, changed bool)
	// Peek answers as Consume would for n tokens, without taking them.
	Peek(s *S, exists bool, now, n int64) Result
	// ExpiresAt is the time from which the state is worth no more than no
	// state at all, so a store may drop it.
	ExpiresAt(s *S) int64
	// Quota is the policy's limit, as reported in Result.Limit and headers.
	Quota() int64
	// AppendState appends the encoding of *s to dst.
	AppendState(dst []byte, s *S) []byte
	// DecodeState decodes src, as AppendState wrote it, into *s.
	DecodeState(src []byte, s *S) error
}

// ErrBadState is matched by every error that decoding a stored state returns.
var ErrBadState = errors.New("sluice: bad stored state")

// CheckReserve is the argument check every Reserve starts with: tokens
// first, then the bound on the wait. It returns OK when both are valid.
func CheckReserve(n, maxWait int64) Code {
	switch {
	case n <= 0:
		return NonPositiveTokens
	case maxWait < 0:
		return NonPositiveMaxWait
	}
	return OK
}
