package tokenbucket

import (
	"math"
	"math/big"
	"math/bits"
)

// Strategy is how a replaced configuration inherits the tokens of the old one.
type Strategy uint8

// The token inheritance strategies of Bucket4j.
const (
	// Proportionally keeps the fill ratio: 40 of 100 become 80 of 200.
	Proportionally Strategy = iota + 1
	// AsIs keeps the token count, cut down to the new capacity.
	AsIs
	// ResetStrategy starts from the new configuration's initial state.
	ResetStrategy
	// Additive adds the capacity gained: 80 of 200 become 180 of 300.
	// A capacity that shrinks is handled as AsIs.
	Additive
)

// Replace refills old at now and returns the state of a bucket with the
// configuration next that inherits its tokens by strategy.
//
// Bandwidths are matched by ID as Bucket4j matches them: a bandwidth of next
// takes the first old one with the same ID, where an absent ID equals an
// absent ID only while each side has at most one bandwidth without an ID.
// There is no matching by position. Unmatched bandwidths start fresh.
func Replace(cfg *Config, st State, now int64, next *Config, strategy Strategy) State {
	Refill(cfg, st, now)
	out := make(State, len(next.Bandwidths))
	if strategy == ResetStrategy {
		Init(next, out, now)
		return out
	}
	anonymous := countAnonymous(cfg) < 2 && countAnonymous(next) < 2
	for i := range next.Bandwidths {
		nbw := &next.Bandwidths[i]
		j := -1
		if nbw.ID != "" || anonymous {
			for k := range cfg.Bandwidths {
				if cfg.Bandwidths[k].ID == nbw.ID {
					j = k
					break
				}
			}
		}
		if j < 0 {
			out[i] = initial(nbw, now)
			continue
		}
		out[i] = inherit(&cfg.Bandwidths[j], st[j], nbw, strategy)
	}
	return out
}

func countAnonymous(cfg *Config) int {
	n := 0
	for i := range cfg.Bandwidths {
		if cfg.Bandwidths[i].ID == "" {
			n++
		}
	}
	return n
}

// inherit is the state of nbw taking over from old, in state s.
func inherit(old *Bandwidth, s BandwidthState, nbw *Bandwidth, strategy Strategy) BandwidthState {
	out := BandwidthState{LastRefill: s.LastRefill}
	switch {
	case strategy == Proportionally && s.Size < old.Capacity:
		out.Size, out.Err = proportional(old, s, nbw)
	case strategy == Additive && nbw.Capacity > old.Capacity && s.Size < old.Capacity:
		// The sum stays below the new capacity, so it cannot overflow.
		out.Size = s.Size + (nbw.Capacity - old.Capacity)
		out.Err = carriedErr(old, s, nbw)
	case strategy == Proportionally, strategy == Additive && nbw.Capacity > old.Capacity:
		// Full (or above) before: full after.
		out.Size = nbw.Capacity
	case s.Size >= nbw.Capacity: // AsIs, or Additive to a capacity no larger
		out.Size = nbw.Capacity
	default:
		out.Size = s.Size
		out.Err = carriedErr(old, s, nbw)
	}
	return out
}

// carriedErr keeps the partly refilled token when both bandwidths are greedy,
// scaled by the whole ratio of the periods and capped below the new period,
// as Bucket4j does (a shorter new period drops it).
func carriedErr(old *Bandwidth, s BandwidthState, nbw *Bandwidth) int64 {
	if old.Intervally || nbw.Intervally {
		return 0
	}
	ratio := uint64(nbw.Period / old.Period)
	hi, lo := bits.Mul64(ratio, uint64(s.Err))
	if hi != 0 || lo > math.MaxInt64 || int64(lo) >= nbw.Period {
		return nbw.Period - 1
	}
	return int64(lo)
}

// proportional scales the exact token count (size + err/oldPeriod) by
// newCapacity/oldCapacity, rounding toward minus infinity, and keeps the
// fraction as the new rounding error when the new bandwidth is greedy.
// Bucket4j does this in float64; here it is exact. The products reach about
// 2^189, so this rare path uses math/big.
func proportional(old *Bandwidth, s BandwidthState, nbw *Bandwidth) (size, err int64) {
	// num/den = (size·oldP + err)·newCap / (oldP·oldCap)
	num := new(big.Int).Mul(big.NewInt(s.Size), big.NewInt(old.Period))
	num.Add(num, big.NewInt(s.Err))
	num.Mul(num, big.NewInt(nbw.Capacity))
	den := new(big.Int).Mul(big.NewInt(old.Period), big.NewInt(old.Capacity))
	q, r := new(big.Int).DivMod(num, den, new(big.Int)) // Euclidean: 0 ≤ r < den
	if !q.IsInt64() || q.Int64() >= nbw.Capacity {
		if q.Sign() < 0 {
			return math.MinInt64, 0
		}
		return nbw.Capacity, 0
	}
	if nbw.Intervally {
		return q.Int64(), 0
	}
	r.Mul(r, big.NewInt(nbw.Period))
	r.Quo(r, den)
	return q.Int64(), r.Int64()
}
