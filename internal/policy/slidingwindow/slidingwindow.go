// Package slidingwindow is Symfony's sliding-window counter as a pure state
// machine: two fixed windows of Interval, the current one and the one
// before it, with the previous window's hits weighted by the part of it
// that the sliding window still covers.
//
// The state is created at a key's first accepted hit, with the window
// [now, now+Interval). When now reaches the window's end the window rolls:
// before end+Interval the next window keeps the alignment (it starts at the
// old end) and the old hits become the previous window's; later, a fresh
// window starts at now with nothing before it. At elapsed = now − start the
// hits counted are
//
//	count = ⌊prev · (Interval − elapsed) / Interval⌋ + hits
//
// and a request for n tokens is accepted iff count + n ≤ Limit.
//
// sluice floors the weighted previous count as Symfony does, but computes
// it exactly, in integers with a 128-bit product, so there are no float
// artefacts (Symfony counts 5 · (1 − 0.8) as 0.9999999999999998 and floors
// it to 0). It does not reproduce Symfony's other quirks either: a window
// ends exactly at start+Interval (Symfony keeps a hit at that instant in the
// old window), times are exact nanoseconds (no whole-second TTL), and
// RetryAfter is the exact earliest time the request would be accepted, not
// the end of the current window (symfony/symfony#40289). As in Symfony, a
// request for more than Limit tokens is rejected rather than refused as an
// argument error, and reservations are not supported.
package slidingwindow

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config is a sliding window of Limit tokens per Interval ns. Interval must
// be positive and Limit non-negative (0 rejects everything, as in Symfony);
// the caller validates them. A Config is a value and safe for simultaneous
// use by multiple goroutines.
type Config struct {
	Limit    int64
	Interval int64
}

// State is a key's pair of windows: when the current one started (ns), the
// hits of the window before it and the hits of the current one. Prev and
// Hits are never negative. 24 bytes.
type State struct {
	Start int64
	Prev  int64
	Hits  int64
}

var _ policy.Machine[State] = Config{}

// roll moves s forward to the window that holds now. A window rolls into
// the next one on the same grid only if it has hits to pass on; otherwise,
// or when a whole window has gone by without a hit, a fresh window starts
// at now, which is what makes ExpiresAt exact.
//
// After roll, now < s.Start+Interval (in exact arithmetic), so
// now − s.Start < Interval when now ≥ s.Start.
func (c Config) roll(s *State, exists bool, now int64) {
	if !exists {
		*s = State{Start: now}
		return
	}
	if now < s.Start {
		return // the clock went back
	}
	// The difference of two int64 always fits in a uint64, and so does
	// twice an Interval: no saturation near the ends of the time line.
	elapsed, iv := uint64(now)-uint64(s.Start), uint64(c.Interval)
	if elapsed < iv {
		return // still in the window
	}
	if s.Hits > 0 && elapsed < 2*iv {
		// Start+Interval ≤ now, so it fits.
		*s = State{Start: s.Start + c.Interval, Prev: s.Hits}
		return
	}
	*s = State{Start: now}
}

// weighted is ⌊Prev·(Interval−elapsed)/Interval⌋ for s rolled to now. A
// clock that went back before the window's start counts elapsed as 0: the
// previous hits weigh in full.
func (c Config) weighted(s *State, now int64) int64 {
	if s.Prev == 0 {
		return 0
	}
	left := uint64(c.Interval) // Interval − elapsed, in (0, Interval]
	if now > s.Start {
		left -= uint64(now) - uint64(s.Start)
	}
	// The quotient is at most Prev < 2^63, so hi < Interval as Div64
	// requires.
	hi, lo := bits.Mul64(uint64(s.Prev), left)
	q, _ := bits.Div64(hi, lo, uint64(c.Interval))
	return int64(q)
}

// count is the hits counted at now for s rolled to now, saturating at
// MaxInt64 (only a decoded state can get there).
func (c Config) count(s *State, now int64) int64 {
	return policy.SatAdd(c.weighted(s, now), s.Hits)
}

// Consume takes n tokens if count + n ≤ Limit. n ≤ 0 is an argument
// error; n > Limit is rejected with RetryAfter Never.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	next := *s
	c.roll(&next, exists, now)
	count := c.count(&next, now)
	// Limit − count cannot overflow: both are non-negative.
	if n > c.Limit-count {
		return c.refused(s, &next, exists, now, n, count), false
	}
	// count did not saturate, so Hits ≤ count and Hits+n ≤ Limit.
	next.Hits += n
	*s = next
	return policy.Decision{
		Verdict:    policy.Verdict{Allowed: true},
		Remaining:  c.Limit - count - n,
		ResetAfter: c.resetAfter(s, now),
	}, true
}

// refused is the decision on n tokens refused at now, for the state s it
// found (of a key with a state if exists), next, s rolled to now, and the
// count there.
func (c Config) refused(s, next *State, exists bool, now, n, count int64) policy.Decision {
	d := policy.Decision{Remaining: max(c.Limit-count, 0), RetryAfter: policy.Never}
	if n <= c.Limit {
		d.RetryAfter = c.retryAfter(next, now, n)
	}
	if exists {
		d.ResetAfter = c.resetAfter(s, now)
	}
	return d
}

// retryAfter is the exact time from now until n ≤ Limit tokens would be
// accepted if nothing else happened, for s rolled to now, where they are
// rejected now. The count only falls as time passes, so this is the first
// time it is at most Limit − n. It solves ⌊p·(I−e)/I⌋ ≤ R, that is
// p·(I−e) ≤ (R+1)·I − 1, that is I − e ≤ ⌊((R+1)·I − 1)/p⌋, in the current
// window and then in the next one.
func (c Config) retryAfter(s *State, now, n int64) int64 {
	iv := c.Interval
	rel := satSub(now, s.Start) // elapsed, or negative if the clock went back
	// The current window: its hits stay, the previous ones fade.
	if r := c.Limit - n - s.Hits; r >= 0 {
		// Rejected with R ≥ 0 means Prev ≥ weighted > R, so d < Interval.
		if d := fadeSpan(r, iv, s.Prev); d > 0 {
			return satSub(iv-d, rel)
		}
	}
	// The next window, from the current window's end: the current hits
	// become the previous ones and fade over it; at its end a fresh window
	// starts empty, and n ≤ Limit fits.
	toEnd := satSub(iv, rel)
	r := c.Limit - n
	if s.Hits <= r {
		return toEnd
	}
	return policy.SatAdd(toEnd, iv-fadeSpan(r, iv, s.Hits))
}

// fadeSpan is ⌊((r+1)·iv − 1)/p⌋: the longest span left in a window at
// which p previous hits weigh at most r. It requires 0 ≤ r < p, so the
// result is below iv.
func fadeSpan(r, iv, p int64) int64 {
	hi, lo := bits.Mul64(uint64(r)+1, uint64(iv))
	lo, borrow := bits.Sub64(lo, 1, 0)
	hi -= borrow
	d, _ := bits.Div64(hi, lo, uint64(p))
	return int64(d)
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	next := *s
	d, _ := c.Consume(&next, exists, now, n)
	return d.Result(c.Limit)
}

// Reserve is not supported by a sliding window: it returns
// Result{Code: policy.ReserveNotSupported} and changes nothing.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	return policy.Result{Code: policy.ReserveNotSupported}, false
}

// Cancel gives nothing back: the sliding window cannot reserve.
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is the time from which s is worth no more than no state: the
// end of the window after the current one, or the current window's end if
// it has no hits (then nothing rolls over). It saturates at MaxInt64.
func (c Config) ExpiresAt(s *State) int64 {
	end := policy.SatAdd(s.Start, c.Interval)
	if s.Hits == 0 {
		return end
	}
	return policy.SatAdd(end, c.Interval)
}

// resetAfter is ExpiresAt(s) − now, at least 0 and saturating at Never,
// computed exactly in uint64 rather than from a saturated ExpiresAt.
func (c Config) resetAfter(s *State, now int64) int64 {
	span := uint64(c.Interval) // < 2^63, so twice it fits
	if s.Hits > 0 {
		span *= 2
	}
	var d uint64
	if now >= s.Start {
		elapsed := uint64(now) - uint64(s.Start)
		if elapsed >= span {
			return 0
		}
		d = span - elapsed
	} else {
		back := uint64(s.Start) - uint64(now)
		if d = back + span; d < back {
			return policy.Never
		}
	}
	return int64(min(d, policy.Never))
}

// Quota is the tokens per window.
func (c Config) Quota() int64 { return c.Limit }

// Lapses is true: both windows past, roll starts a fresh one at now, as
// for a key with no state.
func (Config) Lapses() bool { return true }

// Window is the interval.
func (c Config) Window() int64 { return c.Interval }

// AppendState appends the encoding of *s to dst.
func (c Config) AppendState(dst []byte, s *State) []byte {
	return policy.AppendInts(dst, policy.TagSlidingWindow, s.Start, s.Prev, s.Hits)
}

// DecodeState decodes a state written by AppendState. Negative hit counts
// are an error matching policy.ErrBadState.
func (c Config) DecodeState(src []byte, s *State) error {
	var st State
	if err := policy.DecodeInts(src, policy.TagSlidingWindow, &st.Start, &st.Prev, &st.Hits); err != nil {
		return err
	}
	if st.Prev < 0 || st.Hits < 0 {
		return fmt.Errorf("%w: negative hits (previous %d, current %d)", policy.ErrBadState, st.Prev, st.Hits)
	}
	*s = st
	return nil
}

// satSub is a − b, saturating at the int64 bounds.
func satSub(a, b int64) int64 {
	d := a - b
	if (a >= b) != (d >= 0) {
		if a >= b {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return d
}
