package compound

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/policytest"
	"github.com/sluicehq/sluice/internal/policy/shaper"
)

// reference is a compound of a fixed window and a shaper worked out on
// their typed states, straight from the rules in the Config comment, as a
// check on the erased, byte-oriented Config.
type reference struct {
	fw      fixedwindow.Config
	fs      fixedwindow.State
	fExists bool
	sh      shaper.Config
	ss      shaper.State
	sExists bool
}

func (r *reference) expiresAt() int64 {
	at := int64(math.MinInt64)
	if r.fExists {
		at = max(at, r.fw.ExpiresAt(&r.fs))
	}
	if r.sExists {
		at = max(at, r.sh.ExpiresAt(&r.ss))
	}
	return at
}

// apply runs op (0 consume, 1 reserve, 2 peek) on both members and decides
// for the compound.
func (r *reference) apply(op int, now, n, maxWait int64) (policy.Result, bool) {
	switch {
	case n <= 0:
		return policy.Result{Code: policy.NonPositiveTokens}, false
	case op == 1 && maxWait < 0:
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	// A member's state past its ExpiresAt is no state, as it is for the
	// member alone in a store.
	fs, ss := r.fs, r.ss
	fLive, sLive := r.fExists && r.fw.ExpiresAt(&fs) > now, r.sExists && r.sh.ExpiresAt(&ss) > now
	if !fLive {
		fs = fixedwindow.State{}
	}
	if !sLive {
		ss = shaper.State{}
	}
	var res [2]policy.Result
	var changed [2]bool
	switch op {
	case 0:
		d0, c0 := r.fw.Consume(&fs, fLive, now, n)
		d1, c1 := r.sh.Consume(&ss, sLive, now, n)
		res[0], changed[0] = d0.Result(r.fw.Quota()), c0
		res[1], changed[1] = d1.Result(r.sh.Quota()), c1
	case 1:
		res[0], changed[0] = r.fw.Reserve(&fs, fLive, now, n, maxWait)
		res[1], changed[1] = r.sh.Reserve(&ss, sLive, now, n, maxWait)
	case 2:
		res[0] = r.fw.Peek(&fs, fLive, now, n)
		res[1] = r.sh.Peek(&ss, sLive, now, n)
	}
	for _, x := range res {
		if x.Code != policy.OK {
			return policy.Result{Code: x.Code}, false
		}
	}
	if !res[0].Allowed || !res[1].Allowed {
		// The rejecting member with the longest RetryAfter, the first on a
		// tie; ResetAfter from the states as they stay.
		pick := res[0]
		if !res[1].Allowed && (res[0].Allowed || res[1].RetryAfter > res[0].RetryAfter) {
			pick = res[1]
		}
		pick.ResetAfter = 0
		if at := r.expiresAt(); at > now {
			pick.ResetAfter = int64(min(uint64(at)-uint64(now), math.MaxInt64))
		}
		return pick, false
	}
	pick := res[0]
	if res[1].Remaining < res[0].Remaining {
		pick = res[1]
	}
	pick.ResetAfter = max(res[0].ResetAfter, res[1].ResetAfter)
	pick.Wait = max(res[0].Wait, res[1].Wait)
	if op == 2 {
		return pick, false
	}
	if changed[0] {
		r.fs, r.fExists = fs, true
	}
	if changed[1] {
		r.ss, r.sExists = ss, true
	}
	return pick, changed[0] || changed[1]
}

// check compares the compound's parts with the reference's states.
func (r *reference) check(t *testing.T, s *State, exists bool) {
	t.Helper()
	if exists != (r.fExists || r.sExists) {
		t.Fatalf("exists = %v, the reference's %v/%v", exists, r.fExists, r.sExists)
	}
	if !exists {
		return
	}
	if len(s.Parts) != 2 {
		t.Fatalf("%d parts, want 2", len(s.Parts))
	}
	var fs fixedwindow.State
	if err := r.fw.DecodeState(s.Parts[0], &fs); (err == nil) != r.fExists || r.fExists && fs != r.fs {
		t.Fatalf("window part %v (%v), the reference's %+v (exists %v)", s.Parts[0], err, r.fs, r.fExists)
	}
	var ss shaper.State
	if err := r.sh.DecodeState(s.Parts[1], &ss); (err == nil) != r.sExists || r.sExists && ss != r.ss {
		t.Fatalf("shaper part %v (%v), the reference's %+v (exists %v)", s.Parts[1], err, r.ss, r.sExists)
	}
}

// compoundStep runs one operation on the compound and the reference and
// compares them.
func compoundStep(t *testing.T, c Config, r *reference, s *State, exists *bool, op byte, now, n, maxWait int64) {
	t.Helper()
	before := s.Clone()
	var (
		got     policy.Result
		changed bool
	)
	kind := int(op % 3)
	switch kind {
	case 0:
		got, changed = policytest.Decide(t, c, s, *exists, now, n)
	case 1:
		got, changed = c.Reserve(s, *exists, now, n, maxWait)
	case 2:
		got = c.Peek(s, *exists, now, n)
	}
	if kind == 0 {
		// Peek answers as Consume did, from the state before.
		if peek := c.Peek(&before, *exists, now, n); peek != got {
			t.Fatalf("Peek(now=%d, n=%d) = %+v, Consume %+v", now, n, peek, got)
		}
	}
	want, wantChanged := r.apply(kind, now, n, maxWait)
	if got != want || changed != wantChanged {
		t.Fatalf("op %d(now=%d, n=%d, maxWait=%d) from %v = %+v, %v; the reference gives %+v, %v",
			kind, now, n, maxWait, before.Parts, got, changed, want, wantChanged)
	}
	if !changed && !equalParts(s.Parts, before.Parts) {
		t.Fatalf("unchanged, but the parts went from %v to %v", before.Parts, s.Parts)
	}
	*exists = *exists || changed
	r.check(t, s, *exists)
	if *exists {
		var back State
		if err := c.DecodeState(c.AppendState(nil, s), &back); err != nil || !equalParts(back.Parts, s.Parts) {
			t.Fatalf("DecodeState(AppendState(%v)) = %v, %v", s.Parts, back.Parts, err)
		}
	}
}

func newPair(fw fixedwindow.Config, sh shaper.Config) (Config, *reference) {
	return Config{Members: []policy.Erased{policy.Erase(fw), policy.Erase(sh)}}, &reference{fw: fw, sh: sh}
}

// TestReference runs random traffic through the compound and the
// reference.
func TestReference(t *testing.T) {
	pairs := []struct {
		fw fixedwindow.Config
		sh shaper.Config
	}{
		{fixedwindow.Config{Limit: 3, Interval: 100}, shaper.Config{Amount: 1, Interval: 10, MaxQueue: 1}},
		{fixedwindow.Config{Limit: 10, Interval: 60}, shaper.Config{Amount: 3, Interval: 10, MaxQueue: 0}},
		{fixedwindow.Config{Limit: 1, Interval: 7}, shaper.Config{Amount: 5, Interval: 2, MaxQueue: 4}},
		{fixedwindow.Config{Limit: 50, Interval: 1000}, shaper.Config{Amount: 1, Interval: 50, MaxQueue: 3}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range pairs {
		c, r := newPair(p.fw, p.sh)
		var s State
		exists := false
		now := int64(0)
		for range 5_000 {
			now += rng.Int64N(12) - 2
			n := 1 + rng.Int64N(min(p.fw.Limit, 4))
			maxWait := rng.Int64N(120) - 2
			compoundStep(t, c, r, &s, &exists, byte(rng.IntN(3)), now, n, maxWait)
		}
	}
}

// FuzzDecodeState: policytest's checks of a decoder, and parts that are
// the members' bytes as the source has them.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte{1, 9, 8, 1, 1, 0, 2, 8, 1, 5, 20, 0}, uint8(2))
	f.Add([]byte{1, 9, 0, 0}, uint8(2))
	f.Add([]byte{1, 9}, uint8(0))
	f.Add([]byte{1, 9, 1, 0}, uint8(2))
	f.Add([]byte{1, 9, 0x80, 0x01}, uint8(1))
	f.Fuzz(func(t *testing.T, src []byte, members uint8) {
		c := Config{}
		for range members % 4 {
			c.Members = append(c.Members, policy.Erase(fixedwindow.Config{Limit: 3, Interval: 10}))
		}
		s := policytest.DecodeState(t, c, src)
		if s == nil {
			return
		}
		if len(s.Parts) != len(c.Members) {
			t.Fatalf("DecodeState(%v) gave %d parts for %d members", src, len(s.Parts), len(c.Members))
		}
		for i, p := range s.Parts {
			if len(p) > 0 && !bytes.Contains(src, p) {
				t.Fatalf("part %d = %v is not in %v", i, p, src)
			}
		}
	})
}

const fuzzStepLen = 25 // op, now, n, max wait

// FuzzDecisions runs arbitrary operations, times and token counts, valid
// or not, through a compound of a fixed window and a shaper, and through
// the reference: no panic, the same answers.
//
// Each step is 25 bytes: an op byte, then now, n and maxWait as
// little-endian int64. The op byte mod 3 picks Consume, Reserve or Peek;
// bit 2 makes now a small step from the previous now, bit 3 makes n small
// and bit 4 makes maxWait small, to keep the fuzzer near real traffic.
func FuzzDecisions(f *testing.F) {
	f.Add(int64(3), int64(100), int64(1), int64(10), int64(1), true, fuzzSeed(
		fuzzStep(0, 0, 1, 0), fuzzStep(0, 5, 1, 0), fuzzStep(1, 0, 1, 50), fuzzStep(1, 0, 1, 50), fuzzStep(1, 15, 2, 100), fuzzStep(2, 25, 1, 0)))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(1), int64(math.MaxInt64), int64(0), false, fuzzSeed(
		fuzzStep(0, math.MinInt64, 2, 0), fuzzStep(1, math.MaxInt64, math.MaxInt64, math.MaxInt64), fuzzStep(0, 0, 1, 0)))
	f.Add(int64(1), int64(1), int64(math.MaxInt64), int64(1), int64(math.MaxInt64), false, fuzzSeed(
		fuzzStep(1, math.MaxInt64, 1, math.MaxInt64), fuzzStep(0, math.MinInt64, 1, 0), fuzzStep(1, 0, 0, -1)))
	f.Fuzz(func(t *testing.T, limit, window, amount, interval, maxQueue int64, small bool, steps []byte) {
		limit, window = limit&math.MaxInt64, window&math.MaxInt64
		amount, interval, maxQueue = amount&math.MaxInt64, interval&math.MaxInt64, maxQueue&math.MaxInt64
		if small {
			limit, window, amount, interval, maxQueue = limit%8, window%200, amount%8, interval%50, maxQueue%4
		}
		c, r := newPair(
			fixedwindow.Config{Limit: max(limit, 1), Interval: max(window, 1)},
			shaper.Config{Amount: max(amount, 1), Interval: max(interval, 1), MaxQueue: maxQueue},
		)
		var s State
		exists := false
		eachStep(steps, func(op byte, now, n, maxWait int64) {
			compoundStep(t, c, r, &s, &exists, op, now, n, maxWait)
		})
	})
}

// fuzzStep encodes a fuzz step as eachStep decodes it, for the seeds.
func fuzzStep(op byte, now, n, maxWait int64) []byte {
	b := []byte{op}
	b = binary.LittleEndian.AppendUint64(b, uint64(now))
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	return binary.LittleEndian.AppendUint64(b, uint64(maxWait))
}

// fuzzSeed joins fuzz steps into a seed's step bytes.
func fuzzSeed(steps ...[]byte) []byte { return bytes.Join(steps, nil) }

// eachStep decodes fuzz steps of fuzzStepLen bytes and calls f with each
// one's operation, time, tokens and maxWait. The operation's bits 4, 8
// and 16 keep the time near the previous one, the tokens and the wait
// small, so that most steps land where the decisions change.
func eachStep(steps []byte, f func(op byte, now, n, maxWait int64)) {
	now := int64(0)
	for ; len(steps) >= fuzzStepLen; steps = steps[fuzzStepLen:] {
		op := steps[0]
		at := int64(binary.LittleEndian.Uint64(steps[1:]))
		n := int64(binary.LittleEndian.Uint64(steps[9:]))
		maxWait := int64(binary.LittleEndian.Uint64(steps[17:]))
		if op&4 != 0 {
			at = policy.SatAdd(now, at%64)
		}
		if op&8 != 0 {
			n %= 8
		}
		if op&16 != 0 {
			maxWait %= 128
		}
		now = at
		f(op, now, n, maxWait)
	}
}
