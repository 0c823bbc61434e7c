package tokenbucket

import "github.com/sluicehq/sluice/internal/policy"

// A bucket holds debt below zero, as Bucket4j's consumeIgnoringRateLimits
// overdraws it: the refill pays the debt back before any token is there
// again. Nothing is added to the state.

// Charge refills st at now and takes n tokens from every bandwidth
// whatever they hold (policy.Debtor's Charge, for a bucket of any
// configuration). Its Result is Consume's answer for n (Allowed: they were
// there), describing st after the charge, with the RetryAfter of 1 token.
func Charge(cfg *Config, st State, now, n int64) (policy.Result, bool) {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}, false
	}
	Refill(cfg, st, now)
	// A finite wait for n is a deficit that fits: Size − n does not wrap.
	if Delay(cfg, st, n, now, false) == Never {
		return policy.Result{Code: policy.ChargeOverflow}, false
	}
	allowed := n <= Available(st)
	Consume(st, n)
	return result(cfg, st, now, allowed, 1), true
}

// Refund refills st at now and gives n tokens back, never above a
// bandwidth's capacity: what the refill has already filled again was paid
// for by time. It reports whether st changed.
func Refund(cfg *Config, st State, now, n int64) bool {
	if n <= 0 {
		return false
	}
	Refill(cfg, st, now)
	AddTokens(cfg, st, n)
	return true
}

// Debt is what st owes at now: the most any bandwidth is below zero once
// refilled.
func Debt(cfg *Config, st State, now int64) int64 {
	var buf [4]BandwidthState
	tmp := append(buf[:0], st...)
	Refill(cfg, tmp, now)
	return max(-Available(tmp), 0)
}

// Charge is Charge on one bandwidth's state.
func (m Single) Charge(s *BandwidthState, exists bool, now, n int64) (policy.Result, bool) {
	st := m.load(s, exists, now)
	res, changed := Charge(m.cfg, st, now, n)
	if changed {
		*s = st[0]
	}
	return res, changed
}

// Refund is Refund on one bandwidth's state.
func (m Single) Refund(s *BandwidthState, exists bool, now, _, n int64) bool {
	st := m.load(s, exists, now)
	if !Refund(m.cfg, st, now, n) || !exists {
		return false // a new bucket is full: nothing to give back
	}
	*s = st[0]
	return true
}

// Debt is Debt on one bandwidth's state.
func (m Single) Debt(s *BandwidthState, exists bool, now int64) int64 {
	if !exists {
		return 0
	}
	return Debt(m.cfg, State{*s}, now)
}

var _ policy.Debtor[BandwidthState] = Single{}

// Charge is Charge on the state of every bandwidth.
func (m Multi) Charge(s *State, exists bool, now, n int64) (policy.Result, bool) {
	var buf [4]BandwidthState
	st := m.scratch(buf[:], s, exists, now)
	res, changed := Charge(m.cfg, st, now, n)
	if changed {
		store(s, st)
	}
	return res, changed
}

// Refund is Refund on the state of every bandwidth.
func (m Multi) Refund(s *State, exists bool, now, _, n int64) bool {
	if !exists {
		return false
	}
	var buf [4]BandwidthState
	st := m.scratch(buf[:], s, exists, now)
	if !Refund(m.cfg, st, now, n) {
		return false
	}
	store(s, st)
	return true
}

// Debt is Debt on the state of every bandwidth.
func (m Multi) Debt(s *State, exists bool, now int64) int64 {
	if !exists || len(*s) != len(m.cfg.Bandwidths) {
		return 0
	}
	return Debt(m.cfg, *s, now)
}

var _ policy.Debtor[State] = Multi{}

// Charge is the Single's on a packed state.
func (m Packed) Charge(p *PackedState, exists bool, now, n int64) (policy.Result, bool) {
	s := m.unpack(p, exists)
	res, changed := m.m.Charge(&s, exists, now, n)
	if changed {
		p.Store(&s)
	}
	return res, changed
}

// Refund is the Single's on a packed state.
func (m Packed) Refund(p *PackedState, exists bool, now, at, n int64) bool {
	s := m.unpack(p, exists)
	changed := m.m.Refund(&s, exists, now, at, n)
	if changed {
		p.Store(&s)
	}
	return changed
}

// Debt is the Single's on a packed state.
func (m Packed) Debt(p *PackedState, exists bool, now int64) int64 {
	s := m.unpack(p, exists)
	return m.m.Debt(&s, exists, now)
}

var _ policy.Debtor[PackedState] = Packed{}
