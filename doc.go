// Package sluice is a rate limiter: Bucket4j's token-bucket model in exact
// integer arithmetic, for Go.
//
// # Buckets
//
// A [Bucket] has one or more bandwidths ([Capacity], [Simple]), each a capacity
// and a [Refill]: [Greedy] (tokens spread evenly over the period),
// [Intervally] (all at once when a period has passed) or [IntervallyAligned]
// and [IntervallyAlignedAdaptive] (on a wall-clock grid). A call consumes
// from every bandwidth or from none:
//
//	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
//		sluice.Simple(1000, time.Minute),                         // 1000 a minute
//		sluice.Capacity(50, sluice.Greedy(50, time.Second)),      // in bursts of at most 50
//	}})
//	if err != nil { ... }
//	if r := b.Allow(); !r.Allowed { ... } // r.Remaining, r.RetryAfter, r.ResetAfter
//
// Every call of the X/XN families (Allow/AllowN, Peek/PeekN,
// Reserve/ReserveN, Wait/WaitN) is on [Bucket], [KeyBucket] and [Limiter]
// alike, X being shorthand for XN with one token, and AllowN and PeekN
// return one [Result]. [Bucket.Snapshot] and [KeyBucket.Snapshot] show a
// bucket's state, for diagnostics. Bucket4j's operations are there too
// ([Bucket.TryConsumeUpTo], [Bucket.ConsumeIgnoringRateLimits],
// [Bucket.AddTokens], ...), and [Bucket.TryConsume] is the boolean hot
// path that allocates nothing.
//
// Bandwidths may be overdrawn ([Bucket.ConsumeIgnoringRateLimits],
// reservations) and may hold more than their capacity
// ([Bucket.ForceAddTokens], initial tokens).
//
// # Waiting
//
// [Bucket.WaitN], [KeyBucket.WaitN] and [Limiter.WaitN] wait for their
// tokens as Bucket4j's blocking tryConsume(n, maxWait) does, under one rule
// (see [Limiter.WaitN]): a positive maxWait, [Never] for no bound, and a
// wait that would be longer, or outlast the context's deadline, is a
// [*MaxWaitError] at once that takes nothing. [Bucket.ReserveN],
// [KeyBucket.ReserveN] and [Limiter.ReserveN] hand out a [Reservation] for
// callers who schedule work themselves, as x/time/rate's ReserveN does.
// Both reserve fairly: tokens are taken first and the caller then waits,
// so later callers queue behind. A wait that ends without its caller going
// ahead gives its tokens back ([Reservation.Cancel]).
//
// # Keyed limiters
//
// A [Limiter] applies a [Policy] to every key (a user, an IP address, an
// API key) separately, each key with its own state, created at first use
// and forgotten once it has expired:
//
//	l, err := sluice.NewLimiter(sluice.SlidingWindow(100, time.Minute))
//	res, err := l.Allow(ctx, userID) // res.Allowed, res.Remaining, res.RetryAfter
//
// The policies: [FixedWindow], [SlidingWindow], [SlidingLog], [TokenBucket]
// (Symfony's), [LeakyBucket] (a meter), [Shaper] (a leaky bucket that
// spaces requests), [GCRA], [BucketPolicy] (a whole Bucket4j
// configuration), [Compound] (all must allow), [Calendar] (a quota per
// day, week or month of a time zone), [PenaltyBox] (a block after another
// policy's refusal) and [NoLimit]. Each is a pure
// state machine in exact integer arithmetic; docs/policies.md compares
// them. For token-bucket policies, [Limiter.Bucket] hands out a key's
// bucket as a [KeyBucket], Bucket4j's proxy: with [WithStore] it is the
// one way to a stored bucket.
//
// With [WithStore] every process using the store shares the limits, at a
// store round trip per decision (per batch on a hot key). [WithLease]
// trades a bounded under-admission for far fewer: each process spends
// leases of the shared tokens locally (docs/stores.md, "Quota leasing").
//
// [WithShadow] puts a Limiter in shadow mode: it decides and counts every
// request as it would in force, but lets each one through, flagging in
// [Result].ShadowRejected those its policy refused, so that a new limit
// can be watched before it bites (docs/observability.md).
//
// # Observing
//
// [WithObserver] gives a Limiter, Bucket or KeyBucket an [Observer], told
// of every decision, wait and store call as an [Event]; packages
// sluiceprom and sluiceotel turn the events into sluice serve's Prometheus
// and OpenTelemetry metrics (docs/observability.md). Without one a
// decision costs a nil check. It is the library's one hook, and the
// library never logs: what it would log is an event too
// ([EventVersionConflict]).
//
// # Options
//
// One [Option] type configures [NewBucket] and [NewLimiter]; each refuses
// an option that does not apply to it (a store's option without
// [WithStore], say) with an [*ArgumentError] naming it.
//
// # Time
//
// Every decision is integer arithmetic on nanoseconds from a [Clock]:
// [MonotonicClock] by default, [WallClock] for aligned refill, [Millis] for
// millisecond resolution. A Clock with a Sleep method is also what waits
// sleep on: package sluicetest's FakeClock advances itself instead of
// waiting, so that blocking calls in tests run instantly.
//
// # Differences from Bucket4j
//
// Where Bucket4j falls back to floating point on overflow, sluice computes
// exactly with 128-bit intermediates. TryConsumeAsMuchAsPossible on an
// overdrawn bucket takes nothing (Bucket4j 7 returned a negative count, bug
// #417). WithInitialTokens keeps a bandwidth's ID.
package sluice
