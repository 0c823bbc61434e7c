package tokenbucket

import (
	"math"
	"math/rand/v2"
	"testing"
)

func checkDivisor(t *testing.T, d, n uint64) {
	t.Helper()
	x := NewDivisor(d)
	if q, r := x.Div(n); q != n/d || r != n%d {
		t.Fatalf("NewDivisor(%d).Div(%d) = %d, %d, want %d, %d", d, n, q, r, n/d, n%d)
	}
}

func TestDivisorMatchesDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ds := []uint64{2, 3, 4, 5, 6, 7, 10, 641, 1000, 1e6, 1e9, 3600e9, 1 << 62, 1<<63 + 1,
		math.MaxInt64, math.MaxUint64 - 1, math.MaxUint64}
	for range 1000 {
		ds = append(ds, rng.Uint64()>>rng.IntN(63)+2)
	}
	for _, d := range ds {
		ns := []uint64{0, 1, d - 1, d, d + 1, 2*d - 1, 2 * d, math.MaxUint64 - 1, math.MaxUint64}
		for range 200 {
			ns = append(ns, rng.Uint64()>>rng.IntN(64))
		}
		for _, n := range ns {
			checkDivisor(t, d, n)
		}
	}
}

func FuzzDivisor(f *testing.F) {
	f.Add(uint64(3), uint64(10))
	f.Add(uint64(1e9), uint64(math.MaxUint64))
	f.Add(uint64(1<<63+1), uint64(1<<63))
	f.Fuzz(func(t *testing.T, d, n uint64) {
		if d < 2 {
			return
		}
		checkDivisor(t, d, n)
	})
}
