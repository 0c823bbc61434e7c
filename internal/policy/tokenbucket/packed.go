package tokenbucket

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/policy"
)

// PackedState is a BandwidthState without its rounding error, which an
// intervally bandwidth never has: its refill adds whole periods, so Err
// stays at the 0 a new bucket starts with (only ReplaceConfiguration sets
// it, and a replaced key's bucket leaves the packed table). 16 bytes
// rather than 24, which is what a key costs in memory beside its key.
type PackedState struct {
	LastRefill int64
	Size       int64
}

// Pack returns s packed, and false when it has a rounding error.
func Pack(s *BandwidthState) (PackedState, bool) {
	return PackedState{LastRefill: s.LastRefill, Size: s.Size}, s.Err == 0
}

// Unpack returns the state p packs.
func (p *PackedState) Unpack() BandwidthState {
	return BandwidthState{LastRefill: p.LastRefill, Size: p.Size}
}

// Packed is a Single over PackedStates, for in-memory tables: each call
// unpacks the state, runs the Single on it and packs the result, so it
// answers exactly as the Single does. The methods are written out rather
// than generic: a call through a type parameter's method would make the
// unpacked state escape, an allocation per call.
type Packed struct {
	m Single
	// keep is how long after its last refill a state of 0 to Capacity
	// tokens lasts (see ExpiresAt), worked out once: a table asks on
	// every decision.
	keep int64
}

var _ policy.Machine[PackedState] = Packed{}

// Packed returns m over PackedStates, and false when m's states may have
// a rounding error (a greedy bandwidth).
func (m Single) Packed() (Packed, bool) {
	bw := &m.cfg.Bandwidths[0]
	return Packed{m: m, keep: intervallyKeep(bw)}, bw.Intervally
}

func (m Packed) unpack(p *PackedState, exists bool) BandwidthState {
	if !exists {
		return BandwidthState{}
	}
	return p.Unpack()
}

// Store packs s into *p. s must have no rounding error, as every state of
// an intervally bandwidth has none: one is a bug in the refill, not
// something to pass over.
func (p *PackedState) Store(s *BandwidthState) {
	v, ok := Pack(s)
	if !ok {
		panic("sluice: internal error: an intervally bandwidth got a rounding error")
	}
	*p = v
}

// Consume is Single.Consume on a packed state.
func (m Packed) Consume(p *PackedState, exists bool, now, n int64) (policy.Decision, bool) {
	s := m.unpack(p, exists)
	d, changed := m.m.Consume(&s, exists, now, n)
	if changed {
		p.Store(&s)
	}
	return d, changed
}

func (m Packed) Reserve(p *PackedState, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	s := m.unpack(p, exists)
	res, changed := m.m.Reserve(&s, exists, now, n, maxWait)
	if changed {
		p.Store(&s)
	}
	return res, changed
}

func (m Packed) Peek(p *PackedState, exists bool, now, n int64) policy.Result {
	s := m.unpack(p, exists)
	return m.m.Peek(&s, exists, now, n)
}

func (m Packed) Cancel(p *PackedState, now int64, r *policy.Receipt) bool {
	s := p.Unpack()
	changed := m.m.Cancel(&s, now, r)
	if changed {
		p.Store(&s)
	}
	return changed
}

// ExpiresAt is the Single's. For 0 to Capacity tokens it is keep after
// the last refill: an intervally bandwidth refills from empty in
// ⌈Capacity/r⌉ periods from a refill, no more than the ⌈Capacity/r⌉ it
// is kept for, so expiresAt1's second term is the larger. An overdrawn or
// overfilled state takes the whole computation.
func (m Packed) ExpiresAt(p *PackedState) int64 {
	if bw := &m.m.cfg.Bandwidths[0]; p.Size < 0 || p.Size > bw.Capacity {
		return expiresAt1(bw, p.Unpack())
	}
	return satAdd(p.LastRefill, m.keep)
}

func (m Packed) Quota() int64  { return m.m.Quota() }
func (m Packed) Window() int64 { return m.m.Window() }

// Config is the policy's configuration.
func (m Packed) Config() *Config { return m.m.cfg }

// Strict reports whether asking for more than the capacity is an argument
// error.
func (m Packed) Strict() bool { return m.m.strict }

// AppendState writes the Single's encoding: packed and unpacked states are
// stored alike.
func (m Packed) AppendState(dst []byte, p *PackedState) []byte {
	s := p.Unpack()
	return m.m.AppendState(dst, &s)
}

func (m Packed) DecodeState(src []byte, p *PackedState) error {
	var s BandwidthState
	if err := m.m.DecodeState(src, &s); err != nil {
		return err
	}
	v, ok := Pack(&s)
	if !ok {
		return fmt.Errorf("%w: rounding error %d, which a packed state does not hold", policy.ErrBadState, s.Err)
	}
	*p = v
	return nil
}
