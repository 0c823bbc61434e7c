package slidinglog

import (
	"encoding/binary"
	"math"
	"math/big"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// model is the sliding log from the semantics, as a plain list, with times
// compared in big integers.
type model struct {
	c   Config
	log []Entry
}

// left is at+Interval−now in big integers.
func (m *model) left(at, now int64) *big.Int {
	d := new(big.Int).Sub(big.NewInt(at), big.NewInt(now))
	return d.Add(d, big.NewInt(m.c.Interval))
}

func (m *model) count(now int64) int64 {
	var sum int64
	for _, e := range m.log {
		if m.left(e.Time, now).Sign() > 0 {
			sum += e.Tokens
		}
	}
	return sum
}

func clampInt64(d *big.Int) int64 {
	switch {
	case d.Sign() < 0:
		return 0
	case !d.IsInt64():
		return policy.Never
	}
	return d.Int64()
}

// consume applies the semantics and returns the result they give.
func (m *model) consume(now, n int64) policy.Result {
	c := m.c
	count := m.count(now)
	res := policy.Result{Limit: c.Limit}
	if n <= c.Limit-count {
		kept := m.log[:0]
		for _, e := range m.log {
			if m.left(e.Time, now).Sign() > 0 {
				kept = append(kept, e)
			}
		}
		m.log = kept
		if k := len(m.log); k > 0 && m.log[k-1].Time >= now {
			m.log[k-1].Tokens += n
		} else {
			m.log = append(m.log, Entry{Time: now, Tokens: n})
		}
		res.Allowed = true
		res.Remaining = c.Limit - count - n
		res.ResetAfter = clampInt64(m.left(m.log[len(m.log)-1].Time, now))
		return res
	}
	res.Remaining = max(c.Limit-count, 0)
	if k := len(m.log); k > 0 {
		res.ResetAfter = clampInt64(m.left(m.log[k-1].Time, now))
	}
	if n > c.Limit {
		res.RetryAfter = policy.Never
		return res
	}
	need := count - (c.Limit - n)
	for _, e := range m.log {
		if m.left(e.Time, now).Sign() <= 0 {
			continue
		}
		if need -= e.Tokens; need <= 0 {
			res.RetryAfter = clampInt64(m.left(e.Time, now))
			break
		}
	}
	return res
}

func fuzzConfig(limit, interval int64, small uint8) Config {
	limit, interval = limit&math.MaxInt64, interval&math.MaxInt64
	if small&1 != 0 {
		limit, interval = limit%100, interval%1000
	}
	return Config{Limit: limit, Interval: max(interval, 1)}
}

const fuzzStepLen = 17 // kind, time, tokens

func steps(ops ...[3]int64) []byte {
	var b []byte
	for _, op := range ops {
		b = append(b, byte(op[0]))
		b = binary.LittleEndian.AppendUint64(b, uint64(op[1]))
		b = binary.LittleEndian.AppendUint64(b, uint64(op[2]))
	}
	return b
}

func FuzzConsume(f *testing.F) {
	// kind bit 0: the time is absolute (else added to the clock).
	f.Add(int64(3), int64(60*sec), uint8(0), t0,
		steps([3]int64{0, 0, 1}, [3]int64{0, 10 * sec, 1}, [3]int64{0, 10 * sec, 1}, [3]int64{0, 10 * sec, 1},
			[3]int64{0, 31 * sec, 1}, [3]int64{0, 10 * sec, 2}, [3]int64{0, 0, 1}))
	f.Add(int64(10), int64(10), uint8(1), int64(0),
		steps([3]int64{0, 0, 3}, [3]int64{0, 1, 4}, [3]int64{0, 1, 2}, [3]int64{0, 1, 5}, [3]int64{0, -3, 1}, [3]int64{0, 8, 5}))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), uint8(0), int64(math.MinInt64),
		steps([3]int64{0, 0, math.MaxInt64 - 1}, [3]int64{1, math.MaxInt64, 1}, [3]int64{1, math.MaxInt64, 1}, [3]int64{1, math.MinInt64, 2}))
	f.Add(int64(5), int64(1), uint8(0), int64(math.MaxInt64-3),
		steps([3]int64{0, 0, 2}, [3]int64{0, 1, 2}, [3]int64{0, 1, 2}, [3]int64{0, 1, 4}, [3]int64{1, math.MaxInt64, 5}))
	f.Fuzz(func(t *testing.T, limit, interval int64, small uint8, now int64, ops []byte) {
		c := fuzzConfig(limit, interval, small)
		m := &model{c: c}
		var s State
		exists := false
		for ; len(ops) >= fuzzStepLen; ops = ops[fuzzStepLen:] {
			at := int64(binary.LittleEndian.Uint64(ops[1:]))
			n := int64(binary.LittleEndian.Uint64(ops[9:]))
			if ops[0]&1 != 0 {
				now = at
			} else {
				now = policy.SatAdd(now, at)
			}
			if small&1 != 0 {
				n %= 50
			}
			checkStep(t, c, m, &s, &exists, now, n)
		}
	})
}

// checkStep runs Consume(n) at now on *s and checks it against the model
// and the invariants.
func checkStep(t *testing.T, c Config, m *model, s *State, exists *bool, now, n int64) {
	t.Helper()
	before := s.Entries()
	peek := c.Peek(s, *exists, now, n)
	res, changed := policytest.Decide(t, c, s, *exists, now, n)
	if peek != res {
		t.Fatalf("Peek(%d) at %d = %+v, but Consume = %+v", n, now, peek, res)
	}
	if n <= 0 {
		if res != (policy.Result{Code: policy.NonPositiveTokens}) || changed || !slices.Equal(s.Entries(), before) {
			t.Fatalf("Consume(%d) = %+v, %v, log %v, want NonPositiveTokens and no change", n, res, changed, s.Entries())
		}
		return
	}
	if want := m.consume(now, n); res != want || changed != want.Allowed {
		t.Fatalf("log %v at %d: Consume(%d) = %+v, %v, want %+v", before, now, n, res, changed, want)
	}
	if got := s.Entries(); !slices.Equal(got, m.log) {
		t.Fatalf("log %v at %d: after Consume(%d) the log is %v, want %v", before, now, n, got, m.log)
	}
	if !changed {
		policytest.CheckRetry(t, c, s, *exists, now, n, res.RetryAfter)
		return
	}
	*exists = true
	var sum int64
	for _, e := range s.Entries() {
		sum += e.Tokens
	}
	if sum > c.Limit {
		t.Fatalf("after Consume(%d) the log holds %d tokens, above the limit %d", n, sum, c.Limit)
	}
	policytest.CheckExpiry(t, c, s, n)
}

func FuzzDecodeState(f *testing.F) {
	c := Config{Limit: 10, Interval: 60 * sec}
	var s State
	policytest.Decide(f, c, &s, false, t0, 2)
	policytest.Decide(f, c, &s, true, t0+sec, 3)
	f.Add(c.AppendState(nil, &s), int64(10), int64(60*sec), int64(30*sec))
	f.Add([]byte{1, 3, 0}, int64(1), int64(1), int64(0))
	f.Add([]byte{1, 3, 2, 0, 2, 2, 2}, int64(5), int64(3), int64(1))
	f.Add([]byte{1, 3, 0x80}, int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, src []byte, limit, interval, dt int64) {
		c := fuzzConfig(limit, interval, 0)
		s := policytest.DecodeState(t, c, src)
		if s == nil {
			return
		}
		log := s.Entries()
		var sum int64
		for i, e := range log {
			if e.Tokens <= 0 || (i > 0 && e.Time < log[i-1].Time) {
				t.Fatalf("DecodeState(%x) = %v: out of order or empty entries", src, log)
			}
			sum += e.Tokens
			if sum < 0 {
				t.Fatalf("DecodeState(%x) = %v: more than MaxInt64 tokens", src, log)
			}
		}
		// A decoded log agrees with the model.
		now := t0
		if len(log) > 0 {
			now = policy.SatAdd(log[0].Time, dt)
		}
		exists := true
		checkStep(t, c, &model{c: c, log: log}, s, &exists, now, 1)
	})
}
