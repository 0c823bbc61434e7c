package compound

import "github.com/sluicehq/sluice/internal/policy"

// A compound holds debt in its members: a charge is charged to every one
// of them, and what the compound owes is what its most indebted member
// owes. It holds debt only when every member does.

var _ policy.Debtor[State] = Config{}

// HoldsDebt reports whether every member can hold debt.
func (c Config) HoldsDebt() bool {
	for _, m := range c.Members {
		if _, ok := policy.DebtsOf(m); !ok {
			return false
		}
	}
	return true
}

// Charge charges n tokens to every member. Its Result folds theirs as
// Consume's does: Allowed when every member had them.
func (c Config) Charge(s *State, exists bool, now, n int64) (policy.Result, bool) {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}, false
	}
	sp := c.spares(s)
	var v verdict
	for i, m := range c.Members {
		d, ok := policy.DebtsOf(m)
		if !ok {
			return policy.Result{Code: policy.DebtNotSupported}, false
		}
		r, next, changed := d.Charge(c.part(s, exists, i), now, n, sp[i].buf)
		sp[i] = spare{buf: next, changed: changed}
		v.add(i, r, 0)
	}
	res := c.result(&v, s, exists, now)
	if res.Code != policy.OK {
		return res, false
	}
	changed := c.commit(s, exists)
	if !res.Allowed {
		// The members that had the tokens answered RetryAfter 0, though
		// the charge may have emptied them: the wait for 1 token is the
		// compound's own answer after it.
		p := c.Peek(s, exists || changed, now, 1)
		res.Remaining, res.RetryAfter, res.ResetAfter = p.Remaining, p.RetryAfter, p.ResetAfter
	}
	return res, changed
}

// Refund refunds n tokens charged at at to every member, as each can.
func (c Config) Refund(s *State, exists bool, now, at, n int64) bool {
	if !exists {
		return false
	}
	changed := false
	for i, m := range c.Members {
		d, ok := policy.DebtsOf(m)
		if !ok {
			continue
		}
		next, ch := d.Refund(c.part(s, true, i), now, at, n, nil)
		if !ch {
			continue
		}
		s.setPart(i, next)
		changed = true
	}
	return changed
}

// Debt is the largest debt of a member.
func (c Config) Debt(s *State, exists bool, now int64) int64 {
	var debt int64
	for i, m := range c.Members {
		if d, ok := policy.DebtsOf(m); ok {
			debt = max(debt, d.Debt(c.part(s, exists, i), now))
		}
	}
	return debt
}

// The word form holds debt as the byte form does, through its encoding,
// which the two share: a charge is rare beside a decision, and this keeps
// one implementation of it.

var _ policy.Debtor[WordState[W4]] = Words[W4, *W4]{}

// HoldsDebt reports whether every member can hold debt.
func (c Words[A, P]) HoldsDebt() bool { return c.c.HoldsDebt() }

// state is s in the byte form, and whether it holds a state.
func (c Words[A, P]) state(s *WordState[A], exists bool) (State, bool) {
	var st State
	if !exists || c.c.DecodeState(c.AppendState(nil, s), &st) != nil {
		return State{}, false
	}
	return st, true
}

// Charge is Config.Charge.
func (c Words[A, P]) Charge(s *WordState[A], exists bool, now, n int64) (policy.Result, bool) {
	st, exists := c.state(s, exists)
	res, changed := c.c.Charge(&st, exists, now, n)
	if changed && c.DecodeState(c.c.AppendState(nil, &st), s) != nil {
		return policy.Result{Code: policy.ChargeOverflow}, false
	}
	return res, changed
}

// Refund is Config.Refund.
func (c Words[A, P]) Refund(s *WordState[A], exists bool, now, at, n int64) bool {
	st, exists := c.state(s, exists)
	if !c.c.Refund(&st, exists, now, at, n) {
		return false
	}
	return c.DecodeState(c.c.AppendState(nil, &st), s) == nil
}

// Debt is Config.Debt.
func (c Words[A, P]) Debt(s *WordState[A], exists bool, now int64) int64 {
	st, exists := c.state(s, exists)
	return c.c.Debt(&st, exists, now)
}
