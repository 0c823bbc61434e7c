package config_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sluicetest"
)

func ExampleLoad() {
	f, err := config.Load([]byte(`
limiters:
  anonymous_api: {policy: fixed_window, limit: 100, interval: 60 minutes}
  authenticated_api:
    policy: token_bucket
    limit: 5000
    rate: {interval: 15 minutes, amount: 500}
`))
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range f.Order {
		fmt.Printf("%s: %v\n", name, f.Limiters[name].Policy)
	}

	// A FakeClock keeps the output fixed; leave WithClock out in real use.
	lim, err := sluice.NewLimiter(f.Limiters["anonymous_api"].Policy, sluice.WithClock(sluicetest.NewFakeClock(0)))
	if err != nil {
		log.Fatal(err)
	}
	res, err := lim.Allow(context.Background(), "203.0.113.7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed:", res.Allowed, "remaining:", res.Remaining)
	// Output:
	// anonymous_api: fixed_window(limit=100, interval=1h0m0s)
	// authenticated_api: token_bucket(limit=5000, rate=500 per 15m0s)
	// allowed: true remaining: 99
}

// Errors say where the problem is; those found by sluice's own validation
// match sluice.ErrInvalidConfig.
func ExampleError() {
	_, err := config.Load([]byte(`limiters:
  anonymous_api: {policy: fixed_window, limit: 0, interval: 60 minutes}
`))
	fmt.Println(err)

	var e *config.Error
	if errors.As(err, &e) {
		fmt.Printf("path %s, line %d, column %d, value %q\n", e.Path, e.Line, e.Column, e.Value)
	}
	fmt.Println("invalid config:", errors.Is(err, sluice.ErrInvalidConfig))
	// Output:
	// config: limiters.anonymous_api.limit (line 2): must be positive, got 0
	// path limiters.anonymous_api.limit, line 2, column 48, value "0"
	// invalid config: true
}
