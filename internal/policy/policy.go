// Package policy is the contract every keyed rate-limiting policy meets: a
// pure state machine over a fixed-size state, with a compact versioned
// encoding, so that the in-memory store, every other store and the
// simulator run the same decisions.
//
// A policy package (internal/policy/fixedwindow, internal/policy/slidingwindow, ...)
// exports a Config that implements Machine[State] for its own State type.
// Time is nanoseconds, taken as a value; there is no clock, lock or I/O in a
// policy.
package policy

import (
	"bytes"
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
	TokensAboveLimit         // n > the limit, where the policy treats that as an error rather than a rejection; Result.Limit is that limit
	NonPositiveMaxWait       // a reservation's maxWait < 0
	ReserveNotSupported      // the policy cannot reserve (sliding log, sliding window, ...)
	NoSlots                  // a slot operation on a policy without slots (see Slots)
	TTLOutOfRange            // a slot's TTL ≤ 0 or above the policy's lease; Result.Limit is the lease in ns
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

// Decision is Consume's answer: a Result without Wait, whose limit is
// given as which of the machine's limits it is (Verdict.Bound), so that it
// is four words. Go passes a struct of at most four words in registers
// from call to call; a larger one is copied through memory at every level
// it is returned through, with 16-byte loads that stall on the narrower
// stores that filled it, which cost a third of a keyed decision when
// Consume answered with a Result (docs/benchmarks.md, "What stays for
// speed").
type Decision struct {
	Verdict
	// Remaining, RetryAfter and ResetAfter are as in Result.
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
}

// Verdict is how a decision went: its argument error, whether it allowed
// the request, and which limit it reports.
type Verdict struct {
	Code    Code
	Allowed bool
	// Bound indexes Limits(m) for the decision's limit, as Result.Limit:
	// 0 for a machine with one limit.
	Bound uint32
}

// Bounded is implemented by a machine whose decisions report one of
// several limits, as a compound reports the limit of its most restrictive
// member; a Decision's Bound indexes Limits. Any other machine's decisions
// report its Quota.
type Bounded interface {
	Limits() []int64
}

// Limits is the limits that m's decisions report, indexed by
// Decision.Bound: m's Limits when it is Bounded, else its Quota alone.
func Limits(m interface{ Quota() int64 }) []int64 {
	if b, ok := m.(Bounded); ok {
		return b.Limits()
	}
	return []int64{m.Quota()}
}

// BoundOf is the index in limits of the first that is limit, 0 if none
// is: the Bound of a decision that reports limit.
func BoundOf(limits []int64, limit int64) uint32 {
	for i, l := range limits {
		if l == limit {
			return uint32(i)
		}
	}
	return 0
}

// Decision is r as Consume answers it: its limit is the one of bound.
func (r Result) Decision(bound uint32) Decision {
	return Decision{Verdict: Verdict{Code: r.Code, Allowed: r.Allowed, Bound: bound},
		Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}
}

// ResultIn is d as a Result of a machine whose limits are limits (its
// Limits): Result with the limit of d.Bound.
func (d Decision) ResultIn(limits []int64) Result { return d.Result(limits[d.Bound]) }

// Result is d as a Result whose limit, that of d.Bound, is limit.
func (d Decision) Result(limit int64) Result {
	res := Result{Code: d.Code, Allowed: d.Allowed, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
	if d.Code == OK || d.Code == TokensAboveLimit {
		res.Limit = limit
	}
	return res
}

// Machine is a policy as a pure state machine over the state S.
//
// Every method takes the state by pointer; exists reports whether it holds
// a key's state or is the zero value of a key not seen yet (or expired).
// A method that returns changed=false must leave *s as it was given.
type Machine[S any] interface {
	// Consume decides whether n tokens may pass at now, taking them if so.
	Consume(s *S, exists bool, now, n int64) (d Decision, changed bool)
	// Reserve takes n tokens that will be there within maxWait (Never for
	// no bound), possibly in the future, and returns the wait in Result.Wait.
	// A reservation that cannot be had within maxWait is refused
	// (Allowed=false, RetryAfter the wait it would need) and takes nothing.
	Reserve(s *S, exists bool, now, n, maxWait int64) (res Result, changed bool)
	// Peek answers as Consume would for n tokens, without taking them.
	Peek(s *S, exists bool, now, n int64) Result
	// Cancel gives back what it can, at now, of the reservation r from a
	// state that other requests changed after r (Undo restores an
	// unchanged one exactly, and calls Cancel only for the others). It
	// must leave no more tokens than there were before r, and take
	// nothing from requests granted after r: their tokens stay theirs
	// and their waits stay as they were granted. A policy that cannot
	// tell its tokens apart from later ones gives nothing back. It
	// reports whether *s changed; a policy that cannot reserve reports
	// false.
	Cancel(s *S, now int64, r *Receipt) (changed bool)
	// ExpiresAt is the time from which the state is worth no more than no
	// state at all, so a store may drop it.
	ExpiresAt(s *S) int64
	// Quota is the policy's limit, as reported in Result.Limit and headers.
	Quota() int64
	// Window is the time, in nanoseconds, over which Quota applies, so
	// that Quota per Window is the policy's long-run rate: a window's
	// interval, or the time to earn Quota tokens at the policy's rate
	// (see TimeToEarn). It is 0 for a policy without a limit.
	Window() int64
	// AppendState appends the encoding of *s to dst.
	AppendState(dst []byte, s *S) []byte
	// DecodeState decodes src, as AppendState wrote it, into *s.
	DecodeState(src []byte, s *S) error
}

// Lapsing is implemented by a Machine whose Consume, Reserve and Peek
// answer on a state past its ExpiresAt exactly as on no state, and leave a
// state that answers every later call as theirs would: the expiry is part
// of its arithmetic. A holder of states need not then ask ExpiresAt
// before those calls (it still does to drop idle states). Lapses reports
// whether that holds for the machine's configuration; policytest checks
// it wherever it is claimed.
type Lapsing interface {
	Lapses() bool
}

// Lapses reports whether m is a Lapsing machine that lapses.
func Lapses(m any) bool {
	l, ok := m.(Lapsing)
	return ok && l.Lapses()
}

// Reserves reports whether m can reserve at all, rather than answering
// ReserveNotSupported to every Reserve: the capability is the machine's
// own answer, asked for one token of a key with no state, so that a
// compound that cannot reserve through one of its members says so too.
// policytest checks that every state gets the same answer.
func Reserves[S any](m Machine[S]) bool {
	var s S
	res, _ := m.Reserve(&s, false, 0, 1, Never)
	return res.Code != ReserveNotSupported
}

// Leasing is what quota leasing (package lease) can do with a machine's
// state: take many tokens of a key's shared state in one Consume, for a
// process to spend locally. It is the machine's to say, so that a policy
// added later is leased, or refused for leasing, without a change to the
// engine or the API.
type Leasing uint8

// The leasings.
const (
	// NoLease: a lease cannot be carved out of the state by one
	// consumption of many tokens (a sliding window's weighted count, a
	// log's entries, a shaper's queue, a compound's members).
	NoLease Leasing = iota
	// Leases: a lease's tokens may be spent until the lease's TTL.
	Leases
	// LeasesToWindowEnd: as Leases, but a lease ends with the window it
	// was granted in, after which the state forgets the tokens it took.
	LeasesToWindowEnd
)

// A Leaser is a Machine whose state can be leased (see Leasing).
type Leaser interface {
	Leasing() Leasing
}

// LeasingOf is m's Leasing: NoLease unless m is a Leaser.
func LeasingOf(m any) Leasing {
	if l, ok := m.(Leaser); ok {
		return l.Leasing()
	}
	return NoLease
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

// CheckTokens is the argument check of a request for n tokens of a
// policy whose limit is limit: n ≤ 0 is an error, and so is n above the
// limit where the policy is strict about it. It returns OK when n is
// valid.
func CheckTokens(n, limit int64, strict bool) Code {
	switch {
	case n <= 0:
		return NonPositiveTokens
	case strict && n > limit:
		return TokensAboveLimit
	}
	return OK
}

// Refusal is the result of the argument error code of a policy whose limit
// is limit: for tokens above the limit, it says which limit.
func Refusal(code Code, limit int64) Result {
	res := Result{Code: code}
	if code == TokensAboveLimit {
		res.Limit = limit
	}
	return res
}

// Receipt is what a granted reservation did to a key, kept by the caller
// so that it can give the tokens back (Undo) when it will not use them.
// States are encoded as the machine's AppendState writes them.
type Receipt struct {
	Tokens int64 // n, as reserved
	At     int64 // the time of the reservation
	Due    int64 // At plus Result.Wait: when the tokens are the caller's
	// Before is the state the reservation found; empty when the key had
	// none (new or expired).
	Before []byte
	// After is the state the reservation left.
	After []byte
}

// Outcome is what Undo did to a key's state.
type Outcome uint8

// The outcomes of Undo.
const (
	Unchanged Outcome = iota // nothing to give back
	Changed                  // the state changed; store it
	Dropped                  // the key is back to no state; forget it
)

// Undo gives back, at now, the tokens of the reservation r from *s, a
// state of m (exists false: the key has none), as x/time/rate's
// Reservation.CancelAt does:
//
//   - once the tokens are due (now after r.Due) they count as used, and
//     nothing changes;
//   - when the key has no state any more (it was reset), there is
//     nothing to give back;
//   - when the state is still the one r left, nothing having been taken
//     since, it goes back exactly to the one r found: Before, or no state
//     (Dropped) when the key had none;
//   - otherwise m.Cancel decides what it can give back without touching
//     the requests granted after r.
//
// Undo never leaves more tokens than there were before r.
func Undo[S any](m Machine[S], s *S, exists bool, now int64, r *Receipt) Outcome {
	if now > r.Due || !exists {
		return Unchanged
	}
	var buf [64]byte
	if !bytes.Equal(m.AppendState(buf[:0], s), r.After) {
		if m.Cancel(s, now, r) {
			return Changed
		}
		return Unchanged
	}
	if len(r.Before) == 0 {
		return Dropped
	}
	if m.DecodeState(r.Before, s) != nil {
		return Unchanged
	}
	return Changed
}

// NewReceipt is the receipt of a reservation of n tokens at now, due after
// wait, that took the state from before to after.
func NewReceipt(now, n, wait int64, before, after []byte) *Receipt {
	return &Receipt{Tokens: n, At: now, Due: SatAdd(now, wait), Before: before, After: after}
}

// RemainingAt is the Remaining of a key whose Peek of 1 token is p: a
// granted reservation reports what the key has left when its tokens are
// due, the moment its caller goes ahead. An allowed Remaining is what
// there was less the token peeked at, for every policy.
func RemainingAt(p Result) int64 {
	if p.Allowed {
		return SatAdd(p.Remaining, 1)
	}
	return p.Remaining
}
