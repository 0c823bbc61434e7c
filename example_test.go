package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// The examples run on a FakeClock so that their output is fixed; a real
// bucket leaves out WithClock.

func ExampleNewBucket() {
	clock := sluicetest.NewFakeClock(0)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(10, time.Second), // 10 a second, one every 100ms
	}}, sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}

	allowed := 0
	for range 11 {
		if b.Allow().Allowed {
			allowed++
		}
	}
	fmt.Println("allowed at once:", allowed)

	clock.Advance(100 * time.Millisecond)
	ok, err := b.TryConsume(1)
	fmt.Println("100ms later:", ok, err)
	// Output:
	// allowed at once: 10
	// 100ms later: true <nil>
}

// A probe has what rate-limit headers need.
func ExampleBucket_AllowN() {
	clock := sluicetest.NewFakeClock(0)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(2, time.Minute),
	}}, sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}

	for range 3 {
		p, err := b.AllowN(1)
		if err != nil {
			log.Fatal(err)
		}
		if p.Allowed {
			fmt.Printf("200 OK, X-Rate-Limit-Remaining: %d\n", p.Remaining)
			continue
		}
		// Retry-After is in whole seconds, rounded up.
		retry := (p.RetryAfter + time.Second - 1) / time.Second
		fmt.Printf("429 Too Many Requests, Retry-After: %d\n", retry)
	}
	// Output:
	// 200 OK, X-Rate-Limit-Remaining: 1
	// 200 OK, X-Rate-Limit-Remaining: 0
	// 429 Too Many Requests, Retry-After: 30
}

// WaitN waits for tokens, here on a fake clock that moves forward instead
// of waiting; a wait longer than maxWait is a *MaxWaitError at once, and
// takes nothing.
func ExampleBucket_WaitN() {
	clock := sluicetest.NewFakeClock(0)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(5, time.Second), // one every 200ms
	}}, sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	if err := b.WaitN(ctx, 5, sluice.Never); err != nil {
		log.Fatal(err)
	}
	fmt.Println("slept:", clock.Slept())

	if err := b.WaitN(ctx, 2, time.Second); err != nil {
		log.Fatal(err)
	}
	fmt.Println("slept:", clock.Slept())

	// 5 more would take 1s: more than we are willing to wait.
	err = b.WaitN(ctx, 5, 500*time.Millisecond)
	fmt.Println(errors.Is(err, sluice.ErrMaxWaitExceeded), "slept:", clock.Slept())
	// Output:
	// slept: 0s
	// slept: 400ms
	// true slept: 400ms
}

func ExampleBucket_ReplaceConfiguration() {
	clock := sluicetest.NewFakeClock(0)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(100, time.Minute),
	}}, sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := b.TryConsume(60); err != nil {
		log.Fatal(err)
	}
	fmt.Println("before:", b.AvailableTokens())

	// 40 of 100 become 80 of 200.
	err = b.ReplaceConfiguration(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(200, time.Minute),
	}}, sluice.InheritProportionally)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("proportionally:", b.AvailableTokens())

	// 80 of 200 become 180 of 300.
	err = b.ReplaceConfiguration(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(300, time.Minute),
	}}, sluice.InheritAdditive)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("additive:", b.AvailableTokens())
	// Output:
	// before: 40
	// proportionally: 80
	// additive: 180
}

// Several bandwidths: a call takes from all of them or from none.
func Example_multipleBandwidths() {
	clock := sluicetest.NewFakeClock(0)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(1000, time.Minute).WithID("per-minute"),
		sluice.Capacity(50, sluice.Greedy(50, time.Second)).WithID("burst"),
	}}, sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println("first burst:", b.TryConsumeAsMuchAsPossible())
	clock.Advance(time.Second)
	s := b.Snapshot()
	fmt.Println("a second later:", s.AvailableTokens, s.Bandwidths)
	// Output:
	// first burst: 50
	// a second later: 50 [966 50]
}

// A limiter's decisions, counted by an observer. Packages sluiceprom and
// sluiceotel export them as metrics.
func ExampleWithObserver() {
	var allowed, rejected int
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute),
		sluice.WithObserver(sluice.ObserverFunc(func(e sluice.Event) {
			switch e.Kind {
			case sluice.EventAllowed:
				allowed++
			case sluice.EventRejected:
				rejected++
			}
		})))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := l.Allow(context.Background(), "alice"); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("allowed", allowed, "rejected", rejected)
	// Output: allowed 2 rejected 1
}
