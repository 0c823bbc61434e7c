package gcra

import (
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/policy"
)

// Debt moves the theoretical arrival time on past the burst: a TAT d·T
// beyond Limit·T after now owes d tokens, which time pays back before a
// request conforms again. Nothing is added to the state.

var _ policy.Debtor[State] = Config{}

// Charge moves the TAT on by n·T whatever it is, as Reserve would with no
// bound on the wait and no bound on n. Its Result is Consume's answer for
// n (Allowed: they conformed), describing the state after the charge,
// with the RetryAfter of 1 token. A TAT past MaxInt64 ns is
// ChargeOverflow.
func (c Config) Charge(s *State, exists bool, now, n int64) (policy.Result, bool) {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}, false
	}
	a := c.ahead(s, exists, now)
	an := a.Add(arith.Mul(uint64(n), uint64(c.Period)))
	next, ok := c.tat(now, an)
	if !ok {
		return policy.Result{Code: policy.ChargeOverflow}, false
	}
	allowed := n <= c.Limit && c.wait(an) == 0
	*s = next
	res := c.granted(an, next, now).Result(c.Limit)
	res.Allowed = allowed
	if !allowed {
		res.RetryAfter = c.wait(an.Add(arith.U128{Lo: uint64(c.Period)}))
	}
	return res, true
}

// Refund moves the TAT back by n·T, never before now: a TAT that time has
// already caught up with was paid for.
func (c Config) Refund(s *State, exists bool, now, _, n int64) bool {
	if n <= 0 {
		return false
	}
	a := c.ahead(s, exists, now)
	if a.IsZero() {
		return false
	}
	back := arith.Mul(uint64(n), uint64(c.Period))
	var left arith.U128
	if back.Less(a) {
		left = a.Sub(back)
	}
	*s, _ = c.tat(now, left) // at most the TAT there was, so it fits
	return true
}

// Debt is ⌈(TAT − now − Limit·T)/T⌉ tokens, 0 within the burst.
func (c Config) Debt(s *State, exists bool, now int64) int64 {
	a, b := c.ahead(s, exists, now), c.burst()
	if !b.Less(a) {
		return 0
	}
	q, r, ok := a.Sub(b).Quo(uint64(c.Period))
	if !ok || q >= policy.Never {
		return policy.Never
	}
	if r > 0 {
		q++
	}
	return int64(q)
}
