package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// Two processes share a limit of 10 a minute through a store, each
// deciding from leases of 4 tokens. Each first update takes the request's
// token and a lease of 4: a holds 4 and the store 5 (a's Remaining, 9, is
// both), then b takes the store's last 5. Together they never admit more
// than the limit; here they admit 7, since the 3 tokens a holds unspent
// are out of b's reach, and are lost when a's lease expires.
func ExampleWithLease() {
	ctx := context.Background()
	store := memstore.New() // a Redis, PostgreSQL, ... store in production
	clock := sluicetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	newProcess := func() *sluice.Limiter {
		l, err := sluice.NewLimiter(sluice.FixedWindow(10, time.Minute),
			sluice.WithStore(store), sluice.WithClock(clock),
			sluice.WithLease(sluice.Lease{Min: 4, Max: 4, TTL: time.Second}))
		if err != nil {
			panic(err)
		}
		return l
	}
	a, b := newProcess(), newProcess()
	for _, p := range []struct {
		name string
		l    *sluice.Limiter
	}{{"a", a}, {"b", b}, {"a", a}, {"b", b}, {"b", b}, {"b", b}, {"b", b}, {"b", b}} {
		res, err := p.l.Allow(ctx, "user:42")
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: allowed %v, remaining %d\n", p.name, res.Allowed, res.Remaining)
	}
	clock.Advance(time.Second) // a's lease expires: its 3 unspent tokens are lost
	res, _ := b.Allow(ctx, "user:42")
	fmt.Printf("b after a's lease expired: allowed %v, retry after %v\n", res.Allowed, res.RetryAfter)
	// Output:
	// a: allowed true, remaining 9
	// b: allowed true, remaining 4
	// a: allowed true, remaining 8
	// b: allowed true, remaining 3
	// b: allowed true, remaining 2
	// b: allowed true, remaining 1
	// b: allowed true, remaining 0
	// b: allowed false, remaining 0
	// b after a's lease expired: allowed false, retry after 59s
}
