package sluice_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestMemoryReplaceConfiguration: an in-memory Limiter's key replaced
// with KeyBucket.ReplaceConfiguration behaves as a stored key replaced
// the same way, by every inheritance strategy: the same results, through
// the Limiter and through the bucket, while other keys keep the policy.
func TestMemoryReplaceConfiguration(t *testing.T) {
	ctx := context.Background()
	wide := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(200, 10*time.Second)}}
	for _, strategy := range []sluice.Inheritance{sluice.InheritProportionally, sluice.InheritAsIs, sluice.InheritNone, sluice.InheritAdditive} {
		t.Run(strategy.String(), func(t *testing.T) {
			var got [2][]sluice.Result
			for i, store := range []bool{false, true} {
				clock := sluicetest.NewFakeClock(limiterStart)
				opts := []sluice.LimiterOption{sluice.WithClock(clock)}
				if store {
					opts = append(opts, sluice.WithStore(newMapStore()))
				}
				l, err := sluice.NewLimiter(sluice.TokenBucket(100, 10, time.Second), opts...)
				if err != nil {
					t.Fatal(err)
				}
				record := func(r sluice.Result, err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
					got[i] = append(got[i], r)
				}
				record(l.AllowN(ctx, "k", 60))
				b, _ := l.Bucket("k")
				if err := b.ReplaceConfiguration(ctx, wide, strategy); err != nil {
					t.Fatalf("ReplaceConfiguration(%v) = %v", strategy, err)
				}
				cfg, err := b.Configuration(ctx)
				if err != nil || cfg.Bandwidths[0].Capacity() != 200 {
					t.Errorf("Configuration() after the replacement = %+v, %v, want capacity 200", cfg, err)
				}
				record(l.Peek(ctx, "k"))
				record(b.AllowN(ctx, 30))
				clock.Advance(time.Second)
				record(l.AllowN(ctx, "k", 5))
				r, err := l.Reserve(ctx, "k", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				r.Cancel()
				record(l.Peek(ctx, "k"))
				record(l.Allow(ctx, "other"))
				if err := l.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				record(l.Allow(ctx, "k"))
			}
			if !slices.Equal(got[0], got[1]) {
				t.Errorf("results in memory:\n%+v\nin a store:\n%+v", got[0], got[1])
			}
			if got[0][1].Limit != 200 || got[0][len(got[0])-1].Limit != 100 {
				t.Errorf("limits = %d after the replacement, %d after Reset; want 200, 100", got[0][1].Limit, got[0][len(got[0])-1].Limit)
			}
		})
	}
}

// TestMemoryReplacedKeyExpires: a replaced key whose bucket has refilled
// is a new bucket of the limiter's policy again, as a stored key is once
// its record expires.
func TestMemoryReplacedKeyExpires(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	l, _ := sluice.NewLimiter(sluice.TokenBucket(10, 10, time.Second), sluice.WithClock(clock))
	b, _ := l.Bucket("k")
	narrow := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(2, time.Second)}}
	if err := b.ReplaceConfiguration(ctx, narrow, sluice.InheritAsIs); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Allow(ctx, "k"); r.Limit != 2 || r.Remaining != 1 {
		t.Errorf("Allow after the replacement = %+v, want 1 of 2 left", r)
	}
	clock.Advance(time.Minute)
	if r, _ := l.Allow(ctx, "k"); r.Limit != 10 || r.Remaining != 9 {
		t.Errorf("Allow a minute later = %+v, want a new bucket of the policy: 9 of 10 left", r)
	}
}

// TestMemoryReplaceConfigurationRace: calls on a key in memory while its
// bucket is first replaced all count, in the bucket or in the record it
// moves to: with no refill to speak of and the tokens carried over as
// they are, no more than the capacity passes, however the calls and the
// move interleave.
func TestMemoryReplaceConfigurationRace(t *testing.T) {
	ctx := context.Background()
	const capacity, callers, each = 100, 8, 20
	same := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(capacity, 1000*time.Hour)}}
	for round := range 200 {
		l, err := sluice.NewLimiter(sluice.BucketPolicy(same))
		if err != nil {
			t.Fatal(err)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range callers {
			wg.Go(func() {
				<-start
				for i := range each {
					var r sluice.Result
					var err error
					switch (c + i) % 3 {
					case 0:
						r, err = l.Allow(ctx, "k")
					case 1:
						r, err = l.AllowN(ctx, "k", 1)
					default:
						b, berr := l.Bucket("k")
						if berr != nil {
							t.Error(berr)
							return
						}
						r, err = b.Allow(ctx)
					}
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		b, err := l.Bucket("k")
		if err != nil {
			t.Fatal(err)
		}
		close(start)
		if err := b.ReplaceConfiguration(ctx, same, sluice.InheritAsIs); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := admitted.Load(); got > capacity {
			t.Fatalf("round %d: %d calls passed a bucket of %d that refills once in 10 hours, racing its replacement", round, got, capacity)
		}
	}
}
