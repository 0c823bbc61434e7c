// Package slidinglog is the exact sliding log as a pure state machine:
// every accepted request is logged with its time and tokens and counts for
// exactly [time, time+Interval); a request for n tokens is accepted iff the
// tokens still counting plus n are at most Limit. Rejected requests are not
// logged, so they do not prolong a block.
//
// The log holds at most Limit tokens, so at most Limit entries: an accepted
// request first drops the entries that stopped counting. Entries logged at
// the same nanosecond are merged. Decisions take O(log entries) time (a
// binary search over the log, which keeps cumulative token counts), and
// accepting a request on an existing key reuses the log's memory, so in a
// steady state it does not allocate.
//
// A clock that goes back is not allowed to reorder the log: a request
// accepted at a time before the newest entry is logged at that entry's
// time, so it counts for at least as long as it would have.
package slidinglog

import (
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config is a sliding log of Limit tokens per Interval ns. Interval must be
// positive and Limit non-negative (0 rejects everything); the caller
// validates them. A Config is a value and safe for simultaneous use by
// multiple goroutines.
type Config struct {
	Limit    int64
	Interval int64
}

// Entry is one logged request: Tokens > 0 taken at Time (ns).
type Entry struct {
	Time   int64
	Tokens int64
}

// State is a key's log. The zero value is an empty log.
//
// A State refers to memory that Consume and DecodeState reuse, as a slice
// does: after one copy of a State is changed, other copies of it must not
// be used. Clone makes an independent copy.
type State struct {
	// log[head:] is the log, oldest first, times non-decreasing. Each mark
	// holds the tokens logged up to and including it, counted from an
	// arbitrary origin modulo 2^64: base is the count before log[head].
	// The log holds at most MaxInt64 tokens, so the differences are exact.
	log  []mark
	head int
	base uint64
}

type mark struct {
	at  int64
	cum uint64
}

var _ policy.Machine[State] = Config{}

// Entries returns a copy of the log, oldest first, including entries that
// no longer count but have not been dropped yet. It is meant for tests and
// debugging.
func (s *State) Entries() []Entry {
	live := s.log[s.head:]
	out := make([]Entry, len(live))
	prev := s.base
	for i, m := range live {
		out[i] = Entry{Time: m.at, Tokens: int64(m.cum - prev)}
		prev = m.cum
	}
	return out
}

// Clone returns a copy of s that shares no memory with it.
func (s *State) Clone() State {
	return State{log: slices.Clone(s.log[s.head:]), base: s.base}
}

// before is the cumulative count before live[i], where live = s.log[s.head:].
func (s *State) before(live []mark, i int) uint64 {
	if i == 0 {
		return s.base
	}
	return live[i-1].cum
}

// push appends m to the log. When the backing array is full it moves the
// log to the front if at least half of the array is dropped entries, and
// otherwise grows it: each entry is moved O(1) times on average, and a log
// of steady length stops allocating.
func (s *State) push(m mark) {
	if len(s.log) == cap(s.log) && s.head > 0 {
		live := s.log[s.head:]
		if s.head >= len(live) {
			s.log = s.log[:copy(s.log, live)]
		} else {
			s.log = append(make([]mark, 0, 2*len(live)+1), live...)
		}
		s.head = 0
	}
	s.log = append(s.log, m)
}

// gone reports whether an entry logged at at no longer counts at now.
func (c Config) gone(at, now int64) bool {
	return now >= at && uint64(now)-uint64(at) >= uint64(c.Interval)
}

// until is the time from now until an entry logged at at stops counting:
// at+Interval−now, 0 if it already has, saturating at Never.
func (c Config) until(at, now int64) int64 {
	iv := uint64(c.Interval)
	if now >= at {
		elapsed := uint64(now) - uint64(at)
		if elapsed >= iv {
			return 0
		}
		return int64(iv - elapsed)
	}
	ahead := uint64(at) - uint64(now)
	d := ahead + iv
	if d < ahead || d > policy.Never {
		return policy.Never
	}
	return int64(d)
}

// counting returns the log of s (empty if !exists), the index in it of the
// oldest entry still counting at now, and the tokens still counting.
func (c Config) counting(s *State, exists bool, now int64) (live []mark, k int, count int64) {
	if !exists {
		return nil, 0, 0
	}
	live = s.log[s.head:]
	// The entries that stopped counting are a prefix: binary search.
	lo, hi := 0, len(live)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c.gone(live[m].at, now) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(live) {
		count = int64(live[len(live)-1].cum - s.before(live, lo))
	}
	return live, lo, count
}

// decide answers a request for n > 0 tokens at now without changing s. k
// is as counting returns it.
func (c Config) decide(s *State, exists bool, now, n int64) (res policy.Result, k int) {
	live, k, count := c.counting(s, exists, now)
	res.Limit = c.Limit
	var last int64 // the newest entry's time, if any
	if len(live) > 0 {
		last = live[len(live)-1].at
	}
	// Limit − count cannot overflow: both are non-negative.
	if n <= c.Limit-count {
		res.Allowed = true
		res.Remaining = c.Limit - count - n
		// The new entry is logged at now, or merged into a newer one.
		newest := now
		if k < len(live) {
			newest = max(now, last)
		}
		res.ResetAfter = c.until(newest, now)
		return res, k
	}
	res.Remaining = max(c.Limit-count, 0)
	if len(live) > 0 {
		res.ResetAfter = c.until(last, now)
	}
	if n > c.Limit {
		res.RetryAfter = policy.Never
		return res, k
	}
	// Wait for the oldest entries to free count+n−Limit ≤ count tokens.
	need := uint64(count - (c.Limit - n)) // in [1, count]
	base := s.before(live, k)
	lo, hi := k, len(live)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if live[m].cum-base >= need {
			hi = m
		} else {
			lo = m + 1
		}
	}
	res.RetryAfter = c.until(live[lo].at, now)
	return res, k
}

// Consume takes n tokens if the tokens still counting leave room for them,
// and logs them at now. n ≤ 0 is an argument error; n > Limit is rejected
// with RetryAfter Never.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	res, k := c.decide(s, exists, now, n)
	if !res.Allowed {
		return res.Decision(0), false
	}
	if !exists {
		*s = State{log: s.log[:0]}
	}
	// Drop the entries that stopped counting.
	s.base = s.before(s.log[s.head:], k)
	s.head += k
	if s.head == len(s.log) {
		s.log, s.head = s.log[:0], 0
	}
	if len(s.log) > s.head {
		if last := &s.log[len(s.log)-1]; last.at >= now {
			last.cum += uint64(n)
			return res.Decision(0), true
		}
		s.push(mark{at: now, cum: s.log[len(s.log)-1].cum + uint64(n)})
		return res.Decision(0), true
	}
	s.push(mark{at: now, cum: s.base + uint64(n)})
	return res.Decision(0), true
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}
	}
	res, _ := c.decide(s, exists, now, n)
	return res
}

// Reserve is not supported by a sliding log: it returns
// Result{Code: policy.ReserveNotSupported} and changes nothing.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	return policy.Result{Code: policy.ReserveNotSupported}, false
}

// Cancel gives nothing back: the sliding log cannot reserve.
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is when the newest entry stops counting, saturating at
// MaxInt64, or MinInt64 for an empty log, which is worth nothing at any
// time.
func (c Config) ExpiresAt(s *State) int64 {
	if len(s.log) == s.head {
		return math.MinInt64
	}
	return policy.SatAdd(s.log[len(s.log)-1].at, c.Interval)
}

// Quota is the tokens per interval.
func (c Config) Quota() int64 { return c.Limit }

// Window is the interval.
func (c Config) Window() int64 { return c.Interval }

// AppendState appends the encoding of *s to dst: the number of entries,
// then each entry's time (the first one absolute, the others after the one
// before) and tokens.
func (c Config) AppendState(dst []byte, s *State) []byte {
	dst = policy.AppendHeader(dst, policy.TagSlidingLog)
	live := s.log[s.head:]
	dst = policy.AppendInt(dst, int64(len(live)))
	prevAt, prevCum := int64(0), s.base
	for _, m := range live {
		dst = policy.AppendInt(dst, m.at-prevAt)
		dst = policy.AppendInt(dst, int64(m.cum-prevCum))
		prevAt, prevCum = m.at, m.cum
	}
	return dst
}

// DecodeState decodes a state written by AppendState into *s, reusing its
// memory. Entries out of order, non-positive tokens or more than MaxInt64
// tokens in all are errors matching policy.ErrBadState; *s is then
// unchanged.
func (c Config) DecodeState(src []byte, s *State) error {
	rest, err := policy.ReadHeader(src, policy.TagSlidingLog)
	if err != nil {
		return err
	}
	count, rest, err := policy.ReadInt(rest)
	if err != nil {
		return err
	}
	// Every entry takes at least 2 bytes, which bounds the allocation.
	if count < 0 || count > int64(len(rest)/2) {
		return fmt.Errorf("%w: %d log entries in %d bytes", policy.ErrBadState, count, len(rest))
	}
	// Check everything before touching *s.
	if err := scan(rest, int(count), nil); err != nil {
		return err
	}
	log := s.log[:0]
	if cap(log) < int(count) {
		log = make([]mark, 0, count)
	}
	_ = scan(rest, int(count), func(m mark) { log = append(log, m) })
	*s = State{log: log}
	return nil
}

// scan reads count entries from src, checks them and passes each one to
// emit (if not nil) with cumulative counts from 0.
func scan(src []byte, count int, emit func(mark)) error {
	var at, tokens int64
	var cum uint64
	var err error
	for i := range count {
		var d int64
		if d, src, err = policy.ReadInt(src); err != nil {
			return err
		}
		switch {
		case i == 0:
			at = d
		case d < 0:
			return fmt.Errorf("%w: log entry %d is %d ns before the one before", policy.ErrBadState, i, -d)
		case at > math.MaxInt64-d:
			return fmt.Errorf("%w: log entry %d is after the end of time", policy.ErrBadState, i)
		default:
			at += d
		}
		if tokens, src, err = policy.ReadInt(src); err != nil {
			return err
		}
		if tokens <= 0 {
			return fmt.Errorf("%w: log entry %d has %d tokens", policy.ErrBadState, i, tokens)
		}
		if cum += uint64(tokens); cum > math.MaxInt64 {
			return fmt.Errorf("%w: the log holds more than %d tokens", policy.ErrBadState, int64(math.MaxInt64))
		}
		if emit != nil {
			emit(mark{at: at, cum: cum})
		}
	}
	if len(src) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", policy.ErrBadState, len(src))
	}
	return nil
}
