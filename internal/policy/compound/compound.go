// Package compound is the compound policy as a pure state machine: several
// policies, its members, limit the same key at once, and a request passes
// only if every member lets it pass.
//
// Unlike Symfony's compound limiter, which consumes from every member even
// after one rejected, sluice's compound is all or nothing: a request that one
// member rejects takes nothing from the others.
package compound

import (
	"bytes"
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config is a compound of Members. The zero Config, with no member, limits
// nothing: it allows every request, with Limit and Remaining policy.Never,
// as a no-limit policy does. A Config is safe for simultaneous use by
// multiple goroutines if its members are; a State is not.
//
// A request passes if every member allows it, and is then taken from every
// member; if any member rejects it, it is taken from none. Every member is
// asked every time, even after one has rejected, so that the answer is
// the most restrictive member's Result:
//   - when rejected, that of the rejecting member with the largest
//     RetryAfter (the first of them, in Members order, on a tie);
//   - when allowed, that of the member with the fewest Remaining (the first
//     of them on a tie), so that Limit may come from different members from
//     one request to the next;
//
// but for ResetAfter, which is when the whole compound is back to unused:
// the largest of the members' ResetAfter when allowed, and the time until
// ExpiresAt when rejected (the members that would have allowed the request
// then report a take that did not happen); and for Wait, the longest of the
// members' waits (see Reserve).
//
// An argument error reported by a member is the compound's, with nothing
// taken. The compound itself checks n and maxWait first; among the members'
// errors, ReserveNotSupported wins, and otherwise the first member's.
type Config struct {
	Members []policy.Erased
}

// TakesSlots reports whether a member's Consume takes slots (a penalty
// box of a concurrency limit; a member cannot hold slots itself), which
// a compound, having no slot operations, can never give back.
func (c Config) TakesSlots() bool {
	return slices.ContainsFunc(c.Members, policy.ErasedTakesSlots)
}

// State is a key's state in every member: Parts[i] is the encoding of
// member i's state, and a part that is empty (or nil, or missing) is no
// state for that member. A part that member i cannot decode counts as no
// state too, as policy.Erase has it.
//
// A State owns the arrays behind Parts and reuses them: once it has been
// through a call, Consume and Reserve allocate nothing while the parts keep
// their sizes. So a copy made by assignment shares them with the original
// and is changed with it; use Clone for a copy that stands alone. The zero
// State is an empty state.
type State struct {
	Parts [][]byte
	// spare holds, for member i, the buffer its next part is written to
	// before the decision is known, and whether that member changed its
	// part. It is scratch space, not part of the state: a call that changes
	// nothing may still overwrite it.
	spare []spare
}

type spare struct {
	buf     []byte
	changed bool
}

// Clone returns a deep copy of s, sharing no array with it.
func (s State) Clone() State {
	if s.Parts == nil {
		return State{}
	}
	parts := make([][]byte, len(s.Parts))
	for i, p := range s.Parts {
		parts[i] = bytes.Clone(p)
	}
	return State{Parts: parts}
}

var _ policy.Machine[State] = Config{}

// part is member i's state in s, or nil for none.
func (c Config) part(s *State, exists bool, i int) []byte {
	if !exists || i >= len(s.Parts) {
		return nil
	}
	return s.Parts[i]
}

// spares returns s.spare with one element per member, allocating it the
// first time.
func (c Config) spares(s *State) []spare {
	if len(s.spare) < len(c.Members) {
		s.spare = append(s.spare, make([]spare, len(c.Members)-len(s.spare))...)
	}
	return s.spare[:len(c.Members)]
}

// verdict folds the members' results, in member order, into the
// compound's. Its zero value has seen no member.
type verdict struct {
	code     policy.Code
	seen     bool // a member answered with code OK
	rejected bool
	res      policy.Result // the member reported so far
	// from is the member res is from, and bound the Bound of its
	// decision, when it was one.
	from  int
	bound uint32
	// resetAfter and wait are the largest over the members.
	resetAfter, wait int64
}

// add folds in member i's result r, the decision of bound b if it was
// one.
func (v *verdict) add(i int, r policy.Result, b uint32) {
	if r.Code != policy.OK {
		if v.code == policy.OK || r.Code == policy.ReserveNotSupported {
			v.code, v.res, v.from, v.bound = r.Code, r, i, b
		}
		return
	}
	if v.code != policy.OK { // the compound's answer is the error's
		return
	}
	switch {
	case !r.Allowed:
		if !v.rejected || r.RetryAfter > v.res.RetryAfter {
			v.res, v.from, v.bound = r, i, b
		}
		v.rejected = true
	case !v.rejected && (!v.seen || r.Remaining < v.res.Remaining):
		v.res, v.from, v.bound = r, i, b
	}
	v.seen = true
	v.resetAfter = max(v.resetAfter, r.ResetAfter)
	v.wait = max(v.wait, r.Wait)
}

// decide folds in member i's decision d.
func (v *verdict) decide(i int, m policy.Erased, d policy.Decision) {
	v.add(i, d.ResultIn(m.Limits()), d.Bound)
}

// decision is res, the compound's answer for v, as Consume answers it:
// its Bound is that of the member it reports, after the limits of the
// members before it (see Limits).
func (c Config) decision(v *verdict, res policy.Result) policy.Decision {
	if !v.seen && v.code == policy.OK { // no member
		return res.Decision(0)
	}
	b := v.bound
	for _, m := range c.Members[:v.from] {
		b += uint32(len(m.Limits()))
	}
	return res.Decision(b)
}

// Limits is the members' Limits, in member order, so that a decision
// reports the limit of the member it reports; Never for no member.
func (c Config) Limits() []int64 {
	var limits []int64
	for _, m := range c.Members {
		limits = append(limits, m.Limits()...)
	}
	if len(limits) == 0 {
		limits = append(limits, policy.Never)
	}
	return limits
}

// result is the compound's answer, for the state s had before the call.
func (c Config) result(v *verdict, s *State, exists bool, now int64) policy.Result {
	res, rejected := v.result()
	if rejected && exists {
		res.ResetAfter = until(c.ExpiresAt(s), now)
	}
	return res
}

// result is the compound's answer but, when rejected is true, for its
// ResetAfter: that is the time until the ExpiresAt of the key's state
// before the call (0 for a key with none), which the caller, who holds
// that state, sets. Both state forms share it.
func (v *verdict) result() (res policy.Result, rejected bool) {
	switch {
	case v.code != policy.OK:
		return policy.Refusal(v.code, v.res.Limit), false
	case !v.seen: // no member
		return policy.Result{Allowed: true, Remaining: policy.Never, Limit: policy.Never}, false
	case v.rejected:
		res = v.res
		res.Wait = 0
		res.ResetAfter = 0
		return res, true
	}
	res = v.res
	res.ResetAfter = v.resetAfter
	res.Wait = v.wait
	return res, false
}

// until is the time from now to at, 0 if at is past, saturated at
// policy.Never.
func until(at, now int64) int64 {
	if at <= now {
		return 0
	}
	return int64(min(uint64(at)-uint64(now), math.MaxInt64))
}

// commit writes the members' new parts from s.spare into s.Parts, the
// request being allowed by all, and reports whether any part changed. A
// changed part's old array becomes that member's spare buffer.
func (c Config) commit(s *State, exists bool) bool {
	sp := s.spare[:len(c.Members)]
	changed := false
	for i := range sp {
		changed = changed || sp[i].changed
	}
	if !changed {
		return false
	}
	parts := s.Parts
	if !exists {
		parts = parts[:0]
	}
	for len(parts) < len(c.Members) {
		if len(parts) < cap(parts) {
			parts = parts[:len(parts)+1]
			parts[len(parts)-1] = parts[len(parts)-1][:0] // no state
		} else {
			parts = append(parts, nil)
		}
	}
	parts = parts[:len(c.Members)]
	for i := range sp {
		if sp[i].changed {
			old := parts[i]
			parts[i] = sp[i].buf
			if cap(old) < len(parts[i]) {
				// A new part: give the member a spare buffer now, so the
				// key's next decision allocates nothing.
				old = make([]byte, 0, cap(parts[i]))
			}
			sp[i].buf = old[:0]
		}
	}
	s.Parts = parts
	return true
}

// Consume takes n tokens from every member if every member allows them,
// and from none otherwise.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	sp := c.spares(s)
	var v verdict
	for i, m := range c.Members {
		d, next, changed := m.Consume(c.part(s, exists, i), now, n, sp[i].buf)
		sp[i] = spare{buf: next, changed: changed}
		v.decide(i, m, d)
	}
	res, changed := c.keep(&v, s, exists, now)
	return c.decision(&v, res), changed
}

// take asks every member what it would take of its part, by ask, which
// writes the member's next state into buf, and keeps every member's next
// state if every member allows, and none otherwise.
func (c Config) take(s *State, exists bool, now int64, ask func(m policy.Erased, part, buf []byte) (policy.Result, []byte, bool)) (policy.Result, bool) {
	sp := c.spares(s)
	var v verdict
	for i, m := range c.Members {
		r, next, changed := ask(m, c.part(s, exists, i), sp[i].buf)
		sp[i] = spare{buf: next, changed: changed}
		v.add(i, r, 0)
	}
	return c.keep(&v, s, exists, now)
}

// keep ends a take: it keeps the members' next states, in s's spares, if
// v allows the request.
func (c Config) keep(v *verdict, s *State, exists bool, now int64) (policy.Result, bool) {
	res := c.result(v, s, exists, now)
	if !res.Allowed {
		return res, false
	}
	return res, c.commit(s, exists)
}

// Peek answers as Consume would, taking nothing. It writes nothing to s,
// not even scratch space.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}
	}
	var v verdict
	for i, m := range c.Members {
		v.add(i, m.Peek(c.part(s, exists, i), now, n), 0)
	}
	return c.result(&v, s, exists, now)
}

// Reserve reserves n tokens from every member within maxWait if every
// member grants them, and from none otherwise. If any member cannot
// reserve, the compound cannot either: Code ReserveNotSupported.
//
// Each member is asked for the earliest reservation it can grant within
// maxWait, and the compound's wait is the longest of theirs: the caller
// goes when every member's tokens are there. A member whose own wait is
// shorter has its tokens ready before the caller uses them, and counts
// them at its own, earlier time: a window policy charges them to the
// window they were granted in, and a shaper's departure slot is earlier
// than the caller's actual departure, so the spacing after it can be
// shorter than the shaper's interval by up to the difference. Nothing is
// taken beyond what each member granted; only the timing is loosened.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckReserve(n, maxWait); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	return c.take(s, exists, now, func(m policy.Erased, part, buf []byte) (policy.Result, []byte, bool) {
		return m.Reserve(part, now, n, maxWait, buf)
	})
}

// Cancel gives back, member by member, what each can of the reservation
// r, from a compound state that changed since r: each member's part is
// undone as policy.Undo would undo that member alone, restored exactly
// when nothing was taken from it since, else by its own Cancel.
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool {
	before, after, ok := c.receiptParts(r)
	if !ok {
		return false
	}
	changed := false
	for i, m := range c.Members {
		mr := c.memberReceipt(r, &before, &after, i)
		next, ch := m.Cancel(c.part(s, true, i), now, &mr, nil)
		if !ch {
			continue
		}
		s.setPart(i, next)
		changed = true
	}
	return changed
}

// setPart makes p member i's part of s, adding the parts of the
// members before it that s lacks as empty (none yet).
func (s *State) setPart(i int, p []byte) {
	for len(s.Parts) <= i {
		s.Parts = append(s.Parts, nil)
	}
	s.Parts[i] = p
}

// receiptParts decodes the compound states before and after the
// reservation r; ok is false when either does not decode.
func (c Config) receiptParts(r *policy.Receipt) (before, after State, ok bool) {
	if c.DecodeState(r.After, &after) != nil {
		return State{}, State{}, false
	}
	if len(r.Before) != 0 && c.DecodeState(r.Before, &before) != nil {
		return State{}, State{}, false
	}
	return before, after, true
}

// memberReceipt is member i's share of the reservation r, whose compound
// states receiptParts decoded.
func (c Config) memberReceipt(r *policy.Receipt, before, after *State, i int) policy.Receipt {
	return policy.Receipt{Tokens: r.Tokens, At: r.At, Due: r.Due,
		Before: c.part(before, len(r.Before) != 0, i), After: after.Parts[i]}
}

// ExpiresAt is the latest of the members' ExpiresAt, math.MinInt64 when no
// member has a state.
func (c Config) ExpiresAt(s *State) int64 {
	at := int64(math.MinInt64)
	for i, m := range c.Members {
		at = max(at, m.ExpiresAt(c.part(s, true, i)))
	}
	return at
}

// Quota is the smallest of the members' Quota, policy.Never when there is
// no member.
func (c Config) Quota() int64 {
	q := int64(policy.Never)
	for _, m := range c.Members {
		q = min(q, m.Quota())
	}
	return q
}

// Window is the shortest of the members' Window, leaving out those
// without one (0): the member with the shortest window is the one that
// usually binds and that Result.Limit reports.
func (c Config) Window() int64 {
	var w int64
	for _, m := range c.Members {
		if mw := m.Window(); mw > 0 && (w == 0 || mw < w) {
			w = mw
		}
	}
	return w
}

// AppendState appends the encoding of *s to dst: the header, then for
// each member its part's length and bytes.
func (c Config) AppendState(dst []byte, s *State) []byte {
	dst = policy.AppendHeader(dst, policy.TagCompound)
	for i := range c.Members {
		p := c.part(s, true, i)
		dst = append(policy.AppendInt(dst, int64(len(p))), p...)
	}
	return dst
}

// DecodeState decodes a state written by AppendState, copying the parts
// into the arrays s already has where they fit. A state with another
// number of parts than there are members is refused: it was written for
// another compound.
func (c Config) DecodeState(src []byte, s *State) error {
	rest, err := c.checkParts(src)
	if err != nil {
		return err
	}
	parts := s.Parts[:0]
	for range c.Members {
		var p []byte
		p, rest = nextPart(rest)
		var buf []byte
		if len(parts) < cap(parts) {
			buf = parts[:len(parts)+1][len(parts)][:0]
		}
		parts = append(parts, append(buf, p...))
	}
	s.Parts = parts
	return nil
}

// checkParts checks the header and framing of src, an encoded compound
// state, and that it has one part per member, and returns the parts,
// which nextPart reads one at a time. Decoders check first, so that they
// leave their state untouched on an error.
func (c Config) checkParts(src []byte) ([]byte, error) {
	rest, err := policy.ReadHeader(src, policy.TagCompound)
	if err != nil {
		return nil, err
	}
	count := 0
	for r := rest; len(r) > 0; count++ {
		var l int64
		if l, r, err = policy.ReadInt(r); err != nil {
			return nil, err
		}
		if l < 0 || l > int64(len(r)) {
			return nil, fmt.Errorf("%w: part %d of %d bytes, %d left", policy.ErrBadState, count, l, len(r))
		}
		r = r[l:]
	}
	if count != len(c.Members) {
		return nil, fmt.Errorf("%w: %d parts, want %d", policy.ErrBadState, count, len(c.Members))
	}
	return rest, nil
}

// nextPart returns the first part of parts that checkParts checked, and
// the parts after it.
func nextPart(parts []byte) (part, rest []byte) {
	l, r, _ := policy.ReadInt(parts)
	return r[:l], r[l:]
}
