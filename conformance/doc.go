// Package conformance runs conformance vector files against sluice's token
// buckets and limiters.
//
// A vector file is a JSON suite of cases; each case builds a bucket or a
// limiter on a fake clock and runs steps that move the clock or call an
// operation and state what it must return. FORMAT.md in this package's
// directory describes the format.
//
// The same files run against every implementation through a [Target],
// which builds the [Bucket] of a bucket case. A target that is also a
// [LimiterTarget] builds the [Limiter] of a limiter case, and one that is
// a [CompatTarget] runs the compatibility policies. [Local] is all three,
// in memory; [Store] runs them on a driver.Store. A case that a target
// cannot run (its kind of limiter, or an operation such as a blocking
// wait) is reported as skipped, never as passed. [Run] returns a [Report]
// for the sluice command; [RunT] runs each file and case as a subtest.
//
// # Limiter cases
//
// A LIMITER is a limiter description as package config's files write one,
// read by the same decoder (internal/policyspec): every policy of the
// config files, with the same fields, and the compatibility policies
// besides (FORMAT.md has the table). A description that a config file may
// not have is a configuration error here too, of no rule. Durations are Go
// syntax or integer nanoseconds, fields that no policy has are ignored,
// and values that sluice refuses are passed on to the target, so that a
// want_config_error case sees the target refuse them. Among the policies,
// two extend the format, in its terms, and may be compound members too:
//
//	{"policy": "gcra", "limit": 10, "rate": {"interval": "1s", "amount": 5}}
//	{"policy": "shaper", "rate": {"interval": "1s", "amount": 5}, "max_queue": 10}
//
// They mean:
//   - gcra is the generic cell rate algorithm, sluice.GCRA(limit, amount,
//     interval): amount tokens per interval in bursts of up to limit. With
//     the emission interval T = interval/amount, kept exactly, a request
//     for n tokens passes iff max(TAT, now) + n·T, which then becomes the
//     theoretical arrival time TAT, is at most limit·T after now;
//     remaining is ⌊(limit·T − (TAT − now))/T⌋, and waits are rounded up
//     to whole nanoseconds.
//   - shaper is the leaky bucket as a shaper, sluice.Shaper(amount,
//     interval, max_queue): requests leave amount per interval, each token
//     taking a slot of interval/amount. consume lets a request through only
//     when the line is idle; reserve queues it when its wait is at most
//     max_queue slots. limit is max_queue+1, and remaining the 1-token
//     requests reserve would still queue.
//
// Every step of a limiter case acts on one key. consume (tokens default 1)
// is Limiter.AllowN, compared field by field with the sluice.Result;
// reserve (tokens, max_wait: absent means sluice.Never) is Limiter.ReserveN,
// a reservation that is not OK being max_wait_exceeded; reset is
// Limiter.Reset. An error is matched to its want_error code with
// errors.Is: sluice.ErrInvalidArgument, sluice.ErrMaxWaitExceeded,
// errors.ErrUnsupported. sluice accepts intervals under one second,
// so a step or a case wanting Symfony's invalid_interval fails, with a
// message saying that this difference is deliberate.
//
// A want_config_error rule is compared with sluice.ConfigError.Rule, which
// for limiters takes more values than FORMAT lists for buckets:
// non_positive_limit, no_members, and the rules of packages resilience and
// smooth.
//
// # Compatibility policies
//
// The compatibility policies are built with packages resilience and
// smooth, on the case's fake clock:
//
//   - resilience4j: resilience.New with LimitForPeriod, LimitRefreshPeriod
//     and Timeout; absent fields take Resilience4j's defaults (50 per
//     500ns, 5s). Its operations are the RateLimiter's methods.
//   - time_limiter: resilience.NewTimeLimiter; absent fields take
//     Resilience4j's defaults (1s, cancel_running_future true).
//   - smooth_bursty and smooth_warming_up: smooth.NewBursty and
//     smooth.NewWarmingUp; max_burst_seconds defaults to 1.0 and
//     cold_factor to 3.0. Their floats are decoded as float64, the only
//     fields of the format that are.
//
// Blocking operations (acquire, try_acquire) sleep on the fake clock,
// which moves by what they waited; waited is what that call slept.
//
// A time_limiter call is simulated. Its task runs on the fake clock for
// task and returns a value or an error as outcome says, unless task is
// longer than the timeout: it then runs until the timeout, when the
// limiter's timer fires (resilience.WithTimer), and waits until it is
// cancelled or abandoned. So the outcome depends on the durations alone:
// a task of at most the timeout gives success or error after task, a
// longer one a timeout after exactly the timeout; waited is the fake time
// the caller spent, and cancelled whether the task's context was cancelled
// while it ran.
package conformance
