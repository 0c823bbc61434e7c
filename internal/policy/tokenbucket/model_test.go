package tokenbucket

import (
	"fmt"
	"math"
	"math/big"
)

// This file is a reference model of the token bucket, written from
// Bucket4j 7.6's semantics as its manual and tests state them, rather than
// from the code under test: every quantity
// is a math/big integer, so nothing can overflow, and the only clamps are
// the ones the semantics name (capacity, Never, ForceAddTokens saturating at
// MaxInt64). The fuzz targets compare the package against it.

var bigMaxInt64 = big.NewInt(math.MaxInt64)

func bi(n int64) *big.Int { return big.NewInt(n) }

// toInt64 converts a model value that the semantics say fits in an int64.
// It panics otherwise: that is a bug in the model or a broken invariant.
func toInt64(what string, x *big.Int) int64 {
	if !x.IsInt64() {
		panic(fmt.Sprintf("model: %s = %v does not fit in int64", what, x))
	}
	return x.Int64()
}

// capNever returns x as an int64 wait, Never when x ≥ MaxInt64.
func capNever(x *big.Int) int64 {
	if x.Cmp(bigMaxInt64) >= 0 {
		return Never
	}
	return toInt64("wait", x)
}

// modelInitial is the state of bw in a bucket created at now (§1.1, §1.3).
func modelInitial(bw *Bandwidth, now int64) BandwidthState {
	s := BandwidthState{LastRefill: now, Size: bw.Capacity}
	if bw.HasInitial {
		s.Size = bw.Initial
	}
	if bw.Aligned {
		s.LastRefill = bw.FirstRefill - bw.Period
		if bw.Adaptive && now < bw.FirstRefill {
			// min(capacity, max(0, capacity-r) + (first-now)·r/period)
			base := bi(max(bw.Capacity-bw.RefillTokens, 0))
			until := new(big.Int).Sub(bi(bw.FirstRefill), bi(now))
			until.Mul(until, bi(bw.RefillTokens))
			until.Quo(until, bi(bw.Period))
			base.Add(base, until)
			if base.Cmp(bi(bw.Capacity)) > 0 {
				base.Set(bi(bw.Capacity))
			}
			s.Size = toInt64("adaptive initial", base)
		}
	}
	return s
}

// modelRefill is §1.2 with exact arithmetic: the bandwidth holds
// size·period + err token·ns, refill adds dur·r of them, and reaching
// capacity clamps and zeroes the error.
func modelRefill(bw *Bandwidth, s BandwidthState, now int64) BandwidthState {
	if now <= s.LastRefill {
		return s
	}
	p := bi(bw.Period)
	dur := new(big.Int).Sub(bi(now), bi(s.LastRefill))
	if bw.Intervally {
		dur.Sub(dur, new(big.Int).Mod(dur, p))
		if dur.Sign() == 0 {
			return s
		}
	}
	s.LastRefill = toInt64("last refill", new(big.Int).Add(bi(s.LastRefill), dur))
	if s.Size >= bw.Capacity {
		return s
	}
	total := new(big.Int).Mul(bi(s.Size), p)
	total.Add(total, bi(s.Err))
	total.Add(total, new(big.Int).Mul(dur, bi(bw.RefillTokens)))
	if total.Cmp(new(big.Int).Mul(bi(bw.Capacity), p)) >= 0 {
		s.Size, s.Err = bw.Capacity, 0
		return s
	}
	q, m := new(big.Int).DivMod(total, p, new(big.Int)) // floor, 0 ≤ m < p
	s.Size = toInt64("size", q)
	s.Err = toInt64("err", m)
	return s
}

// modelWait is the time until deficit more tokens are refilled (§1.4),
// Never when it does not fit.
func modelWait(bw *Bandwidth, s BandwidthState, deficit *big.Int, now int64) int64 {
	if deficit.Cmp(bigMaxInt64) > 0 {
		return Never // the deficit itself overflows
	}
	p, r := bi(bw.Period), bi(bw.RefillTokens)
	if bw.Intervally {
		// The next grid point, then ceil(deficit/r)-1 more periods.
		w := new(big.Int).Sub(bi(s.LastRefill), bi(now))
		w.Add(w, p)
		k := new(big.Int).Sub(deficit, big.NewInt(1))
		k.Quo(k, r)
		w.Add(w, k.Mul(k, p))
		return capNever(w)
	}
	// (period·deficit - err) / r, rounded down.
	w := new(big.Int).Mul(p, deficit)
	w.Sub(w, bi(s.Err))
	w.Quo(w, r)
	return capNever(w)
}

func modelDelay(cfg *Config, st State, n, now int64, check bool) int64 {
	var d int64
	for i := range cfg.Bandwidths {
		bw, s := &cfg.Bandwidths[i], st[i]
		var w int64
		switch {
		case check && n > bw.Capacity:
			w = Never
		case n <= s.Size:
			w = 0
		default:
			w = modelWait(bw, s, new(big.Int).Sub(bi(n), bi(s.Size)), now)
		}
		d = max(d, w)
	}
	return d
}

func modelTimeToFull(cfg *Config, st State, now int64) int64 {
	var d int64
	for i := range cfg.Bandwidths {
		bw, s := &cfg.Bandwidths[i], st[i]
		if s.Size >= bw.Capacity {
			continue
		}
		d = max(d, modelWait(bw, s, new(big.Int).Sub(bi(bw.Capacity), bi(s.Size)), now))
	}
	return d
}

func modelAvailable(st State) int64 {
	a := st[0].Size
	for _, s := range st[1:] {
		a = min(a, s.Size)
	}
	return a
}

func modelConsume(st State, n int64) {
	for i := range st {
		st[i].Size = toInt64("size after consume", new(big.Int).Sub(bi(st[i].Size), bi(n)))
	}
}

func modelAdd(cfg *Config, st State, n int64) {
	for i := range st {
		bw := &cfg.Bandwidths[i]
		sum := new(big.Int).Add(bi(st[i].Size), bi(n))
		if sum.Cmp(bi(bw.Capacity)) >= 0 {
			st[i].Size, st[i].Err = bw.Capacity, 0
			continue
		}
		st[i].Size = sum.Int64()
	}
}

func modelForceAdd(st State, n int64) {
	for i := range st {
		sum := new(big.Int).Add(bi(st[i].Size), bi(n))
		if sum.Cmp(bigMaxInt64) > 0 {
			sum.Set(bigMaxInt64)
		}
		st[i].Size = sum.Int64()
	}
}

// modelApply is Apply as §1.5 describes it. It returns the result and the
// state to store, or nil when nothing is stored.
func modelApply(cfg *Config, old State, now int64, req Request) (Result, State) {
	n := req.Tokens
	switch req.Op {
	case OpAvailable, OpReset:
	case OpReserve:
		if req.MaxWait <= 0 {
			return Result{Code: NonPositiveMaxWait}, nil
		}
		if n <= 0 {
			return Result{Code: NonPositiveTokens}, nil
		}
	case OpTryConsume, OpTryConsumeAndReturnRemaining, OpEstimate, OpConsumeAsMuchAsPossible,
		OpConsumeIgnoringRateLimits, OpAddTokens, OpForceAddTokens, OpReturnTokens:
		if n <= 0 {
			return Result{Code: NonPositiveTokens}, nil
		}
	default:
		return Result{Code: UnknownOp}, nil
	}
	st := make(State, len(old))
	for i := range old {
		st[i] = modelRefill(&cfg.Bandwidths[i], old[i], now)
	}
	avail := modelAvailable(st)
	var res Result
	switch req.Op {
	case OpAvailable:
		res.Value = avail
		return res, nil
	case OpTryConsume:
		if n > avail {
			return res, nil
		}
		modelConsume(st, n)
		res.Consumed = true
		return res, st
	case OpTryConsumeAndReturnRemaining:
		if n > avail {
			res.Remaining = max(avail, 0)
			res.WaitForRefill = modelDelay(cfg, st, n, now, true)
			res.WaitForReset = modelTimeToFull(cfg, st, now)
			return res, nil
		}
		modelConsume(st, n)
		res.Consumed = true
		res.Remaining = max(avail-n, 0)
		res.WaitForReset = modelTimeToFull(cfg, st, now)
		return res, st
	case OpEstimate:
		res.Remaining = max(avail, 0)
		if n > avail {
			res.WaitForRefill = modelDelay(cfg, st, n, now, true)
			return res, nil
		}
		res.Consumed = true
		return res, nil
	case OpConsumeAsMuchAsPossible:
		take := min(n, avail)
		if take <= 0 { // sluice: never a negative count (Bucket4j #417)
			return res, nil
		}
		modelConsume(st, take)
		res.Value, res.Consumed = take, true
		return res, st
	case OpConsumeIgnoringRateLimits:
		d := modelDelay(cfg, st, n, now, false)
		if d == Never {
			return Result{Code: ReservationOverflow}, nil
		}
		modelConsume(st, n)
		res.Value, res.Consumed = d, true
		return res, st
	case OpReserve:
		d := modelDelay(cfg, st, n, now, false)
		switch {
		case d == Never && req.MaxWait == Never:
			return Result{Code: ReservationOverflow}, nil
		case d > req.MaxWait:
			res.Value = d
			return res, nil
		}
		modelConsume(st, n)
		res.Value, res.Consumed = d, true
		return res, st
	case OpAddTokens, OpReturnTokens:
		modelAdd(cfg, st, n)
		return res, st
	case OpForceAddTokens:
		modelForceAdd(st, n)
		return res, st
	case OpReset:
		for i := range st {
			st[i].Size, st[i].Err = cfg.Bandwidths[i].Capacity, 0
		}
		return res, st
	}
	panic("unreachable")
}
