package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluicetest"
)

func ExampleRateLimiter() {
	clk := sluicetest.NewFakeClock(0) // a real program leaves out the clock and sleeper
	rl, err := resilience.New(resilience.Config{
		LimitForPeriod:     2,
		LimitRefreshPeriod: time.Second,
		Timeout:            1500 * time.Millisecond,
	}, resilience.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		ok, _ := rl.AcquirePermission(ctx, 1)
		fmt.Println("acquired:", ok, "after", time.Duration(clk.Now()))
	}
	wait, _ := rl.ReservePermission(2)
	fmt.Println("reserved 2, wait", wait, "available", rl.AvailablePermissions())
	_, err = rl.ReservePermission(3) // would wait 2s
	fmt.Println(err, errors.Is(err, sluice.ErrMaxWaitExceeded))
	// Output:
	// acquired: true after 0s
	// acquired: true after 0s
	// acquired: true after 1s
	// reserved 2, wait 1s available -1
	// sluice: max wait exceeded: 3 tokens need 2s, at most 1.5s allowed true
}

func ExampleTimeLimit() {
	v, err := resilience.TimeLimit(context.Background(), time.Second, func(ctx context.Context) (string, error) {
		return "done", nil
	})
	fmt.Println(v, err)

	_, err = resilience.TimeLimit(context.Background(), time.Millisecond, func(ctx context.Context) (string, error) {
		<-ctx.Done() // a well-behaved function stops when cancelled
		return "", ctx.Err()
	})
	fmt.Println(err, errors.Is(err, resilience.ErrTimeout), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// done <nil>
	// resilience: call timed out after 1ms true true
}
