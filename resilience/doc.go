// Package resilience offers Resilience4j's RateLimiter and TimeLimiter for
// Go, for users moving from Resilience4j who want the same numbers.
//
// # RateLimiter
//
// [RateLimiter] is Resilience4j's AtomicRateLimiter: time is cut into cycles
// of Config.LimitRefreshPeriod counted from the limiter's creation; each
// cycle brings Config.LimitForPeriod permissions, which do not accumulate
// beyond one cycle's worth. A caller may wait up to Config.Timeout for a
// later cycle; its permits are reserved at once, so the permissions left
// can go negative, and later callers queue behind it.
//
//	rl, err := resilience.New(resilience.Config{
//		LimitForPeriod:     100,
//		LimitRefreshPeriod: time.Second,
//		Timeout:            500 * time.Millisecond,
//	})
//	if err != nil { ... }
//	ok, err := rl.AcquirePermission(ctx, 1)
//
// As in Resilience4j, a caller whose permits would take longer than the
// timeout is parked for the whole timeout and then refused, so that the
// callers the limiter refuses are held back too; [WithFailFast] refuses
// them at once instead, as golang.org/x/time/rate and Bucket4j do.
//
// It follows Resilience4j's arithmetic exactly, in integer nanoseconds,
// except where sluice decides otherwise:
//   - a call for n ≤ 0 permits is an *sluice.ArgumentError (Resilience4j
//     accepts it, and n < 0 adds permissions);
//   - a wait cut short by its context gives its permits back, as far as
//     the callers that reserved after it allow, and returns ctx.Err()
//     (Resilience4j keeps them spent); a context whose deadline comes
//     before the wait fails at once and takes nothing;
//   - [RateLimiter.Drain] takes every permission available now, after the
//     cycle refresh, and leaves debt alone (Resilience4j takes the stale
//     stored count and erases debt);
//   - a clock that goes back refreshes nothing.
//
// # Bulkhead
//
// [Bulkhead] is Resilience4j's SemaphoreBulkhead: at most
// BulkheadConfig.MaxConcurrentCalls calls at once (25 by default), a call
// waiting up to MaxWaitDuration (0 by default) for room, and refused with
// [ErrBulkheadFull] after it. With sluice.WithStore it counts across every
// process that shares the store, which Resilience4j's cannot, on a
// sluice.Concurrency limit: a call holds a slot, renewed while it runs, so
// a process that crashes mid-call gives its calls' places back within
// BulkheadConfig.Lease.
//
//	bh, err := resilience.NewBulkhead("payments", resilience.BulkheadConfig{
//		MaxConcurrentCalls: 20,
//		MaxWaitDuration:    500 * time.Millisecond,
//	}, sluice.WithStore(store))
//	if err != nil { ... }
//	err = bh.Do(ctx, func(ctx context.Context) error { return callPayments(ctx) })
//
// # TimeLimiter
//
// [TimeLimiter], [Call] and [TimeLimit] run a function with a time limit,
// as Resilience4j's TimeLimiter does with a future: the caller gets a
// [*TimeoutError] after exactly the timeout, and the function's context is
// cancelled when [TimeLimiterConfig].CancelRunning is set. Timing out a call
// does not undo it. Tests run calls on a fake clock through [WithTimer].
package resilience
