// Package conformance runs conformance vector files against a token bucket.
//
// A vector file is a JSON suite of cases; each case builds a bucket on a fake
// clock and runs steps that move the clock or call an operation and state
// what it must return. The format is described in FORMAT.md beside the
// shared examples (conformance/FORMAT.md of the sluice project).
//
// The same files run against every implementation through a [Target], which
// builds the [Bucket] under test: [Local] for the in-memory *sluice.Bucket,
// and later one per store. [Run] returns a [Report] for the sluice command;
// [RunT] runs each file and case as a subtest.
//
// Limiter cases (fixed window, sliding window and the other policies) are
// reported as skipped until sluice implements those policies.
package conformance

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Bucket is the token bucket under test: the operations of *sluice.Bucket,
// each taking a context first so that buckets kept in a store can implement
// it. Errors are returned as sluice returns them (an *sluice.ArgumentError
// for a bad argument, a *sluice.ConfigError for a bad configuration); any
// other error fails the step.
type Bucket interface {
	TryConsume(ctx context.Context, tokens int64) (bool, error)
	TryConsumeAndReturnRemaining(ctx context.Context, tokens int64) (sluice.ConsumptionProbe, error)
	EstimateAbilityToConsume(ctx context.Context, tokens int64) (sluice.EstimationProbe, error)
	TryConsumeAsMuchAsPossible(ctx context.Context) (int64, error)
	TryConsumeUpTo(ctx context.Context, limit int64) (int64, error)
	ConsumeIgnoringRateLimits(ctx context.Context, tokens int64) (time.Duration, error)
	AddTokens(ctx context.Context, tokens int64) error
	ForceAddTokens(ctx context.Context, tokens int64) error
	Reset(ctx context.Context) error
	AvailableTokens(ctx context.Context) (int64, error)
	ReplaceConfiguration(ctx context.Context, cfg sluice.Config, strategy sluice.TokensInheritance) error
}

// BlockingBucket is a Bucket whose calls can wait for their tokens, sleeping
// on the sleeper its Target was given. A case with a blocking step is
// skipped, never passed, for a Bucket that does not implement it.
type BlockingBucket interface {
	Bucket
	BlockingTryConsume(ctx context.Context, tokens int64, maxWait time.Duration) (bool, error)
	BlockingConsume(ctx context.Context, tokens int64) error
}

// Target builds the buckets under test. Each case gets a new bucket.
type Target interface {
	// Name identifies the target in reports, e.g. "local".
	Name() string
	// NewBucket returns a new bucket with the configuration cfg, created
	// now by clock; blocking calls wait on sleeper. It returns the
	// *sluice.ConfigError of an invalid cfg.
	NewBucket(ctx context.Context, cfg sluice.Config, clock sluice.Clock, sleeper sluice.Sleeper) (Bucket, error)
}

// Local is the Target of the in-memory *sluice.Bucket. Its buckets
// implement BlockingBucket. The zero value is ready to use.
type Local struct{}

var _ Target = Local{}

// Name returns "local".
func (Local) Name() string { return "local" }

// NewBucket returns a *sluice.Bucket with cfg, clock and sleeper.
func (Local) NewBucket(_ context.Context, cfg sluice.Config, clock sluice.Clock, sleeper sluice.Sleeper) (Bucket, error) {
	b, err := sluice.NewBucket(cfg, sluice.WithClock(clock), sluice.WithSleeper(sleeper))
	if err != nil {
		return nil, err
	}
	return localBucket{b}, nil
}

// localBucket adapts *sluice.Bucket to BlockingBucket. The local bucket never
// touches the network, so only the blocking calls use their context.
type localBucket struct{ b *sluice.Bucket }

var _ BlockingBucket = localBucket{}

func (l localBucket) TryConsume(_ context.Context, n int64) (bool, error) { return l.b.TryConsume(n) }

func (l localBucket) TryConsumeAndReturnRemaining(_ context.Context, n int64) (sluice.ConsumptionProbe, error) {
	return l.b.TryConsumeAndReturnRemaining(n)
}

func (l localBucket) EstimateAbilityToConsume(_ context.Context, n int64) (sluice.EstimationProbe, error) {
	return l.b.EstimateAbilityToConsume(n)
}

func (l localBucket) TryConsumeAsMuchAsPossible(context.Context) (int64, error) {
	return l.b.TryConsumeAsMuchAsPossible(), nil
}

func (l localBucket) TryConsumeUpTo(_ context.Context, limit int64) (int64, error) {
	return l.b.TryConsumeUpTo(limit)
}

func (l localBucket) ConsumeIgnoringRateLimits(_ context.Context, n int64) (time.Duration, error) {
	return l.b.ConsumeIgnoringRateLimits(n)
}

func (l localBucket) AddTokens(_ context.Context, n int64) error      { return l.b.AddTokens(n) }
func (l localBucket) ForceAddTokens(_ context.Context, n int64) error { return l.b.ForceAddTokens(n) }
func (l localBucket) Reset(context.Context) error                     { l.b.Reset(); return nil }
func (l localBucket) AvailableTokens(context.Context) (int64, error) {
	return l.b.AvailableTokens(), nil
}

func (l localBucket) ReplaceConfiguration(_ context.Context, cfg sluice.Config, s sluice.TokensInheritance) error {
	return l.b.ReplaceConfiguration(cfg, s)
}

func (l localBucket) BlockingTryConsume(ctx context.Context, n int64, maxWait time.Duration) (bool, error) {
	return l.b.Blocking().TryConsume(ctx, n, maxWait)
}

func (l localBucket) BlockingConsume(ctx context.Context, n int64) error {
	return l.b.Blocking().Consume(ctx, n)
}
