package tokenbucket

import "github.com/sluicehq/sluice/internal/policy"

// Cancel gives back, at now, what it can of the n tokens that a
// reservation took, leaving the state after, from st, a state that
// requests taken after it have changed (Undo restores an unchanged one
// exactly). As x/time/rate's Reservation.CancelAt, it gives back n less
// the tokens taken after the reservation, never less than 0, bandwidth by
// bandwidth: those later requests keep their tokens and their waits, and
// counted on the tokens the reservation held; giving those back too would
// let a new request take them while a later reservation still goes when
// it was told, beyond the capacity. The tokens taken after it are after's
// size less st's, both refilled to now (the refill of two states differs
// only once one of them is full, which neither is before the reservation
// is due).
//
// A bandwidth never goes above its capacity by a cancel. st is refilled in
// place; Cancel reports whether it gave anything back, and st is worth
// storing only then.
func Cancel(cfg *Config, st, after State, now, n int64) bool {
	if len(after) != len(st) || n <= 0 {
		return false
	}
	Refill(cfg, st, now)
	changed := false
	for i := range cfg.Bandwidths {
		bw, s := &cfg.Bandwidths[i], &st[i]
		if s.Size >= bw.Capacity {
			continue
		}
		then := after[i]
		refill(cfg, i, &then, now)
		later, overflow := subInt64(then.Size, s.Size)
		if overflow {
			continue
		}
		back := n - max(later, 0)
		if back <= 0 {
			continue
		}
		if next, overflow := addInt64(s.Size, back); overflow || next >= bw.Capacity {
			fill(bw, s)
		} else {
			s.Size = next
		}
		changed = true
	}
	return changed
}

// Undo is policy.Undo for a bucket whose state always exists (a Bucket's,
// or a stored bucket's): st goes back to before when it is still after,
// and Cancel decides otherwise. It reports whether st changed.
func Undo(cfg *Config, st, before, after State, due, now, n int64) bool {
	if now > due || len(before) != len(st) {
		return false
	}
	if equal(st, after) {
		copy(st, before)
		return true
	}
	return Cancel(cfg, st, after, now, n)
}

func equal(a, b State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Cancel is the package Cancel on the receipt's states.
func (m Single) Cancel(s *BandwidthState, now int64, r *policy.Receipt) bool {
	var buf [1]BandwidthState
	if decodeState(r.After, m.cfg, buf[:]) != nil {
		return false
	}
	st := State{*s}
	if !Cancel(m.cfg, st, buf[:], now, r.Tokens) {
		return false
	}
	*s = st[0]
	return true
}

// Cancel is the package Cancel on the receipt's states.
func (m Multi) Cancel(s *State, now int64, r *policy.Receipt) bool {
	after := make(State, len(m.cfg.Bandwidths))
	if len(*s) != len(after) || decodeState(r.After, m.cfg, after) != nil {
		return false
	}
	st := append(State(nil), *s...)
	if !Cancel(m.cfg, st, after, now, r.Tokens) {
		return false
	}
	copy(*s, st)
	return true
}
