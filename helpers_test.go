package sluice_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// t0 is the fake clock's start in most tests: a Unix time in nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

const ms = time.Millisecond

// newBucket returns a bucket of bws on clock, which is also its sleeper.
func newBucket(t *testing.T, clock *sluicetest.FakeClock, bws []sluice.Bandwidth, opts ...sluice.Option) *sluice.Bucket {
	t.Helper()
	opts = append([]sluice.Option{sluice.WithClock(clock)}, opts...)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: bws}, opts...)
	if err != nil {
		t.Fatalf("NewBucket: %v", err)
	}
	return b
}

// state is what a read-only call can see of a bucket: the tokens of each
// bandwidth, the time to full refill (which depends on the partial tokens
// too) and the configuration.
type state struct {
	bandwidths []int64
	toFull     time.Duration
	cfg        sluice.BucketConfig
}

func stateOf(t *testing.T, b *sluice.Bucket) state {
	t.Helper()
	s := b.Snapshot()
	return state{bandwidths: s.Bandwidths, toFull: s.TimeToFullRefill, cfg: s.Config}
}

func checkUnchanged(t *testing.T, b *sluice.Bucket, before state) {
	t.Helper()
	if after := stateOf(t, b); !reflect.DeepEqual(after, before) {
		t.Errorf("bucket changed from %+v to %+v", before, after)
	}
}

func checkAvailable(t *testing.T, b *sluice.Bucket, want int64) {
	t.Helper()
	if got := b.AvailableTokens(); got != want {
		t.Errorf("AvailableTokens() = %d, want %d", got, want)
	}
}

// counts is what a sluicetest.Counter has seen.
type counts struct {
	consumed, rejected, cancelled int64
	waited, delayed               time.Duration
}

func countsOf(c *sluicetest.Counter) counts {
	return counts{consumed: c.Tokens(sluice.EventAllowed), rejected: c.Tokens(sluice.EventRejected), cancelled: c.Tokens(sluice.EventCancelled),
		waited: c.Duration(sluice.EventWaited), delayed: c.Duration(sluice.EventDelayed)}
}

// blocking is Bucket4j's blocking calls on WaitN, as the conformance
// runner maps them: TryConsume is a WaitN whose *MaxWaitError is a
// refusal, Consume a WaitN of no bound.
type blocking struct{ w waiter }

// waiter is what has WaitN: a Bucket, a KeyBucket.
type waiter interface {
	WaitN(ctx context.Context, n int64, maxWait time.Duration) error
}

func block(w waiter) blocking { return blocking{w} }

func (b blocking) TryConsume(ctx context.Context, n int64, maxWait time.Duration) (bool, error) {
	err := b.w.WaitN(ctx, n, maxWait)
	var mw *sluice.MaxWaitError
	if errors.As(err, &mw) {
		return false, nil
	}
	return err == nil, err
}

func (b blocking) Consume(ctx context.Context, n int64) error { return b.w.WaitN(ctx, n, sluice.Never) }
