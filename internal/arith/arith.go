// Package arith is unsigned 128-bit integer arithmetic for the policies
// whose products of times and rates outgrow 64 bits.
package arith

import (
	"math"
	"math/bits"
)

// U128 is an unsigned 128-bit integer, Hi·2^64 + Lo.
type U128 struct{ Hi, Lo uint64 }

// Mul is a·b, exactly.
func Mul(a, b uint64) U128 {
	hi, lo := bits.Mul64(a, b)
	return U128{hi, lo}
}

// Add is x+y; it requires that the sum is below 2^128.
func (x U128) Add(y U128) U128 {
	lo, carry := bits.Add64(x.Lo, y.Lo, 0)
	return U128{x.Hi + y.Hi + carry, lo}
}

// Sub is x−y; it requires that x ≥ y.
func (x U128) Sub(y U128) U128 {
	lo, borrow := bits.Sub64(x.Lo, y.Lo, 0)
	return U128{x.Hi - y.Hi - borrow, lo}
}

// Less reports whether x < y.
func (x U128) Less(y U128) bool { return x.Hi < y.Hi || x.Hi == y.Hi && x.Lo < y.Lo }

// IsZero reports whether x is 0.
func (x U128) IsZero() bool { return x.Hi == 0 && x.Lo == 0 }

// Quo is ⌊x/d⌋ and x mod d for d > 0, with ok false when the quotient does
// not fit in 64 bits.
func (x U128) Quo(d uint64) (q, r uint64, ok bool) {
	if x.Hi >= d {
		return 0, 0, false
	}
	q, r = bits.Div64(x.Hi, x.Lo, d)
	return q, r, true
}

// CeilDiv is ⌈x/d⌉ for d > 0, saturating at math.MaxInt64.
func CeilDiv(x U128, d uint64) int64 {
	q, r, ok := x.Quo(d)
	if !ok || q >= math.MaxInt64 {
		return math.MaxInt64
	}
	if r != 0 {
		q++
	}
	return int64(q)
}
