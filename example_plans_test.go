package sluice_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A rolling deploy: the old configuration (version 1) and the new one
// (version 2) share a store. The key migrates once, to the new bucket,
// and the old process then decides under it instead of moving it back.
func ExampleWithConfigVersion() {
	ctx := context.Background()
	store := memstore.New()
	clock := sluicetest.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	old, _ := sluice.NewLimiter(sluice.TokenBucket(100, 100, time.Hour),
		sluice.WithStore(store), sluice.WithClock(clock), sluice.WithConfigVersion(1))
	cur, _ := sluice.NewLimiter(sluice.TokenBucket(200, 200, time.Hour),
		sluice.WithStore(store), sluice.WithClock(clock), sluice.WithConfigVersion(2))

	old.AllowN(ctx, "alice", 60) // 40 of 100 left
	for _, l := range []*sluice.Limiter{cur, old, cur, old} {
		r, _ := l.Allow(ctx, "alice")
		fmt.Println(r.Limit, r.Remaining)
	}
	// Output:
	// 200 79
	// 200 78
	// 200 77
	// 200 76
}

// Plans per key: paid customers get a larger bucket than the limiter's
// own policy, which free ones keep.
func ExampleWithPolicyFor() {
	ctx := context.Background()
	free := sluice.TokenBucket(10, 10, time.Minute)
	paid := sluice.TokenBucket(1000, 1000, time.Minute)
	planOf := func(_ context.Context, key string) (sluice.Policy, error) {
		if strings.HasPrefix(key, "paid:") {
			return paid, nil
		}
		return nil, nil // the limiter's own policy
	}
	l, err := sluice.NewLimiter(free, sluice.WithPolicyFor(planOf))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"paid:acme", "bob"} {
		r, _ := l.Allow(ctx, key)
		fmt.Println(key, r.Limit, r.Remaining)
	}
	// Output:
	// paid:acme 1000 999
	// bob 10 9
}
