package policy

// Debtor is implemented by a Machine[S] whose state can owe tokens: a
// charge larger than what is left is taken anyway, and the excess is debt
// that later requests pay before any of them is admitted. That is what a
// cost known only after the work (a model's streamed tokens, a response's
// bytes) needs: it must count even when it exceeds the limit, or the
// tenant used what nothing counted.
//
// Each machine holds debt in the state it already has (a bucket below
// zero, a theoretical arrival time further ahead, a window's count above
// its limit that spills into the next windows), so a state that owes
// nothing is the state it was before. A machine whose state cannot hold
// it (a log of entries bounded by the limit, a queue's schedule) is no
// Debtor, and the callers refuse a charge on it.
type Debtor[S any] interface {
	// Charge takes n > 0 tokens at now whatever is left. Its Result is the
	// answer Consume would have given for n (Allowed: they fitted without
	// debt), with Remaining, RetryAfter (for 1 token) and ResetAfter
	// describing the state after the charge. A charge whose debt would not
	// fit the state's arithmetic is refused with Code ChargeOverflow and
	// takes nothing; n ≤ 0 is NonPositiveTokens.
	Charge(s *S, exists bool, now, n int64) (res Result, changed bool)
	// Refund gives back, at now, up to n > 0 tokens charged or consumed at
	// at, as far as the state still counts them: never more than it took,
	// and nothing once the tokens have been paid for by time (a window
	// that ended, a bucket that refilled past its capacity).
	Refund(s *S, exists bool, now, at, n int64) (changed bool)
	// Debt is what the state owes at now: the tokens taken beyond what the
	// policy would have admitted, not yet paid back by time; 0 for a state
	// that owes nothing.
	Debt(s *S, exists bool, now int64) int64
}

// ChargeOverflow is the Code of a charge whose debt would not fit in the
// state's int64 arithmetic (a wait past the year 2262).
const ChargeOverflow Code = ReserveNotSupported + 1

// Debts is the erased form of a Debtor: its methods on encoded states, as
// Erased's (see Erased for the states, dst and next).
type Debts interface {
	Charge(state []byte, now, n int64, dst []byte) (res Result, next []byte, changed bool)
	Refund(state []byte, now, at, n int64, dst []byte) (next []byte, changed bool)
	Debt(state []byte, now int64) int64
}

// DebtsOf returns e's debts when its machine is a Debtor that can hold
// debt: a compound answers for its members.
func DebtsOf(e Erased) (Debts, bool) {
	d, ok := e.(interface {
		Debts
		holdsDebt() bool
	})
	if !ok || !d.holdsDebt() {
		return nil, false
	}
	return d, true
}

// HoldsDebt reports whether m is a Debtor[S] that can hold debt.
func HoldsDebt[S any](m Machine[S]) bool {
	if c, ok := m.(interface{ HoldsDebt() bool }); ok {
		return c.HoldsDebt()
	}
	_, ok := m.(Debtor[S])
	return ok
}

func (e *erased[S]) holdsDebt() bool { return HoldsDebt(e.m) }

func (e *erased[S]) Charge(state []byte, now, n int64, dst []byte) (Result, []byte, bool) {
	d, ok := e.m.(Debtor[S])
	if !ok {
		return Result{Code: DebtNotSupported}, dst[:0], false
	}
	s, exists := e.load(state, now)
	res, changed := d.Charge(s, exists, now, n)
	next := dst[:0]
	if changed {
		next = e.m.AppendState(next, s)
	}
	e.pool.Put(s)
	return res, next, changed
}

func (e *erased[S]) Refund(state []byte, now, at, n int64, dst []byte) ([]byte, bool) {
	d, ok := e.m.(Debtor[S])
	if !ok {
		return dst[:0], false
	}
	s, exists := e.load(state, now)
	changed := d.Refund(s, exists, now, at, n)
	next := dst[:0]
	if changed {
		next = e.m.AppendState(next, s)
	}
	e.pool.Put(s)
	return next, changed
}

func (e *erased[S]) Debt(state []byte, now int64) int64 {
	d, ok := e.m.(Debtor[S])
	if !ok {
		return 0
	}
	s, exists := e.load(state, now)
	debt := d.Debt(s, exists, now)
	e.pool.Put(s)
	return debt
}

// DebtNotSupported is the Code of a charge on a machine that cannot hold
// debt.
const DebtNotSupported Code = ChargeOverflow + 1
