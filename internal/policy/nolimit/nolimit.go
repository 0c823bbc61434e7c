// Package nolimit is the policy that limits nothing, as Symfony's
// NoLimiter: every request is allowed, Remaining and Limit are MaxInt64,
// and reservations wait 0. It keeps no state, so a store never needs to
// save one.
package nolimit

import (
	"math"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config is the policy without a limit. Its zero value is ready to use and
// safe for simultaneous use by multiple goroutines.
type Config struct{}

// State is empty: there is nothing to remember.
type State struct{}

var _ policy.Machine[State] = Config{}

// unlimited is the answer to every valid request.
var unlimited = policy.Result{Allowed: true, Remaining: math.MaxInt64, Limit: math.MaxInt64}

// Consume allows n tokens and changes nothing. n ≤ 0 is an argument
// error, as for every policy.
func (Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	return unlimited.Decision(0), false
}

// Reserve grants n tokens with a wait of 0 and changes nothing. n ≤ 0 and
// maxWait < 0 are argument errors.
func (Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	switch {
	case n <= 0:
		return policy.Result{Code: policy.NonPositiveTokens}, false
	case maxWait < 0:
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	return unlimited, false
}

// Peek answers as Consume does.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	d, _ := c.Consume(s, exists, now, n)
	return d.Result(c.Quota())
}

// Cancel changes nothing: nothing was taken.
func (Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is MinInt64: the state is worth nothing at any time.
func (Config) ExpiresAt(s *State) int64 { return math.MinInt64 }

// Quota is MaxInt64.
func (Config) Quota() int64 { return math.MaxInt64 }

// Window is 0: there is no limit to spread over time.
func (Config) Window() int64 { return 0 }

// AppendState appends the encoding of the empty state, its header alone.
func (Config) AppendState(dst []byte, s *State) []byte {
	return policy.AppendHeader(dst, policy.TagNoLimit)
}

// DecodeState checks a state written by AppendState.
func (Config) DecodeState(src []byte, s *State) error {
	return policy.DecodeInts(src, policy.TagNoLimit)
}

var _ policy.Debtor[State] = Config{}

// Charge allows n tokens and changes nothing: there is no limit to owe
// against.
func (c Config) Charge(s *State, exists bool, now, n int64) (policy.Result, bool) {
	return c.Peek(s, exists, now, n), false
}

// Refund changes nothing: nothing was taken.
func (Config) Refund(s *State, exists bool, now, at, n int64) bool { return false }

// Debt is 0: nothing is ever owed.
func (Config) Debt(s *State, exists bool, now int64) int64 { return 0 }
