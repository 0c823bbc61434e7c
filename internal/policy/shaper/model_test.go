package shaper

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// model is the shaper worked out in exact rationals, straight from the
// definitions in the package comment, as a check on the 128-bit
// arithmetic of Config.
type model struct {
	c    Config
	free *big.Rat // the next free slot in ns; nil for no state
}

var (
	ratZero     = new(big.Rat)
	bigMaxInt64 = big.NewInt(math.MaxInt64)
)

func ratInt(v int64) *big.Rat { return new(big.Rat).SetInt64(v) }

// slots is k slots, k·Interval/Amount ns.
func (m *model) slots(k int64) *big.Rat {
	num := new(big.Int).Mul(big.NewInt(k), big.NewInt(m.c.Interval))
	return new(big.Rat).SetFrac(num, big.NewInt(m.c.Amount))
}

// ceil is ⌈r⌉ for r ≥ 0, saturated at policy.Never.
func ceil(r *big.Rat) int64 {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if q.Cmp(bigMaxInt64) > 0 {
		return policy.Never
	}
	return q.Int64()
}

// floor is ⌊r⌋ for r ≥ 0, saturated at policy.Never.
func floor(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if q.Cmp(bigMaxInt64) > 0 {
		return policy.Never
	}
	return q.Int64()
}

// backlog is the time from now until the next free slot, 0 if it is free.
func (m *model) backlog(now int64) *big.Rat {
	if m.free == nil {
		return ratZero
	}
	d := new(big.Rat).Sub(m.free, ratInt(now))
	if d.Sign() < 0 {
		return ratZero
	}
	return d
}

// take moves the next free slot on by n slots from dep. A slot past the
// int64 horizon is kept at math.MaxInt64, as the package documents.
func (m *model) take(dep *big.Rat, n int64) {
	m.free = new(big.Rat).Add(dep, m.slots(n))
	if new(big.Int).Quo(m.free.Num(), m.free.Denom()).Cmp(bigMaxInt64) > 0 {
		m.free = ratInt(math.MaxInt64)
	}
}

func (m *model) result(now int64, allowed bool, retryAfter int64) policy.Result {
	b := m.backlog(now)
	room := m.slots(m.c.MaxQueue)
	remaining := int64(0)
	if b.Cmp(room) <= 0 {
		// The k-th next 1-token request waits b+(k-1) slots: it fits while
		// that is at most room.
		k := new(big.Rat).Quo(new(big.Rat).Sub(room, b), m.slots(1))
		remaining = policy.SatAdd(floor(k), 1)
	}
	return policy.Result{
		Allowed:    allowed,
		Remaining:  remaining,
		RetryAfter: retryAfter,
		ResetAfter: ceil(b),
		Limit:      policy.SatAdd(m.c.MaxQueue, 1),
	}
}

func (m *model) consume(now, n int64) (policy.Result, bool) {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}, false
	}
	if b := m.backlog(now); b.Sign() > 0 {
		return m.result(now, false, ceil(b)), false
	}
	old := m.free
	m.take(ratInt(now), n)
	return m.result(now, true, 0), old == nil || old.Cmp(m.free) != 0
}

func (m *model) reserve(now, n, maxWait int64) (policy.Result, bool) {
	switch {
	case n <= 0:
		return policy.Result{Code: policy.NonPositiveTokens}, false
	case maxWait < 0:
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	b := m.backlog(now)
	room := m.slots(m.c.MaxQueue)
	if b.Cmp(room) > 0 {
		return m.result(now, false, ceil(new(big.Rat).Sub(b, room))), false
	}
	wait := ceil(b)
	if wait > maxWait {
		return m.result(now, false, wait), false
	}
	old := m.free
	m.take(new(big.Rat).Add(ratInt(now), b), n)
	res := m.result(now, true, 0)
	res.Wait = wait
	return res, old == nil || old.Cmp(m.free) != 0
}

// check compares the machine's state with the model's.
func (m *model) check(t *testing.T, s State, exists bool) {
	t.Helper()
	if exists != (m.free != nil) {
		t.Fatalf("state exists = %v, the model's %v", exists, m.free != nil)
	}
	if !exists {
		return
	}
	if s.Frac < 0 || s.Frac >= m.c.Amount {
		t.Fatalf("state %+v: Frac outside [0, %d)", s, m.c.Amount)
	}
	got := new(big.Rat).Add(ratInt(s.Next), new(big.Rat).SetFrac64(s.Frac, m.c.Amount))
	if got.Cmp(m.free) != 0 {
		t.Fatalf("state %+v is slot %v, the model's is %v", s, got, m.free)
	}
}

// machineStep runs one operation on the machine and the model and compares
// them, with the invariants every answer keeps.
func machineStep(t *testing.T, c Config, m *model, s *State, exists *bool, op byte, now, n, maxWait int64) {
	t.Helper()
	before := *s
	var (
		got, want         policy.Result
		changed, mChanged bool
	)
	if op%2 == 0 {
		peek := c.Peek(s, *exists, now, n)
		if *s != before {
			t.Fatalf("Peek(now=%d, n=%d) changed the state from %+v to %+v", now, n, before, *s)
		}
		got, changed = policytest.Decide(t, c, s, *exists, now, n)
		want, mChanged = m.consume(now, n)
		if peek != got {
			t.Fatalf("Peek(now=%d, n=%d) = %+v, Consume %+v", now, n, peek, got)
		}
	} else {
		got, changed = c.Reserve(s, *exists, now, n, maxWait)
		want, mChanged = m.reserve(now, n, maxWait)
	}
	if got != want || changed != mChanged {
		t.Fatalf("%+v from %+v (exists %v), op %d(now=%d, n=%d, maxWait=%d) = %+v, %v; the model gives %+v, %v",
			c, before, *exists, op%2, now, n, maxWait, got, changed, want, mChanged)
	}
	if !changed && *s != before {
		t.Fatalf("unchanged, but the state went from %+v to %+v", before, *s)
	}
	if got.Code == policy.OK {
		switch {
		case got.Remaining < 0 || got.Remaining > got.Limit:
			t.Fatalf("Remaining %d outside [0, %d]", got.Remaining, got.Limit)
		case got.ResetAfter < 0 || got.Wait < 0:
			t.Fatalf("negative ResetAfter or Wait: %+v", got)
		case got.Allowed && (got.RetryAfter != 0 || got.Wait > max(maxWait, 0)):
			t.Fatalf("allowed with %+v, max wait %d", got, maxWait)
		case !got.Allowed && got.RetryAfter <= 0:
			t.Fatalf("rejected with RetryAfter %d", got.RetryAfter)
		}
	}
	*exists = *exists || changed
	m.check(t, *s, *exists)
	if *exists {
		var back State
		if err := c.DecodeState(c.AppendState(nil, s), &back); err != nil || back != *s {
			t.Fatalf("DecodeState(AppendState(%+v)) = %+v, %v", *s, back, err)
		}
	}
}

// TestModel runs random traffic, the clock mostly going forward, through
// the machine and the model.
func TestModel(t *testing.T) {
	configs := []Config{
		{Amount: 1, Interval: 10, MaxQueue: 0},
		{Amount: 3, Interval: 10, MaxQueue: 2},
		{Amount: 7, Interval: 3, MaxQueue: 5},
		{Amount: 1000, Interval: 1, MaxQueue: 50},
		{Amount: 5, Interval: 1_000_000_000, MaxQueue: 10},
		{Amount: math.MaxInt64, Interval: math.MaxInt64 - 1, MaxQueue: 3},
		{Amount: 1, Interval: math.MaxInt64 / 4, MaxQueue: math.MaxInt64},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range configs {
		m := &model{c: c}
		var s State
		exists := false
		slot := min(max(c.Interval/c.Amount, 1), 1<<40)
		now := int64(1_000_000)
		for range 5_000 {
			now = policy.SatAdd(now, rng.Int64N(4*slot)-slot/2)
			n := 1 + rng.Int64N(4)
			maxWait := rng.Int64N(3*slot*max(min(c.MaxQueue, 10), 1)) - 1
			if rng.IntN(8) == 0 {
				maxWait = policy.Never
			}
			machineStep(t, c, m, &s, &exists, byte(rng.IntN(2)), now, n, maxWait)
		}
	}
}
