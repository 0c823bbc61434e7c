// Package smooth offers Guava's RateLimiter for Go: SmoothBursty
// ([NewBursty]) and SmoothWarmingUp ([NewWarmingUp]), with Guava's exact
// waits, for users moving from Guava who want the same numbers.
//
//	rl, err := smooth.NewBursty(5) // 5 permits per second
//	if err != nil { ... }
//	waited, err := rl.Acquire(ctx, 1)
//
// # Time and arithmetic
//
// As in Guava, the limiter's clock is whole microseconds since its
// creation, and waits are whole microseconds: at 3 permits per second the
// second of two back-to-back requests waits 333333µs, and after a
// fractional refill a wait can be 333332µs.
//
// Guava computes in doubles and truncates to microseconds, and this package
// does the same, operation for operation, in float64, confined to one
// unexported type in one file (guava.go); sluice's own limiters decide in
// integers. Exact rational
// arithmetic would not reproduce Guava: it differs in the last microsecond
// in about one operation in a thousand. For example at 10 permits per
// second, after Acquire(1) at 0 and Acquire(3) at 333334µs, Guava's next
// request waits 66665µs, since the 3 - 2.33334 fresh permits come out
// in binary as 0.6666599999999998, while the exact wait is 66666µs.
// Only the double arithmetic gives Guava's outputs bit for bit, for bursts
// as for warm-up ramps.
//
// # Differences from Guava
//
//   - Acquire and TryAcquire take a context; a sleep cut short returns
//     ctx.Err(), and the permits stay reserved.
//   - Permits are int64, converted to float64 as Guava converts its int.
//   - A warm-up period of 0 stores no permits; in Guava it makes the
//     limiter unlimited after its first idle moment.
//   - The sum of two waits saturates at math.MaxInt64 microseconds where
//     Guava's long addition would wrap.
//   - maxBurstSeconds and coldFactor, fixed by Guava's public API, are
//     options, validated (Guava does not check its package-private
//     factories).
package smooth
