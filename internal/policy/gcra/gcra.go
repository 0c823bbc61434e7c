// Package gcra is the generic cell rate algorithm as a pure state machine,
// with the semantics of go-redis/redis_rate's AllowN: Rate tokens per
// Period, bursts of up to Limit tokens, and a single timestamp of state,
// the theoretical arrival time (TAT).
//
// With the emission interval T = Period/Rate, a request for n tokens at now
// moves the TAT to max(TAT, now) + n·T, and is allowed iff the new TAT is
// at most Limit·T after now. A key not seen yet is full: Limit tokens are
// there at once.
//
// T may be a fraction of a nanosecond, and sluice keeps it exact: the TAT
// is whole nanoseconds plus a remainder in units of 1/Rate ns, and every
// decision is computed in those units, 128 bits wide. There are no floats
// and no rounding drift (redis_rate keeps the TAT as a float of seconds).
// Decisions are exact for every positive Limit, Rate and Period and every
// int64 time; a request whose new TAT would lie past MaxInt64 ns (the year
// 2262) is rejected with RetryAfter Never.
package gcra

import (
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/policy"
)

// Config is Rate tokens per Period ns with bursts of up to Limit tokens.
// All three must be positive; the caller validates them. A Config is a
// value and safe for simultaneous use by multiple goroutines.
type Config struct {
	Limit  int64
	Rate   int64
	Period int64
}

// State is a key's theoretical arrival time: TAT ns plus Frac/Rate ns,
// with 0 ≤ Frac < Rate. A Frac at or above Rate (left by a Config whose
// Rate was larger) counts as Rate−1: less than 1 ns off. 16 bytes.
type State struct {
	TAT  int64
	Frac int64
}

var _ policy.Machine[State] = Config{}

// Quantities in ticks of 1/Rate ns. The TAT ahead of now is below
// 2^64·Rate < 2^127; n·Period and Limit·Period are below 2^126; so their
// sums stay below 2^128.

// ahead is TAT − now in ticks, 0 if the TAT is not after now (or there is
// no state).
func (c Config) ahead(s *State, exists bool, now int64) arith.U128 {
	if !exists || s.TAT < now {
		return arith.U128{}
	}
	frac := uint64(min(max(s.Frac, 0), c.Rate-1))
	return arith.Mul(uint64(s.TAT)-uint64(now), uint64(c.Rate)).Add(arith.U128{Lo: frac})
}

// aheadNs is ceilNs(c.ahead(s, exists, now)) without its division: the
// state holds the quotient and the remainder.
func (c Config) aheadNs(s *State, exists bool, now int64) int64 {
	if !exists || s.TAT < now {
		return 0
	}
	return ceilOf(uint64(s.TAT)-uint64(now), min(max(s.Frac, 0), c.Rate-1))
}

// burst is Limit·T in ticks.
func (c Config) burst() arith.U128 { return arith.Mul(uint64(c.Limit), uint64(c.Period)) }

// ceilNs is x ticks rounded up to whole ns, saturating at Never.
func (c Config) ceilNs(x arith.U128) int64 {
	q, r, ok := x.Quo(uint64(c.Rate))
	if !ok || q >= policy.Never {
		return policy.Never
	}
	if r > 0 {
		q++
	}
	return int64(q)
}

// remaining is ⌊(Limit·T − x)/T⌋ for the TAT x ticks ahead of now, 0 if x
// is beyond the burst. The quotient is at most Limit.
func (c Config) remaining(x arith.U128) int64 {
	b := c.burst()
	if b.Less(x) {
		return 0
	}
	q, _, _ := b.Sub(x).Quo(uint64(c.Period))
	return int64(q)
}

// tat is the TAT x ticks after now, with ok=false if it is past MaxInt64 ns.
func (c Config) tat(now int64, x arith.U128) (State, bool) {
	q, r, ok := x.Quo(uint64(c.Rate))
	// MaxInt64 − now is in [0, 2^64), so the uint64 difference is exact.
	if !ok || q > uint64(math.MaxInt64)-uint64(now) {
		return State{}, false
	}
	return State{TAT: int64(uint64(now) + q), Frac: int64(r)}, true
}

// take works out taking n tokens at now from s (of a key with a state if
// exists): a is the TAT ahead of now in ticks before, an after, and next
// the state after. ok is false when the tokens can never be had: n is
// above the burst, or the TAT would lie past MaxInt64 ns, which it only
// comes nearer as time passes.
func (c Config) take(s *State, exists bool, now, n int64) (a, an arith.U128, next State, ok bool) {
	a = c.ahead(s, exists, now)
	if n > c.Limit {
		return a, an, next, false
	}
	an = a.Add(arith.Mul(uint64(n), uint64(c.Period)))
	next, ok = c.tat(now, an)
	return a, an, next, ok
}

// refused is the decision on a request that is not allowed at now on s
// (of a key with a state if exists), whose TAT is a ticks ahead of now.
func (c Config) refused(s *State, exists bool, now int64, a arith.U128, retryAfter int64) policy.Decision {
	return policy.Decision{
		Remaining:  c.remaining(a),
		RetryAfter: retryAfter,
		ResetAfter: c.aheadNs(s, exists, now),
	}
}

// granted is the decision on a request that moved the TAT to next, an
// ticks ahead of now. Its ResetAfter is next's TAT rounded up, whose
// division tat made.
func (c Config) granted(an arith.U128, next State, now int64) policy.Decision {
	return policy.Decision{
		Verdict:    policy.Verdict{Allowed: true},
		Remaining:  c.remaining(an),
		ResetAfter: ceilOf(uint64(next.TAT)-uint64(now), next.Frac),
	}
}

// wait is the time from now until a TAT an ticks ahead of now conforms:
// ⌈(an − Limit·T)/Rate⌉ ns, 0 if it does already, saturating at Never.
func (c Config) wait(an arith.U128) int64 {
	b := c.burst()
	if !b.Less(an) {
		return 0
	}
	return c.ceilNs(an.Sub(b))
}

// Consume takes n tokens if they conform now. n ≤ 0 is an argument error;
// n > Limit is rejected with RetryAfter Never.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	a, an, next, ok := c.take(s, exists, now, n)
	if !ok {
		return c.refused(s, exists, now, a, policy.Never), false
	}
	if w := c.wait(an); w > 0 {
		return c.refused(s, exists, now, a, c.retryAt(a, now, n, w, next.TAT)), false
	}
	*s = next
	return c.granted(an, next, now), true
}

// ceilOf is q ns and r ticks rounded up to whole ns, saturating at Never:
// ceilNs of the ticks whose quotient and remainder they are.
func ceilOf(q uint64, r int64) int64 {
	if q >= policy.Never {
		return policy.Never
	}
	if r > 0 {
		q++
	}
	return int64(q)
}

// retryAt checks that n tokens, which conform w > 0 ns after now, can then
// be taken with a TAT that fits in int64, and returns w, or Never if not.
// tat is the TAT that taking them now would set, which fits: taking them
// w later sets at most tat+w, as the TAT ahead of now only falls as time
// passes, so when tat+w fits there is nothing to divide.
func (c Config) retryAt(a arith.U128, now, n, w, tat int64) int64 {
	if w == policy.Never || uint64(w) > uint64(math.MaxInt64)-uint64(now) {
		return policy.Never
	}
	if uint64(w) <= uint64(math.MaxInt64)-uint64(tat) {
		return w
	}
	// The TAT ahead of now+w: a − w·Rate, or 0.
	passed := arith.Mul(uint64(w), uint64(c.Rate))
	var later arith.U128
	if passed.Less(a) {
		later = a.Sub(passed)
	}
	if _, ok := c.tat(now+w, later.Add(arith.Mul(uint64(n), uint64(c.Period)))); !ok {
		return policy.Never
	}
	return w
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	next := *s
	d, _ := c.Consume(&next, exists, now, n)
	return d.Result(c.Limit)
}

// Reserve takes n tokens that conform within maxWait: the TAT moves on at
// once, and Result.Wait is the time until the tokens are the caller's. A
// reservation of more than Limit tokens is refused with RetryAfter Never,
// even when maxWait is Never.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckReserve(n, maxWait); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	a, an, next, ok := c.take(s, exists, now, n)
	if !ok {
		return c.refused(s, exists, now, a, policy.Never).Result(c.Limit), false
	}
	w := c.wait(an)
	if w == policy.Never || w > maxWait {
		return c.refused(s, exists, now, a, w).Result(c.Limit), false
	}
	*s = next
	res := c.granted(an, next, now).Result(c.Limit)
	res.Wait = w
	return res, true
}

// ExpiresAt is the TAT rounded up to whole ns: from then on the key is full
// again, as a new one is.
func (c Config) ExpiresAt(s *State) int64 {
	if s.Frac > 0 {
		return policy.SatAdd(s.TAT, 1)
	}
	return s.TAT
}

// Quota is the burst, Limit.
func (c Config) Quota() int64 { return c.Limit }

// Leasing is policy.Leases: a lease moves the theoretical arrival time
// by its tokens at once, as one request of that many tokens would.
func (Config) Leasing() policy.Leasing { return policy.Leases }

// Lapses is true: a TAT at or before now counts as none (ahead).
func (Config) Lapses() bool { return true }

// Window is the time to earn the burst.
func (c Config) Window() int64 { return policy.TimeToEarn(c.Limit, c.Rate, c.Period, false) }

// AppendState appends the encoding of *s to dst.
func (c Config) AppendState(dst []byte, s *State) []byte {
	return policy.AppendInts(dst, policy.TagGCRA, s.TAT, s.Frac)
}

// DecodeState decodes a state written by AppendState. A negative Frac is
// an error matching policy.ErrBadState.
func (c Config) DecodeState(src []byte, s *State) error {
	var st State
	if err := policy.DecodeInts(src, policy.TagGCRA, &st.TAT, &st.Frac); err != nil {
		return err
	}
	if st.Frac < 0 {
		return fmt.Errorf("%w: negative TAT fraction %d", policy.ErrBadState, st.Frac)
	}
	*s = st
	return nil
}

// ticks is s's TAT as ticks of 1/Rate ns on an unsigned time line, the
// int64 times shifted by 2^63 so that their order is kept.
func (c Config) ticks(s *State) arith.U128 {
	frac := uint64(min(max(s.Frac, 0), c.Rate-1))
	return arith.Mul(uint64(s.TAT)^1<<63, uint64(c.Rate)).Add(arith.U128{Lo: frac})
}

// fromTicks is the State of ticks x, as ticks wrote them.
func (c Config) fromTicks(x arith.U128) State {
	q, r, _ := x.Quo(uint64(c.Rate)) // x < 2^64·Rate: the quotient fits
	return State{TAT: int64(q ^ 1<<63), Frac: int64(r)}
}

// Cancel gives back, at now, what it can of the reservation r, as
// x/time/rate's Reservation.CancelAt does: r moved the TAT on by
// r.Tokens·T, to the TAT r.After holds; the requests granted after it
// moved it on by the rest. The TAT goes back by r's share less what was
// granted after it, so that no later request's tokens are handed out
// again; it never goes back past where r found it. When the TAT is now
// behind where r left it (the key was reset and used again), only what
// of r's share it still holds comes back.
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool {
	var after State
	if r.Tokens <= 0 || c.DecodeState(r.After, &after) != nil {
		return false
	}
	share := arith.Mul(uint64(r.Tokens), uint64(c.Period))
	end, cur := c.ticks(&after), c.ticks(s)
	if end.Less(share) {
		return false
	}
	start := end.Sub(share)
	var next arith.U128
	switch {
	case !cur.Less(end):
		later := cur.Sub(end)
		if !later.Less(share) {
			return false
		}
		next = cur.Sub(share.Sub(later))
	case start.Less(cur):
		next = start
	default:
		return false
	}
	*s = c.fromTicks(next)
	return true
}
