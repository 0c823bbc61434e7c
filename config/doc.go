// Package config loads limiter files: YAML documents that name rate
// limiters and give each a sluice policy, in the manner of Symfony's
// rate_limiter configuration.
//
//	limiters:
//	  anonymous_api: {policy: fixed_window, limit: 100, interval: 60 minutes}
//	  authenticated_api:
//	    policy: token_bucket
//	    limit: 5000
//	    rate: {interval: 15 minutes, amount: 500}
//	  business:
//	    policy: bucket
//	    limits:
//	      - {capacity: 10000, refill: {greedy: 10000, per: 1h}, id: business}
//	      - {capacity: 20, refill: {greedy: 20, per: 1s}, id: burst}
//	  api: {policy: compound, limiters: [anonymous_api, {policy: sliding_window, limit: 10, interval: 1s}]}
//
// [Load] turns the bytes of such a file into a [File], a map from names to
// [sluice.Policy] values that [sluice.NewLimiter] accepts; [LoadFile] reads
// the file first. Load is a pure function: it reads nothing and keeps no
// state.
//
// # Policies
//
// Every limiter is a mapping with a policy key; the other keys depend on
// the policy:
//
//	policy          required         optional  sluice constructor
//	fixed_window    limit, interval  aligned   FixedWindow(limit, interval); AlignedFixedWindow when aligned is true
//	sliding_window  limit, interval  -         SlidingWindow(limit, interval)
//	sliding_log     limit, interval  -         SlidingLog(limit, interval)
//	token_bucket    limit, rate      -         TokenBucket(limit, rate.amount, rate.interval)
//	leaky_bucket    limit, rate      -         LeakyBucket(limit, rate.amount, rate.interval)
//	gcra            limit, rate      -         GCRA(limit, rate.amount, rate.interval); limit is the burst
//	shaper          rate, max_queue  -         Shaper(rate.amount, rate.interval, max_queue)
//	no_limit        -                -         NoLimit()
//	concurrency     limit, ttl       -         Concurrency(limit, ttl): ttl is the lease; limit at most 1000
//	compound        limiters         -         Compound(members...)
//	bucket          limits           -         BucketPolicy(Config{Bandwidths: ...})
//	calendar        limit, period    time_zone, first_day, anchor_day  Calendar(limit, anchor, months, days)
//	penalty_box     limiter, penalties  forgive_after  PenaltyBox(limiter, penalties, forgive_after)
//
// A calendar's period is day, week or month, starting at midnight in
// time_zone, an IANA name (default UTC); a week starts on first_day
// (sunday to saturday, default monday), a month on anchor_day (1 to 31,
// default 1), or on the month's last day when it has fewer days: an
// anchor_day of 31 starts February's period on the 28th or 29th. The
// command embeds the zone database, so a container without one reads
// every name.
//
// A penalty box's limiter is the name of another limiter or a limiter
// mapping, as a compound's members are; penalties is a list of
// durations, the block after the first offence, the second, ..., the last
// repeating; forgive_after, required with more than one penalty, is the
// quiet time after a block that starts the count over.
//
// A rate is a mapping {interval: D, amount: N}: amount tokens per
// interval.
//
// The limiters of a compound are a list whose items are either the name
// of another limiter of the file or a limiter mapping written in place. A
// name must exist, and compounds must not refer to each other in a cycle.
// A compound may expand to at most 1000 policies in all.
//
// The limits of a bucket are a list of bandwidths, each a mapping:
//
//	key       required  meaning
//	capacity  yes       the most tokens the bandwidth holds
//	refill    yes       one of the three refill mappings below
//	initial   no        tokens a new bucket starts with (default: full)
//	id        no        the bandwidth's ID, unique within the bucket
//
//	{greedy: N, per: D}                N tokens per D, spread evenly
//	{intervally: N, per: D}            N tokens at once every D
//	{intervally_aligned: N, per: D, first_refill: T, adaptive_initial: B}
//	                                   intervally, on a grid through the
//	                                   RFC 3339 time T; adaptive_initial
//	                                   (default false) and initial exclude
//	                                   each other
//
// A bucket with intervally_aligned refill needs a wall clock, which keyed
// limiters have only when given one: sluice.NewLimiter rejects its policy
// on its default clock unless given sluice.WithClock(sluice.WallClock()),
// and it may not be a member of a compound. Its [Limiter.Bucket]
// configuration serves sluice.NewBucket too.
//
// # Leases
//
// A top-level limiter of kind token_bucket, leaky_bucket, bucket, gcra or
// fixed_window may also have a lease key, which is not the policy's but
// the limiter's: quota leasing with a store ([sluice.WithLease]), each
// process spending leases of min to max tokens that expire after ttl
// (all three required; 1 ≤ min ≤ max, ttl positive). [Load] decodes it
// into [Limiter].Lease.
//
//	limiters:
//	  search: {policy: gcra, limit: 1000, rate: {amount: 1000, interval: 1s}, lease: {min: 10, max: 500, ttl: 1s}}
//
// # Shadow mode
//
// A top-level limiter may have shadow: true, which is not its policy's
// but the limiter's, as lease is: [Limiter].Shadow, for
// [sluice.WithShadow]. The limiter then decides and counts as without it,
// but lets every request through, and reports those its policy refused.
//
//	limiters:
//	  new_limit: {policy: fixed_window, limit: 100, interval: 1m, shadow: true}
//
// # Values
//
// Integers are int64, written in decimal, or with 0x, 0o or 0b, and may
// have underscores (1_000_000). Fractions, exponents, quoted numbers,
// decimals with a leading zero (which YAML 1.1 reads as octal) and values
// beyond int64 are errors. Whether zero or a negative number is allowed is
// the policy's rule (limits and capacities must be positive, initial must
// not be negative).
//
// Durations are either Go syntax ("1h30m", "250ms", "1.5s") or a whole
// count and a unit word, singular or plural, with or without a space:
// "1 second", "60 minutes", "1 day", "2 weeks", "90sec". The units are
// ns, us (µs), ms, s, m, h, d and w, and the words nanosecond,
// microsecond, millisecond, second (sec), minute (min), hour (hr), day and
// week, with or without a plural s, in any case (single letters in lower
// case only). A day is 24 hours and a week 7 days. Months and years are
// rejected, since their length varies. A bare number has no unit and is
// an error. A duration beyond about 292 years overflows time.Duration and
// is an error.
//
// Limiter names are letters, digits, '_' and '-'. IDs are strings; quote
// numbers used as IDs.
//
// # Strictness
//
// Decoding is strict, so that a typo fails loudly instead of leaving a
// limit out: keys that the format or the policy does not define, duplicate
// keys, missing keys, values of the wrong type, merge keys (<<) and a
// second YAML document are all errors. Anchors and aliases may be used.
//
// A file without limiters, an empty file included, is an error: a limiter
// file that limits nothing is far more likely a mistake (a truncated file,
// the wrong path) than an intent, and a silent success would turn rate
// limiting off. Write a no_limit limiter to limit nothing on purpose.
//
// # Versions and overrides
//
// Beside its policy's keys, a limiter may have two keys of its own:
//
//	api:
//	  policy: token_bucket
//	  limit: 100
//	  rate: {interval: 1h, amount: 100}
//	  version: 2
//	  overrides:
//	    - {prefix: "paid:", policy: token_bucket, limit: 10000, rate: {interval: 1h, amount: 10000}}
//	    - {key: "paid:acme", policy: fixed_window, limit: 50, interval: 1s}
//
// version (a non-negative integer, default 0) is [Limiter.Version], for
// sluice.WithConfigVersion: the order of configurations during a rolling
// deploy. overrides is a list of policies for some keys, each with a key
// (that key) or a prefix (every key that starts with it, not empty), as
// [Limiter.Overrides]; an override's other keys are a policy, as a
// limiter's are. A key gets the policy of its exact key's override, else
// of its longest matching prefix's, else the limiter's: see
// [Limiter.PolicyFor], and [Limiter.PolicyFunc] for sluice.WithPolicyFor.
// A key or prefix listed twice, both or neither in one override, and an
// override's policy that a keyed limiter refuses are errors.
//
// # Other formats
//
// [LoadSymfony] reads a Symfony framework.rate_limiter file as it is, and
// [LoadResilience4j] the resilience4j.ratelimiter and
// resilience4j.timelimiter sections of a Spring Boot application.yml,
// building package resilience's limiters; what they accept but do not
// apply (Symfony's storage_service, Resilience4j's health indicator, ...)
// is listed in the result's Notes, and their errors are *Error values
// like Load's. docs/migrating.md shows both.
//
// # Errors
//
// Every error is an [*Error] with the path of the offending node in the
// document, its line and column, the value and a message:
//
//	config: limiters.anonymous_api.limit (line 3): must be positive, got 0
//
// The policies are validated by the constructors of package sluice, whose
// rules (positive limits and periods, unique bandwidth IDs, no aligned
// first refill before the Unix epoch, ...) the format does not repeat;
// such an error wraps the *sluice.ConfigError, so that
// errors.Is(err, sluice.ErrInvalidConfig) holds.
package config
