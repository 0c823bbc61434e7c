package arith

import (
	"math"
	"math/big"
	"testing"
)

func toBig(x U128) *big.Int {
	b := new(big.Int).SetUint64(x.Hi)
	b.Lsh(b, 64)
	return b.Add(b, new(big.Int).SetUint64(x.Lo))
}

func FuzzArithmetic(f *testing.F) {
	f.Add(uint64(3), uint64(5), uint64(7), uint64(11), uint64(2))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(1), uint64(0), uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, a, b, c, e, d uint64) {
		x, y := Mul(a, b), Mul(c, e)
		bx, by := toBig(x), toBig(y)
		if want := new(big.Int).Mul(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b)); bx.Cmp(want) != 0 {
			t.Fatalf("Mul(%d, %d) = %v, want %v", a, b, bx, want)
		}
		if got, want := x.Less(y), bx.Cmp(by) < 0; got != want {
			t.Fatalf("%v.Less(%v) = %v, want %v", bx, by, got, want)
		}
		if x.IsZero() != (bx.Sign() == 0) {
			t.Fatalf("%v.IsZero() = %v", bx, x.IsZero())
		}
		lo, hi := x, y
		if y.Less(x) {
			lo, hi = y, x
		}
		if got, want := toBig(hi.Sub(lo)), new(big.Int).Sub(toBig(hi), toBig(lo)); got.Cmp(want) != 0 {
			t.Fatalf("Sub = %v, want %v", got, want)
		}
		if sum := new(big.Int).Add(bx, by); sum.BitLen() <= 128 {
			if got := toBig(x.Add(y)); got.Cmp(sum) != 0 {
				t.Fatalf("Add = %v, want %v", got, sum)
			}
		}
		if d == 0 {
			return
		}
		q, r := new(big.Int).QuoRem(bx, new(big.Int).SetUint64(d), new(big.Int))
		gq, gr, ok := x.Quo(d)
		if ok != q.IsUint64() || ok && (gq != q.Uint64() || gr != r.Uint64()) {
			t.Fatalf("%v.Quo(%d) = %d, %d, %v; want %v, %v", bx, d, gq, gr, ok, q, r)
		}
		if r.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		want := int64(math.MaxInt64)
		if q.IsInt64() {
			want = q.Int64()
		}
		if got := CeilDiv(x, d); got != want {
			t.Fatalf("CeilDiv(%v, %d) = %d, want %d", bx, d, got, want)
		}
	})
}
