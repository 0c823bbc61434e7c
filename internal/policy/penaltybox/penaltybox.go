// Package penaltybox is the penalty box as a pure state machine: a
// wrapper around any policy that, when the policy refuses a request,
// blocks the key for a penalty, refusing everything until it ends. Repeat
// offences may escalate through a list of penalties (a minute, then ten,
// then an hour), and are forgiven after a quiet period.
//
// Its state is the inner policy's, and two integers: when the last block
// ends, and the offences counted towards the next penalty. So it runs on
// every store, as its inner policy does.
package penaltybox

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config is a validated penalty box around Inner: at least one penalty,
// each positive, and a positive Forgive when there are several. A Config
// is safe for simultaneous use by multiple goroutines if Inner is; a
// State is not.
//
// An offence is a Consume that Inner refuses (not an argument error). It
// starts a block of Penalties[k−1] from now, where k is the offences since
// the key was last forgiven, this one included, and at most
// len(Penalties): the last penalty repeats. A key is forgiven, its count
// back to 0, once Forgive has passed since its last block ended with no
// offence. During a block every request is refused, and counts as no
// new offence: the block neither grows nor escalates. A refused
// reservation is no offence: its caller asked to wait, and waits.
type Config struct {
	Inner     policy.Erased
	Penalties []int64
	Forgive   int64
}

// State is a key's state: Inner's, and the block. Until is the end of the
// last block and Strikes the offences counted towards the next penalty;
// Until means nothing while Strikes is 0. A State owns the arrays behind
// Inner and reuses them, so a copy made by assignment shares them; use
// Clone for a copy that stands alone.
type State struct {
	Until   int64
	Strikes int64
	// Inner is Inner's state, as it encodes it; empty for none.
	Inner []byte
	// spare is the buffer Inner's next state is written to; scratch
	// space, not part of the state.
	spare []byte
}

// Clone returns a deep copy of s, sharing no array with it.
func (s State) Clone() State {
	return State{Until: s.Until, Strikes: s.Strikes, Inner: append([]byte(nil), s.Inner...)}
}

var _ policy.Machine[State] = Config{}

// blocked reports whether s holds a block at now.
func (c Config) blocked(s *State, exists bool, now int64) bool {
	return exists && s.Strikes > 0 && now < s.Until
}

// inner is Inner's state in s, nil for none.
func inner(s *State, exists bool) []byte {
	if !exists {
		return nil
	}
	return s.Inner
}

// forgiven is when the offences of s are forgiven: at the end of its last
// block for a single penalty, where their count does not matter.
func (c Config) forgiven(s *State) int64 {
	if len(c.Penalties) == 1 {
		return s.Until
	}
	return policy.SatAdd(s.Until, c.Forgive)
}

// offend starts the block of an offence at now on s.
func (c Config) offend(s *State, exists bool, now int64) {
	strikes := int64(0)
	if exists && s.Strikes > 0 && now < c.forgiven(s) {
		strikes = s.Strikes
	}
	strikes = min(strikes+1, int64(len(c.Penalties)))
	s.Strikes, s.Until = strikes, policy.SatAdd(now, c.Penalties[strikes-1])
}

// refusal is the answer, at now, to a request for n tokens while s
// blocks the key: it can pass when the block is over and Inner lets it,
// which Inner's answer at the block's end says exactly; the key is back
// to unused when the block is over and Inner's state has expired.
func (c Config) refusal(s *State, exists bool, now, n int64) policy.Result {
	state := inner(s, exists)
	wait := until(s.Until, now)
	retry := wait
	if p := c.Inner.Peek(state, s.Until, n); !p.Allowed {
		retry = policy.SatAdd(wait, p.RetryAfter)
	}
	return policy.Result{RetryAfter: retry, ResetAfter: until(max(s.Until, c.Inner.ExpiresAt(state)), now), Limit: c.Inner.Quota()}
}

// Limits is Inner's: a decision reports Inner's limit, and a block its
// Quota.
func (c Config) Limits() []int64 { return c.Inner.Limits() }

// decision is res as Consume answers it.
func (c Config) decision(res policy.Result) policy.Decision {
	return res.Decision(policy.BoundOf(c.Inner.Limits(), res.Limit))
}

// until is the time from now to at, 0 if at is past, saturated at Never.
func until(at, now int64) int64 {
	if at <= now {
		return 0
	}
	return int64(min(uint64(at)-uint64(now), policy.Never))
}

// TakesSlots reports whether Inner's Consume takes slots, which a
// penalty box, having no slot operations, can never give back.
func (c Config) TakesSlots() bool { return policy.ErasedTakesSlots(c.Inner) }

// Consume takes n tokens from Inner if the key is not blocked and Inner
// allows them. A refusal by Inner is an offence, which blocks the key:
// the state changes although nothing was taken. Inner's argument errors
// are Consume's, and no offence.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	if c.blocked(s, exists, now) {
		if p := c.Inner.Peek(s.Inner, now, n); p.Code != policy.OK {
			return c.decision(p), false
		}
		return c.decision(c.refusal(s, exists, now, n)), false
	}
	res, next, changed := c.Inner.Consume(inner(s, exists), now, n, s.spare[:0])
	switch {
	case res.Code != policy.OK:
		return res, false
	case res.Allowed:
		if changed {
			c.keep(s, exists, next)
		}
		return res, changed
	}
	// Inner's own change on a refusal (a new key's state) is dropped, so
	// that Peek, which cannot see it, answers as Consume.
	if !exists {
		*s = State{spare: s.spare}
	}
	c.offend(s, exists, now)
	return c.decision(c.refusal(s, true, now, n)), true
}

// keep makes next, which Inner wrote in s.spare, Inner's state in s.
func (c Config) keep(s *State, exists bool, next []byte) {
	old := s.Inner
	if !exists {
		s.Until, s.Strikes = 0, 0
	}
	s.Inner, s.spare = next, old[:0]
}

// Peek answers as Consume would, changing nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}
	}
	if c.blocked(s, exists, now) {
		if p := c.Inner.Peek(s.Inner, now, n); p.Code != policy.OK {
			return p
		}
		return c.refusal(s, exists, now, n)
	}
	res := c.Inner.Peek(inner(s, exists), now, n)
	if res.Code != policy.OK || res.Allowed {
		return res
	}
	b := State{Inner: inner(s, exists)}
	if exists {
		b.Until, b.Strikes = s.Until, s.Strikes
	}
	c.offend(&b, exists, now)
	return c.refusal(&b, true, now, n)
}

// Reserve reserves n tokens of Inner within maxWait, unless the key is
// blocked: a block grants no reservation, whatever the wait, and its
// RetryAfter is a Consume's. A reservation that Inner refuses is refused
// and is no offence.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckReserve(n, maxWait); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	res, next, changed := c.Inner.Reserve(inner(s, exists), now, n, maxWait, s.spare[:0])
	switch {
	case res.Code != policy.OK:
		return res, false
	case c.blocked(s, exists, now):
		return c.refusal(s, exists, now, n), false
	case !res.Allowed:
		return res, false
	}
	if changed {
		c.keep(s, exists, next)
	}
	return res, changed
}

// Cancel gives back what Inner can of the reservation r: the block is
// not the reservation's, and stays.
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool {
	var before, after State
	if c.DecodeState(r.After, &after) != nil {
		return false
	}
	if len(r.Before) != 0 && c.DecodeState(r.Before, &before) != nil {
		return false
	}
	ir := policy.Receipt{Tokens: r.Tokens, At: r.At, Due: r.Due, Before: before.Inner, After: after.Inner}
	next, changed := c.Inner.Cancel(s.Inner, now, &ir, nil)
	if changed {
		s.Inner = next
	}
	return changed
}

// ExpiresAt is the latest of Inner's ExpiresAt and, for a key with
// offences, when they are forgiven.
func (c Config) ExpiresAt(s *State) int64 {
	at := c.Inner.ExpiresAt(s.Inner)
	if s.Strikes > 0 {
		at = max(at, c.forgiven(s))
	}
	return at
}

// Lapses is true: past ExpiresAt the block is over, the offences are
// forgiven, and Inner's state counts as none (policy.Erased's rule).
func (Config) Lapses() bool { return true }

// Quota is Inner's.
func (c Config) Quota() int64 { return c.Inner.Quota() }

// Window is Inner's.
func (c Config) Window() int64 { return c.Inner.Window() }

// AppendState appends the encoding of *s to dst: the header, Until,
// Strikes, and Inner's state's length and bytes.
func (c Config) AppendState(dst []byte, s *State) []byte {
	dst = policy.AppendInts(dst, policy.TagPenaltyBox, s.Until, s.Strikes, int64(len(s.Inner)))
	return append(dst, s.Inner...)
}

// DecodeState decodes a state written by AppendState, copying Inner's
// state into the array s already has when it fits.
func (c Config) DecodeState(src []byte, s *State) error {
	rest, err := policy.ReadHeader(src, policy.TagPenaltyBox)
	if err != nil {
		return err
	}
	var until, strikes, n int64
	for _, p := range []*int64{&until, &strikes, &n} {
		if *p, rest, err = policy.ReadInt(rest); err != nil {
			return err
		}
	}
	switch {
	case strikes < 0 || strikes > int64(len(c.Penalties)):
		return fmt.Errorf("%w: penalty box strikes %d, want 0 to %d", policy.ErrBadState, strikes, len(c.Penalties))
	case n != int64(len(rest)):
		return fmt.Errorf("%w: penalty box inner state of %d bytes, %d follow", policy.ErrBadState, n, len(rest))
	}
	s.Until, s.Strikes, s.Inner = until, strikes, append(s.Inner[:0], rest...)
	return nil
}

// MaxPenalties bounds the penalties of a Config, so that a state's
// Strikes stays a small number.
const MaxPenalties = 64
