package compound

import (
	"encoding/binary"
	"math"

	"github.com/sluicehq/sluice/internal/policy"
)

// Words is the compound of a Config whose members all keep their states
// as words (policy.WordMachine): its state, a WordState, holds every
// member's words inline in an array A, W2 to W16, with no pointer, where a
// State holds a slice of encoded parts and their spare buffers. A key in
// a keyed table then costs its slot and nothing else: no allocation when
// it is made, and nothing for the garbage collector to scan.
//
// Its decisions are the Config's, rule for rule (the two forms share the
// code that folds the members' results); only the state differs. Its
// encoding is the Config's too, so a state written by one decodes in the
// other. Make one with NewWords. A Words is safe for simultaneous use by
// multiple goroutines if its members are; a WordState is not.
type Words[A any, P Array[A]] struct {
	c       Config
	members []policy.WordMachine
	// off[i] is where member i's words start in the array; off[len(members)]
	// is the number of words used.
	off []int
}

// WordState is a key's state in every member of a Words compound: member
// i's words are W[off[i]:off[i+1]], and bit i of Have says whether member
// i has a state there (a member with none may have left stale words
// behind, which are not read). The zero WordState is an empty state, and a
// copy made by assignment stands alone.
type WordState[A any] struct {
	W    A
	Have uint64
}

// Array is the constraint on a WordState's array: a pointer to one of
// W2 … W16, which gives its words as a slice.
type Array[A any] interface {
	*A
	words() []int64
}

// The arrays of a WordState, by size in words.
type (
	W2  [2]int64
	W3  [3]int64
	W4  [4]int64
	W5  [5]int64
	W6  [6]int64
	W8  [8]int64
	W12 [12]int64
	W16 [16]int64
)

func (a *W2) words() []int64  { return a[:] }
func (a *W3) words() []int64  { return a[:] }
func (a *W4) words() []int64  { return a[:] }
func (a *W5) words() []int64  { return a[:] }
func (a *W6) words() []int64  { return a[:] }
func (a *W8) words() []int64  { return a[:] }
func (a *W12) words() []int64 { return a[:] }
func (a *W16) words() []int64 { return a[:] }

// maxWordMembers is the most members a Words holds: one bit of Have each.
const maxWordMembers = 64

// WordsOf reports how many words a WordState of c needs, and whether c
// can be a Words at all: every member a policy.WordMachine, and at most
// 64 of them.
func WordsOf(c Config) (words int, ok bool) {
	if len(c.Members) > maxWordMembers {
		return 0, false
	}
	for _, m := range c.Members {
		wm, ok := m.(policy.WordMachine)
		if !ok {
			return 0, false
		}
		words += wm.Words()
	}
	return words, true
}

// NewWords returns c as a Words over the array A; ok is false when c
// cannot be one (see WordsOf) or its members need more words than A has.
func NewWords[A any, P Array[A]](c Config) (w Words[A, P], ok bool) {
	var a A
	n, ok := WordsOf(c)
	if !ok || n > len(P(&a).words()) {
		return Words[A, P]{}, false
	}
	w = Words[A, P]{c: c, members: make([]policy.WordMachine, len(c.Members)), off: make([]int, len(c.Members)+1)}
	for i, m := range c.Members {
		w.members[i] = m.(policy.WordMachine)
		w.off[i+1] = w.off[i] + w.members[i].Words()
	}
	return w, true
}

var _ policy.Machine[WordState[W4]] = Words[W4, *W4]{}

// member is member i's words in w.
func (c Words[A, P]) member(w []int64, i int) []int64 { return w[c.off[i]:c.off[i+1]] }

// have is the Have of s, none when the key has no state.
func have[A any](s *WordState[A], exists bool) uint64 {
	if !exists {
		return 0
	}
	return s.Have
}

// finish ends a call that may have changed *s in place, which held saved
// before: it keeps the members' changes if the request is allowed, and
// puts saved back otherwise, so that a rejection takes nothing from any
// member. at is the ExpiresAt of the state before the call, the latest of
// the members' as their calls read it, for a rejection's ResetAfter.
func (c Words[A, P]) finish(v *verdict, s *WordState[A], exists bool, saved A, at, now int64, changed uint64) (policy.Result, bool) {
	res, rejected := v.result()
	if !res.Allowed {
		s.W = saved
		if rejected && exists {
			res.ResetAfter = until(at, now)
		}
		return res, false
	}
	if changed == 0 {
		return res, false
	}
	s.Have = have(s, exists) | changed
	return res, true
}

// Consume takes n tokens from every member if every member allows them,
// and from none otherwise, as Config.Consume.
func (c Words[A, P]) Consume(s *WordState[A], exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	saved, h, w := s.W, have(s, exists), P(&s.W).words()
	var v verdict
	var changed uint64
	at := int64(math.MinInt64)
	for i, m := range c.members {
		d, ch, mat := m.ConsumeWords(c.member(w, i), h&(1<<i) != 0, now, n)
		if ch {
			changed |= 1 << i
		}
		at = max(at, mat)
		v.decide(i, m, d)
	}
	res, ch := c.finish(&v, s, exists, saved, at, now, changed)
	return c.c.decision(&v, res), ch
}

// Reserve reserves n tokens from every member within maxWait if every
// member grants them, and from none otherwise, as Config.Reserve.
func (c Words[A, P]) Reserve(s *WordState[A], exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckReserve(n, maxWait); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	saved, h, w := s.W, have(s, exists), P(&s.W).words()
	var v verdict
	var changed uint64
	at := int64(math.MinInt64)
	for i, m := range c.members {
		r, ch, mat := m.ReserveWords(c.member(w, i), h&(1<<i) != 0, now, n, maxWait)
		if ch {
			changed |= 1 << i
		}
		at = max(at, mat)
		v.add(i, r, 0)
	}
	return c.finish(&v, s, exists, saved, at, now, changed)
}

// Peek answers as Consume would, taking nothing.
func (c Words[A, P]) Peek(s *WordState[A], exists bool, now, n int64) policy.Result {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}
	}
	h, w := have(s, exists), P(&s.W).words()
	var v verdict
	at := int64(math.MinInt64)
	for i, m := range c.members {
		r, mat := m.PeekWords(c.member(w, i), h&(1<<i) != 0, now, n)
		at = max(at, mat)
		v.add(i, r, 0)
	}
	res, rejected := v.result()
	if rejected && exists {
		res.ResetAfter = until(at, now)
	}
	return res
}

// Cancel gives back, member by member, what each can of the reservation
// r, as Config.Cancel.
func (c Words[A, P]) Cancel(s *WordState[A], now int64, r *policy.Receipt) bool {
	before, after, ok := c.c.receiptParts(r)
	if !ok {
		return false
	}
	w := P(&s.W).words()
	changed := false
	for i, m := range c.members {
		mr := c.c.memberReceipt(r, &before, &after, i)
		switch m.CancelWords(c.member(w, i), s.Have&(1<<i) != 0, now, &mr) {
		case policy.Changed:
			s.Have |= 1 << i
			changed = true
		case policy.Dropped:
			s.Have &^= 1 << i
			changed = true
		}
	}
	return changed
}

// ExpiresAt is the latest of the members' ExpiresAt, math.MinInt64 when no
// member has a state.
func (c Words[A, P]) ExpiresAt(s *WordState[A]) int64 {
	w := P(&s.W).words()
	at := int64(math.MinInt64)
	for i, m := range c.members {
		at = max(at, m.ExpiresAtWords(c.member(w, i), s.Have&(1<<i) != 0))
	}
	return at
}

// Quota is the smallest of the members' Quota, as Config.Quota.
func (c Words[A, P]) Quota() int64 { return c.c.Quota() }

// Limits is the members' Limits, as Config.Limits.
func (c Words[A, P]) Limits() []int64 { return c.c.Limits() }

// Lapses is true: each member's state past its own ExpiresAt already
// counts as none, and a rejection's ResetAfter is then 0 either way.
func (Words[A, P]) Lapses() bool { return true }

// Window is the shortest of the members' Window, as Config.Window.
func (c Words[A, P]) Window() int64 { return c.c.Window() }

// AppendState appends the encoding of *s to dst, the same as
// Config.AppendState writes for the same members' states: a member
// without a state has an empty part.
func (c Words[A, P]) AppendState(dst []byte, s *WordState[A]) []byte {
	dst = policy.AppendHeader(dst, policy.TagCompound)
	w := P(&s.W).words()
	for i, m := range c.members {
		if s.Have&(1<<i) == 0 {
			dst = policy.AppendInt(dst, 0)
			continue
		}
		// The part's length comes before it, and is known after it: write
		// the part, then move it up by the length's size.
		start := len(dst)
		dst = m.AppendWords(dst, c.member(w, i))
		l := len(dst) - start
		var lb [binary.MaxVarintLen64]byte
		lp := policy.AppendInt(lb[:0], int64(l))
		dst = append(dst, lp...)
		copy(dst[start+len(lp):], dst[start:start+l])
		copy(dst[start:], lp)
	}
	return dst
}

// DecodeState decodes a state written by AppendState (of either form)
// into *s, refusing one written for another compound as Config.DecodeState
// does. A part that its member cannot decode is no state for that member,
// as it is in a State.
func (c Words[A, P]) DecodeState(src []byte, s *WordState[A]) error {
	rest, err := c.c.checkParts(src)
	if err != nil {
		return err
	}
	w := P(&s.W).words()
	var h uint64
	for i, m := range c.members {
		var p []byte
		p, rest = nextPart(rest)
		if len(p) != 0 && m.DecodeWords(c.member(w, i), p) {
			h |= 1 << i
		}
	}
	s.Have = h
	return nil
}
