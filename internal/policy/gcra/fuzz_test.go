package gcra

import (
	"encoding/binary"
	"math"
	"math/big"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// model is GCRA from the semantics, with the TAT an exact rational.
type model struct {
	c   Config
	tat *big.Rat // nil for no state
}

func rat(v int64) *big.Rat { return new(big.Rat).SetInt64(v) }

// floorRat is ⌊r⌋: big.Int.Div is Euclidean, the floor for a positive
// denominator.
func floorRat(r *big.Rat) *big.Int { return new(big.Int).Div(r.Num(), r.Denom()) }

func ceilRat(r *big.Rat) *big.Int {
	return new(big.Int).Neg(floorRat(new(big.Rat).Neg(r)))
}

// ns saturates a whole number of ns at Never, and at 0 below.
func ns(v *big.Int) int64 {
	switch {
	case v.Sign() < 0:
		return 0
	case !v.IsInt64():
		return policy.Never
	}
	return v.Int64()
}

func (m *model) emission() *big.Rat { return big.NewRat(m.c.Period, m.c.Rate) }

// ahead is max(TAT, now) − now.
func (m *model) ahead(now int64) *big.Rat {
	if m.tat == nil || m.tat.Cmp(rat(now)) <= 0 {
		return new(big.Rat)
	}
	return new(big.Rat).Sub(m.tat, rat(now))
}

// fits reports whether the TAT now+x lies within int64 ns.
func fits(now int64, x *big.Rat) bool {
	return floorRat(new(big.Rat).Add(rat(now), x)).Cmp(big.NewInt(math.MaxInt64)) <= 0
}

func (m *model) remaining(x *big.Rat) int64 {
	left := new(big.Rat).Sub(new(big.Rat).Mul(rat(m.c.Limit), m.emission()), x)
	return ns(floorRat(left.Quo(left, m.emission())))
}

// decide answers n tokens at now; maxWait < 0 means a Consume.
func (m *model) decide(now, n, maxWait int64) policy.Result {
	T := m.emission()
	a := m.ahead(now)
	refused := func(retry int64) policy.Result {
		return policy.Result{Remaining: m.remaining(a), RetryAfter: retry, ResetAfter: ns(ceilRat(a)), Limit: m.c.Limit}
	}
	if n > m.c.Limit {
		return refused(policy.Never)
	}
	an := new(big.Rat).Add(a, new(big.Rat).Mul(rat(n), T))
	if !fits(now, an) {
		return refused(policy.Never)
	}
	over := new(big.Rat).Sub(an, new(big.Rat).Mul(rat(m.c.Limit), T))
	w := int64(0)
	if over.Sign() > 0 {
		w = ns(ceilRat(over))
	}
	if maxWait < 0 && w > 0 {
		// The retry must land on the time line with a TAT that fits.
		t := new(big.Int).Add(big.NewInt(now), big.NewInt(w))
		if w == policy.Never || !t.IsInt64() {
			return refused(policy.Never)
		}
		later := new(big.Rat).Sub(a, rat(w))
		if later.Sign() < 0 {
			later.SetInt64(0)
		}
		if !fits(t.Int64(), later.Add(later, new(big.Rat).Mul(rat(n), T))) {
			return refused(policy.Never)
		}
		return refused(w)
	}
	if maxWait >= 0 && (w == policy.Never || w > maxWait) {
		return refused(w)
	}
	m.tat = new(big.Rat).Add(rat(now), an)
	return policy.Result{Allowed: true, Remaining: m.remaining(an), ResetAfter: ns(ceilRat(an)), Limit: m.c.Limit, Wait: w}
}

func fuzzConfig(limit, rate, period int64, small uint8) Config {
	limit, rate, period = limit&math.MaxInt64, rate&math.MaxInt64, period&math.MaxInt64
	if small&1 != 0 {
		limit, rate, period = limit%100, rate%100, period%10000
	}
	return Config{Limit: max(limit, 1), Rate: max(rate, 1), Period: max(period, 1)}
}

const fuzzStepLen = 25 // kind, time, tokens, max wait

func steps(ops ...[4]int64) []byte {
	var b []byte
	for _, op := range ops {
		b = append(b, byte(op[0]))
		for _, v := range op[1:] {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

func FuzzDecisions(f *testing.F) {
	// kind bit 0: the time is absolute (else added to the clock); bit 1:
	// Reserve (else Consume).
	f.Add(int64(10), int64(10), int64(sec), uint8(0), t0, int64(0), int64(0), false,
		steps([4]int64{0, 0, 1, 0}, [4]int64{0, 0, 2, 0}, [4]int64{0, 0, 8, 0}, [4]int64{2, 0, 8, 100 * ms}, [4]int64{2, 0, 8, 900 * ms}, [4]int64{0, 50 * ms, 1, 0}))
	f.Add(int64(5), int64(3), int64(1), uint8(1), int64(0), int64(0), int64(2), true,
		steps([4]int64{0, 0, 5, 0}, [4]int64{0, 1, 3, 0}, [4]int64{2, 0, 4, 1}, [4]int64{0, -5, 1, 0}))
	f.Add(int64(math.MaxInt64), int64(1), int64(math.MaxInt64), uint8(0), int64(math.MinInt64), int64(math.MaxInt64), int64(math.MaxInt64), true,
		steps([4]int64{0, 0, math.MaxInt64, 0}, [4]int64{2, 0, math.MaxInt64, math.MaxInt64}, [4]int64{1, math.MaxInt64, 1, 0}))
	f.Add(int64(1), int64(math.MaxInt64), int64(1), uint8(0), int64(math.MaxInt64-3), int64(math.MaxInt64), int64(5), true,
		steps([4]int64{0, 0, 1, 0}, [4]int64{2, 0, 1, math.MaxInt64}, [4]int64{1, math.MinInt64, 1, 0}))
	f.Fuzz(func(t *testing.T, limit, rate, period int64, small uint8, now, tat, frac int64, exists bool, ops []byte) {
		c := fuzzConfig(limit, rate, period, small)
		s := State{TAT: tat, Frac: frac & math.MaxInt64}
		m := &model{c: c}
		if exists {
			m.tat = new(big.Rat).Add(rat(s.TAT), big.NewRat(min(s.Frac, c.Rate-1), c.Rate))
		}
		for ; len(ops) >= fuzzStepLen; ops = ops[fuzzStepLen:] {
			at := int64(binary.LittleEndian.Uint64(ops[1:]))
			n := int64(binary.LittleEndian.Uint64(ops[9:]))
			maxWait := int64(binary.LittleEndian.Uint64(ops[17:]))
			if ops[0]&1 != 0 {
				now = at
			} else {
				now = policy.SatAdd(now, at)
			}
			if small&1 != 0 {
				n %= 200
			}
			if ops[0]&2 == 0 {
				maxWait = -1
			}
			checkStep(t, c, m, &s, &exists, now, n, maxWait)
		}
	})
}

// checkStep runs Consume (maxWait < 0) or Reserve on *s and checks it
// against the model and the invariants.
func checkStep(t *testing.T, c Config, m *model, s *State, exists *bool, now, n, maxWait int64) {
	t.Helper()
	before := *s
	var res policy.Result
	var changed bool
	if maxWait < 0 {
		peek := c.Peek(s, *exists, now, n)
		if *s != before {
			t.Fatalf("Peek changed the state from %+v to %+v", before, *s)
		}
		res, changed = policytest.Decide(t, c, s, *exists, now, n)
		if peek != res {
			t.Fatalf("Peek(%d) at %d = %+v, but Consume = %+v", n, now, peek, res)
		}
	} else {
		res, changed = c.Reserve(s, *exists, now, n, maxWait)
	}
	if n <= 0 {
		if res != (policy.Result{Code: policy.NonPositiveTokens}) || changed || *s != before {
			t.Fatalf("n = %d: %+v, %v, state %+v, want NonPositiveTokens and no change", n, res, changed, *s)
		}
		return
	}
	if want := m.decide(now, n, maxWait); res != want || changed != want.Allowed {
		t.Fatalf("%+v (exists %v) at %d: n=%d maxWait=%d: %+v, %v, want %+v", before, *exists, now, n, maxWait, res, changed, want)
	}
	if !changed {
		if *s != before {
			t.Fatalf("refused request changed the state from %+v to %+v", before, *s)
		}
		if maxWait < 0 {
			policytest.CheckRetry(t, c, &before, *exists, now, n, res.RetryAfter)
		}
		return
	}
	*exists = true
	if s.Frac < 0 || s.Frac >= c.Rate {
		t.Fatalf("state %+v: Frac outside [0, %d)", *s, c.Rate)
	}
	if want := new(big.Rat).Add(rat(s.TAT), big.NewRat(s.Frac, c.Rate)); want.Cmp(m.tat) != 0 {
		t.Fatalf("state %+v, want the TAT %v", *s, m.tat.FloatString(3))
	}
	policytest.CheckExpiry(t, c, s, n)
}

func FuzzDecodeState(f *testing.F) {
	c := Config{Limit: 10, Rate: 3, Period: sec}
	f.Add(c.AppendState(nil, &State{TAT: t0, Frac: 2}), int64(10), int64(3), int64(sec), int64(0))
	f.Add(c.AppendState(nil, &State{TAT: math.MaxInt64, Frac: math.MaxInt64}), int64(1), int64(1), int64(1), int64(-1))
	f.Add([]byte{1, 7, 0, 1}, int64(0), int64(0), int64(0), int64(0))
	f.Add([]byte{1, 7}, int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, src []byte, limit, rate, period, dt int64) {
		c := fuzzConfig(limit, rate, period, 0)
		s := policytest.DecodeState(t, c, src)
		if s == nil {
			return
		}
		if s.Frac < 0 {
			t.Fatalf("DecodeState(%x) = %+v, with a negative Frac", src, *s)
		}
		// A decoded state agrees with the model.
		m := &model{c: c, tat: new(big.Rat).Add(rat(s.TAT), big.NewRat(min(s.Frac, c.Rate-1), c.Rate))}
		exists := true
		now := policy.SatAdd(s.TAT, dt)
		checkStep(t, c, m, s, &exists, now, 1, -1)
	})
}
