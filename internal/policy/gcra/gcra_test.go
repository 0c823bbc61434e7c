package gcra

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// The expected numbers are worked out in the comments (T is the emission
// interval Period/Rate); a Python model of the semantics in fractions
// agrees with every one.

const (
	t0    = int64(1_700_000_000_000_000_000)
	sec   = int64(time.Second)
	ms    = int64(time.Millisecond)
	never = policy.Never
)

// The steps and results of the worked examples.
var (
	consume, reserve           = policytest.Consume, policytest.Reserve
	allowed, granted, rejected = policytest.Allowed, policytest.Granted, policytest.Rejected
)

func TestDecisions(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []policytest.Step
		final State
	}{
		{
			// redis_rate's PerSecond(10): T = 100ms, burst span 1s. After
			// 1+2 the TAT is 300ms ahead: 8 more would end 1.1s ahead,
			// 100ms too far; 7 fill the burst exactly.
			name: "10 per second, bursts of 10",
			cfg:  Config{Limit: 10, Rate: 10, Period: sec},
			steps: []policytest.Step{
				consume(0, 1, allowed(10, 9, 100*ms)),
				consume(0, 2, allowed(10, 7, 300*ms)),
				consume(0, 1000, rejected(10, 7, never, 300*ms)),
				consume(0, 8, rejected(10, 7, 100*ms, 300*ms)),
				consume(0, 7, allowed(10, 0, sec)),
				consume(100*ms, 1, allowed(10, 0, sec)),
				consume(100*ms, 1, rejected(10, 0, 100*ms, sec)),
			},
			final: State{TAT: t0 + 1100*ms},
		},
		{
			// T = 333333333⅓ ns. One token leaves the TAT at ⅓ ns past a
			// whole ns (Frac 1), reported rounded up. With the burst full,
			// one more needs the TAT ⅓ s closer: 333333334 ns, and 1 ns
			// before that it is ⅓ ns short.
			name: "fractional emission interval",
			cfg:  Config{Limit: 3, Rate: 3, Period: sec},
			steps: []policytest.Step{
				consume(0, 1, allowed(3, 2, 333333334)),
				consume(0, 2, allowed(3, 0, sec)),
				consume(0, 1, rejected(3, 0, 333333334, sec)),
				consume(333333333, 1, rejected(3, 0, 1, 666666667)),
				consume(333333334, 1, allowed(3, 0, sec)),
			},
			final: State{TAT: t0 + 1333333333, Frac: 1},
		},
		{
			// T = ⅓ ns, burst span 5/3 ns: 5 tokens leave the TAT at t0+1⅔.
			// At +1 it is ⅔ ahead, and 3 more make it 5/3 ahead again.
			name: "emission interval below a nanosecond",
			cfg:  Config{Limit: 5, Rate: 3, Period: 1},
			steps: []policytest.Step{
				consume(0, 5, allowed(5, 0, 2)),
				consume(0, 1, rejected(5, 0, 1, 2)),
				consume(1, 3, allowed(5, 0, 2)),
				consume(1, 1, rejected(5, 0, 1, 2)),
			},
			final: State{TAT: t0 + 2, Frac: 2},
		},
		{
			// T = 1s, burst 5: at +2.5s the TAT is 2.5s ahead, so 2 tokens
			// remain; 3 need it at 2s, 500ms later.
			name: "tokens come back at the rate",
			cfg:  Config{Limit: 5, Rate: 1, Period: sec},
			steps: []policytest.Step{
				consume(0, 2, allowed(5, 3, 2*sec)),
				consume(0, 3, allowed(5, 0, 5*sec)),
				consume(0, 1, rejected(5, 0, sec, 5*sec)),
				consume(2500*ms, 3, rejected(5, 2, 500*ms, 2500*ms)),
				consume(2500*ms, 1, allowed(5, 1, 3500*ms)),
				consume(20*sec, 5, allowed(5, 0, 5*sec)),
			},
			final: State{TAT: t0 + 25*sec},
		},
		{
			// After the burst, 5 more conform 500ms later: refused with a
			// 400ms bound, granted with 500ms. The TAT is then 1.5s ahead.
			name: "reservations wait for the TAT",
			cfg:  Config{Limit: 10, Rate: 10, Period: sec},
			steps: []policytest.Step{
				reserve(0, 10, 0, allowed(10, 0, sec)),
				reserve(0, 5, 400*ms, rejected(10, 0, 500*ms, sec)),
				reserve(0, 5, 500*ms, granted(10, 0, 1500*ms, 500*ms)),
				consume(500*ms, 1, rejected(10, 0, 100*ms, sec)),
				reserve(600*ms, 1, never, allowed(10, 0, sec)),
				reserve(600*ms, 11, never, rejected(10, 0, never, sec)),
				reserve(600*ms, 10, never, granted(10, 0, 2*sec, sec)),
			},
			final: State{TAT: t0 + 2600*ms},
		},
		{
			// With T = 10 ns the new TAT of a request at MaxInt64−5 would be
			// 5 ns past the end of time; at MaxInt64−10 it is exactly there.
			name: "the end of the time line",
			cfg:  Config{Limit: 1, Rate: 1, Period: 10},
			steps: []policytest.Step{
				consume(math.MaxInt64-5-t0, 1, rejected(1, 1, never, 0)),
				reserve(math.MaxInt64-5-t0, 1, never, rejected(1, 1, never, 0)),
				consume(math.MaxInt64-10-t0, 1, allowed(1, 0, 10)),
			},
			final: State{TAT: math.MaxInt64},
		},
		{
			name: "argument errors",
			cfg:  Config{Limit: 1, Rate: 1, Period: sec},
			steps: []policytest.Step{
				consume(0, 0, policy.Result{Code: policy.NonPositiveTokens}),
				consume(0, -1, policy.Result{Code: policy.NonPositiveTokens}),
				reserve(0, 0, 0, policy.Result{Code: policy.NonPositiveTokens}),
				reserve(0, 1, -1, policy.Result{Code: policy.NonPositiveMaxWait}),
				reserve(0, 1, math.MinInt64, policy.Result{Code: policy.NonPositiveMaxWait}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			policytest.Steps(t, tt.cfg, &s, false, t0, tt.steps)
			if s != tt.final {
				t.Errorf("final state = %+v, want %+v", s, tt.final)
			}
		})
	}
}

// TestReconfiguredFraction checks that a Frac left by a larger Rate counts
// as Rate−1, less than 1 ns.
func TestReconfiguredFraction(t *testing.T) {
	cfg := Config{Limit: 10, Rate: 10, Period: sec} // T = 100ms
	s := State{TAT: t0 + 300*ms, Frac: 25}
	// 300ms + 0.9ns ahead, 400ms + 0.9ns after one token: ResetAfter
	// 400000001 ns, and ⌊(600ms − 0.9ns)/100ms⌋ = 5 remain.
	got, _ := policytest.Decide(t, cfg, &s, true, t0, 1)
	if want := allowed(10, 5, 400*ms+1); got != want {
		t.Errorf("Consume(1) = %+v, want %+v", got, want)
	}
	if want := (State{TAT: t0 + 400*ms, Frac: 9}); s != want {
		t.Errorf("state = %+v, want %+v", s, want)
	}
}

func TestExpiresAt(t *testing.T) {
	cfg := Config{Limit: 3, Rate: 3, Period: sec}
	tests := []struct {
		s    State
		want int64
	}{
		{State{TAT: t0}, t0},
		{State{TAT: t0, Frac: 1}, t0 + 1},
		{State{TAT: math.MaxInt64, Frac: 2}, math.MaxInt64},
		{State{TAT: math.MinInt64}, math.MinInt64},
	}
	for _, tt := range tests {
		if got := cfg.ExpiresAt(&tt.s); got != tt.want {
			t.Errorf("ExpiresAt(%+v) = %d, want %d", tt.s, got, tt.want)
		}
	}
	// From ExpiresAt on, the key is as full as a new one.
	s := State{TAT: t0, Frac: 1}
	a, b := s, State{}
	ra, _ := policytest.Decide(t, cfg, &a, true, t0+1, 3)
	rb, _ := policytest.Decide(t, cfg, &b, false, t0+1, 3)
	if ra != rb || a != b {
		t.Errorf("Consume(3) at ExpiresAt = %+v %+v, on a new key %+v %+v", ra, a, rb, b)
	}
	a = s
	if res, _ := cfg.Consume(&a, true, t0, 3); res.Allowed {
		t.Errorf("Consume(3) 1 ns before ExpiresAt = %+v, want rejected", res)
	}
}

func TestDecodeStateErrors(t *testing.T) {
	cfg := Config{Limit: 3, Rate: 3, Period: sec}
	tests := []struct {
		name string
		src  []byte
	}{
		// policytest checks the malformed states; this one decodes to a
		// TAT that cannot be.
		{"negative fraction", policy.AppendInt(policy.AppendInt(policy.AppendHeader(nil, policy.TagGCRA), t0), -1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{TAT: 1, Frac: 2}
			if err := cfg.DecodeState(tt.src, &s); !errors.Is(err, policy.ErrBadState) {
				t.Errorf("DecodeState(%x) = %v, want an error matching ErrBadState", tt.src, err)
			}
			if want := (State{TAT: 1, Frac: 2}); s != want {
				t.Errorf("DecodeState(%x) left %+v, want %+v untouched", tt.src, s, want)
			}
		})
	}
}

// TestContract runs the contract's suite on bursts of a few tokens, the
// emission interval whole and fractional.
func TestContract(t *testing.T) {
	policytest.Run(t, Config{Limit: 3, Rate: 3, Period: 10}, Config{Limit: 4, Rate: 3, Period: 10},
		Config{Limit: 1, Rate: 7, Period: 100})
}

func TestQuota(t *testing.T) {
	if got := (Config{Limit: 7, Rate: 1, Period: sec}).Quota(); got != 7 {
		t.Errorf("Quota() = %d, want 7", got)
	}
}

func BenchmarkConsume(b *testing.B) {
	cfg := Config{Limit: 100, Rate: 3, Period: sec}
	s := State{TAT: t0}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		cfg.Consume(&s, true, now, 1)
		now += 333 * ms
	}
}
