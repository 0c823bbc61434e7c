package sluice

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/calendar"
	"github.com/sluicehq/sluice/internal/policy/compound"
	"github.com/sluicehq/sluice/internal/policy/concurrency"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/nolimit"
	"github.com/sluicehq/sluice/internal/policy/penaltybox"
	"github.com/sluicehq/sluice/internal/policy/shaper"
	"github.com/sluicehq/sluice/internal/policy/slidinglog"
	"github.com/sluicehq/sluice/internal/policy/slidingwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Policy is a rate-limiting policy that a Limiter applies to each key. Make
// one with FixedWindow, TokenBucket, LeakyBucket, BucketPolicy, ... A Policy
// is an immutable value; an invalid one makes NewLimiter return its
// *ConfigError.
type Policy interface {
	// String names the policy and its parameters, as config files write
	// them: "fixed_window(limit=100, interval=1h0m0s)". It is for people:
	// Kind and Window are the facts to branch on.
	String() string
	// Kind is the policy's kind, the name config files give it
	// ("fixed_window", "token_bucket", "bucket", ...), whatever its
	// parameters and whether or not they are valid.
	Kind() string
	// Window is the length of time over which the policy's limit applies,
	// so that Result.Limit per Window is its long-run rate: a window
	// policy's interval; for a bucket, the time its bandwidth of smallest
	// capacity takes to refill from empty (limit 100 refilled 10 a
	// second: 10s); for GCRA, the time to earn its burst; for a shaper,
	// the time to send its queue and one more; for a compound, the
	// shortest of its members', since the member with the shortest window
	// is the one that usually binds and that Result.Limit reports (name
	// members apart where each must show). It is 0 for NoLimit and for an
	// invalid policy, and saturates at Never.
	//
	// It is what HTTP's RateLimit-Policy header calls the window (w) and
	// the span in which a simulation looks for the busiest burst.
	Window() time.Duration
	// build validates the policy and returns its in-memory keyed form,
	// holding at most maxKeys keys (0: no bound).
	build(maxKeys int) (keyed.Keys, error)
	// erased validates the policy and returns its machine over encoded
	// state, for compound policies and byte-oriented stores.
	erased() (policy.Erased, error)
	// tokenBucket returns the configuration of a token-bucket policy, and
	// whether asking for more than its capacity is an argument error; ok
	// is false for other policies and invalid ones.
	tokenBucket() (cfg *tokenbucket.Config, strict, ok bool)
	// wallClock reports whether the policy refills on a wall-clock grid
	// (a bucket's intervally aligned refill), which needs a wall clock.
	wallClock() bool
	// leasing is what WithLease can do with the policy's state: its
	// machine's answer.
	leasing() policy.Leasing
}

// The kinds of the policies of this package, as Policy.Kind names them:
// the names config files and the conformance vectors give them, one per
// constructor but for AlignedFixedWindow, a fixed_window with aligned:
// true. internal/policyspec's table holds them for those formats.
const (
	kindFixedWindow   = "fixed_window"
	kindSlidingWindow = "sliding_window"
	kindSlidingLog    = "sliding_log"
	kindTokenBucket   = "token_bucket"
	kindLeakyBucket   = "leaky_bucket"
	kindGCRA          = "gcra"
	kindShaper        = "shaper"
	kindCompound      = "compound"
	kindNoLimit       = "no_limit"
	kindBucket        = "bucket"
	kindCalendar      = "calendar"
	kindPenaltyBox    = "penalty_box"
)

// machinePolicy is a Policy backed by a policy.Machine.
type machinePolicy[S any, M policy.Machine[S]] struct {
	kind string
	name string
	m    M
	err  error
	// packed, when set, builds the in-memory keys over a smaller form of
	// S that holds every state of m: fewer bytes per key.
	packed func(maxKeys int) keyed.Keys
	// aligned is set when m refills on a wall-clock grid.
	aligned bool
}

func (p machinePolicy[S, M]) String() string  { return p.name }
func (p machinePolicy[S, M]) wallClock() bool { return p.aligned }
func (p machinePolicy[S, M]) Kind() string    { return p.kind }

func (p machinePolicy[S, M]) leasing() policy.Leasing {
	if p.err != nil {
		return policy.NoLease
	}
	return policy.LeasingOf(p.m)
}

func (p machinePolicy[S, M]) Window() time.Duration {
	if p.err != nil {
		return 0
	}
	return time.Duration(p.m.Window())
}

func (p machinePolicy[S, M]) build(maxKeys int) (keyed.Keys, error) {
	if p.err != nil {
		return nil, p.err
	}
	if p.packed != nil {
		return p.packed(maxKeys), nil
	}
	return keyed.NewTable[S](p.m, maxKeys), nil
}

func (p machinePolicy[S, M]) erased() (policy.Erased, error) {
	if p.err != nil {
		return nil, p.err
	}
	return policy.Erase[S](p.m), nil
}

// Reserves reports whether the policy can reserve (Limiter.ReserveN,
// WaitN, Wait): SlidingWindow and SlidingLog cannot, nor a Compound with
// either among its members. It is not part of Policy, to keep the
// package's API small: httplimit.NewTransport asks it through an interface
// of its own, to refuse at once a limiter it could not wait on.
func (p machinePolicy[S, M]) Reserves() bool { return p.err == nil && policy.Reserves[S](p.m) }

// HoldsDebt reports whether the policy can owe tokens (Limiter.Charge,
// Hold, Settle): every policy but SlidingWindow, SlidingLog and Shaper,
// and a Compound of policies that can. As Reserves, it is not part of
// Policy; the command asks it through an interface of its own, to refuse
// at configuration time a limiter that charges after the fact on a
// policy that cannot.
func (p machinePolicy[S, M]) HoldsDebt() bool { return p.err == nil && policy.HoldsDebt[S](p.m) }

// tokenBucket asks the machine: the token-bucket machines say what their
// bucket is, whatever policy made them.
func (p machinePolicy[S, M]) tokenBucket() (*tokenbucket.Config, bool, bool) {
	b, ok := any(p.m).(interface {
		Config() *tokenbucket.Config
		Strict() bool
	})
	if !ok || p.err != nil {
		return nil, false, false
	}
	return b.Config(), b.Strict(), true
}

func policyError(kind string, rule Rule, field, value, msg string) error {
	return &ConfigError{Rule: rule, Bandwidth: -1, Field: kind + "." + field, Value: value, Msg: msg}
}

// checkLimit validates the limit and the interval, named intervalField,
// that every window policy has.
func checkLimit(kind string, intervalField string, limit int64, interval time.Duration) error {
	switch {
	case limit <= 0:
		return policyError(kind, RuleNonPositiveLimit, "limit", itoa(limit), "must be positive")
	case interval <= 0:
		return policyError(kind, RuleNonPositivePeriod, intervalField, interval.String(), "must be positive")
	}
	return nil
}

// FixedWindow lets limit tokens through per window of interval. A window
// opens at a key's first hit (not on a calendar boundary), as in Symfony;
// at its end the count starts again. Up to twice the limit can pass around
// a window boundary. Asking for more than limit at once is an argument
// error. Reservations take tokens from later windows. It can be leased
// (WithLease), a lease ending with its window.
func FixedWindow(limit int64, interval time.Duration) Policy {
	return machinePolicy[fixedwindow.State, fixedwindow.Config]{
		kind: kindFixedWindow,
		name: fmt.Sprintf("%s(limit=%d, interval=%v)", kindFixedWindow, limit, interval),
		m:    fixedwindow.Config{Limit: limit, Interval: int64(interval)},
		err:  checkLimit(kindFixedWindow, "interval", limit, interval),
	}
}

// AlignedFixedWindow is FixedWindow on the clock's grid: windows open at
// the multiples of interval since the Unix epoch (a per-minute window at
// each minute's :00), not at a key's first hit, as envoyproxy/ratelimit's
// windows do. Every key's window ends at the same time, so clients that
// all wait for it come back together. On the default MonotonicClock the
// grid is that of the clock's first reading of the system time.
func AlignedFixedWindow(limit int64, interval time.Duration) Policy {
	return machinePolicy[fixedwindow.State, fixedwindow.Config]{
		kind: kindFixedWindow,
		name: fmt.Sprintf("%s(limit=%d, interval=%v, aligned)", kindFixedWindow, limit, interval),
		m:    fixedwindow.Config{Limit: limit, Interval: int64(interval), Aligned: true},
		err:  checkLimit(kindFixedWindow, "interval", limit, interval),
	}
}

// Calendar lets limit tokens through per calendar period: months months
// or days days, exactly one of them positive, starting at anchor's local
// date and time of day in anchor's Location. Calendar(100, t, 0, 1) is a
// day, (0, 7) a week from anchor's weekday, (1, 0) a month from anchor's
// day of the month, on the month's last day when it has fewer days (an
// anchor on the 31st: February 28 or 29, April 30), as billing cycles
// count; (12, 0) is a year. Periods follow the zone's clock: a day across
// a change to or from daylight saving time is 23 or 25 hours, a month
// 28 to 31 days. Result.RetryAfter and ResetAfter end exactly at the
// boundary; Window is the average period (a Gregorian month is
// 30.436875 days).
//
// The periods are those of the limiter's clock read as Unix time: on the
// default MonotonicClock, the system time of its first reading, on
// WallClock the system time. Asking for more than limit at once is an
// argument error. Reservations take tokens from later periods, as
// FixedWindow's do. It can be leased (WithLease), a lease ending with its
// period. The zone's rules are those of the Location: load it
// with time.LoadLocation, and import time/tzdata where the system may
// have no zone database.
func Calendar(limit int64, anchor time.Time, months, days int) Policy {
	p := machinePolicy[calendar.State, calendar.Config]{
		kind: kindCalendar,
		name: fmt.Sprintf("%s(limit=%d, months=%d, days=%d, anchor=%s %s)", kindCalendar, limit, months, days,
			anchor.Format("2006-01-02T15:04:05.999999999"), anchor.Location()),
		m: calendar.New(limit, anchor, int64(months), int64(days)),
	}
	// The bounds keep every period within a few centuries, so that
	// counting them from the anchor never overflows.
	const maxMonths, maxDays = 12 * 100, 366 * 100
	switch {
	case limit <= 0:
		p.err = policyError(kindCalendar, RuleNonPositiveLimit, "limit", itoa(limit), "must be positive")
	case months < 0 || months > maxMonths:
		p.err = policyError(kindCalendar, RuleNonPositivePeriod, "months", strconv.Itoa(months), "must be in [0, 1200]")
	case days < 0 || days > maxDays:
		p.err = policyError(kindCalendar, RuleNonPositivePeriod, "days", strconv.Itoa(days), "must be in [0, 36600]")
	case (months > 0) == (days > 0):
		p.err = policyError(kindCalendar, RuleNonPositivePeriod, "period", fmt.Sprintf("%d months and %d days", months, days),
			"must be months or days, exactly one of them positive")
	}
	return p
}

// SlidingWindow is the sliding window counter, as in Symfony: a key's
// count is its hits in the current window of interval plus the hits of the
// previous window weighted by the part of it still inside the sliding
// interval, floor(previous·(interval-elapsed)/interval) + current, computed
// exactly. A request passes when count+n ≤ limit. It smooths the
// boundary burst of a fixed window with two counters of state per key.
// It cannot reserve.
func SlidingWindow(limit int64, interval time.Duration) Policy {
	p := machinePolicy[slidingwindow.State, slidingwindow.Config]{
		kind: kindSlidingWindow,
		name: fmt.Sprintf("%s(limit=%d, interval=%v)", kindSlidingWindow, limit, interval),
		m:    slidingwindow.Config{Limit: limit, Interval: int64(interval)},
		err:  checkLimit(kindSlidingWindow, "interval", limit, interval),
	}
	if m, ok := p.m.Packed(); ok {
		p.packed = func(maxKeys int) keyed.Keys { return keyed.NewTable[slidingwindow.PackedState](m, maxKeys) }
	}
	return p
}

// SlidingLog is the exact sliding window: every accepted request is logged
// with its time and counts for exactly interval after it, so no interval
// of that length ever holds more than limit tokens. Rejected requests are
// not logged. Memory per key is bounded by limit entries. It cannot
// reserve.
func SlidingLog(limit int64, interval time.Duration) Policy {
	return machinePolicy[slidinglog.State, slidinglog.Config]{
		kind: kindSlidingLog,
		name: fmt.Sprintf("%s(limit=%d, interval=%v)", kindSlidingLog, limit, interval),
		m:    slidinglog.Config{Limit: limit, Interval: int64(interval)},
		err:  checkLimit(kindSlidingLog, "interval", limit, interval),
	}
}

// GCRA is the generic cell rate algorithm, as go-redis/redis_rate and
// throttled use it: rate tokens per period, in bursts of at most limit,
// with one timestamp of state per key (the theoretical arrival time),
// kept exactly even when period/rate is not a whole number of
// nanoseconds. It can be leased (WithLease).
func GCRA(limit, rate int64, period time.Duration) Policy {
	p := machinePolicy[gcra.State, gcra.Config]{
		kind: kindGCRA,
		name: fmt.Sprintf("%s(limit=%d, rate=%d per %v)", kindGCRA, limit, rate, period),
		m:    gcra.Config{Limit: limit, Rate: rate, Period: int64(period)},
		err:  checkLimit(kindGCRA, "rate.interval", limit, period),
	}
	if p.err == nil && rate <= 0 {
		p.err = policyError(kindGCRA, RuleNonPositiveRefillTokens, "rate.amount", itoa(rate), "must be positive")
	}
	return p
}

// Shaper is the leaky bucket as a shaper: requests leave at a constant
// rate of amount tokens per interval, each at its own departure time.
// AllowN lets a request through only when its departure is now; Wait (or
// Reserve) hands out the departure and sleeps until it. When more than
// maxQueue 1-token requests would be waiting, a request is rejected, as in
// the classic synchronous leaky bucket that bounds its blocked callers;
// maxQueue 0 makes it a strict policer of the spacing.
func Shaper(amount int64, interval time.Duration, maxQueue int64) Policy {
	p := machinePolicy[shaper.State, shaper.Config]{
		kind: kindShaper,
		name: fmt.Sprintf("%s(rate=%d per %v, max_queue=%d)", kindShaper, amount, interval, maxQueue),
		m:    shaper.Config{Amount: amount, Interval: int64(interval), MaxQueue: maxQueue},
	}
	switch {
	case amount <= 0:
		p.err = policyError(kindShaper, RuleNonPositiveRefillTokens, "rate.amount", itoa(amount), "must be positive")
	case interval <= 0:
		p.err = policyError(kindShaper, RuleNonPositivePeriod, "rate.interval", interval.String(), "must be positive")
	case maxQueue < 0:
		p.err = policyError(kindShaper, RuleNegativeMaxQueue, "max_queue", itoa(maxQueue), "must not be negative")
	}
	return p
}

// Compound lets a request through only when every member policy does, and
// then takes it from all of them; a rejection by one member takes nothing
// from the others (Symfony before 8.2 took from every member). The result
// reports the most restrictive member: among rejecting members the one
// with the longest RetryAfter, else the one with the fewest Remaining.
// Reserve takes from every member within maxWait and waits for the
// slowest; a member that cannot reserve makes the compound unable to.
func Compound(members ...Policy) Policy {
	p := machinePolicy[compound.State, compound.Config]{kind: kindCompound, name: kindCompound + "("}
	if len(members) == 0 {
		p.err = &ConfigError{Rule: RuleNoMembers, Bandwidth: -1, Field: "compound.limiters", Value: "[]",
			Msg: "must name at least one limiter"}
	}
	for i, m := range members {
		if i > 0 {
			p.name += ", "
		}
		if m == nil {
			p.err = nilArgument("Compound", fmt.Sprintf("members[%d]", i))
			break
		}
		p.name += m.String()
		e, err := m.erased()
		if err == nil && holdsSlots(m) {
			err = policyError(kindCompound, ruleSlotsInCompound, fmt.Sprintf("limiters[%d]", i), m.String(),
				"must not hold slots: a compound cannot release a member's slot")
		}
		if err != nil {
			if p.err == nil {
				p.err = err
			}
			continue
		}
		p.m.Members = append(p.m.Members, e)
	}
	p.name += ")"
	if p.err != nil {
		return p
	}
	for _, m := range members {
		p.aligned = p.aligned || m.wallClock()
	}
	return compactCompound(p)
}

// compactCompound returns the compound p in its word form when every
// member's state is a few int64 words: a key's state is then an array in
// the table's slot, 40 to 152 bytes with its key, where the byte form
// holds encoded parts and their buffers on the heap (about 300 bytes a key
// more, and an allocation per new key). The decisions are the same. Other
// compounds (a sliding log or a compound among the members, or more than
// 16 words) keep the byte form.
func compactCompound(p machinePolicy[compound.State, compound.Config]) Policy {
	n, ok := compound.WordsOf(p.m)
	switch {
	case !ok:
		return p
	case n <= 2:
		return wordCompound[compound.W2](p)
	case n <= 3:
		return wordCompound[compound.W3](p)
	case n <= 4:
		return wordCompound[compound.W4](p)
	case n <= 5:
		return wordCompound[compound.W5](p)
	case n <= 6:
		return wordCompound[compound.W6](p)
	case n <= 8:
		return wordCompound[compound.W8](p)
	case n <= 12:
		return wordCompound[compound.W12](p)
	case n <= 16:
		return wordCompound[compound.W16](p)
	}
	return p
}

// wordCompound is the compound p over a WordState of array A, or p itself
// if its members do not fit in A.
func wordCompound[A any, P compound.Array[A]](p machinePolicy[compound.State, compound.Config]) Policy {
	w, ok := compound.NewWords[A, P](p.m)
	if !ok {
		return p
	}
	return machinePolicy[compound.WordState[A], compound.Words[A, P]]{kind: p.kind, name: p.name, m: w, aligned: p.aligned}
}

// PenaltyBox blocks a key for a penalty when inner refuses it: until the
// penalty is over every request of the key is refused, even one inner
// would let through, and Result.RetryAfter runs to the block's end, or
// later when inner still refuses then. Repeat offences escalate through
// penalties, the last one repeating (a minute, then 10, then an hour);
// the count starts over once forgiveAfter has passed since a block ended
// with no offence. A single penalty needs no forgiveAfter; several need
// a positive one. Only a refused AllowN is an offence: a request during a
// block, a refused reservation (ReserveN, Wait) and an argument error
// are not.
//
// A key's state is inner's and two integers, so it runs on every store
// inner runs on. It reserves when inner can, but a blocked key grants no
// reservation.
func PenaltyBox(inner Policy, penalties []time.Duration, forgiveAfter time.Duration) Policy {
	p := machinePolicy[penaltybox.State, penaltybox.Config]{kind: kindPenaltyBox}
	if inner == nil {
		p.name, p.err = kindPenaltyBox+"(nil)", nilArgument("PenaltyBox", "inner")
		return p
	}
	p.name = fmt.Sprintf("%s(%v, penalties=%v, forgive_after=%v)", kindPenaltyBox, inner, penalties, forgiveAfter)
	e, err := inner.erased()
	p.m.Inner, p.err = e, err
	p.aligned = inner.wallClock()
	for i, d := range penalties {
		if d <= 0 && p.err == nil {
			p.err = policyError(kindPenaltyBox, RuleNonPositivePeriod, "penalties", fmt.Sprintf("%v at %d", d, i), "must each be positive")
		}
		p.m.Penalties = append(p.m.Penalties, int64(d))
	}
	p.m.Forgive = int64(forgiveAfter)
	switch {
	case p.err != nil:
	case len(penalties) == 0 || len(penalties) > penaltybox.MaxPenalties:
		p.err = policyError(kindPenaltyBox, RuleNonPositivePeriod, "penalties", fmt.Sprint(penalties),
			fmt.Sprintf("must hold 1 to %d penalties", penaltybox.MaxPenalties))
	case forgiveAfter < 0 || len(penalties) > 1 && forgiveAfter == 0:
		p.err = policyError(kindPenaltyBox, RuleNonPositivePeriod, "forgive_after", forgiveAfter.String(),
			"must be positive with several penalties, and never negative")
	}
	return p
}

// NoLimit lets everything through; Remaining and Limit are math.MaxInt64.
// It keeps no state.
func NoLimit() Policy {
	return machinePolicy[nolimit.State, nolimit.Config]{kind: kindNoLimit, name: kindNoLimit}
}

// TokenBucket is Symfony's token bucket: a bucket of limit tokens, full at a
// key's first use, to which amount tokens come back at once every interval
// (counted from the first use). Asking for more than limit at once is an
// argument error. It is BucketPolicy with one Intervally bandwidth. It
// can be leased (WithLease).
func TokenBucket(limit, amount int64, interval time.Duration) Policy {
	return singleBandwidth(kindTokenBucket, limit, Intervally(amount, interval), true)
}

// LeakyBucket is the leaky bucket as a meter (policer): each accepted token
// raises a level that drains continuously at amount per interval, and a
// request that would overflow limit is rejected. Remaining is limit minus
// the level. It is the same arithmetic as a token bucket with greedy
// refill, whose tokens are the room left in the leaky bucket. It can be
// leased (WithLease).
func LeakyBucket(limit, amount int64, interval time.Duration) Policy {
	return singleBandwidth(kindLeakyBucket, limit, Greedy(amount, interval), false)
}

func singleBandwidth(kind string, limit int64, refill Refill, strict bool) Policy {
	p := machinePolicy[tokenbucket.BandwidthState, tokenbucket.Single]{
		kind: kind,
		name: fmt.Sprintf("%s(limit=%d, rate=%d per %v)", kind, limit, refill.tokens, refill.period),
	}
	cfg, err := BucketConfig{Bandwidths: []Bandwidth{Capacity(limit, refill)}}.compile()
	if err != nil {
		p.err = policyConfigError(kind, err)
		return p
	}
	p.m = tokenbucket.NewSingle(cfg.Bandwidths[0], strict)
	if m, ok := p.m.Packed(); ok {
		p.packed = func(maxKeys int) keyed.Keys { return keyed.NewTable[tokenbucket.PackedState](m, maxKeys) }
	}
	return p
}

// policyConfigError renames the fields of a bandwidth's ConfigError into
// the words of the policy that made the bandwidth.
func policyConfigError(kind string, err error) error {
	ce, ok := err.(*ConfigError)
	if !ok {
		return err
	}
	out := *ce
	out.Bandwidth = -1
	switch ce.Field {
	case "capacity":
		out.Field, out.Rule = "limit", RuleNonPositiveLimit
	case "refill.tokens":
		out.Field = "rate.amount"
	case "refill.period":
		out.Field = "rate.interval"
	case "refill":
		out.Field = "rate"
	}
	out.Field = kind + "." + out.Field
	return &out
}

// bucketName names a bucket policy by its bandwidths, so that two
// configurations differ in name when they differ in limits: the server
// keeps a limiter's statistics across a reload when its name is the same.
func bucketName(cfg BucketConfig) string {
	var b strings.Builder
	b.WriteString(kindBucket + "(")
	for i, bw := range cfg.Bandwidths {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(bw.String())
	}
	b.WriteString(")")
	return b.String()
}

// BucketPolicy applies a whole Bucket4j configuration, one or more
// bandwidths, to each key. For one bandwidth prefer TokenBucket or
// LeakyBucket, whose state per key is smaller. Intervally aligned refill
// needs a wall clock, which a Limiter has only when given one
// (WithClock(WallClock())): its default, MonotonicClock, is not one. It
// can be leased (WithLease).
func BucketPolicy(cfg BucketConfig) Policy {
	p := machinePolicy[tokenbucket.State, tokenbucket.Multi]{kind: kindBucket, name: bucketName(cfg)}
	c, err := cfg.compile()
	if err != nil {
		p.err = err
		return p
	}
	p.m, p.aligned = tokenbucket.NewMulti(c), hasAligned(c)
	return p
}

const kindConcurrency = "concurrency"

// The rules of concurrency limits: a limit above its bound, and a
// compound with one among its members.
const (
	ruleLimitTooHigh    Rule = "limit_too_high"
	ruleSlotsInCompound Rule = "slots_in_compound"
)

// Concurrency limits what is in flight rather than what passes per
// period: at most limit tokens held at once per key, across every
// process that shares the limiter's store. Limiter.Acquire takes a slot
// (one token) and Limiter.Release gives it back; a slot not released
// lapses after lease unless renewed (Limiter.Renew), so a holder that
// crashed keeps its slot at most one lease: a crash can make the limit
// admit fewer, for at most a lease, never more.
//
// limit is at most 1000, the most slots a key's record holds, and lease
// must be positive. AllowN takes a slot of n tokens that it never
// releases: it lapses after the lease. It cannot reserve, be leased, or
// be a Compound's member.
func Concurrency(limit int64, lease time.Duration) Policy {
	p := machinePolicy[concurrency.State, concurrency.Config]{
		kind: kindConcurrency,
		name: fmt.Sprintf("%s(limit=%d, ttl=%v)", kindConcurrency, limit, lease),
		m:    concurrency.Config{Limit: limit, Lease: int64(lease)},
		err:  checkLimit(kindConcurrency, "ttl", limit, lease),
	}
	if p.err == nil && limit > concurrency.MaxLimit {
		p.err = policyError(kindConcurrency, ruleLimitTooHigh, "limit", itoa(limit), fmt.Sprintf("must be at most %d", concurrency.MaxLimit))
	}
	return p
}
