package tokenbucket

import (
	"encoding/binary"
	"math/big"
	"slices"
	"testing"
)

// fuzzBandwidth maps arbitrary integers onto a valid bandwidth:
// capacity > 0, 0 < tokens ≤ period, initial ≥ 0, first ≥ 0. kind picks the
// refill (bits 0-1: greedy, intervally, aligned), adaptive initial tokens
// (bit 2), initial tokens (bit 3) and small numbers (bit 4), which keep the
// fuzzer near the sizes real limits have.
func fuzzBandwidth(capacity, tokens, period, initial, first int64, kind uint8) Bandwidth {
	capacity, period, initial = capacity&maxI, period&maxI, initial&maxI
	if kind&16 != 0 {
		capacity, period, initial = capacity%1000, period%1000, initial%1000
	}
	p := max(period, 1)
	bw := Bandwidth{
		Capacity:     max(capacity, 1),
		RefillTokens: 1 + int64(uint64(tokens)%uint64(p)),
		Period:       p,
	}
	switch kind % 4 {
	case 1:
		bw.Intervally = true
	case 2, 3:
		bw.Intervally, bw.Aligned, bw.FirstRefill = true, true, first&maxI
		bw.Adaptive = kind&4 != 0
	}
	if kind&8 != 0 && !bw.Adaptive {
		bw.Initial, bw.HasInitial = initial, true
	}
	return bw
}

func satAddTest(a, b int64) int64 {
	s := new(big.Int).Add(bi(a), bi(b))
	switch {
	case s.Cmp(bigMaxInt64) > 0:
		return maxI
	case !s.IsInt64():
		return minI
	}
	return s.Int64()
}

// checkInvariants checks st against the bandwidth rules: 0 ≤ Err < Period,
// and no bandwidth above max(capacity, its size before) unless forced.
func checkInvariants(t *testing.T, cfg *Config, before, after State, forced bool) {
	t.Helper()
	for i, s := range after {
		bw := &cfg.Bandwidths[i]
		if s.Err < 0 || s.Err >= bw.Period {
			t.Fatalf("bandwidth %d: Err = %d, want 0 ≤ Err < %d", i, s.Err, bw.Period)
		}
		if !forced && s.Size > max(bw.Capacity, before[i].Size) {
			t.Fatalf("bandwidth %d: Size = %d, above capacity %d and the %d before", i, s.Size, bw.Capacity, before[i].Size)
		}
	}
}

const fuzzStepLen = 25 // op, tokens, dt, max wait

type fuzzStep struct {
	op                  byte
	tokens, dt, maxWait int64
}

func encodeSteps(steps ...fuzzStep) []byte {
	var b []byte
	for _, s := range steps {
		b = append(b, s.op)
		b = binary.LittleEndian.AppendUint64(b, uint64(s.tokens))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.dt))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.maxWait))
	}
	return b
}

// decodeStep reads one step: Op is op%12 (0 is unknown); with bit 7 set
// the tokens and the time step are small, and with bit 6 MaxWait is Never.
func decodeStep(b []byte) (req Request, dt int64) {
	op := b[0]
	req.Op = Op(op % 12)
	req.Tokens = int64(binary.LittleEndian.Uint64(b[1:]))
	dt = int64(binary.LittleEndian.Uint64(b[9:]))
	req.MaxWait = int64(binary.LittleEndian.Uint64(b[17:]))
	if op&0x80 != 0 {
		req.Tokens %= 64
		dt %= 1024
		req.MaxWait %= 4096
	}
	if op&0x40 != 0 {
		req.MaxWait = Never
	}
	return req, dt
}

// FuzzApply runs a sequence of operations on one or two fuzzed bandwidths
// and compares every result and stored state with the big-integer model,
// which cannot overflow. It also checks the invariants after every call, that
// an argument error leaves the state alone, that the hot-path TryConsume
// agrees with Apply, and that prepared and literal configs agree.
func FuzzApply(f *testing.F) {
	ops := encodeSteps(
		fuzzStep{byte(OpTryConsume), 3, 25, 0},
		fuzzStep{byte(OpTryConsumeAndReturnRemaining), 9, 3, 0},
		fuzzStep{byte(OpEstimate), 11, 0, 0},
		fuzzStep{byte(OpConsumeIgnoringRateLimits), 20, 7, 0},
		fuzzStep{byte(OpReserve), 5, 1, 100},
		fuzzStep{byte(OpReserve), 5, 1, 10},
		fuzzStep{byte(OpAvailable), 0, 400, 0},
		fuzzStep{byte(OpAddTokens), 4, 0, 0},
		fuzzStep{byte(OpForceAddTokens), 30, 0, 0},
		fuzzStep{byte(OpConsumeAsMuchAsPossible), maxI, 50, 0},
		fuzzStep{byte(OpReturnTokens), 2, -30, 0},
		fuzzStep{byte(OpReset), 0, 0, 0},
		fuzzStep{byte(OpTryConsume), 0, 0, 0},
		fuzzStep{byte(OpReserve), 1, 0, 0},
		fuzzStep{0, 1, 0, 0},
	)
	// c1, r1, p1, i1, k1; c2, r2, p2, i2, k2 (bit 7: present); first, start; ops
	f.Add(int64(10), int64(9), int64(99), int64(0), uint8(8), int64(100), int64(0), int64(999), int64(0), uint8(0x80), int64(0), int64(0), ops)
	f.Add(int64(9), int64(8), int64(10), int64(0), uint8(9), int64(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), ops)
	f.Add(int64(400), int64(99), int64(60_000), int64(0), uint8(6), int64(0), int64(0), int64(0), int64(0), uint8(0), int64(1_000_000), int64(960_000), ops)
	f.Add(maxI/16, maxI/16-1, maxI/8, int64(0), uint8(8), int64(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0),
		encodeSteps(fuzzStep{byte(OpTryConsume), maxI / 32, maxI/16 - 1, 0}, fuzzStep{byte(OpConsumeAsMuchAsPossible), maxI, 0, 0}))
	f.Add(maxI, int64(0), maxI, int64(0), uint8(0), maxI, maxI, maxI, int64(0), uint8(0x82), maxI, minI,
		encodeSteps(fuzzStep{byte(OpReserve), maxI, maxI, maxI}, fuzzStep{0x40 | byte(OpReserve), maxI, 0, 0}, fuzzStep{byte(OpTryConsumeAndReturnRemaining), maxI, 0, 0}))
	f.Fuzz(func(t *testing.T, c1, r1, p1, i1 int64, k1 uint8, c2, r2, p2, i2 int64, k2 uint8, first, start int64, ops []byte) {
		bws := []Bandwidth{fuzzBandwidth(c1, r1, p1, i1, first, k1)}
		if k2&0x80 != 0 {
			bws = append(bws, fuzzBandwidth(c2, r2, p2, i2, first, k2))
		}
		cfg := NewConfig(slices.Clone(bws)...)
		lit := &Config{Bandwidths: slices.Clone(bws)}
		stored := New(cfg, start)
		for i := range bws {
			if want := modelInitial(&bws[i], start); stored[i] != want {
				t.Fatalf("New(%d) bandwidth %d = %+v, want %+v", start, i, stored[i], want)
			}
		}
		now := start
		for k := 0; k+fuzzStepLen <= len(ops) && k < 100*fuzzStepLen; k += fuzzStepLen {
			req, dt := decodeStep(ops[k:])
			now = satAddTest(now, dt)

			work := slices.Clone(stored)
			res, changed := Apply(cfg, work, now, req)
			wantRes, wantState := modelApply(cfg, stored, now, req)
			if res != wantRes || changed != (wantState != nil) {
				t.Fatalf("step %d: Apply(%d, %+v) on %+v = %+v, %v, want %+v, %v",
					k/fuzzStepLen, now, req, stored, res, changed, wantRes, wantState != nil)
			}
			if changed && !slices.Equal(work, wantState) {
				t.Fatalf("step %d: Apply(%d, %+v) on %+v stored %+v, want %+v", k/fuzzStepLen, now, req, stored, work, wantState)
			}
			switch res.Code {
			case NonPositiveTokens, NonPositiveMaxWait, UnknownOp:
				if !slices.Equal(work, stored) {
					t.Fatalf("step %d: Apply(%+v) = code %d but changed the state to %+v", k/fuzzStepLen, req, res.Code, work)
				}
			}

			litWork := slices.Clone(stored)
			litRes, litChanged := Apply(lit, litWork, now, req)
			if litRes != res || litChanged != changed || !slices.Equal(litWork, work) {
				t.Fatalf("step %d: Apply(%+v) with a literal config = %+v, %v, %+v; prepared %+v, %v, %+v",
					k/fuzzStepLen, req, litRes, litChanged, litWork, res, changed, work)
			}

			if req.Op == OpTryConsume && req.Tokens > 0 {
				out := slices.Clone(stored)
				want := stored // a rejection stores nothing
				if res.Consumed {
					want = work
				}
				if got := TryConsume(cfg, out, make(State, len(out)), now, req.Tokens); got != res.Consumed || !slices.Equal(out, want) {
					t.Fatalf("step %d: TryConsume(%d) = %v, %+v; Apply = %v, %+v", k/fuzzStepLen, req.Tokens, got, out, res.Consumed, want)
				}
			}

			if changed {
				checkInvariants(t, cfg, stored, work, req.Op == OpForceAddTokens)
				stored = work
			}
		}
	})
}

// FuzzRefillPathIndependent: refilling at t1 and then t2 gives the same
// state as refilling once at t2 (t0 ≤ t1 ≤ t2), for greedy, intervally and
// aligned bandwidths; refill never lowers the token count; and both agree
// with the model.
func FuzzRefillPathIndependent(f *testing.F) {
	f.Add(int64(10), int64(9), int64(99), int64(0), uint8(8), int64(0), int64(0), int64(0), int64(0), int64(25), int64(60))
	f.Add(int64(100), int64(8), int64(9), int64(0), uint8(1), int64(0), int64(-5), int64(0), int64(0), int64(4), int64(27))
	f.Add(int64(400), int64(99), int64(60_000), int64(0), uint8(6), int64(1_000_000), int64(0), int64(0), int64(960_000), int64(990_000), int64(1_100_000))
	f.Add(maxI, int64(0), int64(1), int64(0), uint8(0), int64(0), int64(0), int64(0), minI, int64(0), maxI)
	f.Add(maxI/16, maxI/16-1, maxI/8, int64(0), uint8(8), int64(0), int64(0), int64(0), int64(0), maxI/32, maxI/16-1)
	f.Fuzz(func(t *testing.T, capacity, tokens, period, initial int64, kind uint8, first, size, errTokenNs, a, b, c int64) {
		bw := fuzzBandwidth(capacity, tokens, period, initial, first, kind)
		cfg := NewConfig(bw)
		ts := []int64{a, b, c}
		slices.Sort(ts)
		t0, t1, t2 := ts[0], ts[1], ts[2]
		s := BandwidthState{LastRefill: t0, Size: size, Err: int64(uint64(errTokenNs) % uint64(bw.Period))}
		if bw.Aligned {
			s = New(cfg, t0)[0]
		}

		once := State{s}
		Refill(cfg, once, t2)
		twice := State{s}
		Refill(cfg, twice, t1)
		mid := twice[0]
		Refill(cfg, twice, t2)

		if once[0] != twice[0] {
			t.Fatalf("from %+v: Refill(%d) = %+v, but Refill(%d) then Refill(%d) = %+v", s, t2, once[0], t1, t2, twice[0])
		}
		if want := modelRefill(&bw, s, t1); mid != want {
			t.Fatalf("from %+v: Refill(%d) = %+v, want %+v", s, t1, mid, want)
		}
		if want := modelRefill(&bw, s, t2); once[0] != want {
			t.Fatalf("from %+v: Refill(%d) = %+v, want %+v", s, t2, once[0], want)
		}
		if mid.Size < s.Size || once[0].Size < mid.Size {
			t.Fatalf("from %+v: sizes %d at %d then %d at %d, want non-decreasing", s, mid.Size, t1, once[0].Size, t2)
		}
		checkInvariants(t, cfg, State{s}, once, false)
	})
}

const admitStepLen = 18 // dt shift, dt, n shift, n

// FuzzNeverOverAdmit: over any sequence of TryConsume calls at
// non-decreasing times, the tokens admitted never exceed, for every
// bandwidth, the tokens it started with plus what its refill rate adds
// since its initial LastRefill, capacity ignored: for greedy
// floor((err0 + elapsed·r)/p), for intervally floor(elapsed/p)·r. The bound
// is computed with math/big from the model's initial state.
func FuzzNeverOverAdmit(f *testing.F) {
	step := func(dt uint64, n uint64, hot bool) []byte {
		b := []byte{0}
		b = binary.LittleEndian.AppendUint64(b, dt<<1)
		ns := byte(0)
		if hot {
			ns = 0x80
		}
		b = append(b, ns)
		return binary.LittleEndian.AppendUint64(b, n<<1)
	}
	var steps []byte
	for i := range 20 {
		steps = append(steps, step(uint64(i%4)*7, uint64(i%5+1), i%2 == 0)...)
	}
	f.Add(int64(10), int64(9), int64(99), int64(0), uint8(8), int64(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), steps)
	f.Add(int64(9), int64(8), int64(10), int64(0), uint8(9), int64(100), int64(0), int64(1000), int64(0), uint8(0x80), int64(0), int64(-50), steps)
	f.Add(int64(400), int64(99), int64(60_000), int64(0), uint8(6), int64(0), int64(0), int64(0), int64(0), uint8(0), int64(1_000_000), int64(960_000), steps)
	f.Add(maxI/16, maxI/16-1, maxI/8, int64(0), uint8(8), int64(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0),
		append(step(uint64(maxI/16-1), uint64(maxI/32), false), step(0, 1<<61, true)...))
	f.Fuzz(func(t *testing.T, c1, r1, p1, i1 int64, k1 uint8, c2, r2, p2, i2 int64, k2 uint8, first, start int64, steps []byte) {
		bws := []Bandwidth{fuzzBandwidth(c1, r1, p1, i1, first, k1)}
		if k2&0x80 != 0 {
			bws = append(bws, fuzzBandwidth(c2, r2, p2, i2, first, k2))
		}
		cfg := NewConfig(bws...)
		st := New(cfg, start)
		initial := make([]BandwidthState, len(bws))
		for i := range bws {
			initial[i] = modelInitial(&bws[i], start)
		}
		admitted := new(big.Int)
		now := start
		for k := 0; k+admitStepLen <= len(steps) && k < 200*admitStepLen; k += admitStepLen {
			b := steps[k:]
			dt := int64(binary.LittleEndian.Uint64(b[1:]) >> (1 + b[0]%64))
			n := max(int64(binary.LittleEndian.Uint64(b[10:])>>(1+b[9]%64)), 1)
			now = satAddTest(now, dt)

			var ok bool
			if b[9]&0x80 != 0 {
				out := slices.Clone(st)
				if ok = TryConsume(cfg, out, make(State, len(out)), now, n); ok {
					st = out
				}
			} else {
				work := slices.Clone(st)
				var res Result
				res, _ = Apply(cfg, work, now, Request{Op: OpTryConsume, Tokens: n})
				if ok = res.Consumed; ok {
					st = work
				}
			}
			if ok {
				admitted.Add(admitted, bi(n))
			}

			for i := range bws {
				bw, s0 := &bws[i], initial[i]
				elapsed := new(big.Int).Sub(bi(now), bi(s0.LastRefill))
				if elapsed.Sign() < 0 {
					elapsed.SetInt64(0)
				}
				var gained *big.Int
				if bw.Intervally {
					gained = elapsed.Quo(elapsed, bi(bw.Period))
					gained.Mul(gained, bi(bw.RefillTokens))
				} else {
					gained = elapsed.Mul(elapsed, bi(bw.RefillTokens))
					gained.Add(gained, bi(s0.Err))
					gained.Quo(gained, bi(bw.Period))
				}
				bound := gained.Add(gained, bi(s0.Size))
				if admitted.Cmp(bound) > 0 {
					t.Fatalf("step %d at %d: admitted %v tokens, but bandwidth %d (%+v, from %+v) allows at most %v",
						k/admitStepLen, now, admitted, i, *bw, s0, bound)
				}
			}
		}
	})
}
