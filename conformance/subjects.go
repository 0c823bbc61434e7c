package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/smooth"
)

// subject is what a case builds and runs its steps on: a bucket, a keyed
// limiter or a compatibility limiter.
type subject interface {
	// what names it in messages: "bucket" or "limiter".
	what() string
	// ops are the operations its steps may call.
	ops() opTable
	// build builds it on target, on e.clock, and puts it in e. skip says
	// why target cannot build it ("" when it can); err is the error of
	// building it.
	build(ctx context.Context, target Target, e *env) (skip string, err error)
}

// bucketSubject is a case's BUCKET.
type bucketSubject struct {
	config sluice.BucketConfig
	millis bool // the bucket's clock reads whole milliseconds
}

func (*bucketSubject) what() string { return "bucket" }
func (*bucketSubject) ops() opTable { return bucketOps }

func (b *bucketSubject) build(ctx context.Context, target Target, e *env) (string, error) {
	var clock sluice.Clock = e.clock
	if b.millis {
		clock = sluice.Millis(e.clock)
	}
	bk, err := target.NewBucket(ctx, b.config, clock)
	if err != nil {
		return "", err
	}
	e.bucket = bk
	e.blocking, _ = bk.(BlockingBucket)
	return "", nil
}

// limiterKey is the one key every step of a limiter case uses.
const limiterKey = "conformance"

// limiterSubject is a case's LIMITER of a keyed policy: the window and
// leaky policies, no_limit, compound and sluice's gcra and shaper.
type limiterSubject struct{ policy sluice.Policy }

func (*limiterSubject) what() string { return "limiter" }
func (*limiterSubject) ops() opTable { return limiterOps }

func (l *limiterSubject) build(ctx context.Context, target Target, e *env) (string, error) {
	lt, ok := target.(LimiterTarget)
	if !ok {
		return fmt.Sprintf("target %s has no keyed limiters", target.Name()), nil
	}
	lim, err := lt.NewLimiter(ctx, l.policy, keyedClock{e.clock})
	e.limiter = lim
	e.debts, _ = lim.(DebtLimiter)
	e.slots, _ = lim.(SlotLimiter)
	e.held = map[string]sluice.Slot{}
	return "", err
}

// keyedClock is the case's fake clock as a keyed limiter runs on it: not
// a wall clock, as a Limiter's default (sluice.MonotonicClock) is not one,
// so that a keyed limiter refuses aligned refill, which needs a wall
// clock ("keyed limiters have no wall clock"), while a bucket case's
// bucket, on the fake wall clock, takes it. It reads and sleeps on the
// fake clock.
type keyedClock struct{ c *sluicetest.FakeClock }

func (k keyedClock) Now() int64                                       { return k.c.Now() }
func (keyedClock) IsWallClock() bool                                  { return false }
func (k keyedClock) Sleep(ctx context.Context, d time.Duration) error { return k.c.Sleep(ctx, d) }

// invalidLimiter is a LIMITER that the decoder of limiter descriptions
// refused (a token_bucket without rate), in a case that wants a
// configuration error: building it fails with the decoder's error, a
// *yamlnode.Error, on every target.
type invalidLimiter struct{ err error }

func (*invalidLimiter) what() string { return "limiter" }
func (*invalidLimiter) ops() opTable { return limiterOps }

func (l *invalidLimiter) build(context.Context, Target, *env) (string, error) { return "", l.err }

// compatTarget returns target as a CompatTarget, or why it is not one.
func compatTarget(target Target, policy string) (CompatTarget, string) {
	ct, ok := target.(CompatTarget)
	if !ok {
		return nil, fmt.Sprintf("target %s does not run the compatibility policies: %s is local-only", target.Name(), policy)
	}
	return ct, ""
}

// rateLimiterSubject is the resilience4j policy.
type rateLimiterSubject struct{ cfg resilience.Config }

func (*rateLimiterSubject) what() string { return "limiter" }
func (*rateLimiterSubject) ops() opTable { return rateLimiterOps }

func (r *rateLimiterSubject) build(ctx context.Context, target Target, e *env) (string, error) {
	ct, skip := compatTarget(target, "resilience4j")
	if ct == nil {
		return skip, nil
	}
	rl, err := ct.NewRateLimiter(ctx, r.cfg, resilience.WithClock(e.clock))
	e.rate = rl
	return "", err
}

// timeLimiterSubject is the time_limiter policy.
type timeLimiterSubject struct{ cfg resilience.TimeLimiterConfig }

func (*timeLimiterSubject) what() string { return "limiter" }
func (*timeLimiterSubject) ops() opTable { return timeLimiterOps }

func (t *timeLimiterSubject) build(ctx context.Context, target Target, e *env) (string, error) {
	ct, skip := compatTarget(target, "time_limiter")
	if ct == nil {
		return skip, nil
	}
	tl := &timeLimit{}
	l, err := ct.NewTimeLimiter(ctx, t.cfg, resilience.WithTimer(tl.newTimer))
	if err != nil {
		return "", err
	}
	tl.l = l
	e.timeLimit = tl
	return "", nil
}

// smoothSubject is the smooth_bursty or smooth_warming_up policy.
type smoothSubject struct{ policyspec.Smooth }

func (*smoothSubject) what() string { return "limiter" }
func (*smoothSubject) ops() opTable { return smoothOps }

func (s *smoothSubject) build(ctx context.Context, target Target, e *env) (string, error) {
	name := "smooth_bursty"
	if s.WarmingUp {
		name = "smooth_warming_up"
	}
	ct, skip := compatTarget(target, name)
	if ct == nil {
		return skip, nil
	}
	opts := []smooth.Option{smooth.WithClock(e.clock)}
	var (
		rl  *smooth.RateLimiter
		err error
	)
	if s.WarmingUp {
		rl, err = ct.NewWarmingUp(ctx, s.PermitsPerSecond, s.Warmup, append(opts, smooth.WithColdFactor(s.ColdFactor))...)
	} else {
		rl, err = ct.NewBursty(ctx, s.PermitsPerSecond, append(opts, smooth.WithMaxBurstSeconds(s.MaxBurstSeconds))...)
	}
	e.smooth = rl
	return "", err
}
