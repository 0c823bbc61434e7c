package policy

import "math/bits"

// TimeToEarn is how long tokens per period take to add up to n, for n ≥ 0
// and tokens, period > 0: whole periods when the tokens come at once,
// else rounded up to the nanosecond; it saturates at Never. It is the
// Window of the policies whose limit is earned at a rate.
func TimeToEarn(n, tokens, period int64, whole bool) int64 {
	if whole {
		return SatMul(CeilDiv(n, tokens), period)
	}
	hi, lo := bits.Mul64(uint64(n), uint64(period))
	if hi >= uint64(tokens) {
		return Never
	}
	q, r := bits.Div64(hi, lo, uint64(tokens))
	if r > 0 {
		q++
	}
	if q > Never {
		return Never
	}
	return int64(q)
}
