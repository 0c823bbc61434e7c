package smooth_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/smooth"
)

func ExampleNewBursty() {
	clk := sluicetest.NewFakeClock(0) // a real program leaves out the clock and sleeper
	rl, err := smooth.NewBursty(5, smooth.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, permits := range []int64{10, 1, 1} {
		waited, _ := rl.Acquire(ctx, permits)
		fmt.Printf("Acquire(%d) waited %v\n", permits, waited)
	}
	ok, _ := rl.TryAcquire(ctx, 1, 100*time.Millisecond)
	fmt.Println("TryAcquire within 100ms:", ok)
	// Output:
	// Acquire(10) waited 0s
	// Acquire(1) waited 2s
	// Acquire(1) waited 200ms
	// TryAcquire within 100ms: false
}

func ExampleNewWarmingUp() {
	clk := sluicetest.NewFakeClock(0)
	rl, err := smooth.NewWarmingUp(2, 4*time.Second, smooth.WithClock(clk))
	if err != nil {
		panic(err)
	}
	for range 6 {
		waited, _ := rl.Acquire(context.Background(), 1)
		fmt.Println(waited)
	}
	// Output:
	// 0s
	// 1.375s
	// 1.125s
	// 875ms
	// 625ms
	// 500ms
}
