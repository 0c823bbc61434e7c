package rlqs_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/app/rlqs"
)

// Three Envoys share 100 tokens a second: the one that wants 10 gets them,
// the others split the rest.
func ExampleSplit() {
	fmt.Println(rlqs.Split(100, []int64{10, 500, 200}))
	// Output: [10 45 45]
}

// An Envoy's share of 45 a second, for assignments of 2s: a bucket of 22
// (what a quarter of the assignment earns) refilled at 45 a second. An
// assignment sent at t0 for 2s, plus the guard of 250ms, costs the
// limiter what the bucket can admit until then.
func ExampleBucketFor() {
	b, _ := rlqs.BucketFor(45, time.Second, 2*time.Second)
	fmt.Printf("%+v\n", b)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g, pay, credit := rlqs.Renew(nil, 0, b, t0, t0.Add(2250*time.Millisecond), 250*time.Millisecond)
	fmt.Println(g.Charged, pay, credit)
	// Output:
	// {MaxTokens:22 PerFill:45 Fill:1s}
	// 123 123 0
}
