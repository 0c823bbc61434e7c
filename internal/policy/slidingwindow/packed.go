package slidingwindow

import (
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/policy"
)

// PackedState is a State whose hit counts fit in 32 bits, as every state
// of a Config with a Limit of at most MaxUint32 does: Hits never exceeds
// Limit, and Prev is an earlier Hits. 16 bytes rather than 24, which is
// what a key costs in memory beside its key.
type PackedState struct {
	Start      int64
	Prev, Hits uint32
}

func pack(s *State) (PackedState, bool) {
	if uint64(s.Prev) > math.MaxUint32 || uint64(s.Hits) > math.MaxUint32 {
		return PackedState{}, false
	}
	return PackedState{Start: s.Start, Prev: uint32(s.Prev), Hits: uint32(s.Hits)}, true
}

func (p *PackedState) unpack() State {
	return State{Start: p.Start, Prev: int64(p.Prev), Hits: int64(p.Hits)}
}

// Packed is the machine of a Config over PackedStates, for in-memory
// tables: each call unpacks the state, runs the Config on it and packs the
// result, so it answers exactly as the Config does. The methods are
// written out rather than generic: a call through a type parameter's
// method would make the unpacked state escape, an allocation per call.
type Packed struct{ c Config }

var _ policy.Machine[PackedState] = Packed{}

// Packed returns c over PackedStates, and false when c's counts may not
// fit in 32 bits.
func (c Config) Packed() (Packed, bool) { return Packed{c}, c.Limit <= math.MaxUint32 }

func (m Packed) unpack(p *PackedState, exists bool) State {
	if !exists {
		return State{}
	}
	return p.unpack()
}

// store packs s into *p. A count above Limit is a bug in the machine, not
// something to pass over.
func store(p *PackedState, s *State) {
	v, ok := pack(s)
	if !ok {
		panic("sluice: internal error: a sliding window counted more than its limit")
	}
	*p = v
}

// Consume is Config.Consume on a packed state.
func (m Packed) Consume(p *PackedState, exists bool, now, n int64) (policy.Decision, bool) {
	s := m.unpack(p, exists)
	d, changed := m.c.Consume(&s, exists, now, n)
	if changed {
		store(p, &s)
	}
	return d, changed
}

func (m Packed) Reserve(p *PackedState, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	s := m.unpack(p, exists)
	res, changed := m.c.Reserve(&s, exists, now, n, maxWait)
	if changed {
		store(p, &s)
	}
	return res, changed
}

func (m Packed) Peek(p *PackedState, exists bool, now, n int64) policy.Result {
	s := m.unpack(p, exists)
	return m.c.Peek(&s, exists, now, n)
}

func (m Packed) Cancel(p *PackedState, now int64, r *policy.Receipt) bool { return false }

func (m Packed) ExpiresAt(p *PackedState) int64 {
	s := p.unpack()
	return m.c.ExpiresAt(&s)
}

func (m Packed) Quota() int64  { return m.c.Quota() }
func (m Packed) Window() int64 { return m.c.Window() }

// Lapses is true, as for Config.
func (Packed) Lapses() bool { return true }

// AppendState writes the Config's encoding: packed and unpacked states are
// stored alike.
func (m Packed) AppendState(dst []byte, p *PackedState) []byte {
	s := p.unpack()
	return m.c.AppendState(dst, &s)
}

func (m Packed) DecodeState(src []byte, p *PackedState) error {
	var s State
	if err := m.c.DecodeState(src, &s); err != nil {
		return err
	}
	v, ok := pack(&s)
	if !ok {
		return fmt.Errorf("%w: hits (previous %d, current %d) above the 32 bits a packed state holds", policy.ErrBadState, s.Prev, s.Hits)
	}
	*p = v
	return nil
}
