// Package fixedwindow is the fixed-window counter as a pure state machine,
// with Symfony's semantics: a window of Interval opens at the first hit
// (not on a calendar boundary) and lets Limit tokens through. With
// Aligned, windows open on the clock's grid instead, at the multiples of
// Interval since the epoch, as envoyproxy/ratelimit's do.
//
// Unlike Symfony, times are exact nanoseconds (no whole-second rounding),
// a window ends exactly at start+Interval, and reserved tokens are debt
// that later windows repay, instead of being forgotten at the next window.
// A reservation that does not fit in the room left in a window waits for
// the next one and spends that room, so no window ever serves more than
// Limit tokens.
package fixedwindow

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config is a validated fixed window: Limit > 0 tokens per Interval > 0 ns.
type Config struct {
	Limit    int64
	Interval int64
	// Aligned opens each window at a multiple of Interval, not at the
	// hit that finds no window open.
	Aligned bool
}

// State is a key's window: when it opened and the tokens taken in it,
// including reserved ones beyond Limit, which spill into the next windows
// on the same grid. 16 bytes.
type State struct {
	Start int64
	Hits  int64
}

var _ policy.Machine[State] = Config{}

// The arithmetic below is exact for every int64 time and count: windows
// are counted in uint64 from the state's start, and times are compared
// through 128-bit products, so nothing wraps near the ends of the time
// line.

// roll moves s forward to the window that holds now. A window whose
// tokens, debt included, are all spent by now is replaced by a fresh one
// anchored at now, as Symfony anchors a window at its first hit, or at the
// grid point before now when aligned. A clock that went back stays in the
// current window.
func (c Config) roll(s *State, exists bool, now int64) {
	if !exists {
		*s = State{Start: c.open(now)}
		return
	}
	if now < s.Start {
		return
	}
	d := uint64(now) - uint64(s.Start)
	if d < uint64(c.Interval) {
		return
	}
	k := d / uint64(c.Interval)
	hits, ok := Carry(s.Hits, c.Limit, k)
	if !ok {
		*s = State{Start: c.open(now)}
		return
	}
	s.Start = int64(uint64(s.Start) + k*uint64(c.Interval)) // k·Interval ≤ d
	s.Hits = hits
}

// open is the start of a fresh window that holds now: now itself, or the
// last multiple of Interval at or before it when aligned. At the very
// start of the time line, where that multiple is not an int64, it is now.
func (c Config) open(now int64) int64 {
	if !c.Aligned {
		return now
	}
	off := now % c.Interval
	if off < 0 {
		off += c.Interval
	}
	if now < math.MinInt64+off {
		return now
	}
	return now - off
}

// until is the time from now to the start of window j of s, clamped to
// [0, Never].
func (c Config) until(s *State, j uint64, now int64) int64 {
	hi, lo := bits.Mul64(j, uint64(c.Interval))
	var borrow, carry uint64
	if s.Start >= now {
		lo, carry = bits.Add64(lo, uint64(s.Start)-uint64(now), 0)
		hi += carry
	} else {
		lo, borrow = bits.Sub64(lo, uint64(now)-uint64(s.Start), 0)
		hi, borrow = bits.Sub64(hi, 0, borrow)
		if borrow != 0 {
			return 0
		}
	}
	if hi != 0 || lo > policy.Never {
		return policy.Never
	}
	return int64(lo)
}

// result describes s at now after a decision.
func (c Config) result(s *State, now int64, allowed bool, retryAfter int64) policy.Result {
	return Result(c.Limit, s.Hits, allowed, retryAfter, c.until(s, Windows(s.Hits, c.Limit), now))
}

// Consume takes n tokens if the current window still has them. More than
// Limit is an argument error, as in Symfony.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if code := policy.CheckTokens(n, c.Limit, true); code != policy.OK {
		return policy.Decision{Verdict: policy.Verdict{Code: code}}, false
	}
	next := *s
	c.roll(&next, exists, now)
	if j := First(next.Hits, n, c.Limit); j > 0 {
		retryAfter := c.until(&next, j, now)
		resetAfter := retryAfter // a full window's rejection: both at its end
		if w := Windows(next.Hits, c.Limit); w != j {
			resetAfter = c.until(&next, w, now)
		}
		return Decision(c.Limit, next.Hits, false, retryAfter, resetAfter), false
	}
	next.Hits += n
	*s = next
	return Decision(c.Limit, next.Hits, true, 0, c.until(&next, Windows(next.Hits, c.Limit), now)), true
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	next := *s
	d, _ := c.Consume(&next, exists, now, n)
	return d.Result(c.Limit)
}

// Reserve takes n tokens in the first window that has room for them, if
// that window starts within maxWait.
//
// All n tokens are used in that window. Room left in the windows before it
// cannot be handed out any more without overfilling it, so that room is
// spent: the price of one counter, which keeps every window at most Limit.
// Hits that would not fit in an int64 are refused with RetryAfter Never.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckTokens(n, c.Limit, true); code != policy.OK {
		return policy.Refusal(code, c.Limit), false
	}
	if maxWait < 0 {
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	next := *s
	c.roll(&next, exists, now)
	j := First(next.Hits, n, c.Limit)
	var wait int64
	if j > 0 {
		wait = c.until(&next, j, now)
	}
	hits, retryAfter, ok := Admit(next.Hits, n, c.Limit, j, wait, maxWait)
	if !ok {
		return c.result(&next, now, false, retryAfter), false
	}
	next.Hits = hits
	*s = next
	res := c.result(s, now, true, 0)
	res.Wait = wait
	return res, true
}

// Cancel gives nothing back once the window counter has moved on since
// the reservation: a counter cannot tell its tokens from those taken after
// it, and taking them out of the count would shift the later reservations
// into windows they do not wait for, letting a window serve more than
// Limit. (policy.Undo restores an unchanged counter exactly.)
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is the end of the last window that holds any of the hits,
// saturating at the ends of the int64 time line.
func (c Config) ExpiresAt(s *State) int64 {
	hi, lo := bits.Mul64(Windows(s.Hits, c.Limit), uint64(c.Interval))
	if hi != 0 || lo > policy.Never {
		return policy.Never
	}
	return policy.SatAdd(s.Start, int64(lo))
}

// Quota is the tokens per window.
func (c Config) Quota() int64 { return c.Limit }

// Leasing is policy.LeasesToWindowEnd: a lease is hits taken at once,
// and its tokens are forgotten with the window they were counted in.
func (Config) Leasing() policy.Leasing { return policy.LeasesToWindowEnd }

// Lapses is true: a window past its expiry is replaced by one anchored at
// now (roll), as for a key with no state.
func (Config) Lapses() bool { return true }

// Window is the interval.
func (c Config) Window() int64 { return c.Interval }

// AppendState appends the encoding of *s to dst.
func (c Config) AppendState(dst []byte, s *State) []byte {
	return policy.AppendInts(dst, policy.TagFixedWindow, s.Start, s.Hits)
}

// DecodeState decodes a state written by AppendState.
func (c Config) DecodeState(src []byte, s *State) error {
	var st State
	if err := policy.DecodeInts(src, policy.TagFixedWindow, &st.Start, &st.Hits); err != nil {
		return err
	}
	if st.Hits < 0 {
		return fmt.Errorf("%w: fixed window hits %d, want at least 0", policy.ErrBadState, st.Hits)
	}
	*s = st
	return nil
}
