package sluice_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestPackedKeys: the in-memory keys of a token bucket and a sliding
// window keep packed states (16 bytes, not 24). A limiter on them answers
// every call as a limiter on the full states does, through decisions and
// the KeyBucket operations (overdraft, added tokens, reservations given
// back, a replaced configuration): the token bucket as the same bucket in
// a BucketPolicy, whose keys keep full states, and the sliding window as
// itself on a store, which keeps the full encoding.
func TestPackedKeys(t *testing.T) {
	ctx := context.Background()
	bucket := sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(10, sluice.Intervally(3, 100*time.Millisecond))}})
	for _, tt := range []struct {
		packed, full sluice.Policy
		store        bool
	}{
		{packed: sluice.TokenBucket(10, 3, 100*time.Millisecond), full: bucket},
		{packed: sluice.SlidingWindow(10, time.Second), full: sluice.SlidingWindow(10, time.Second), store: true},
	} {
		t.Run(tt.packed.String(), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			opts := []sluice.Option{sluice.WithClock(clock)}
			packed, err := sluice.NewLimiter(tt.packed, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.store {
				opts = append(opts, sluice.WithStore(newMapStore()))
			}
			full, err := sluice.NewLimiter(tt.full, opts...)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for step := range 2000 {
				key := fmt.Sprint("k", rng.IntN(3))
				n := rng.Int64N(10) + 1
				op := rng.IntN(9)
				got, want := packedOp(ctx, packed, key, op, n), packedOp(ctx, full, key, op, n)
				if got != want {
					t.Fatalf("step %d, op %d on %s, n %d: %s, want %s", step, op, key, n, got, want)
				}
				clock.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
			}
		})
	}
}

// packedOp runs operation op on key and describes what it returned.
func packedOp(ctx context.Context, l *sluice.Limiter, key string, op int, n int64) string {
	if op < 4 {
		r, err := l.AllowN(ctx, key, n)
		return fmt.Sprint(r, err)
	}
	b, err := l.Bucket(key)
	if err != nil { // not a token bucket
		r, err := l.PeekN(ctx, key, n)
		return fmt.Sprint("peek ", r, err)
	}
	switch op {
	case 4:
		err = b.AddTokens(ctx, n)
	case 5:
		_, err = b.ConsumeIgnoringRateLimits(ctx, n%4+1)
	case 6:
		r, err := b.ReserveN(ctx, n%4+1, time.Second)
		if err == nil {
			r.Cancel()
		}
		return fmt.Sprint("reserve ", err)
	case 7:
		err = b.ReplaceConfiguration(ctx, sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(n+10, time.Second)}}, sluice.InheritProportionally)
	}
	a, aerr := b.AvailableTokens(ctx)
	return fmt.Sprint(op, err, a, aerr)
}
