// Package fixedwindow is the fixed-window counter as a pure state machine,
// with Symfony's semantics: a window of Interval opens at the first hit
// (not on a calendar boundary) and lets Limit tokens through.
//
// Unlike Symfony, times are exact nanoseconds (no whole-second rounding),
// a window ends exactly at start+Interval, and reserved tokens are debt
// that later windows repay, instead of being forgotten at the next window.
package fixedwindow

import "github.com/sluicehq/sluice/internal/policy"

// Config is a validated fixed window: Limit > 0 tokens per Interval > 0 ns.
type Config struct {
	Limit    int64
	Interval int64
}

// State is a key's window: when it opened and the tokens taken in it,
// including reserved ones beyond Limit, which spill into the next windows
// on the same grid. 16 bytes.
type State struct {
	Start int64
	Hits  int64
}

var _ policy.Machine[State] = Config{}

// roll moves s forward to the window that holds now. A window whose
// tokens, debt included, are all spent by now is replaced by a fresh one
// anchored at now, as Symfony anchors a window at its first hit.
func (c Config) roll(s *State, exists bool, now int64) {
	if !exists {
		*s = State{Start: now}
		return
	}
	if now < policy.SatAdd(s.Start, c.Interval) {
		return // still in the window (or the clock went back)
	}
	k := (now - s.Start) / c.Interval
	if carry := s.Hits - policy.SatMul(k, c.Limit); carry > 0 {
		s.Start += k * c.Interval
		s.Hits = carry
		return
	}
	*s = State{Start: now}
}

// result describes s at now after a decision.
func (c Config) result(s *State, now int64, allowed bool, retryAfter int64) policy.Result {
	return policy.Result{
		Allowed:    allowed,
		Remaining:  max(c.Limit-s.Hits, 0),
		RetryAfter: retryAfter,
		ResetAfter: max(c.ExpiresAt(s)-now, 0),
		Limit:      c.Limit,
	}
}

func (c Config) check(n int64) policy.Code {
	switch {
	case n <= 0:
		return policy.NonPositiveTokens
	case n > c.Limit:
		return policy.TokensAboveLimit
	}
	return policy.OK
}

// Consume takes n tokens if the current window still has them. More than
// Limit is an argument error, as in Symfony.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Result, bool) {
	if code := c.check(n); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	next := *s
	c.roll(&next, exists, now)
	if next.Hits+n > c.Limit {
		return c.result(&next, now, false, c.waitFor(&next, now, n)), false
	}
	next.Hits += n
	*s = next
	return c.result(s, now, true, 0), true
}

// waitFor is the time from now until n more tokens fit: the start of the
// first window whose share of the hits leaves room for them.
func (c Config) waitFor(s *State, now, n int64) int64 {
	if s.Hits+n <= c.Limit {
		return 0
	}
	// Window j (0 = current) has room when Hits+n ≤ (j+1)·Limit.
	j := policy.CeilDiv(s.Hits+n, c.Limit) - 1
	return max(policy.SatAdd(s.Start, policy.SatMul(j, c.Interval))-now, 0)
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	next := *s
	res, _ := c.Consume(&next, exists, now, n)
	return res
}

// Reserve takes n tokens in the first window that has room for them, if
// that window starts within maxWait.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := c.check(n); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	if maxWait < 0 {
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	next := *s
	c.roll(&next, exists, now)
	wait := c.waitFor(&next, now, n)
	if wait > maxWait {
		return c.result(&next, now, false, wait), false
	}
	next.Hits += n
	*s = next
	res := c.result(s, now, true, 0)
	res.Wait = wait
	return res, true
}

// ExpiresAt is the end of the last window that holds any of the hits.
func (c Config) ExpiresAt(s *State) int64 {
	windows := max(policy.CeilDiv(s.Hits, c.Limit), 1)
	return policy.SatAdd(s.Start, policy.SatMul(windows, c.Interval))
}

// Quota is the tokens per window.
func (c Config) Quota() int64 { return c.Limit }

// AppendState appends the encoding of *s to dst.
func (c Config) AppendState(dst []byte, s *State) []byte {
	dst = policy.AppendHeader(dst, policy.TagFixedWindow)
	return policy.AppendInt(policy.AppendInt(dst, s.Start), s.Hits)
}

// DecodeState decodes a state written by AppendState.
func (c Config) DecodeState(src []byte, s *State) error {
	rest, err := policy.ReadHeader(src, policy.TagFixedWindow)
	if err != nil {
		return err
	}
	var st State
	if err := policy.ReadInts(rest, &st.Start, &st.Hits); err != nil {
		return err
	}
	*s = st
	return nil
}
