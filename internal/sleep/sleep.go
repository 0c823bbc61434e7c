// Package sleep waits on behalf of the code that must wait: a blocking
// call for its tokens, and an attempt that lost a race before it tries
// again. Every wait ends early when its context ends.
package sleep

import (
	"context"
	"math/rand/v2"
	"time"
)

// For waits d, or until ctx ends, and then returns ctx.Err().
func For(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff waits a random time in (0, min(base·2^shift, most)], "full
// jitter", or until ctx ends, and then returns ctx.Err(). Callers that
// retry after a lost race raise shift with each loss, so that the
// losers spread out over a window that grows until each finds a moment
// to win in. base and most must be positive, shift not negative.
func Backoff(ctx context.Context, base time.Duration, shift int, most time.Duration) error {
	return For(ctx, rand.N(Ceiling(base, shift, most))+1)
}

// Ceiling is min(base·2^shift, most), without overflow.
func Ceiling(base time.Duration, shift int, most time.Duration) time.Duration {
	if shift < 63 && base <= most>>shift {
		return base << shift
	}
	return most
}

// Sleeper is the optional method of a clock that sleeps on its own time,
// as sluice.Clock's doc describes: a fake clock advances itself instead
// of waiting.
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// On waits d on clock: by its Sleep when it is a Sleeper, else as For.
func On(ctx context.Context, clock any, d time.Duration) error {
	if s, ok := clock.(Sleeper); ok {
		return s.Sleep(ctx, d)
	}
	return For(ctx, d)
}
