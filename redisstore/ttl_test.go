package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestPolicyTTL: a limiter's key lives in Redis as long as its state
// matters, plus the 1s that the engine adds for other processes' clocks.
// A token bucket of 10 tokens coming back every 10s matters for one
// period (the time to refill it from empty, as long as Symfony keeps its
// refill grid), as a fixed window of 10s does; 5 periods when 2 tokens
// come back each. A GCRA of 10 per 10s after one call matters until its
// theoretical arrival time, 1s on; a sliding window of 10s counts the
// previous window's hits during the next, so 20s. The token bucket kept
// its key a period more (21s, PTTL 20,995ms): twice the memory per key.
func TestPolicyTTL(t *testing.T) {
	const interval = 10 * time.Second
	const margin = time.Second // keyed's, for other processes' clocks
	tests := []struct {
		name   string
		policy sluice.Policy
		want   time.Duration // what the state needs, without the margin
	}{
		{"token bucket", sluice.TokenBucket(10, 10, interval), interval},
		{"token bucket, 2 per period", sluice.TokenBucket(10, 2, interval), 5 * interval},
		{"fixed window", sluice.FixedWindow(10, interval), interval},
		{"GCRA", sluice.GCRA(10, 10, interval), interval / 10},
		{"sliding window", sluice.SlidingWindow(10, interval), 2 * interval},
	}
	c := standalone(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := sluice.NewLimiter(tt.policy, sluice.WithStore(newStore(t, c)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Allow(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			keys, err := c.Keys(context.Background(), prefix(t)+"*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("KEYS %s* = %v, %v; want the limiter's one key", prefix(t), keys, err)
			}
			pttl, err := c.PTTL(context.Background(), keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The call and PTTL take a few milliseconds of the TTL; the
			// bound is the TTL the key was written with.
			if pttl > tt.want+margin || pttl < tt.want {
				t.Errorf("PTTL of %s after one call = %v, want at most %v (what the state needs, %v, plus %v), and at least %v",
					tt.policy, pttl, tt.want+margin, tt.want, margin, tt.want)
			}
		})
	}
}
