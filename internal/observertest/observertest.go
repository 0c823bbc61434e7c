// Package observertest drives the decisions that the tests of the
// observer adapters (sluiceprom, sluiceotel) check their metrics against,
// so that both count the same events.
package observertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluicetest"
)

// T0 is the fake clock's start, in Unix nanoseconds.
const T0 = int64(1_700_000_000) * int64(time.Second)

// DownStore fails every call, as a store that cannot be reached.
type DownStore struct{}

func (DownStore) Update(context.Context, string, driver.UpdateFunc) error {
	return driver.ErrUnavailable
}

// Drive makes, with the observers that observer returns by limiter name:
//   - limiter "api", a fixed window of 2 a minute on a memory store: 3
//     Allow of key k (2 allowed, 1 rejected), AllowN(2) of key j
//     (allowed), then Reset of j: 5 store updates and 1 delete;
//   - limiter "down", on a store that is down, with a circuit breaker that
//     opens at the first failure: 1 Allow, an error that fails closed;
//   - resilience rate limiter "payments", 2 a second, given to register:
//     3 acquisitions, 2 allowed and 1 rejected.
//
// It returns the rate limiter's clock, which a test may step.
func Drive(t *testing.T, observer func(name string) sluice.Observer, register func(name string, rl *resilience.RateLimiter)) *sluicetest.FakeClock {
	t.Helper()
	ctx := context.Background()
	api, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithStore(memstore.New()),
		sluice.WithObserver(observer("api")))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := api.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.AllowN(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	if err := api.Reset(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	down, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithStore(DownStore{}),
		sluice.WithObserver(observer("down")), sluice.WithCircuitBreaker(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Allow(ctx, "k"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Allow on a store that is down = %v, want driver.ErrUnavailable", err)
	}

	clock := sluicetest.NewFakeClock(T0)
	rl, err := resilience.New(resilience.Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Second, Timeout: 0},
		resilience.WithClock(clock), resilience.WithObserver(observer("payments")))
	if err != nil {
		t.Fatal(err)
	}
	register("payments", rl)
	for range 3 {
		if _, err := rl.AcquirePermission(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	return clock
}

// BenchAllow measures an in-memory Limiter's Allow with opts (its
// observer, say) on one key of a token bucket that never runs dry, on a
// fake clock, so that the benchmarks of the observers and of none measure
// the same decisions.
func BenchAllow(b *testing.B, opts ...sluice.Option) {
	clock := sluicetest.NewFakeClock(T0)
	l, err := sluice.NewLimiter(sluice.TokenBucket(1000, 1e9, time.Second), append(opts, sluice.WithClock(clock))...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(2)
		l.Allow(ctx, "k")
	}
}
