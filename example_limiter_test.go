package sluice_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// The keyed examples run on a FakeClock, which their waits also sleep on, so
// that their output is fixed; a real limiter leaves out WithClock. docs/policies.md quotes their numbers.

// An aligned fixed window opens on the clock's grid: the first hit at
// 12:00:40 finds the window 12:00:00 to 12:01:00 open, with 20s left, and
// every key's window turns over at 12:01:00.
func ExampleAlignedFixedWindow() {
	clock := sluicetest.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 40, 0, time.UTC).UnixNano())
	l, err := sluice.NewLimiter(sluice.AlignedFixedWindow(3, time.Minute), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r, _ := l.Allow(ctx, "user-1")
	fmt.Println(r.Allowed, r.Remaining, r.ResetAfter)
	l.AllowN(ctx, "user-1", 2)
	r, _ = l.Allow(ctx, "user-1")
	fmt.Println(r.Allowed, r.RetryAfter)
	clock.Advance(20 * time.Second)
	r, _ = l.Allow(ctx, "user-1")
	fmt.Println(r.Allowed, r.Remaining, r.ResetAfter)
	// Output:
	// true 2 20s
	// false 20s
	// true 2 1m0s
}

// A fixed window lets up to twice its limit through around a boundary: the
// window opened by the first hit ends at 1m, and a new one opens at once.
func ExampleFixedWindow() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.FixedWindow(100, time.Minute), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	passed := int64(0)
	take := func(n int64) {
		if r, _ := l.AllowN(ctx, "user-1", n); r.Allowed {
			passed += n
		}
	}

	take(1) // at 0s: opens the window [0s, 1m)
	clock.Advance(59 * time.Second)
	take(99) // in the window's last second
	clock.Advance(time.Second)
	take(100) // at 1m: a new window [1m, 2m)
	fmt.Println("passed from 0s to 1m:", passed, "of them from 59s:", passed-1)
	r, _ := l.AllowN(ctx, "user-1", 1)
	fmt.Println("1 more at 1m:", r.Allowed, "retry after", r.RetryAfter)
	// Output:
	// passed from 0s to 1m: 200 of them from 59s: 199
	// 1 more at 1m: false retry after 1m0s
}

// The sliding window counts the previous window's hits, weighted by the
// part of it still inside the last minute: the burst of ExampleFixedWindow
// is stopped.
func ExampleSlidingWindow() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.SlidingWindow(100, time.Minute), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	l.AllowN(ctx, "user-1", 1) // at 0s
	clock.Advance(59 * time.Second)
	l.AllowN(ctx, "user-1", 99)
	clock.Advance(time.Second)
	r, _ := l.AllowN(ctx, "user-1", 100) // the previous 100 still weigh 100
	fmt.Println("100 at 1m:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(30 * time.Second) // half of them still count: 50
	r, _ = l.AllowN(ctx, "user-1", 51)
	fmt.Println("51 at 1m30s:", r.Allowed)
	// The weighting takes the previous hits as spread over their window:
	// bunched at its end, they let a second burst through at the end of
	// this one, ⌊100·(1s+1ns)/1m⌋ = 1 counting.
	clock.Advance(29*time.Second - 1)
	r, _ = l.AllowN(ctx, "user-1", 99)
	fmt.Println("99 at", time.Duration(clock.Now()), r.Allowed)
	// Output:
	// 100 at 1m: false retry after 59.400000001s
	// 51 at 1m30s: false
	// 99 at 1m58.999999999s true
}

// The sliding log counts every request for exactly one interval after it:
// no minute ever holds more than 100.
func ExampleSlidingLog() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.SlidingLog(100, time.Minute), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	l.AllowN(ctx, "user-1", 1) // at 0s
	clock.Advance(59 * time.Second)
	l.AllowN(ctx, "user-1", 99)
	clock.Advance(time.Second) // the hit at 0s stops counting
	r, _ := l.AllowN(ctx, "user-1", 100)
	fmt.Println("100 at 1m:", r.Allowed, "retry after", r.RetryAfter)
	r, _ = l.AllowN(ctx, "user-1", 1)
	fmt.Println("1 at 1m:", r.Allowed, "remaining", r.Remaining)
	// Output:
	// 100 at 1m: false retry after 59s
	// 1 at 1m: true remaining 0
}

// Symfony's token bucket, limit 5000 and rate 500 per 15 minutes: the whole
// limit at once, then 500 every 15 minutes counted from the first use.
func ExampleTokenBucket() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.TokenBucket(5000, 500, 15*time.Minute), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, _ := l.AllowN(ctx, "user-1", 5000)
	fmt.Println("5000 at once:", r.Allowed)
	r, _ = l.AllowN(ctx, "user-1", 501) // two refills away
	fmt.Println("501 more:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(15*time.Minute - time.Second)
	r, _ = l.AllowN(ctx, "user-1", 500) // Symfony says 900s
	fmt.Println("500 at 14m59s:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(time.Second)
	r, _ = l.AllowN(ctx, "user-1", 500)
	fmt.Println("500 at 15m:", r.Allowed)
	_, err = l.AllowN(ctx, "user-1", 5001)
	fmt.Println(err)
	// Output:
	// 5000 at once: true
	// 501 more: false retry after 30m0s
	// 500 at 14m59s: false retry after 1s
	// 500 at 15m: true
	// sluice: Limiter.AllowN: tokens must not exceed the limit 5000, got 5001
}

// The leaky bucket as a meter: 10 fill it, and it drains one every second,
// continuously.
func ExampleLeakyBucket() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.LeakyBucket(10, 1, time.Second), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, _ := l.AllowN(ctx, "user-1", 10)
	fmt.Println("10 at once:", r.Allowed)
	r, _ = l.AllowN(ctx, "user-1", 1)
	fmt.Println("1 more:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(2500 * time.Millisecond) // 2.5 have drained
	r, _ = l.AllowN(ctx, "user-1", 3)
	fmt.Println("3 at 2.5s:", r.Allowed, "retry after", r.RetryAfter)
	r, _ = l.AllowN(ctx, "user-1", 2)
	fmt.Println("2 at 2.5s:", r.Allowed)
	// Output:
	// 10 at once: true
	// 1 more: false retry after 1s
	// 3 at 2.5s: false retry after 500ms
	// 2 at 2.5s: true
}

// The shaper spaces requests out, 2 a second: each reservation gets its own
// departure time, and at most 2 wait behind the one that goes at once.
func ExampleShaper() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.Shaper(2, time.Second, 2), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	for range 4 {
		r, err := l.ReserveN(ctx, "user-1", 1, sluice.Never)
		if err != nil {
			log.Fatal(err)
		}
		if !r.OK() {
			fmt.Println("queue full")
			continue
		}
		fmt.Println("departs in", r.Delay())
	}
	clock.Advance(500 * time.Millisecond)
	if err := l.WaitN(ctx, "user-1", 1, sluice.Never); err != nil {
		log.Fatal(err)
	}
	fmt.Println("at 500ms, Wait slept", clock.Slept())
	// Output:
	// departs in 0s
	// departs in 500ms
	// departs in 1s
	// queue full
	// at 500ms, Wait slept 1s
}

// GCRA as go-redis/redis_rate's PerSecond(10): bursts of 10, then one token
// back every 100ms, from a single timestamp per key.
func ExampleGCRA() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.GCRA(10, 10, time.Second), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, _ := l.AllowN(ctx, "user-1", 10)
	fmt.Println("10 at once:", r.Allowed, "reset after", r.ResetAfter)
	r, _ = l.AllowN(ctx, "user-1", 1)
	fmt.Println("1 more:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(250 * time.Millisecond)
	r, _ = l.AllowN(ctx, "user-1", 2)
	fmt.Println("2 at 250ms:", r.Allowed, "remaining", r.Remaining, "reset after", r.ResetAfter)
	// Output:
	// 10 at once: true reset after 1s
	// 1 more: false retry after 100ms
	// 2 at 250ms: true remaining 0 reset after 950ms
}

// A compound of 5 a minute and 2 a second: a request passes only if both
// let it, and one that either rejects takes nothing from the other.
func ExampleCompound() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.Compound(
		sluice.FixedWindow(5, time.Minute),
		sluice.FixedWindow(2, time.Second),
	), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	for _, n := range []int64{2, 1, 1, 1} { // the last 3 are over 2 a second
		r, _ := l.AllowN(ctx, "user-1", n)
		fmt.Println("at 0s,", n, r.Allowed, "retry after", r.RetryAfter)
	}
	clock.Advance(time.Second) // 3 of the 5 a minute are left, not 0
	r, _ := l.AllowN(ctx, "user-1", 2)
	fmt.Println("at 1s, 2", r.Allowed)
	clock.Advance(time.Second)
	r, _ = l.AllowN(ctx, "user-1", 2)
	fmt.Println("at 2s, 2", r.Allowed, "retry after", r.RetryAfter)
	// Output:
	// at 0s, 2 true retry after 0s
	// at 0s, 1 false retry after 1s
	// at 0s, 1 false retry after 1s
	// at 0s, 1 false retry after 1s
	// at 1s, 2 true
	// at 2s, 2 false retry after 58s
}

// Calendar: 1,000 calls a month, resetting on the 31st in New York, a
// month's last day when it is shorter, and 5 a second besides, in a
// compound. The RetryAfter of the spent quota runs to the exact boundary.
func ExampleCalendar() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		log.Fatal(err)
	}
	start := time.Date(2028, 2, 10, 12, 0, 0, 0, ny)
	clock := sluicetest.NewFakeClock(start.UnixNano())
	l, err := sluice.NewLimiter(sluice.Compound(
		sluice.Calendar(1000, time.Date(2028, 1, 31, 0, 0, 0, 0, ny), 1, 0),
		sluice.TokenBucket(5, 5, time.Second),
	), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, _ := l.AllowN(ctx, "customer-1", 5)
	fmt.Println(r.Allowed, "remaining", r.Remaining, "of", r.Limit)
	for range 199 { // 995 more, 5 a second
		clock.Advance(time.Second)
		l.AllowN(ctx, "customer-1", 5)
	}
	clock.Advance(time.Second)
	r, _ = l.Allow(ctx, "customer-1")
	fmt.Println(r.Allowed, "until", start.Add(200*time.Second+r.RetryAfter).In(ny))
	clock.Set(time.Date(2028, 2, 29, 0, 0, 0, 0, ny).UnixNano())
	r, _ = l.Allow(ctx, "customer-1")
	fmt.Println(r.Allowed, "resets in", r.ResetAfter)
	// Output:
	// true remaining 0 of 5
	// false until 2028-02-29 00:00:00 -0500 EST
	// true resets in 743h0m0s
}

// PenaltyBox: 5 logins a minute, and a client that tries a 6th is shut
// out for a minute, then 10, then an hour, until it has been quiet for a
// day.
func ExamplePenaltyBox() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.PenaltyBox(sluice.FixedWindow(5, time.Minute),
		[]time.Duration{time.Minute, 10 * time.Minute, time.Hour}, 24*time.Hour), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	for range 2 {
		l.AllowN(ctx, "203.0.113.7", 5)
		r, _ := l.Allow(ctx, "203.0.113.7")
		fmt.Println(r.Allowed, "retry after", r.RetryAfter)
		clock.Advance(r.RetryAfter)
	}
	r, _ := l.Allow(ctx, "203.0.113.7")
	fmt.Println(r.Allowed, "after the block")
	// Output:
	// false retry after 1m0s
	// false retry after 10m0s
	// true after the block
}

// NoLimit lets everything through and keeps no state.
func ExampleNoLimit() {
	l, err := sluice.NewLimiter(sluice.NoLimit())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, _ := l.AllowN(ctx, "user-1", 1_000_000)
	fmt.Println(r.Allowed, r.Remaining)
	res, err := l.ReserveN(ctx, "user-1", 1_000_000, 0)
	fmt.Println(res.OK(), res.Delay(), err, "keys held:", l.Len())
	// Output:
	// true 9223372036854775807
	// true 0s <nil> keys held: 0
}

// BucketPolicy applies Bucket4j bandwidths to each key: 20 a minute, in
// bursts of at most 10. A request takes from both or from neither.
func ExampleBucketPolicy() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(20, time.Minute),                      // one every 3s
		sluice.Capacity(10, sluice.Greedy(10, time.Second)), // one every 100ms
	}}), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, _ := l.AllowN(ctx, "user-1", 10)
	fmt.Println("10 at 0s:", r.Allowed)
	r, _ = l.AllowN(ctx, "user-1", 1) // the burst bandwidth is empty
	fmt.Println("1 more:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(time.Second)
	r, _ = l.AllowN(ctx, "user-1", 10) // 10⅓ left a minute
	fmt.Println("10 at 1s:", r.Allowed)
	clock.Advance(time.Second)
	r, _ = l.AllowN(ctx, "user-1", 10) // ⅔ left a minute: 9⅓ to come
	fmt.Println("10 at 2s:", r.Allowed, "retry after", r.RetryAfter)
	// Output:
	// 10 at 0s: true
	// 1 more: false retry after 100ms
	// 10 at 1s: true
	// 10 at 2s: false retry after 28s
}

// Reservations run into debt: on a fixed window of 2 a minute, tokens that
// do not fit go to the next windows, and the caller waits for them.
func ExampleLimiter_Reserve() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	for range 3 {
		res, err := l.ReserveN(ctx, "user-1", 2, 90*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		if !res.OK() {
			fmt.Println("reserve 2: not within 90s, but in", res.Result().RetryAfter)
			continue
		}
		fmt.Println("reserve 2: wait", res.Delay())
	}
	r, _ := l.AllowN(ctx, "user-1", 1) // [0s, 1m) and [1m, 2m) are taken
	fmt.Println("1 at 0s:", r.Allowed, "retry after", r.RetryAfter)
	clock.Advance(time.Minute)
	r, _ = l.AllowN(ctx, "user-1", 1) // the debt fills [1m, 2m)
	fmt.Println("1 at 1m:", r.Allowed, "retry after", r.RetryAfter)
	// Output:
	// reserve 2: wait 0s
	// reserve 2: wait 1m0s
	// reserve 2: not within 90s, but in 2m0s
	// 1 at 0s: false retry after 2m0s
	// 1 at 1m: false retry after 1m0s
}

// A caller that reserved tokens and then will not use them gives them
// back: nothing was taken after it, so the key is as it was before.
func ExampleReservation_Cancel() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.TokenBucket(2, 1, time.Second), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	l.AllowN(ctx, "user-1", 2)
	res, err := l.ReserveN(ctx, "user-1", 1, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reserved:", res.OK(), "due in", res.Delay())
	res.Cancel() // the caller gave up
	r, _ := l.PeekN(ctx, "user-1", 1)
	fmt.Println("after Cancel, 1 more in", r.RetryAfter)
	// Output:
	// reserved: true due in 1s
	// after Cancel, 1 more in 1s
}

// Concurrency bounds what is in flight: 2 slots per key, each held until
// released, or for at most 30s when its holder never comes back.
func ExampleConcurrency() {
	clock := sluicetest.NewFakeClock(0)
	l, err := sluice.NewLimiter(sluice.Concurrency(2, 30*time.Second), sluice.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	a, _ := l.Acquire(ctx, "provider", 0, 0)
	b, _ := l.Acquire(ctx, "provider", 10*time.Second, 0)
	c, _ := l.Acquire(ctx, "provider", 0, 0)
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, c.RetryAfter)

	r, _ := l.Release(ctx, a) // a's call ended
	c, _ = l.Acquire(ctx, "provider", 0, 0)
	fmt.Println(r.Allowed, c.Allowed)

	clock.Advance(10 * time.Second) // b's holder crashed: its slot lapses
	lost, _ := l.Renew(ctx, b)
	d, _ := l.Acquire(ctx, "provider", 0, 0)
	fmt.Println(lost.Allowed, d.Allowed, d.Remaining)
	// Output:
	// true true false 10s
	// true true
	// false true 0
}
