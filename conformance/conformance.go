package conformance

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/smooth"
)

// Bucket is the token bucket under test: the operations of *sluice.Bucket,
// each taking a context first so that buckets kept in a store can implement
// it. Errors are returned as sluice returns them (an *sluice.ArgumentError
// for a bad argument, a *sluice.ConfigError for a bad configuration); any
// other error fails the step.
//
// The vectors' operations are Bucket4j's: try_consume is TryConsume,
// try_consume_and_return_remaining AllowN, and estimate_ability_to_consume
// PeekN, whose remaining tokens are those there now (Result.Remaining+n
// when allowed).
type Bucket interface {
	TryConsume(ctx context.Context, tokens int64) (bool, error)
	AllowN(ctx context.Context, tokens int64) (sluice.Result, error)
	PeekN(ctx context.Context, tokens int64) (sluice.Result, error)
	TryConsumeAsMuchAsPossible(ctx context.Context) (int64, error)
	TryConsumeUpTo(ctx context.Context, limit int64) (int64, error)
	ConsumeIgnoringRateLimits(ctx context.Context, tokens int64) (time.Duration, error)
	AddTokens(ctx context.Context, tokens int64) error
	ForceAddTokens(ctx context.Context, tokens int64) error
	Reset(ctx context.Context) error
	AvailableTokens(ctx context.Context) (int64, error)
	ReplaceConfiguration(ctx context.Context, cfg sluice.BucketConfig, strategy sluice.Inheritance) error
}

// BlockingBucket is a Bucket whose calls can wait for their tokens, sleeping
// on the clock its Target was given (see sluice.Clock): WaitN, as
// sluice.Bucket.WaitN. The vectors' blocking operations are Bucket4j's
// blocking tryConsume, which WaitN is: blocking_try_consume is WaitN
// (a *sluice.MaxWaitError is consumed: false) and blocking_consume is
// WaitN with sluice.Never. A case with a blocking step is skipped, never
// passed, for a Bucket that does not implement it.
type BlockingBucket interface {
	Bucket
	WaitN(ctx context.Context, tokens int64, maxWait time.Duration) error
}

// Limiter is the keyed limiter under test: the operations of
// *sluice.Limiter that the vectors use, each taking a context first so
// that limiters keeping their keys in a store can implement it. Errors are
// returned as sluice returns them (an *sluice.ArgumentError for a bad
// argument, errors.ErrUnsupported); any other error fails the
// step. A case runs every step on one key.
type Limiter interface {
	AllowN(ctx context.Context, key string, n int64) (sluice.Result, error)
	// ReserveN takes n tokens that will be there within maxWait
	// (sluice.Never: no bound), as sluice.Limiter.ReserveN: a reservation
	// that is not OK is a step's max_wait_exceeded.
	ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*sluice.Reservation, error)
	Reset(ctx context.Context, key string) error
}

// DebtLimiter is a Limiter whose keys can owe tokens, as
// sluice.Limiter's Charge, Hold, Settle and Debt: the vectors' charge,
// hold, settle and debt operations. A case with one of them is skipped,
// never passed, on a target whose limiters are not DebtLimiters.
type DebtLimiter interface {
	Charge(ctx context.Context, key string, n int64) (sluice.Cost, error)
	Hold(ctx context.Context, key string, n int64, ttl time.Duration) (sluice.Cost, error)
	Settle(ctx context.Context, id string, n int64) (sluice.Cost, error)
	Debt(ctx context.Context, key string) (sluice.Cost, error)
}

var _ DebtLimiter = (*sluice.Limiter)(nil)

// SlotLimiter is a Limiter whose policy may hold slots (concurrency):
// the slot operations of *sluice.Limiter. A case with a slot step is
// skipped, never passed, for a Limiter that does not implement it.
type SlotLimiter interface {
	Limiter
	Acquire(ctx context.Context, key string, ttl, maxWait time.Duration) (sluice.Slot, error)
	Release(ctx context.Context, s sluice.Slot) (sluice.Slot, error)
	Renew(ctx context.Context, s sluice.Slot) (sluice.Slot, error)
}

// Target builds the buckets under test. Each case gets a new bucket.
//
// A Target offers more through optional interfaces: LimiterTarget for the
// cases of the window and leaky policies, CompatTarget for those of the
// compatibility policies. The cases of a target without them are skipped,
// never passed.
type Target interface {
	// Name identifies the target in reports, e.g. "local".
	Name() string
	// NewBucket returns a new bucket with the configuration cfg, created
	// now by clock, which blocking calls also sleep on (a fake clock that
	// records its sleeps). It returns the *sluice.ConfigError of an
	// invalid cfg.
	NewBucket(ctx context.Context, cfg sluice.BucketConfig, clock sluice.Clock) (Bucket, error)
}

// LimiterTarget is a Target that builds keyed limiters, for the cases of
// the window and leaky policies (a case's limiter other than the
// compatibility policies).
type LimiterTarget interface {
	Target
	// NewLimiter returns a new limiter applying p, on clock, which
	// blocking calls also sleep on. It returns the *sluice.ConfigError of
	// an invalid p.
	NewLimiter(ctx context.Context, p sluice.Policy, clock sluice.Clock) (Limiter, error)
}

// CompatTarget is a Target that runs the compatibility policies:
// resilience4j and time_limiter (package resilience), smooth_bursty and
// smooth_warming_up (package smooth). Their limiters live in the memory of
// one process and have no store, so Local implements CompatTarget and a
// store's target does not. Each method is the package's constructor of the
// same name with a context first; the runner passes the options that put
// the limiter on the case's fake clock.
type CompatTarget interface {
	Target
	NewRateLimiter(ctx context.Context, cfg resilience.Config, opts ...resilience.Option) (*resilience.RateLimiter, error)
	NewTimeLimiter(ctx context.Context, cfg resilience.TimeLimiterConfig, opts ...resilience.TimeLimiterOption) (*resilience.TimeLimiter, error)
	NewBursty(ctx context.Context, permitsPerSecond float64, opts ...smooth.Option) (*smooth.RateLimiter, error)
	NewWarmingUp(ctx context.Context, permitsPerSecond float64, warmup time.Duration, opts ...smooth.Option) (*smooth.RateLimiter, error)
}

// Local is the Target of the in-memory *sluice.Bucket and *sluice.Limiter
// and of the compatibility limiters. Its buckets implement BlockingBucket.
// The zero value is ready to use.
type Local struct{}

var (
	_ LimiterTarget = Local{}
	_ CompatTarget  = Local{}
	_ Limiter       = (*sluice.Limiter)(nil)
)

// Name returns "local".
func (Local) Name() string { return "local" }

// NewBucket returns a *sluice.Bucket with cfg and clock.
func (Local) NewBucket(_ context.Context, cfg sluice.BucketConfig, clock sluice.Clock) (Bucket, error) {
	b, err := sluice.NewBucket(cfg, sluice.WithClock(clock))
	if err != nil {
		return nil, err
	}
	return localBucket{b}, nil
}

// NewLimiter returns a *sluice.Limiter applying p, with clock.
func (Local) NewLimiter(_ context.Context, p sluice.Policy, clock sluice.Clock) (Limiter, error) {
	l, err := sluice.NewLimiter(p, sluice.WithClock(clock))
	if err != nil {
		return nil, err
	}
	return l, nil
}

// NewRateLimiter returns resilience.New(cfg, opts...).
func (Local) NewRateLimiter(_ context.Context, cfg resilience.Config, opts ...resilience.Option) (*resilience.RateLimiter, error) {
	return resilience.New(cfg, opts...)
}

// NewTimeLimiter returns resilience.NewTimeLimiter(cfg, opts...).
func (Local) NewTimeLimiter(_ context.Context, cfg resilience.TimeLimiterConfig, opts ...resilience.TimeLimiterOption) (*resilience.TimeLimiter, error) {
	return resilience.NewTimeLimiter(cfg, opts...)
}

// NewBursty returns smooth.NewBursty(permitsPerSecond, opts...).
func (Local) NewBursty(_ context.Context, permitsPerSecond float64, opts ...smooth.Option) (*smooth.RateLimiter, error) {
	return smooth.NewBursty(permitsPerSecond, opts...)
}

// NewWarmingUp returns smooth.NewWarmingUp(permitsPerSecond, warmup, opts...).
func (Local) NewWarmingUp(_ context.Context, permitsPerSecond float64, warmup time.Duration, opts ...smooth.Option) (*smooth.RateLimiter, error) {
	return smooth.NewWarmingUp(permitsPerSecond, warmup, opts...)
}

// localBucket adapts *sluice.Bucket to BlockingBucket. The local bucket never
// touches the network, so only the blocking calls use their context.
type localBucket struct{ b *sluice.Bucket }

var _ BlockingBucket = localBucket{}

func (l localBucket) TryConsume(_ context.Context, n int64) (bool, error) { return l.b.TryConsume(n) }

func (l localBucket) AllowN(_ context.Context, n int64) (sluice.Result, error) { return l.b.AllowN(n) }
func (l localBucket) PeekN(_ context.Context, n int64) (sluice.Result, error)  { return l.b.PeekN(n) }

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

func (l localBucket) ReplaceConfiguration(_ context.Context, cfg sluice.BucketConfig, s sluice.Inheritance) error {
	return l.b.ReplaceConfiguration(cfg, s)
}

func (l localBucket) WaitN(ctx context.Context, n int64, maxWait time.Duration) error {
	return l.b.WaitN(ctx, n, maxWait)
}
