package tokenbucket

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The expected numbers in these tests are Bucket4j 7.6's (its reference
// manual and its own test suite) or are worked out by hand in the comments (token·ns arithmetic: a greedy
// bandwidth refilling r tokens per p ns holds size·p + err token·ns and
// gains r of them per ns).

const (
	maxI = int64(math.MaxInt64)
	minI = int64(math.MinInt64)
	sec  = int64(time.Second)
	min1 = int64(time.Minute)
	hour = int64(time.Hour)
)

func greedyBW(capacity, tokens, period int64) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: tokens, Period: period}
}

func intervallyBW(capacity, tokens, period int64) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: tokens, Period: period, Intervally: true}
}

func alignedBW(capacity, tokens, period, first int64, adaptive bool) Bandwidth {
	return Bandwidth{Capacity: capacity, RefillTokens: tokens, Period: period,
		Intervally: true, Aligned: true, FirstRefill: first, Adaptive: adaptive}
}

func (bw Bandwidth) withInitial(n int64) Bandwidth {
	bw.Initial, bw.HasInitial = n, true
	return bw
}

func (bw Bandwidth) withID(id string) Bandwidth {
	bw.ID = id
	return bw
}

// configForms returns cfg in the two forms the package accepts: prepared by
// NewConfig (divisions by multiplication) and a plain literal (hardware
// division). Every table runs on both, so the two paths must agree.
func configForms(bws ...Bandwidth) []struct {
	name string
	cfg  *Config
} {
	return []struct {
		name string
		cfg  *Config
	}{
		{"prepared", NewConfig(slices.Clone(bws)...)},
		{"literal", &Config{Bandwidths: slices.Clone(bws)}},
	}
}

func TestRefill(t *testing.T) {
	g10 := greedyBW(10, 10, 100) // one token per 10ns
	tests := []struct {
		name  string
		bw    Bandwidth
		start BandwidthState
		now   int64
		want  BandwidthState
	}{
		// 25ns·10 = 250 token·ns: 2 tokens and half of the next.
		{"greedy spreads tokens", g10, BandwidthState{0, 0, 0}, 25, BandwidthState{25, 2, 50}},
		{"greedy keeps a partial token", g10, BandwidthState{0, 0, 0}, 7, BandwidthState{7, 0, 70}},
		// 50 carried + 5ns·10 = 100: exactly one token.
		{"greedy carries the rounding error", g10, BandwidthState{0, 0, 50}, 5, BandwidthState{5, 1, 0}},
		// 350ns at 10 per 100ns: 3 whole periods (30) and 500 token·ns (5).
		{"greedy whole periods then the rest", greedyBW(100, 10, 100), BandwidthState{0, 0, 0}, 350, BandwidthState{350, 35, 0}},
		// dur == period: 10 tokens, the error stays.
		{"greedy exactly one period", greedyBW(100, 10, 100), BandwidthState{0, 3, 7}, 100, BandwidthState{100, 13, 7}},
		// 300 + 70 + 1234·10 = 12710 token·ns: 127 tokens, error 10.
		{"greedy many periods with an error", greedyBW(1000, 10, 100), BandwidthState{0, 3, 70}, 1234, BandwidthState{1234, 127, 10}},
		// (3·2^31+5)·2^20 / 2^32 = 3·2^19 tokens, error 5·2^20.
		{"greedy power of two period", greedyBW(1<<40, 1<<20, 1<<32), BandwidthState{0, 0, 0}, 3<<31 + 5, BandwidthState{3<<31 + 5, 1572864, 5242880}},
		{"greedy one token per ns", greedyBW(1000, 1, 1), BandwidthState{0, 0, 0}, 999, BandwidthState{999, 999, 0}},

		// FixedIntervalRefillSpecification: 9 tokens per 10ns from empty.
		{"intervally 9 per 10ns at +4ns", intervallyBW(9, 9, 10), BandwidthState{0, 0, 0}, 4, BandwidthState{0, 0, 0}},
		{"intervally 9 per 10ns at +10ns", intervallyBW(9, 9, 10), BandwidthState{0, 0, 0}, 10, BandwidthState{10, 9, 0}},
		{"intervally just before a period", intervallyBW(100, 9, 10), BandwidthState{0, 0, 0}, 9, BandwidthState{0, 0, 0}},
		{"intervally snaps to the grid", intervallyBW(100, 9, 10), BandwidthState{0, 0, 0}, 27, BandwidthState{20, 18, 0}},
		{"intervally grid from the last refill", intervallyBW(100, 9, 10), BandwidthState{3, 0, 0}, 27, BandwidthState{23, 18, 0}},
		{"intervally one ns period", intervallyBW(10, 1, 1), BandwidthState{0, 0, 0}, 5, BandwidthState{5, 5, 0}},

		// 60 + 5ns·10 = 110: a tenth token reaches capacity, error dropped.
		{"capacity clamp zeroes the error", g10, BandwidthState{0, 9, 60}, 5, BandwidthState{5, 10, 0}},
		{"capacity clamp past capacity", g10, BandwidthState{0, 9, 60}, 50, BandwidthState{50, 10, 0}},
		{"above capacity keeps surplus and error, moves LastRefill", g10, BandwidthState{0, 15, 30}, 1000, BandwidthState{1000, 15, 30}},
		{"at capacity moves LastRefill", g10, BandwidthState{0, 10, 0}, 1000, BandwidthState{1000, 10, 0}},
		{"intervally above capacity moves LastRefill to the grid", intervallyBW(10, 5, 100), BandwidthState{0, 12, 0}, 250, BandwidthState{200, 12, 0}},

		{"clock backwards ignored", g10, BandwidthState{100, 3, 7}, 50, BandwidthState{100, 3, 7}},
		{"same time ignored", g10, BandwidthState{100, 3, 7}, 100, BandwidthState{100, 3, 7}},
		{"clock far backwards ignored", g10, BandwidthState{100, 3, 7}, minI, BandwidthState{100, 3, 7}},

		{"overdraft refills from below zero", g10, BandwidthState{0, -5, 0}, 30, BandwidthState{30, -2, 0}},
		{"overdraft refills to capacity", g10, BandwidthState{0, -5, 0}, 250, BandwidthState{250, 10, 0}},
		{"negative times", greedyBW(100, 10, 100), BandwidthState{-1000, 0, 0}, -750, BandwidthState{-750, 25, 0}},

		// Overflow regressions (HandlingArithmeticOverflowSpecification shape).
		{"whole int64 range fills", greedyBW(maxI, 1, 1), BandwidthState{minI, 0, 0}, maxI, BandwidthState{maxI, maxI, 0}},
		// 3 whole periods of 2^62 tokens: past int64, but full anyway.
		{"whole periods past int64", greedyBW(maxI, 1<<62, 1<<62), BandwidthState{minI, 0, 0}, maxI, BandwidthState{maxI, maxI, 0}},
		// (M-1)·M / M = M-1 exactly; the product needs 126 bits.
		{"partial period product past int64", greedyBW(maxI, maxI, maxI), BandwidthState{0, 0, 0}, maxI - 1, BandwidthState{maxI - 1, maxI - 1, 0}},
		// MaxInt64/2^40 = 8388607 whole periods of 2^40 tokens, then
		// (2^40-1) more: 2^63-1 in all, exactly the capacity.
		{"refill to exactly MaxInt64", greedyBW(maxI, 1<<40, 1<<40), BandwidthState{0, 0, 0}, maxI, BandwidthState{maxI, maxI, 0}},
	}
	for _, tt := range tests {
		for _, form := range configForms(tt.bw) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				st := State{tt.start}
				Refill(form.cfg, st, tt.now)
				if st[0] != tt.want {
					t.Errorf("Refill(%+v, %d) = %+v, want %+v", tt.start, tt.now, st[0], tt.want)
				}
			})
		}
	}
}

// TestRefillExactAcrossHugeSpans covers refills of an overdrawn bandwidth
// over more than MaxInt64 nanoseconds. The tokens added then exceed MaxInt64,
// yet the bandwidth ends well below capacity, so filling it to capacity (as
// if the sum had overflowed) admits about 2^63 tokens too many. The package
// promises exact arithmetic; the sums are in the comments.
func TestRefillExactAcrossHugeSpans(t *testing.T) {
	tests := []struct {
		name  string
		bw    Bandwidth
		start BandwidthState
		now   int64
		want  BandwidthState
	}{
		// dur = (M-4) - (-10) = 2^63+5 tokens; -(2^63-2) + 2^63+5 = 7.
		{"whole periods", greedyBW(maxI, 1, 1), BandwidthState{-10, -(maxI - 1), 0}, maxI - 4, BandwidthState{maxI - 4, 7, 0}},
		// dur = 3·2^62-1 at 2 per 3ns with error 2: (2·dur+2)/3 = 2^63
		// tokens; 2^63 - 6148914691236517204 = 3074457345618258604.
		{"whole and partial periods", greedyBW(maxI, 2, 3), BandwidthState{minI + 10, -6148914691236517204, 2}, 1<<62 + 9, BandwidthState{1<<62 + 9, 3074457345618258604, 0}},
	}
	for _, tt := range tests {
		for _, form := range configForms(tt.bw) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				st := State{tt.start}
				Refill(form.cfg, st, tt.now)
				if st[0] != tt.want {
					t.Errorf("Refill(%+v, %d) = %+v, want %+v", tt.start, tt.now, st[0], tt.want)
				}
			})
		}
	}
}

// TestOverdraftAcrossHugeSpanViaApply shows the state of
// TestRefillExactAcrossHugeSpans is reachable through Apply: 1 token/ns,
// ConsumeIgnoringRateLimits(MaxInt64-1) on an empty bucket has a finite wait
// (MaxInt64-1 ns), and 2^63+5 ns later exactly 7 tokens are back.
func TestOverdraftAcrossHugeSpanViaApply(t *testing.T) {
	cfg := NewConfig(greedyBW(maxI, 1, 1).withInitial(0))
	st := New(cfg, -10)
	res, changed := Apply(cfg, st, -10, Request{Op: OpConsumeIgnoringRateLimits, Tokens: maxI - 1})
	if want := (Result{Consumed: true, Value: maxI - 1}); res != want || !changed {
		t.Fatalf("ConsumeIgnoringRateLimits(MaxInt64-1) = %+v, %v, want %+v, true", res, changed, want)
	}
	res, _ = Apply(cfg, st, maxI-4, Request{Op: OpAvailable})
	if res.Value != 7 {
		t.Errorf("Available at MaxInt64-4 = %d, want 7", res.Value)
	}
}

// TestAlignedGridSurvivesLongIdle: the grid of an aligned bandwidth stays
// on FirstRefill + k·period whatever the calls in between
// (IntervallyAlignedRefillSpecification, "boundary of interval is not
// missed during long time of inactivity").
func TestAlignedGridSurvivesLongIdle(t *testing.T) {
	first := 1000 * hour
	for _, form := range configForms(alignedBW(10, 10, hour, first, false)) {
		t.Run(form.name, func(t *testing.T) {
			cfg := form.cfg
			created := first + 10*min1
			st := New(cfg, created)
			if want := (BandwidthState{first - hour, 10, 0}); st[0] != want {
				t.Fatalf("New(%d) = %+v, want %+v", created, st[0], want)
			}
			steps := []struct {
				now  int64
				req  Request
				want Result
			}{
				{created, Request{Op: OpTryConsume, Tokens: 10}, Result{Consumed: true}},
				{first + hour - 1, Request{Op: OpAvailable}, Result{Value: 0}},
				{first + hour, Request{Op: OpAvailable}, Result{Value: 10}},
				// 1000 days and 30 minutes of idleness, then empty it.
				{first + 24000*hour + 30*min1, Request{Op: OpTryConsume, Tokens: 10}, Result{Consumed: true}},
				{first + 24001*hour - 1, Request{Op: OpAvailable}, Result{Value: 0}},
				{first + 24001*hour, Request{Op: OpAvailable}, Result{Value: 10}},
			}
			for _, s := range steps {
				res, _ := Apply(cfg, st, s.now, s.req)
				if res != s.want {
					t.Fatalf("Apply(%d, %+v) = %+v, want %+v", s.now-first, s.req, res, s.want)
				}
				if (st[0].LastRefill-first)%hour != 0 {
					t.Fatalf("after Apply(%d, %+v): LastRefill %d is off the grid", s.now-first, s.req, st[0].LastRefill-first)
				}
			}
		})
	}
}

func TestDelay(t *testing.T) {
	tests := []struct {
		name  string
		bws   []Bandwidth
		st    State
		n     int64
		now   int64
		check bool
		want  int64
	}{
		// SEMANTICS §1.4: (8·3 - 2)/6 = 3, rounded down like Bucket4j.
		{"greedy rounds down", []Bandwidth{greedyBW(10, 6, 8)}, State{{0, 0, 2}}, 3, 0, true, 3},
		{"greedy one token", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 0, 0}}, 1, 0, true, 10},
		{"greedy full capacity", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 0, 0}}, 10, 0, true, 100},
		{"greedy counts the partial token", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 0, 50}}, 1, 0, true, 5},
		{"available now", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 5, 0}}, 5, 0, true, 0},
		{"over capacity with check", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 10, 0}}, 11, 0, true, Never},
		{"over capacity without check", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 10, 0}}, 1000, 0, false, 9900},
		{"overdraft adds to the wait", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, -5, 0}}, 5, 0, true, 100},

		// Issue #71: 10 tokens per minute, empty.
		{"intervally wait for the grid", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 1, 0, true, min1},
		{"intervally full refill in one period", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 10, 0, true, min1},
		{"intervally 15s later", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 1, 15 * sec, true, 45 * sec},
		{"intervally over capacity with check", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 15, 15 * sec, true, Never},
		{"intervally two periods", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 15, 15 * sec, false, 105 * sec},
		{"intervally three periods exactly", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 30, 15 * sec, false, 165 * sec},
		{"intervally three periods", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 25, 15 * sec, false, 165 * sec},
		{"intervally four periods", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 0, 0}}, 31, 15 * sec, false, 225 * sec},
		{"intervally with tokens left", []Bandwidth{intervallyBW(10, 10, min1)}, State{{0, 4, 0}}, 10, 15 * sec, true, 45 * sec},

		{"deficit overflows", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, -10, 0}}, maxI, 0, false, Never},
		{"deficit overflows intervally", []Bandwidth{intervallyBW(10, 10, 100)}, State{{0, -10, 0}}, maxI, 0, false, Never},
		{"greedy wait past int64", []Bandwidth{greedyBW(10, 1, maxI)}, State{{0, 0, 0}}, 2, 0, false, Never},
		{"greedy wait of exactly MaxInt64 is Never", []Bandwidth{greedyBW(10, 1, maxI)}, State{{0, 0, 0}}, 1, 0, false, Never},
		{"greedy wait just below MaxInt64", []Bandwidth{greedyBW(10, 1, maxI)}, State{{0, 0, 1}}, 1, 0, false, maxI - 1},
		{"greedy largest deficit", []Bandwidth{greedyBW(10, 1, 1)}, State{{0, 0, 0}}, maxI - 1, 0, false, maxI - 1},
		// Wait M/2 for the grid, then M/2 per period.
		{"intervally wait just below MaxInt64", []Bandwidth{intervallyBW(10, 1, maxI/2)}, State{{0, 0, 0}}, 2, 0, false, maxI - 1},
		{"intervally wait past int64", []Bandwidth{intervallyBW(10, 1, maxI/2)}, State{{0, 0, 0}}, 3, 0, false, Never},
		{"intervally periods past int64", []Bandwidth{intervallyBW(10, 1, maxI/2)}, State{{0, 0, 0}}, maxI, 0, false, Never},

		{"the slowest bandwidth decides", []Bandwidth{greedyBW(10, 10, 100), greedyBW(100, 1, 100)}, State{{0, 0, 0}, {0, 0, 0}}, 1, 0, true, 100},
		{"any bandwidth over capacity is Never", []Bandwidth{greedyBW(100, 1, 100), greedyBW(10, 10, 100)}, State{{0, 100, 0}, {0, 10, 0}}, 11, 0, true, Never},
		{"one bandwidth ready, the other not", []Bandwidth{greedyBW(10, 10, 100), greedyBW(100, 1, 100)}, State{{0, 10, 0}, {0, 0, 0}}, 2, 0, true, 200},
	}
	for _, tt := range tests {
		for _, form := range configForms(tt.bws...) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				st := slices.Clone(tt.st)
				if got := Delay(form.cfg, st, tt.n, tt.now, tt.check); got != tt.want {
					t.Errorf("Delay(%d, check=%v) = %d, want %d", tt.n, tt.check, got, tt.want)
				}
				if !slices.Equal(st, tt.st) {
					t.Errorf("Delay changed the state to %+v", st)
				}
			})
		}
	}
}

func TestTimeToFull(t *testing.T) {
	tests := []struct {
		name string
		bws  []Bandwidth
		st   State
		now  int64
		want int64
	}{
		{"full", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 10, 0}}, 0, 0},
		{"above capacity", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 12, 0}}, 0, 0},
		// deficit 7: (700 - 40)/10 = 66.
		{"greedy", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 3, 40}}, 0, 66},
		{"greedy overdrawn", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, -10, 0}}, 0, 200},
		// deficit 10 at 5 per minute: the grid in 45s, then one more minute.
		{"intervally", []Bandwidth{intervallyBW(10, 5, min1)}, State{{0, 0, 0}}, 15 * sec, 105 * sec},
		{"the slowest bandwidth decides", []Bandwidth{greedyBW(10, 10, 100), intervallyBW(10, 5, min1)}, State{{0, 0, 0}, {0, 0, 0}}, 15 * sec, 105 * sec},
		{"deficit overflows", []Bandwidth{greedyBW(maxI, 1, 1)}, State{{0, -1, 0}}, 0, Never},
		{"deficit of MaxInt64", []Bandwidth{greedyBW(maxI, 1, 1)}, State{{0, 0, 0}}, 0, Never},
		{"deficit of MaxInt64-1", []Bandwidth{greedyBW(maxI, 1, 1)}, State{{0, 1, 0}}, 0, maxI - 1},
	}
	for _, tt := range tests {
		for _, form := range configForms(tt.bws...) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				if got := TimeToFull(form.cfg, tt.st, tt.now); got != tt.want {
					t.Errorf("TimeToFull(%+v) = %d, want %d", tt.st, got, tt.want)
				}
			})
		}
	}
}

func TestInitialTokens(t *testing.T) {
	first := 1000 * min1
	tests := []struct {
		name string
		bw   Bandwidth
		now  int64
		want BandwidthState
	}{
		{"greedy starts full", greedyBW(10, 1, 100), 5, BandwidthState{5, 10, 0}},
		{"initial tokens", greedyBW(10, 1, 100).withInitial(3), 5, BandwidthState{5, 3, 0}},
		{"initial tokens zero", greedyBW(10, 1, 100).withInitial(0), 5, BandwidthState{5, 0, 0}},
		{"initial tokens above capacity", greedyBW(10, 1, 100).withInitial(30), 5, BandwidthState{5, 30, 0}},

		// IntervallyAlignedRefillSpecification: capacity 400, a minute,
		// 40s before the first refill.
		{"adaptive 400 per minute", alignedBW(400, 400, min1, first, true), first - 40*sec, BandwidthState{first - min1, 266, 0}},
		{"adaptive 300 per minute", alignedBW(400, 300, min1, first, true), first - 40*sec, BandwidthState{first - min1, 300, 0}},
		{"adaptive 200 per minute", alignedBW(400, 200, min1, first, true), first - 40*sec, BandwidthState{first - min1, 333, 0}},
		{"adaptive 100 per minute", alignedBW(400, 100, min1, first, true), first - 40*sec, BandwidthState{first - min1, 366, 0}},
		{"adaptive above capacity per period", alignedBW(100, 400, min1, first, true), first - sec, BandwidthState{first - min1, 6, 0}},
		// 300 + 600s·100/60s = 1300, capped.
		{"adaptive long before the first refill", alignedBW(400, 100, min1, first, true), first - 10*min1, BandwidthState{first - min1, 400, 0}},
		{"adaptive at the first refill", alignedBW(400, 100, min1, first, true), first, BandwidthState{first - min1, 400, 0}},
		{"adaptive after the first refill", alignedBW(400, 100, min1, first, true), first + sec, BandwidthState{first - min1, 400, 0}},
		{"aligned not adaptive", alignedBW(400, 100, min1, first, false), first - 40*sec, BandwidthState{first - min1, 400, 0}},
		{"aligned with initial tokens", alignedBW(400, 100, min1, first, false).withInitial(7), first - 40*sec, BandwidthState{first - min1, 7, 0}},
		{"aligned at the epoch", alignedBW(10, 10, 100, 0, false), 5, BandwidthState{-100, 10, 0}},
		// (MaxInt64 - 0)·1/MaxInt64 = 1 token, plus capacity-r = 9.
		{"adaptive with the widest span", alignedBW(10, 1, maxI, maxI, true), 0, BandwidthState{0, 10, 0}},
		{"adaptive from a negative time", alignedBW(10, 1, maxI, maxI, true), minI, BandwidthState{0, 10, 0}},
		{"adaptive, rate 1 in 2^62ns, 2^62 before", alignedBW(10, 1, 1<<62, 1<<62, true), 0, BandwidthState{0, 10, 0}},
		{"adaptive, small capacity, long span", alignedBW(2, 2, 1<<62, maxI, true), 0, BandwidthState{maxI - 1<<62, 2, 0}},
		{"adaptive rounds down", alignedBW(1000, 3, 10, 1000, true), 1000 - 7, BandwidthState{990, 999, 0}},
	}
	for _, tt := range tests {
		for _, form := range configForms(tt.bw) {
			t.Run(tt.name+"/"+form.name, func(t *testing.T) {
				st := New(form.cfg, tt.now)
				if st[0] != tt.want {
					t.Errorf("New(%d) = %+v, want %+v", tt.now, st[0], tt.want)
				}
				// Creating the bucket refills nothing before the first refill.
				res, _ := Apply(form.cfg, st, tt.now, Request{Op: OpAvailable})
				if res.Value != tt.want.Size {
					t.Errorf("Available at creation = %d, want %d", res.Value, tt.want.Size)
				}
			})
		}
	}
}

// TestAdaptiveFirstRefillOnTime: with adaptive initial tokens the first
// refill comes exactly at FirstRefill.
func TestAdaptiveFirstRefillOnTime(t *testing.T) {
	first := 1000 * min1
	cfg := NewConfig(alignedBW(400, 100, min1, first, true))
	st := New(cfg, first-40*sec) // 366 tokens
	steps := []struct {
		now  int64
		req  Request
		want Result
	}{
		{first - 40*sec, Request{Op: OpTryConsume, Tokens: 366}, Result{Consumed: true}},
		{first - 1, Request{Op: OpAvailable}, Result{Value: 0}},
		{first, Request{Op: OpAvailable}, Result{Value: 100}},
		{first + min1 - 1, Request{Op: OpAvailable}, Result{Value: 100}},
		{first + min1, Request{Op: OpAvailable}, Result{Value: 200}},
	}
	for _, s := range steps {
		if res, _ := Apply(cfg, st, s.now, s.req); res != s.want {
			t.Errorf("Apply(first%+d, %+v) = %+v, want %+v", s.now-first, s.req, res, s.want)
		}
	}
}

// TestIssue51LongIdle: Bucket4j #51 overflowed after 12 hours idle with
// 700k/h, 14.5k/min and 300/s bandwidths; all three are full afterwards.
func TestIssue51LongIdle(t *testing.T) {
	bws := []Bandwidth{greedyBW(700_000, 700_000, hour), greedyBW(14_500, 14_500, min1), greedyBW(300, 300, sec)}
	for _, form := range configForms(bws...) {
		t.Run(form.name, func(t *testing.T) {
			st := New(form.cfg, 0)
			if res, _ := Apply(form.cfg, st, 0, Request{Op: OpTryConsume, Tokens: 300}); !res.Consumed {
				t.Fatalf("TryConsume(300) = %v, want true", res.Consumed)
			}
			res, changed := Apply(form.cfg, st, 12*hour, Request{Op: OpTryConsumeAndReturnRemaining, Tokens: 300})
			// The hourly bandwidth is the slowest to refill its 300:
			// 300·3600s/700000 = 1.542857142857s.
			if want := (Result{Consumed: true, Remaining: 0, WaitForReset: 1542857142}); res != want || !changed {
				t.Errorf("TryConsumeAndReturnRemaining(300) after 12h = %+v, want %+v", res, want)
			}
			want := State{{12 * hour, 699_700, 0}, {12 * hour, 14_200, 0}, {12 * hour, 0, 0}}
			if !slices.Equal(st, want) {
				t.Errorf("state after 12h = %+v, want %+v", st, want)
			}
		})
	}
}

// TestArithmeticOverflowRefill is HandlingArithmeticOverflowSpecification
// "Should down to floating point arithmetic if necessary during refill":
// capacity MaxInt64/16, period MaxInt64/8 ns, empty, then MaxInt64/16-1 ns.
// Exactly: (M/16-1)·(M/16) / (M/8) = 288230376151711742 tokens, remainder
// 864691128455135232 token·ns. Bucket4j's float64 fallback gets ...744, so
// its tryConsume(M/32) succeeds; here it must fail (SEMANTICS §1.2).
func TestArithmeticOverflowRefill(t *testing.T) {
	c, p := int64(maxI/16), int64(maxI/8)
	for _, form := range configForms(greedyBW(c, c, p).withInitial(0)) {
		t.Run(form.name, func(t *testing.T) {
			st := New(form.cfg, 0)
			now := int64(maxI/16 - 1)
			if res, changed := Apply(form.cfg, st, now, Request{Op: OpTryConsume, Tokens: maxI / 32}); res.Consumed || changed {
				t.Errorf("TryConsume(MaxInt64/32) = %v, want false", res.Consumed)
			}
			Refill(form.cfg, st, now)
			if want := (BandwidthState{now, 288230376151711742, 864691128455135232}); st[0] != want {
				t.Errorf("state = %+v, want %+v", st[0], want)
			}
			res, _ := Apply(form.cfg, st, now, Request{Op: OpConsumeAsMuchAsPossible, Tokens: maxI})
			if res.Value != 288230376151711742 {
				t.Errorf("ConsumeAsMuchAsPossible = %d, want 288230376151711742", res.Value)
			}
		})
	}
}
