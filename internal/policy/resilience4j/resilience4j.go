// Package resilience4j is the pure arithmetic of Resilience4j's
// AtomicRateLimiter: a fixed-size State and functions that take the time as
// a value, with no clock, lock or I/O, so that a store can hold the state
// and run the same decisions as the in-memory limiter.
//
// Time is int64 nanoseconds of the limiter's clock. Cycles of Config.Period
// nanoseconds are counted from State.Start, the limiter's creation, by
// integer division truncated toward zero as in Java. Every multiplication
// and addition is checked: a wait that does not fit in int64 nanoseconds is
// reported as Never and is never granted.
//
// Resilience4j's formulas are followed exactly, with these differences,
// decided by sluice:
//   - n must be positive (callers check it; Resilience4j accepts n ≤ 0);
//   - Drain takes every permission available after the cycle refresh and
//     leaves debt alone (Resilience4j takes the stale stored count and
//     erases debt);
//   - a clock that goes back to an earlier cycle refreshes nothing and
//     keeps the active cycle (Resilience4j would subtract permissions);
//   - Cancel gives back the permits of a wait that was cancelled.
package resilience4j

import (
	"math"
	"math/bits"
)

// Never is the wait reported when the permits cannot be had within int64
// nanoseconds.
const Never = math.MaxInt64

// Config is the part of the limiter's configuration the arithmetic uses.
// Both fields must be positive; the caller validates them.
type Config struct {
	Limit  int64 // permissions per cycle (limitForPeriod), ≥ 1
	Period int64 // cycle length in nanoseconds (limitRefreshPeriod), ≥ 1
}

// State is AtomicRateLimiter's state, plus the creation time cycles are
// counted from.
type State struct {
	Start       int64 // clock reading at creation, nanoseconds
	Cycle       int64 // the active cycle, ≥ 0
	Permissions int64 // permissions left in the active cycle; negative while permits are reserved ahead
	NanosToWait int64 // the wait computed by the last Acquire, nanoseconds
}

// New returns the state of a limiter created at start: cycle 0 with a full
// cycle's permissions.
func New(c Config, start int64) State {
	return State{Start: start, Permissions: c.Limit}
}

// Refresh returns s brought to the cycle of now: when now is in a later
// cycle than s.Cycle, Permissions becomes
// min(Permissions + elapsedCycles·Limit, Limit). Permissions above Limit
// (after the limit was lowered) are kept within their cycle only. A now in
// an earlier cycle (the clock went back) changes nothing.
func (c Config) Refresh(s State, now int64) State {
	cycle := subSat(now, s.Start) / c.Period
	if cycle <= s.Cycle {
		return s
	}
	elapsed := cycle - s.Cycle // both ≥ 0, so no overflow
	s.Cycle = cycle
	acc, ok := mul(elapsed, c.Limit)
	// Limit - acc ≥ 1 - MaxInt64, so it does not overflow.
	if !ok || s.Permissions >= c.Limit-acc {
		s.Permissions = c.Limit
	} else {
		s.Permissions += acc // < Limit
	}
	return s
}

// Wait returns the time from now until n permits are available to a caller
// of the refreshed state s (s.Cycle must be Refresh's cycle for now): 0 if
// s.Permissions ≥ n, else the time to the next cycle plus
// ceil((n - Permissions - Limit)/Limit) whole cycles, or Never when that
// overflows int64 nanoseconds or n - Permissions overflows int64 (so that
// Permissions - n always fits). n must be positive.
func (c Config) Wait(s State, now, n int64) int64 {
	if s.Permissions >= n {
		return 0
	}
	// nanosToNextCycle = (Cycle+1)·Period - elapsed.
	end, ok := mul(s.Cycle, c.Period)
	if !ok {
		return Never
	}
	if end, ok = add(end, c.Period); !ok {
		return Never
	}
	toNext, ok := sub(end, subSat(now, s.Start))
	if !ok {
		return Never
	}
	// deficit = n - Permissions ≥ 1; ceil(deficit/Limit) - 1 =
	// (deficit-1)/Limit full cycles after the next one starts.
	deficit, ok := sub(n, s.Permissions)
	if !ok {
		return Never
	}
	full, ok := mul((deficit-1)/c.Limit, c.Period)
	if !ok {
		return Never
	}
	w, ok := add(full, toNext)
	if !ok {
		return Never
	}
	return w
}

// Acquire refreshes s to now and computes the wait for n permits. When the
// wait is at most timeout (equality succeeds) and not Never, it reserves the
// permits, subtracting them from Permissions (which may go negative), and
// reports true. Otherwise it reserves nothing and reports false; the refresh
// is stored either way, as is the wait in s.NanosToWait. n must be positive
// and timeout ≥ 0.
func (c Config) Acquire(s *State, now, n, timeout int64) (wait int64, reserved bool) {
	r := c.Refresh(*s, now)
	wait = c.Wait(r, now, n)
	r.NanosToWait = wait
	if wait != Never && wait <= timeout {
		// A finite wait means n - Permissions fits in int64, so
		// Permissions - n does too.
		r.Permissions -= n
		reserved = true
	}
	*s = r
	return wait, reserved
}

// Peek returns the permissions available at now and the wait for n permits,
// as Resilience4j's metrics estimate them, without changing s.
func (c Config) Peek(s State, now, n int64) (permissions, wait int64) {
	r := c.Refresh(s, now)
	return r.Permissions, c.Wait(r, now, n)
}

// Drain refreshes s to now and takes every permission available, leaving 0;
// debt (negative Permissions) stays as it is. It returns how many it took.
func (c Config) Drain(s *State, now int64) int64 {
	r := c.Refresh(*s, now)
	took := max(r.Permissions, 0)
	r.Permissions -= took
	*s = r
	return took
}

// Cancel gives back, at now, what it can of the n permits that an Acquire
// reserved, which took the state from before to after, as x/time/rate's
// Reservation.CancelAt does: when nothing was acquired since (s is still
// after), s goes back to before exactly; otherwise it gives back n less
// the permits acquired after it (after's permissions less s's, both
// refreshed to now), never less than 0, since the callers that acquired
// them keep them and their waits, and counted on the permits the
// cancelled one held. Permits given back never raise Permissions above
// Limit (or above what it already is, when that is more). n must be
// positive.
func (c Config) Cancel(s *State, now int64, before, after State, n int64) {
	if *s == after {
		*s = before
		return
	}
	r := c.Refresh(*s, now)
	back := n
	if later, ok := sub(c.Refresh(after, now).Permissions, r.Permissions); !ok {
		back = 0
	} else if later > 0 {
		back = max(0, n-later)
	}
	if back > 0 && r.Permissions < c.Limit {
		if p, ok := add(r.Permissions, back); ok && p < c.Limit {
			r.Permissions = p
		} else {
			r.Permissions = c.Limit
		}
	}
	*s = r
}

// mul returns a·b for a, b ≥ 0 and whether it fits in int64.
func mul(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// add returns a+b and whether it did not overflow.
func add(a, b int64) (int64, bool) {
	s := a + b
	if (s > a) != (b > 0) {
		return 0, false
	}
	return s, true
}

// sub returns a-b and whether it did not overflow.
func sub(a, b int64) (int64, bool) {
	d := a - b
	if (d < a) != (b > 0) {
		return 0, false
	}
	return d, true
}

// subSat returns a-b, saturated at the int64 bounds.
func subSat(a, b int64) int64 {
	d, ok := sub(a, b)
	if ok {
		return d
	}
	if b > 0 {
		return math.MinInt64
	}
	return math.MaxInt64
}
