package rollout_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

const t0 = int64(1_750_000_000) * int64(time.Second)

// TestRollingDeploy: a process of the old configuration (version 1) and
// one of the new (version 2) take turns on one key of one store, as during
// a rolling deploy. The key migrates exactly once, at the new process's
// first call, by the inheritance strategy, and never back: every later
// call of either process takes one token from what the migration left.
// The clock stands still, so nothing refills: any token created or lost
// shows in Remaining.
func TestRollingDeploy(t *testing.T) {
	const before, steps = 10, 60 // calls of the old process alone, then interleaved
	tests := []struct {
		name     string
		old, cur sluice.Policy
		inherit  sluice.Inheritance
		// left is what the key holds after the migration, and limit
		// whose limit the old process decides under afterwards.
		bucket   bool
		left     int64
		oldLimit int64
	}{
		{"bucket proportionally", sluice.TokenBucket(100, 1, time.Hour), sluice.TokenBucket(200, 1, time.Hour), sluice.InheritProportionally, true, 180, 200},
		{"bucket as is", sluice.TokenBucket(100, 1, time.Hour), sluice.TokenBucket(200, 1, time.Hour), sluice.InheritAsIs, true, 90, 200},
		{"bucket additive", sluice.TokenBucket(100, 1, time.Hour), sluice.TokenBucket(200, 1, time.Hour), sluice.InheritAdditive, true, 190, 200},
		{"bucket none", sluice.TokenBucket(100, 1, time.Hour), sluice.TokenBucket(200, 1, time.Hour), sluice.InheritReset, true, 200, 200},
		// A window's record does not carry its configuration: the old
		// process counts on the stored window under its own limit.
		{"window kept", sluice.FixedWindow(100, time.Hour), sluice.FixedWindow(200, time.Hour), sluice.InheritAsIs, false, 190, 100},
		{"window reset", sluice.FixedWindow(100, time.Hour), sluice.FixedWindow(200, time.Hour), sluice.InheritReset, false, 200, 100},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					s := st.open(t)
					clock := sluicetest.NewFakeClock(t0)
					newLimiter := func(p sluice.Policy, v uint64) *sluice.Limiter {
						l, err := sluice.NewLimiter(p, sluice.WithStore(s), sluice.WithClock(clock),
							sluice.WithInheritance(tt.inherit), sluice.WithConfigVersion(v))
						if err != nil {
							t.Fatal(err)
						}
						return l
					}
					old, cur := newLimiter(tt.old, 1), newLimiter(tt.cur, 2)
					for i := range before {
						if res, err := old.Allow(t.Context(), "k"); err != nil || res.Remaining != 100-int64(i)-1 {
							t.Fatalf("old Allow #%d = %+v, %v", i, res, err)
						}
					}
					for i := range steps {
						l, who, limit := cur, "new", int64(200)
						if i%2 == 1 {
							l, who, limit = old, "old", tt.oldLimit
						}
						res, err := l.Allow(t.Context(), "k")
						if err != nil {
							t.Fatalf("step %d: %s Allow = %v", i, who, err)
						}
						// The key holds left-i-1 tokens of the new
						// configuration; a window counts 200-left+i+1
						// against the caller's limit.
						want := tt.left - int64(i) - 1
						if !tt.bucket {
							want = limit - (200 - tt.left) - int64(i) - 1
						}
						if !res.Allowed || res.Remaining != want || res.Limit != limit {
							t.Fatalf("step %d: %s Allow = %+v, want allowed, %d of %d left", i, who, res, want, limit)
						}
					}
				})
			}
		})
	}
}

// TestRollingDeployKindChange: the new configuration changes the policy's
// kind (a window becomes a token bucket). The new process replaces the
// key's record once; the old one cannot read the new record and writes
// nothing over it, so the new bucket's count stays exact.
func TestRollingDeployKindChange(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			clock := sluicetest.NewFakeClock(t0)
			old, err := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithStore(s), sluice.WithClock(clock), sluice.WithConfigVersion(1))
			if err != nil {
				t.Fatal(err)
			}
			cur, err := sluice.NewLimiter(sluice.TokenBucket(200, 1, time.Hour), sluice.WithStore(s), sluice.WithClock(clock), sluice.WithConfigVersion(2))
			if err != nil {
				t.Fatal(err)
			}
			old.AllowN(t.Context(), "k", 10)
			for i := range 20 {
				r, err := cur.Allow(t.Context(), "k")
				if err != nil || r.Remaining != 200-int64(i)-1 {
					t.Fatalf("new Allow #%d = %+v, %v; want %d of 200 left", i, r, err, 200-i-1)
				}
				if _, err := old.Allow(t.Context(), "k"); err != nil {
					t.Fatalf("old Allow #%d = %v", i, err)
				}
			}
		})
	}
}
