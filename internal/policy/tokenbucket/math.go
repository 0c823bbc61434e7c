package tokenbucket

import (
	"math"
	"math/bits"
)

// Never is the wait reported for tokens that can never be had: more than a
// bandwidth's capacity, or a wait that does not fit in int64 nanoseconds.
const Never = math.MaxInt64

// refill brings s up to now under bw's refill rule. It is the heart of the
// model and is exact: the tokens and the rounding error together hold
// size·period + err token·nanoseconds, so refilling at t1 and then at t2
// gives the same state as refilling once at t2 (path independence).
//
// A clock that goes backwards is ignored: nothing happens until now passes
// LastRefill again. LastRefill always advances, even while full, so a bucket
// above capacity keeps its surplus without growing it.
func refill(cfg *Config, i int, s *BandwidthState, now int64) {
	prev := s.LastRefill
	if now <= prev {
		return
	}
	bw, dv, p := &cfg.Bandwidths[i], cfg.divisor(i), uint64(cfg.Bandwidths[i].Period)
	// The difference of two int64 always fits in a uint64.
	dur := uint64(now) - uint64(prev)
	if bw.Intervally {
		// Snap to the refill grid, prev + k·period.
		_, r := divmod(dv, dur, p)
		dur -= r
		if dur == 0 {
			return
		}
		now = int64(uint64(prev) + dur)
	}
	s.LastRefill = now
	if s.Size >= bw.Capacity {
		return
	}
	// room is what fills the bandwidth, exactly: Size may be negative, so
	// the difference can exceed MaxInt64, but never 2^64-1.
	room := uint64(bw.Capacity) - uint64(s.Size)
	r := uint64(bw.RefillTokens)
	var whole uint64
	if dur >= p {
		whole, dur = divmod(dv, dur, p)
	}
	// Whole periods add whole·r tokens.
	hi, add := bits.Mul64(whole, r)
	if hi != 0 || add >= room {
		fill(bw, s)
		return
	}
	// The partial period: (dur·r + err) / period. dur < period and
	// err < period, so the quotient is at most r, and hi < period as
	// bits.Div64 requires.
	hi, lo := bits.Mul64(dur, r)
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(s.Err), 0)
	hi += carry
	var q, rem uint64
	if hi == 0 {
		q, rem = divmod(dv, lo, p)
	} else {
		q, rem = bits.Div64(hi, lo, p)
	}
	if q >= room-add {
		fill(bw, s)
		return
	}
	// Size + add + q < Capacity: the uint64 sum wraps back into range.
	s.Size = int64(uint64(s.Size) + add + q)
	s.Err = int64(rem)
}

// fill sets the bandwidth to capacity. Reaching capacity drops the part of a
// token refilled so far, as Bucket4j does.
func fill(bw *Bandwidth, s *BandwidthState) {
	s.Size = bw.Capacity
	s.Err = 0
}

// delay is how long, from now, until n tokens are available in this
// bandwidth (0 if they are now), or Never. With check set, asking for more
// than the capacity is Never; without it (reservations, overdraft) it is a
// finite wait for the deficit. Greedy waits round down, like Bucket4j's.
// delay requires that s was refilled at now.
func delay(bw *Bandwidth, s *BandwidthState, n int64, now int64, check bool) int64 {
	if check && n > bw.Capacity {
		return Never
	}
	if n <= s.Size {
		return 0
	}
	// n > Size, so the difference is positive and below 2^64.
	return waitFor(bw, s, uint64(n)-uint64(s.Size), now)
}

// waitFor is the time until deficit > 0 more tokens have been refilled.
func waitFor(bw *Bandwidth, s *BandwidthState, deficit uint64, now int64) int64 {
	r := uint64(bw.RefillTokens)
	p := uint64(bw.Period)
	if bw.Intervally {
		// The next grid point, then whole periods for what it does not cover.
		next := satAdd(satSub(s.LastRefill, now), bw.Period)
		periods := (deficit - 1) / r // ceil(deficit/r) - 1
		hi, lo := bits.Mul64(periods, p)
		if hi != 0 || lo > math.MaxInt64 {
			return Never
		}
		return satAdd(int64(lo), next)
	}
	// (period·deficit - err) / r, exactly: the product needs 128 bits.
	hi, lo := bits.Mul64(p, deficit)
	var borrow uint64
	lo, borrow = bits.Sub64(lo, uint64(s.Err), 0)
	hi -= borrow
	if hi >= r {
		return Never
	}
	q, _ := bits.Div64(hi, lo, r)
	if q > math.MaxInt64 {
		return Never
	}
	return int64(q)
}

// timeToFull is the time until the bandwidth is at capacity again.
func timeToFull(bw *Bandwidth, s *BandwidthState, now int64) int64 {
	if s.Size >= bw.Capacity {
		return 0
	}
	return waitFor(bw, s, uint64(bw.Capacity)-uint64(s.Size), now)
}

// adaptiveInitial is Bucket4j's adaptive initial tokens for an aligned
// bandwidth created at now, before its first refill:
// min(capacity, max(0, capacity-r) + (first-now)·r/period), computed exactly.
func adaptiveInitial(bw *Bandwidth, now int64) int64 {
	base := max(bw.Capacity-bw.RefillTokens, 0) // no overflow: both positive
	until := uint64(bw.FirstRefill) - uint64(now)
	hi, lo := bits.Mul64(until, uint64(bw.RefillTokens))
	// r ≤ period, so the quotient is at most until < 2^64 and hi < period.
	q, _ := bits.Div64(hi, lo, uint64(bw.Period))
	if q >= uint64(bw.Capacity) {
		return bw.Capacity
	}
	return min(bw.Capacity, satAdd(base, int64(q)))
}

func addInt64(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) != (b > 0)
}

func subInt64(a, b int64) (int64, bool) {
	c := a - b
	return c, (c < a) != (b > 0)
}

// satAdd adds, saturating at the int64 bounds.
func satAdd(a, b int64) int64 {
	c, overflow := addInt64(a, b)
	if !overflow {
		return c
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

// satSub subtracts, saturating at the int64 bounds.
func satSub(a, b int64) int64 {
	c, overflow := subInt64(a, b)
	if !overflow {
		return c
	}
	if b < 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}
