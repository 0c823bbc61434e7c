package tokenbucket

import (
	"slices"
	"testing"
)

func TestApply(t *testing.T) {
	// One token per 10ns, capacity 10. From {0, 5, 0}, refilling at 25ns
	// adds 250 token·ns: 7 tokens and an error of 50 (half a token).
	base := []Bandwidth{greedyBW(10, 10, 100)}
	start := State{{0, 5, 0}}
	refilled := State{{25, 7, 50}}
	tests := []struct {
		name        string
		bws         []Bandwidth // nil: base
		start       State       // nil: start
		now         int64
		req         Request
		want        Result
		wantChanged bool
		wantState   State // st after Apply, refilled in place even when not changed
	}{
		{"available", nil, nil, 25, Request{Op: OpAvailable}, Result{Value: 7}, false, refilled},

		{"try consume all", nil, nil, 25, Request{Op: OpTryConsume, Tokens: 7}, Result{Consumed: true}, true, State{{25, 0, 50}}},
		{"try consume too many", nil, nil, 25, Request{Op: OpTryConsume, Tokens: 8}, Result{}, false, refilled},

		// WaitForReset after taking 3: deficit 6, (600-50)/10 = 55.
		{"remaining consumed", nil, nil, 25, Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 3},
			Result{Consumed: true, Remaining: 4, WaitForReset: 55}, true, State{{25, 4, 50}}},
		{"remaining consumed to empty", nil, nil, 25, Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 7},
			Result{Consumed: true, Remaining: 0, WaitForReset: 95}, true, State{{25, 0, 50}}},
		// Deficit 2: (200-50)/10 = 15; to full, deficit 3: 25.
		{"remaining rejected", nil, nil, 25, Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 9},
			Result{Remaining: 7, WaitForRefill: 15, WaitForReset: 25}, false, refilled},
		{"remaining over capacity", nil, nil, 25, Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 11},
			Result{Remaining: 7, WaitForRefill: Never, WaitForReset: 25}, false, refilled},
		{"remaining overdrawn clamps to zero", nil, State{{0, -5, 0}}, 25, Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 1},
			Result{Remaining: 0, WaitForRefill: 35, WaitForReset: 125}, false, State{{25, -3, 50}}},

		{"estimate possible", nil, nil, 25, Request{Op: OpEstimate, Tokens: 7}, Result{Consumed: true, Remaining: 7}, false, refilled},
		{"estimate not yet", nil, nil, 25, Request{Op: OpEstimate, Tokens: 9}, Result{Remaining: 7, WaitForRefill: 15}, false, refilled},
		{"estimate over capacity", nil, nil, 25, Request{Op: OpEstimate, Tokens: 11}, Result{Remaining: 7, WaitForRefill: Never}, false, refilled},

		{"as much as possible up to the limit", nil, nil, 25, Request{Op: OpConsumeAsMuchAsPossible, Tokens: 3},
			Result{Consumed: true, Value: 3}, true, State{{25, 4, 50}}},
		{"as much as possible", nil, nil, 25, Request{Op: OpConsumeAsMuchAsPossible, Tokens: maxI},
			Result{Consumed: true, Value: 7}, true, State{{25, 0, 50}}},
		{"as much as possible when empty", nil, State{{0, 0, 0}}, 5, Request{Op: OpConsumeAsMuchAsPossible, Tokens: maxI},
			Result{}, false, State{{5, 0, 50}}},
		// Bucket4j 7 (#417) returned -3 here and added 3 tokens.
		{"as much as possible when overdrawn", nil, State{{0, -5, 0}}, 25, Request{Op: OpConsumeAsMuchAsPossible, Tokens: maxI},
			Result{}, false, State{{25, -3, 50}}},

		{"ignoring limits with tokens there", nil, nil, 25, Request{Op: OpConsumeIgnoringRateLimits, Tokens: 5},
			Result{Consumed: true, Value: 0}, true, State{{25, 2, 50}}},
		// Deficit 3: (300-50)/10 = 25.
		{"ignoring limits overdraws", nil, nil, 25, Request{Op: OpConsumeIgnoringRateLimits, Tokens: 10},
			Result{Consumed: true, Value: 25}, true, State{{25, -3, 50}}},
		// No capacity check: deficit 993, (99300-50)/10 = 9925.
		{"ignoring limits over capacity", nil, nil, 25, Request{Op: OpConsumeIgnoringRateLimits, Tokens: 1000},
			Result{Consumed: true, Value: 9925}, true, State{{25, -993, 50}}},
		// ConsumeIgnoringLimitsSpecification: 100 per 100ns, empty, +120ns.
		{"ignoring limits Bucket4j example", []Bandwidth{greedyBW(100, 100, 100)}, State{{0, 0, 0}}, 120,
			Request{Op: OpConsumeIgnoringRateLimits, Tokens: 151}, Result{Consumed: true, Value: 51}, true, State{{120, -51, 0}}},
		{"ignoring limits overflow", nil, nil, 25, Request{Op: OpConsumeIgnoringRateLimits, Tokens: maxI},
			Result{Code: ReservationOverflow}, false, refilled},

		{"reserve available now", nil, nil, 25, Request{Op: OpReserve, Tokens: 7, MaxWait: 1},
			Result{Consumed: true, Value: 0}, true, State{{25, 0, 50}}},
		{"reserve within max wait", nil, nil, 25, Request{Op: OpReserve, Tokens: 10, MaxWait: 25},
			Result{Consumed: true, Value: 25}, true, State{{25, -3, 50}}},
		{"reserve past max wait", nil, nil, 25, Request{Op: OpReserve, Tokens: 10, MaxWait: 24},
			Result{Value: 25}, false, refilled},
		{"reserve without limit", nil, nil, 25, Request{Op: OpReserve, Tokens: 10, MaxWait: Never},
			Result{Consumed: true, Value: 25}, true, State{{25, -3, 50}}},
		{"reserve over capacity", nil, nil, 25, Request{Op: OpReserve, Tokens: 1000, MaxWait: Never},
			Result{Consumed: true, Value: 9925}, true, State{{25, -993, 50}}},
		{"reserve never, with a limit", nil, nil, 25, Request{Op: OpReserve, Tokens: maxI, MaxWait: 1000},
			Result{Value: Never}, false, refilled},
		{"reserve never, without limit", nil, nil, 25, Request{Op: OpReserve, Tokens: maxI, MaxWait: Never},
			Result{Code: ReservationOverflow}, false, refilled},

		{"add", nil, nil, 25, Request{Op: OpAddTokens, Tokens: 2}, Result{}, true, State{{25, 9, 50}}},
		{"add to capacity zeroes the error", nil, nil, 25, Request{Op: OpAddTokens, Tokens: 3}, Result{}, true, State{{25, 10, 0}}},
		{"add MaxInt64-1", nil, nil, 25, Request{Op: OpAddTokens, Tokens: maxI - 1}, Result{}, true, State{{25, 10, 0}}},
		{"add brings above capacity down", nil, State{{0, 15, 30}}, 25, Request{Op: OpAddTokens, Tokens: 1}, Result{}, true, State{{25, 10, 0}}},
		{"add to overdraft", nil, State{{0, -5, 0}}, 25, Request{Op: OpAddTokens, Tokens: 4}, Result{}, true, State{{25, 1, 50}}},
		{"return tokens", nil, nil, 25, Request{Op: OpReturnTokens, Tokens: 2}, Result{}, true, State{{25, 9, 50}}},
		{"return tokens to capacity", nil, nil, 25, Request{Op: OpReturnTokens, Tokens: 30}, Result{}, true, State{{25, 10, 0}}},

		{"force add past capacity keeps the error", nil, nil, 25, Request{Op: OpForceAddTokens, Tokens: 10}, Result{}, true, State{{25, 17, 50}}},
		{"force add saturates", nil, nil, 25, Request{Op: OpForceAddTokens, Tokens: maxI - 1}, Result{}, true, State{{25, maxI, 50}}},

		{"reset", nil, nil, 25, Request{Op: OpReset}, Result{}, true, State{{25, 10, 0}}},
		{"reset above capacity", nil, State{{0, 15, 30}}, 25, Request{Op: OpReset}, Result{}, true, State{{25, 10, 0}}},
		{"reset ignores tokens", nil, nil, 25, Request{Op: OpReset, Tokens: -1}, Result{}, true, State{{25, 10, 0}}},

		{"clock backwards refills nothing", nil, State{{100, 5, 0}}, 25, Request{Op: OpTryConsume, Tokens: 5},
			Result{Consumed: true}, true, State{{100, 0, 0}}},
	}
	for _, tt := range tests {
		from := orDefault(tt.start, start)
		for _, form := range configForms(orDefault(tt.bws, base)...) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				st := slices.Clone(from)
				res, changed := Apply(form.cfg, st, tt.now, tt.req)
				if res != tt.want || changed != tt.wantChanged {
					t.Errorf("Apply(%+v) = %+v, %v, want %+v, %v", tt.req, res, changed, tt.want, tt.wantChanged)
				}
				if !slices.Equal(st, tt.wantState) {
					t.Errorf("Apply(%+v) left %+v, want %+v", tt.req, st, tt.wantState)
				}
			})
		}
	}
}

// TestApplyArgumentErrors: an argument error is reported before anything
// happens, so the state is left exactly as it was and changed is false.
func TestApplyArgumentErrors(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want Code
	}{
		{"try consume zero", Request{Op: OpTryConsume, Tokens: 0}, NonPositiveTokens},
		{"try consume negative", Request{Op: OpTryConsume, Tokens: -1}, NonPositiveTokens},
		{"remaining zero", Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 0}, NonPositiveTokens},
		{"estimate negative", Request{Op: OpEstimate, Tokens: minI}, NonPositiveTokens},
		{"as much as possible zero limit", Request{Op: OpConsumeAsMuchAsPossible, Tokens: 0}, NonPositiveTokens},
		{"ignoring limits zero", Request{Op: OpConsumeIgnoringRateLimits, Tokens: 0}, NonPositiveTokens},
		{"reserve zero tokens", Request{Op: OpReserve, Tokens: 0, MaxWait: 10}, NonPositiveTokens},
		{"reserve zero max wait", Request{Op: OpReserve, Tokens: 1, MaxWait: 0}, NonPositiveMaxWait},
		{"reserve negative max wait", Request{Op: OpReserve, Tokens: 1, MaxWait: -1}, NonPositiveMaxWait},
		{"reserve both bad", Request{Op: OpReserve, Tokens: -1, MaxWait: -1}, NonPositiveMaxWait},
		{"add zero", Request{Op: OpAddTokens, Tokens: 0}, NonPositiveTokens},
		{"force add negative", Request{Op: OpForceAddTokens, Tokens: -5}, NonPositiveTokens},
		{"return zero", Request{Op: OpReturnTokens, Tokens: 0}, NonPositiveTokens},
		{"zero op", Request{Op: 0, Tokens: 1}, UnknownOp},
		{"op past the last", Request{Op: OpReturnTokens + 1, Tokens: 1}, UnknownOp},
		{"op 255", Request{Op: 255, Tokens: 1}, UnknownOp},
	}
	for _, tt := range tests {
		for _, form := range configForms(greedyBW(10, 10, 100)) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				start := State{{0, 5, 0}}
				st := slices.Clone(start)
				res, changed := Apply(form.cfg, st, 25, tt.req)
				if res != (Result{Code: tt.want}) || changed {
					t.Errorf("Apply(%+v) = %+v, %v, want %+v, false", tt.req, res, changed, Result{Code: tt.want})
				}
				if !slices.Equal(st, start) {
					t.Errorf("Apply(%+v) changed the state to %+v, want %+v", tt.req, st, start)
				}
			})
		}
	}
}

// TestApplyMultipleBandwidths: consumption is all or nothing, and waits are
// the maximum over the bandwidths.
func TestApplyMultipleBandwidths(t *testing.T) {
	// A: 10 per 100ns, capacity 10; B: 1 per 100ns, capacity 100.
	bws := []Bandwidth{greedyBW(10, 10, 100), greedyBW(100, 1, 100)}
	start := State{{0, 10, 0}, {0, 3, 0}}
	tests := []struct {
		name        string
		req         Request
		want        Result
		wantChanged bool
		wantState   State
	}{
		{"available is the minimum", Request{Op: OpAvailable}, Result{Value: 3}, false, start},
		{"rejected by one rejects all", Request{Op: OpTryConsume, Tokens: 4}, Result{}, false, start},
		{"consumed from every bandwidth", Request{Op: OpTryConsume, Tokens: 3}, Result{Consumed: true}, true, State{{0, 7, 0}, {0, 0, 0}}},
		// B lacks 1 token (100ns); B is 97 short of full (9700ns).
		{"probe waits for the slowest", Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 4},
			Result{Remaining: 3, WaitForRefill: 100, WaitForReset: 9700}, false, start},
		{"probe over one capacity", Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 11},
			Result{Remaining: 3, WaitForRefill: Never, WaitForReset: 9700}, false, start},
		// A: 20 short (200ns); B: 17 short (1700ns).
		{"ignoring limits", Request{Op: OpConsumeIgnoringRateLimits, Tokens: 20}, Result{Consumed: true, Value: 1700}, true, State{{0, -10, 0}, {0, -17, 0}}},
		{"add clamps each to its capacity", Request{Op: OpAddTokens, Tokens: 50}, Result{}, true, State{{0, 10, 0}, {0, 53, 0}}},
		{"as much as possible", Request{Op: OpConsumeAsMuchAsPossible, Tokens: maxI}, Result{Consumed: true, Value: 3}, true, State{{0, 7, 0}, {0, 0, 0}}},
		{"reset", Request{Op: OpReset}, Result{}, true, State{{0, 10, 0}, {0, 100, 0}}},
	}
	for _, tt := range tests {
		for _, form := range configForms(bws...) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				st := slices.Clone(start)
				res, changed := Apply(form.cfg, st, 0, tt.req)
				if res != tt.want || changed != tt.wantChanged {
					t.Errorf("Apply(%+v) = %+v, %v, want %+v, %v", tt.req, res, changed, tt.want, tt.wantChanged)
				}
				if !slices.Equal(st, tt.wantState) {
					t.Errorf("Apply(%+v) left %+v, want %+v", tt.req, st, tt.wantState)
				}
			})
		}
	}
}

// TestTryConsumeMatchesApply: the hot-path TryConsume is OpTryConsume.
func TestTryConsumeMatchesApply(t *testing.T) {
	bws := []Bandwidth{greedyBW(10, 10, 100), intervallyBW(100, 9, 10)}
	start := State{{0, 5, 0}, {0, 3, 0}}
	tests := []struct {
		name string
		now  int64
		n    int64
		want bool
	}{
		// At 25: A has 7 (error 50), B 3 + 2·9 = 21 at LastRefill 20.
		{"consumed", 25, 7, true},
		{"rejected", 25, 8, false},
		{"clock backwards", -5, 3, true},
		{"clock backwards rejected", -5, 4, false},
		{"rejected far ahead by capacity", maxI, 11, false},
		{"far ahead", maxI, 10, true},
	}
	for _, tt := range tests {
		for _, form := range configForms(bws...) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				applied := slices.Clone(start)
				res, changed := Apply(form.cfg, applied, tt.now, Request{Op: OpTryConsume, Tokens: tt.n})
				st := slices.Clone(start)
				got := TryConsume(form.cfg, st, make(State, len(st)), tt.now, tt.n)
				if got != tt.want || res.Consumed != tt.want || changed != tt.want {
					t.Errorf("TryConsume(%d) = %v, Apply = %v, want %v", tt.n, got, res.Consumed, tt.want)
				}
				want := start // a rejection stores nothing, not even the refill
				if tt.want {
					want = applied
				}
				if !slices.Equal(st, want) {
					t.Errorf("TryConsume(%d) left %+v, want %+v", tt.n, st, want)
				}
			})
		}
	}
}

// orDefault returns v, or def when v is nil.
func orDefault[T any](v, def []T) []T {
	if v == nil {
		return def
	}
	return v
}
