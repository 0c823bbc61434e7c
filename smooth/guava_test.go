package smooth

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzGuava runs random requests through both limiters and checks what
// must hold whatever the doubles do: waits are never negative, the next
// free ticket never moves back, stored permits stay within [0, maxPermits]
// and are never NaN, and an infinite rate never waits.
func FuzzGuava(f *testing.F) {
	f.Add(5.0, int64(4_000_000), 3.0, []byte{1, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Add(1e-9, int64(0), 1.0, []byte{255, 255, 255, 255, 0, 0, 0, 0, 200})
	f.Add(1e300, int64(1), 100.0, []byte{7, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(math.Inf(1), int64(0), 3.0, []byte{7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(math.Inf(1), int64(5), 3.0, []byte{7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, pps float64, warmupMicros int64, coldFactor float64, ops []byte) {
		if !(pps > 0) || warmupMicros < 0 || !(coldFactor >= 1) || math.IsInf(coldFactor, 0) {
			return
		}
		limiters := []*guava{
			{maxBurstSeconds: 1},
			{warm: true, warmupPeriodMicros: warmupMicros, coldFactor: coldFactor},
		}
		for _, g := range limiters {
			g.setRate(pps, 0)
			now := int64(0)
			for rest := ops; len(rest) >= 9; rest = rest[9:] {
				now += int64(binary.LittleEndian.Uint32(rest))
				permits := int64(rest[8]) + 1
				before := g.nextFreeTicketMicros
				w := g.reserve(permits, now)
				if w < 0 {
					t.Fatalf("reserve(%d, %d) = %d < 0", permits, now, w)
				}
				if g.nextFreeTicketMicros < before {
					t.Fatalf("next free ticket moved back from %d to %d", before, g.nextFreeTicketMicros)
				}
				if math.IsInf(pps, 1) {
					// No limit: the stored permits may be ∞ or, warming
					// up over 0s, ∞ - ∞; what matters is that no one waits.
					if w != 0 {
						t.Fatalf("reserve(%d, %d) = %d at an infinite rate, want 0", permits, now, w)
					}
					continue
				}
				if s := g.storedPermits; math.IsNaN(s) || s < 0 || s > g.maxPermits {
					t.Fatalf("stored permits %v outside [0, %v]", s, g.maxPermits)
				}
			}
		}
	})
}

func TestJavaLong(t *testing.T) {
	tests := []struct {
		f    float64
		want int64
	}{
		{0, 0}, {1.9, 1}, {-1.9, -1}, {math.NaN(), 0},
		{math.Inf(1), math.MaxInt64}, {math.Inf(-1), math.MinInt64},
		{0x1p63, math.MaxInt64}, {-0x1p63, math.MinInt64}, {0x1p62, 1 << 62},
	}
	for _, tt := range tests {
		if got := javaLong(tt.f); got != tt.want {
			t.Errorf("javaLong(%v) = %d, want %d", tt.f, got, tt.want)
		}
	}
}
