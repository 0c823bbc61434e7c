package tokenbucket

import "math/bits"

// Divisor divides uint64 numbers by a fixed d > 0 with a multiplication
// instead of a DIV instruction: the round-up method of Granlund and
// Montgomery, in the branch-free form libdivide uses. On the machines we
// measure, the DIV in refill was a third of a decision's time; this is exact
// for every uint64 numerator (proven by the tests against plain division).
type Divisor struct {
	d     uint64
	magic uint64 // 0 for a power of two
	shift uint8
}

// NewDivisor prepares division by d, which must be at least 2.
func NewDivisor(d uint64) Divisor {
	l := uint8(63 - bits.LeadingZeros64(d)) // floor(log2 d)
	if d&(d-1) == 0 {
		// The formula below with a zero multiplier yields n >> 1 >> shift.
		return Divisor{d: d, shift: l - 1}
	}
	// m = floor(2^(64+l)/d), doubled with its remainder's carry, plus one:
	// a 65-bit multiplier whose top bit the shift-and-add below supplies.
	// 2^l < d, so the quotient fits in 64 bits.
	m, rem := bits.Div64(1<<l, 0, d)
	m += m
	twice := rem + rem
	if twice >= d || twice < rem {
		m++
	}
	return Divisor{d: d, magic: m + 1, shift: l}
}

// Div returns n / d and n % d.
func (x *Divisor) Div(n uint64) (q, r uint64) {
	hi, _ := bits.Mul64(n, x.magic)
	q = (((n - hi) >> 1) + hi) >> x.shift
	return q, n - q*x.d
}
