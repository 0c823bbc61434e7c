package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestWindow(t *testing.T) {
	for _, tt := range []struct {
		p    sluice.Policy
		want time.Duration
	}{
		{sluice.FixedWindow(100, time.Minute), time.Minute},
		{sluice.SlidingWindow(10, time.Second), time.Second},
		{sluice.SlidingLog(10, time.Hour), time.Hour},
		{sluice.TokenBucket(100, 10, time.Second), 10 * time.Second},
		{sluice.TokenBucket(15, 10, time.Second), 2 * time.Second}, // whole intervals
		{sluice.LeakyBucket(15, 10, time.Second), 1500 * time.Millisecond},
		{sluice.LeakyBucket(1, 3, time.Second), 333333334}, // rounded up
		{sluice.GCRA(5, 10, time.Second), 500 * time.Millisecond},
		{sluice.Shaper(10, time.Second, 5), 600 * time.Millisecond},
		{sluice.Shaper(10, time.Second, 9), time.Second},
		{sluice.NoLimit(), 0},
		{sluice.FixedWindow(0, time.Minute), 0}, // invalid
		{sluice.Compound(sluice.FixedWindow(10, time.Second), sluice.SlidingWindow(100, time.Minute)), time.Second},
		{sluice.Compound(sluice.NoLimit(), sluice.SlidingWindow(100, time.Minute)), time.Minute},
		{sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Simple(1000, time.Hour),
			sluice.Capacity(20, sluice.Greedy(10, time.Second)), // the smallest capacity
		}}), 2 * time.Second},
		{sluice.LeakyBucket(1<<62, 1, time.Hour), sluice.Never},
	} {
		if got := tt.p.Window(); got != tt.want {
			t.Errorf("%s.Window() = %v, want %v", tt.p, got, tt.want)
		}
	}
}

// TestKind: a policy's kind is its constructor's, as config files name it,
// whatever its parameters and whether or not they are valid.
func TestKind(t *testing.T) {
	for _, tt := range []struct {
		p    sluice.Policy
		want string
	}{
		{sluice.FixedWindow(100, time.Minute), "fixed_window"},
		{sluice.AlignedFixedWindow(100, time.Minute), "fixed_window"},
		{sluice.FixedWindow(0, time.Minute), "fixed_window"},
		{sluice.SlidingWindow(10, time.Second), "sliding_window"},
		{sluice.SlidingLog(10, time.Hour), "sliding_log"},
		{sluice.TokenBucket(100, 10, time.Second), "token_bucket"},
		{sluice.LeakyBucket(15, 10, time.Second), "leaky_bucket"},
		{sluice.LeakyBucket(15, 10, 0), "leaky_bucket"},
		{sluice.GCRA(5, 10, time.Second), "gcra"},
		{sluice.Shaper(10, time.Second, 5), "shaper"},
		{sluice.NoLimit(), "no_limit"},
		{sluice.Compound(sluice.NoLimit()), "compound"},
		{sluice.Compound(), "compound"},
		{sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second)}}), "bucket"},
	} {
		if got := tt.p.Kind(); got != tt.want {
			t.Errorf("%s.Kind() = %q, want %q", tt.p, got, tt.want)
		}
	}
}
