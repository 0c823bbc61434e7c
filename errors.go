package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidArgument is matched (errors.Is) by every *ArgumentError.
	ErrInvalidArgument = errors.New("sluice: invalid argument")
	// ErrInvalidConfig is matched (errors.Is) by every *ConfigError.
	ErrInvalidConfig = errors.New("sluice: invalid configuration")
	// ErrMaxWaitExceeded is matched by the *MaxWaitError of a wait that
	// would be longer than allowed. Nothing was taken.
	ErrMaxWaitExceeded = errors.New("sluice: max wait exceeded")
	// ErrTokensAboveLimit is matched by the *ArgumentError of a request
	// for more tokens than the limit of a policy that refuses that as an
	// argument error (FixedWindow, TokenBucket, and a Compound with one of
	// them). The other policies reject such a request: a Result that is
	// not Allowed, with RetryAfter Never. Either way the request can never
	// pass; callers that answer both alike check for both.
	ErrTokensAboveLimit = errors.New("sluice: tokens above the limit")
)

// ArgumentError reports an argument out of its bounds. The call that
// returned it changed nothing.
type ArgumentError struct {
	Op  string // the function or method, with its type: "Bucket.TryConsume", "NewLimiter"
	Arg string // the argument, e.g. "tokens", or the option, e.g. "WithMaxKeys"
	// Value is the value given: an int64 for a count, a time.Duration for
	// a duration, nil when the argument is wrong whatever its value.
	Value any
	Want  string // the bound it broke, e.g. "must be positive"
	// kind, when not nil, is the sentinel the error matches besides
	// ErrInvalidArgument: ErrTokensAboveLimit, or errors.ErrUnsupported
	// for an option that the policy cannot support (WithLease).
	kind error
}

// nilArgument is the *ArgumentError of op's required argument arg, nil.
func nilArgument(op, arg string) *ArgumentError {
	return &ArgumentError{Op: op, Arg: arg, Want: "must not be nil"}
}

func (e *ArgumentError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("sluice: %s: %s %s", e.Op, e.Arg, e.Want)
	}
	return fmt.Sprintf("sluice: %s: %s %s, got %v", e.Op, e.Arg, e.Want, e.Value)
}

// Is reports whether target is ErrInvalidArgument, or ErrTokensAboveLimit
// or errors.ErrUnsupported when the error is of that kind.
func (e *ArgumentError) Is(target error) bool {
	return target == ErrInvalidArgument || e.kind != nil && target == e.kind
}

// Rule names a configuration rule. The values are the codes of the
// conformance vector format.
type Rule string

// The configuration rules: first those Bucket4j enforces on buckets, then
// sluice's own for keyed policies.
const (
	RuleNonPositiveCapacity     Rule = "non_positive_capacity"
	RuleNonPositiveRefillTokens Rule = "non_positive_refill_tokens"
	RuleNonPositivePeriod       Rule = "non_positive_period"
	RuleRefillRateTooHigh       Rule = "refill_rate_too_high" // more than 1 token per nanosecond
	RuleNegativeInitialTokens   Rule = "negative_initial_tokens"
	RuleNegativeFirstRefill     Rule = "negative_first_refill"        // aligned first refill before the Unix epoch
	RuleAdaptiveWithManual      Rule = "adaptive_with_manual_initial" // adaptive initial tokens and WithInitialTokens
	RuleNoLimits                Rule = "no_limits"                    // no bandwidth at all
	RuleDuplicateID             Rule = "duplicate_id"                 // two bandwidths with one ID
	RuleAlignedNeedsWallClock   Rule = "aligned_needs_wall_clock"     // aligned refill on a clock not counting from the epoch
	RuleUnknownRefill           Rule = "unknown_refill"               // the zero Refill
	RuleNonPositiveLimit        Rule = "non_positive_limit"           // a policy's limit
	RuleNegativeMaxQueue        Rule = "negative_max_queue"           // a shaper's max_queue
	RuleNoMembers               Rule = "no_members"                   // a compound policy without members
)

// ConfigError reports a configuration that breaks a rule: which bandwidth
// (its index and ID), which field, and the value.
type ConfigError struct {
	Rule      Rule
	Bandwidth int    // index in Config.Bandwidths, or -1 for the whole configuration
	ID        string // the bandwidth's ID, if it has one
	Field     string // e.g. "capacity", "refill.period"
	Value     string // the offending value as written
	Msg       string // what the rule requires
}

func (e *ConfigError) Error() string {
	where := "sluice: config"
	if e.Bandwidth >= 0 {
		where = fmt.Sprintf("sluice: bandwidth %d", e.Bandwidth)
		if e.ID != "" {
			where += fmt.Sprintf(" (id %q)", e.ID)
		}
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", where, e.Msg)
	}
	return fmt.Sprintf("%s: %s %s, got %s", where, e.Field, e.Msg, e.Value)
}

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// MaxWaitError is returned when tokens cannot be had within the maximum
// wait, or before the deadline of the call's context. It matches
// ErrMaxWaitExceeded, and context.DeadlineExceeded when Deadline is set.
// Nothing was taken.
type MaxWaitError struct {
	Tokens int64
	// Wait is the wait the tokens would need, Never when they can never
	// be had.
	Wait time.Duration
	// MaxWait is the bound the wait broke.
	MaxWait time.Duration
	// Deadline reports that the bound was the context's deadline, sooner
	// than the maximum wait: MaxWait is the time that was left until it.
	Deadline bool
}

func (e *MaxWaitError) Error() string {
	tokens := fmt.Sprintf("%d tokens need", e.Tokens)
	if e.Tokens == 1 {
		tokens = "1 token needs"
	}
	switch {
	case e.Wait == Never && e.Tokens == 1:
		return "sluice: max wait exceeded: 1 token can never be had"
	case e.Wait == Never:
		return fmt.Sprintf("sluice: max wait exceeded: %d tokens can never be had", e.Tokens)
	case e.Deadline:
		return fmt.Sprintf("sluice: %s %v, past the context's deadline in %v", tokens, e.Wait, e.MaxWait)
	}
	return fmt.Sprintf("sluice: max wait exceeded: %s %v, at most %v allowed", tokens, e.Wait, e.MaxWait)
}

// Is reports whether target is ErrMaxWaitExceeded, or
// context.DeadlineExceeded when the bound was the context's deadline.
func (e *MaxWaitError) Is(target error) bool {
	return target == ErrMaxWaitExceeded || e.Deadline && target == context.DeadlineExceeded
}
