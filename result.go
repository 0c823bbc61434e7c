package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// Result is a decision on one request: what AllowN and PeekN return on a
// Limiter, a Bucket and a KeyBucket, and a Reservation's Result.
type Result struct {
	// Allowed reports whether the request may pass; its tokens were taken,
	// unless ShadowRejected.
	Allowed bool
	// Shadow reports a decision of a limiter in shadow mode (WithShadow):
	// Allowed is then always true, whatever its policy decided.
	Shadow bool
	// ShadowRejected reports a request that a limiter in shadow mode let
	// through although its policy refused it: it took nothing, and
	// Remaining, RetryAfter and ResetAfter are those of the refusal, so
	// that RetryAfter says how long the request would have been held
	// back.
	ShadowRejected bool
	// Remaining is how many tokens a request could still take now, after
	// this decision: go-redis/redis_rate's Remaining and Bucket4j's
	// remainingTokens, which is AvailableTokens (Bucket4j's
	// getAvailableTokens) once the decision is made, never negative.
	Remaining int64
	// RetryAfter is how long until the same request could pass: 0 when
	// allowed, Never when it never can. Use it for Retry-After.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to the state of an
	// unused key.
	ResetAfter time.Duration
	// Limit is the policy's limit (a window's limit, a bucket's smallest
	// capacity).
	Limit int64
}

func resultOf(r policy.Result) Result {
	return Result{
		Allowed:    r.Allowed,
		Remaining:  r.Remaining,
		RetryAfter: time.Duration(r.RetryAfter),
		ResetAfter: time.Duration(r.ResetAfter),
		Limit:      r.Limit,
	}
}

// shadowed is res, a decision of a limiter in shadow mode: allowed
// whatever its policy decided.
func shadowed(res Result) Result {
	res.Shadow = true
	if !res.Allowed {
		res.Allowed, res.ShadowRejected = true, true
	}
	return res
}
