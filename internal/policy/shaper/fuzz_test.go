package shaper

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// fuzzConfig maps arbitrary integers onto a valid Config; small keeps the
// numbers near the sizes real limits have.
func fuzzConfig(amount, interval, maxQueue int64, small bool) Config {
	amount, interval, maxQueue = amount&math.MaxInt64, interval&math.MaxInt64, maxQueue&math.MaxInt64
	if small {
		amount, interval, maxQueue = amount%16, interval%1000, maxQueue%8
	}
	return Config{Amount: max(amount, 1), Interval: max(interval, 1), MaxQueue: maxQueue}
}

// FuzzDecodeState: policytest's checks of a decoder, and a fraction in
// range.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte{1, 5, 0xe8, 0x01, 4}, int64(3))
	f.Add([]byte{1, 5, 0, 6}, int64(3))
	f.Add([]byte{1, 5, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}, int64(1))
	f.Add([]byte{1, 1, 0, 0}, int64(1))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, src []byte, amount int64) {
		c := fuzzConfig(amount, 1, 0, false)
		s := policytest.DecodeState(t, c, src)
		if s != nil && (s.Frac < 0 || s.Frac >= c.Amount) {
			t.Fatalf("DecodeState(%v) = %+v, Frac outside [0, %d)", src, *s, c.Amount)
		}
	})
}

const fuzzStepLen = 25 // op, now, n, max wait

// FuzzDecisions runs arbitrary operations, times and token counts, valid
// or not, through the machine and the exact model: no panic, no overflow,
// the same answers.
//
// Each step is 25 bytes: an op byte, then now, n and maxWait as
// little-endian int64. Op bit 0 picks Reserve over Consume (and Peek); bit
// 1 makes now a small step from the previous now, bit 2 makes n small and
// bit 3 makes maxWait small, to keep the fuzzer near real traffic.
func FuzzDecisions(f *testing.F) {
	step := func(op byte, now, n, maxWait int64) []byte {
		b := []byte{op}
		b = binary.LittleEndian.AppendUint64(b, uint64(now))
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
		return binary.LittleEndian.AppendUint64(b, uint64(maxWait))
	}
	seed := func(steps ...[]byte) []byte { return bytes.Join(steps, nil) }
	f.Add(int64(3), int64(10), int64(2), true, seed(
		step(1, 0, 1, math.MaxInt64), step(1, 0, 1, math.MaxInt64), step(1, 0, 1, math.MaxInt64),
		step(1, 0, 1, math.MaxInt64), step(0, 4, 1, 0), step(3, 3, 1, 6)))
	f.Add(int64(1), int64(math.MaxInt64), int64(0), false, seed(
		step(0, 0, 2, 0), step(0, math.MinInt64, 1, 0), step(0, math.MaxInt64, 1, 0)))
	f.Add(int64(math.MaxInt64), int64(1), int64(math.MaxInt64), false, seed(
		step(1, math.MinInt64, math.MaxInt64, math.MaxInt64), step(1, math.MaxInt64, math.MaxInt64, 0)))
	f.Add(int64(7), int64(3), int64(5), true, seed(
		step(0, 5, 0, 0), step(1, 5, -1, 0), step(1, 5, 1, -1), step(14, 1, 9, 2)))
	f.Fuzz(func(t *testing.T, amount, interval, maxQueue int64, small bool, steps []byte) {
		c := fuzzConfig(amount, interval, maxQueue, small)
		m := &model{c: c}
		var s State
		exists := false
		now := int64(0)
		for ; len(steps) >= fuzzStepLen; steps = steps[fuzzStepLen:] {
			op := steps[0]
			at := int64(binary.LittleEndian.Uint64(steps[1:]))
			n := int64(binary.LittleEndian.Uint64(steps[9:]))
			maxWait := int64(binary.LittleEndian.Uint64(steps[17:]))
			if op&2 != 0 {
				at = policy.SatAdd(now, at%64)
			}
			if op&4 != 0 {
				n %= 8
			}
			if op&8 != 0 {
				maxWait %= 64
			}
			now = at
			machineStep(t, c, m, &s, &exists, op, now, n, maxWait)
		}
	})
}
