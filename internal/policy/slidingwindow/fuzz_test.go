package slidingwindow

import (
	"encoding/binary"
	"math"
	"math/big"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// modelCount is the count at now from the semantics, in big integers: the
// state rolled to now, then ⌊prev·(I−e)/I⌋ + hits with e = now − start
// clamped to [0, I].
func modelCount(c Config, s State, exists bool, now int64) *big.Int {
	bi := big.NewInt
	start, prev, hits := bi(s.Start), bi(s.Prev), bi(s.Hits)
	iv, t := bi(c.Interval), bi(now)
	if !exists {
		start, prev, hits = t, bi(0), bi(0)
	} else if end := new(big.Int).Add(start, iv); t.Cmp(end) >= 0 {
		if s.Hits > 0 && t.Cmp(new(big.Int).Add(end, iv)) < 0 {
			start, prev, hits = end, bi(s.Hits), bi(0)
		} else {
			start, prev, hits = t, bi(0), bi(0)
		}
	}
	e := new(big.Int).Sub(t, start)
	if e.Sign() < 0 {
		e.SetInt64(0)
	}
	w := new(big.Int).Mul(prev, new(big.Int).Sub(iv, e))
	w.Quo(w, iv)
	return w.Add(w, hits)
}

// modelResetAfter is the time from now until the kept state expires: the
// end of the window after the current one if the current one has hits,
// else the current window's end; at least 0, saturated at Never.
func modelResetAfter(c Config, s State, exists bool, now int64) int64 {
	if !exists {
		return 0
	}
	span := int64(1)
	if s.Hits > 0 {
		span = 2
	}
	d := new(big.Int).Mul(big.NewInt(span), big.NewInt(c.Interval))
	d.Add(d, big.NewInt(s.Start)).Sub(d, big.NewInt(now))
	switch {
	case d.Sign() < 0:
		return 0
	case !d.IsInt64():
		return policy.Never
	}
	return d.Int64()
}

// fuzzConfig maps arbitrary integers onto a valid config; bit 0 of small
// keeps the numbers near real sizes.
func fuzzConfig(limit, interval int64, small uint8) Config {
	limit, interval = limit&math.MaxInt64, interval&math.MaxInt64
	if small&1 != 0 {
		limit, interval = limit%1000, interval%1000
	}
	return Config{Limit: limit, Interval: max(interval, 1)}
}

const fuzzStepLen = 17 // kind, time, tokens

func FuzzConsume(f *testing.F) {
	steps := func(ops ...[3]int64) []byte {
		var b []byte
		for _, op := range ops {
			b = append(b, byte(op[0]))
			b = binary.LittleEndian.AppendUint64(b, uint64(op[1]))
			b = binary.LittleEndian.AppendUint64(b, uint64(op[2]))
		}
		return b
	}
	// kind bit 0: the time is absolute (else added to the clock).
	f.Add(int64(100), int64(60*sec), uint8(0), t0, int64(0), int64(0), int64(0), false,
		steps([3]int64{0, 0, 80}, [3]int64{0, 90 * sec, 61}, [3]int64{0, 0, 60}, [3]int64{0, 0, 1}))
	f.Add(int64(10), int64(60*sec), uint8(0), t0, t0, int64(0), int64(9), true,
		steps([3]int64{0, 75 * sec, 5}, [3]int64{0, 0, 4}, [3]int64{0, 1, 1}, [3]int64{1, t0, 1}))
	f.Add(int64(5), int64(2), uint8(1), int64(0), int64(0), int64(3), int64(5), true,
		steps([3]int64{0, 1, 5}, [3]int64{0, 1, 5}, [3]int64{0, 1, 1}, [3]int64{0, -7, 1}))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), uint8(0), int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64), int64(math.MaxInt64), true,
		steps([3]int64{1, math.MaxInt64, math.MaxInt64}, [3]int64{1, math.MinInt64, 1}, [3]int64{1, 0, math.MaxInt64}))
	f.Add(int64(math.MaxInt64), int64(1), uint8(0), int64(math.MinInt64), int64(math.MaxInt64-1), int64(math.MaxInt64), int64(1), true,
		steps([3]int64{1, math.MaxInt64, math.MaxInt64 - 1}, [3]int64{1, math.MinInt64, 1}))
	f.Fuzz(func(t *testing.T, limit, interval int64, small uint8, now, start, prev, hits int64, exists bool, ops []byte) {
		c := fuzzConfig(limit, interval, small)
		s := State{Start: start, Prev: prev & math.MaxInt64, Hits: hits & math.MaxInt64}
		if small&1 != 0 {
			s.Prev, s.Hits = s.Prev%2000, s.Hits%2000
		}
		for ; len(ops) >= fuzzStepLen; ops = ops[fuzzStepLen:] {
			at := int64(binary.LittleEndian.Uint64(ops[1:]))
			n := int64(binary.LittleEndian.Uint64(ops[9:]))
			if ops[0]&1 != 0 {
				now = at
			} else {
				now = policy.SatAdd(now, at)
			}
			if small&1 != 0 {
				n %= 1000
			}
			checkStep(t, c, &s, &exists, now, n)
		}
	})
}

// checkStep runs Consume(n) at now on *s and checks it against the model
// and the invariants.
func checkStep(t *testing.T, c Config, s *State, exists *bool, now, n int64) {
	t.Helper()
	before := *s
	peek := c.Peek(s, *exists, now, n)
	if *s != before {
		t.Fatalf("Peek(%d) at %d changed the state from %+v to %+v", n, now, before, *s)
	}
	count := modelCount(c, before, *exists, now)
	res, changed := policytest.Decide(t, c, s, *exists, now, n)
	if peek != res {
		t.Fatalf("Peek(%d) at %d = %+v, but Consume = %+v", n, now, peek, res)
	}
	if n <= 0 {
		if res != (policy.Result{Code: policy.NonPositiveTokens}) || changed || *s != before {
			t.Fatalf("Consume(%d) = %+v, %v, state %+v, want NonPositiveTokens and no change", n, res, changed, *s)
		}
		return
	}
	// Accepted iff count + n ≤ Limit, remaining from the model.
	after := new(big.Int).Add(count, big.NewInt(n))
	allowed := after.Cmp(big.NewInt(c.Limit)) <= 0
	if res.Allowed != allowed || changed != allowed || res.Code != policy.OK || res.Limit != c.Limit {
		t.Fatalf("from %+v (exists %v) at %d: Consume(%d) = %+v, %v; model count %v, limit %d", before, *exists, now, n, res, changed, count, c.Limit)
	}
	left := new(big.Int).Sub(big.NewInt(c.Limit), count)
	if allowed {
		left.Sub(left, big.NewInt(n))
	}
	if left.Sign() < 0 {
		left.SetInt64(0)
	}
	if !left.IsInt64() || res.Remaining != left.Int64() {
		t.Fatalf("from %+v at %d: Consume(%d) remaining = %d, want %v", before, now, n, res.Remaining, left)
	}
	kept, keptExists := before, *exists
	if changed {
		kept, keptExists = *s, true
	}
	if want := modelResetAfter(c, kept, keptExists, now); res.ResetAfter != want {
		t.Fatalf("from %+v at %d: Consume(%d) ResetAfter = %d, want %d", before, now, n, res.ResetAfter, want)
	}
	if !changed {
		if *s != before {
			t.Fatalf("rejected Consume(%d) changed the state from %+v to %+v", n, before, *s)
		}
		if n > c.Limit && res.RetryAfter != policy.Never {
			t.Fatalf("Consume(%d) above limit %d: RetryAfter = %d, want Never", n, c.Limit, res.RetryAfter)
		}
		policytest.CheckRetry(t, c, &before, *exists, now, n, res.RetryAfter)
	} else {
		if res.RetryAfter != 0 {
			t.Fatalf("accepted Consume(%d) RetryAfter = %d, want 0", n, res.RetryAfter)
		}
		if s.Hits > c.Limit || s.Hits < n || s.Prev < 0 {
			t.Fatalf("accepted Consume(%d): state %+v, want n ≤ Hits ≤ %d", n, *s, c.Limit)
		}
		*exists = true
	}
	if *exists {
		policytest.CheckExpiry(t, c, s, n)
	}
}

func FuzzDecodeState(f *testing.F) {
	c := Config{Limit: 10, Interval: 60 * sec}
	f.Add(c.AppendState(nil, &State{Start: t0, Prev: 3, Hits: 2}), int64(5), int64(sec))
	f.Add(c.AppendState(nil, &State{Start: math.MinInt64, Prev: math.MaxInt64, Hits: math.MaxInt64}), int64(math.MaxInt64), int64(1))
	f.Add([]byte{1, 2, 1}, int64(0), int64(0))
	f.Add([]byte{1, 3, 0, 0, 0}, int64(0), int64(0))
	f.Add([]byte{}, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, src []byte, limit, interval int64) {
		c := fuzzConfig(limit, interval, 0)
		s := policytest.DecodeState(t, c, src)
		if s == nil {
			return
		}
		if s.Prev < 0 || s.Hits < 0 {
			t.Fatalf("DecodeState(%x) = %+v, with negative hits", src, *s)
		}
		// A decoded state agrees with the model.
		exists := true
		checkStep(t, c, s, &exists, s.Start, 1)
	})
}
