package slidingwindow

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// The expected numbers are Symfony's sliding window's (its documented
// examples, several of which conformance/vectors/limiter-windows.json also
// pins) or are worked out in the comments; a Python model of the semantics
// (fractions, and RetryAfter found by searching the time line) agrees with
// every one of them.

const (
	t0    = int64(1_700_000_000_000_000_000)
	sec   = int64(time.Second)
	never = policy.Never
)

// The steps and results of the worked examples.
var consume, allowed, rejected = policytest.Consume, policytest.Allowed, policytest.Rejected

func TestConsume(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []policytest.Step
		final State
	}{
		{
			// Symfony's example: at +90s the window [60s, 120s) is half
			// gone, so 80·30/60 = 40 previous hits count. 61 would need
			// the weight below 39.5, which is 1 ns later: 80·(30s−1ns)/60s
			// = 39.99… floors to 39.
			name: "basics: half of the previous minute's 80 hits count",
			cfg:  Config{Limit: 100, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(0, 80, allowed(100, 20, 120*sec)),
				consume(90*sec, 61, rejected(100, 60, 1, 30*sec)),
				consume(90*sec, 60, allowed(100, 0, 90*sec)),
				consume(90*sec, 1, rejected(100, 0, 1, 90*sec)),
			},
			final: State{Start: t0 + 60*sec, Prev: 80, Hits: 60},
		},
		{
			// Symfony's example: at +15s, 4·5/10 = 2 count; at +25s the
			// window [20s, 30s) starts with the 2 hits of [10s, 20s), and
			// 2·5/10 = 1 counts.
			name: "basics: the previous window fades out",
			cfg:  Config{Limit: 4, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 4, allowed(4, 0, 20*sec)),
				consume(15*sec, 3, rejected(4, 2, 1, 5*sec)),
				consume(15*sec, 2, allowed(4, 0, 15*sec)),
				consume(25*sec, 3, allowed(4, 0, 15*sec)),
			},
			final: State{Start: t0 + 20*sec, Prev: 2, Hits: 3},
		},
		{
			// Symfony's worked example, also in limiter-windows.json: 10/min, 9 previous hits, 25% into the window:
			// ⌊6.75⌋ = 6 count, so 4 fit and 5 do not. 5 fit once
			// 9·(60s−e)/60s < 6, that is e > 20s: e = 20s+1ns, 5s+1ns later.
			name: "worked example: 9 previous hits at 25%",
			cfg:  Config{Limit: 10, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(0, 9, allowed(10, 1, 120*sec)),
				consume(75*sec, 5, rejected(10, 4, 5*sec+1, 45*sec)),
				consume(75*sec, 4, allowed(10, 0, 105*sec)),
				consume(75*sec, 1, rejected(10, 0, 5*sec+1, 105*sec)),
			},
			final: State{Start: t0 + 60*sec, Prev: 9, Hits: 4},
		},
		{
			// The Symfony float quirk: 5·(1−0.8) is exactly 1 here, not
			// 0.9999999999999998 floored to 0, so 5 are rejected and 4 fit.
			name: "exact weight at 80%",
			cfg:  Config{Limit: 5, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 5, allowed(5, 0, 20*sec)),
				consume(18*sec, 5, rejected(5, 4, 1, 2*sec)),
				consume(18*sec, 4, allowed(5, 0, 12*sec)),
				consume(18*sec, 1, rejected(5, 0, 1, 12*sec)),
			},
			final: State{Start: t0 + 10*sec, Prev: 5, Hits: 4},
		},
		{
			// The window ends exactly at start+Interval. 1 ns before it the
			// 2 hits are current; at the end they weigh 2, and 1 ns later
			// 2·(10s−1ns)/10s floors to 1.
			name: "the window ends exactly at start+Interval",
			cfg:  Config{Limit: 2, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 2, allowed(2, 0, 20*sec)),
				consume(10*sec-1, 1, rejected(2, 0, 2, 10*sec+1)),
				consume(10*sec, 1, rejected(2, 0, 1, 10*sec)),
				consume(10*sec+1, 1, allowed(2, 0, 20*sec-1)),
			},
			final: State{Start: t0 + 10*sec, Prev: 2, Hits: 1},
		},
		{
			// 3 previous hits weigh below 1 once 3·(10s−e)/10s < 1, that
			// is e > 6.666666666s: at 10s + 6666666667ns.
			name: "retry in the next window",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 20*sec)),
				consume(0, 3, rejected(3, 0, 16666666667, 20*sec)),
				consume(16666666666, 3, rejected(3, 2, 1, 3333333334)),
				consume(16666666667, 3, allowed(3, 0, 13333333333)),
			},
			final: State{Start: t0 + 10*sec, Prev: 3, Hits: 3},
		},
		{
			// With a 2 ns window, 5 previous hits weigh ⌊5·1/2⌋ = 2 at
			// +3ns, so the retry is the fresh window at +4ns.
			name: "retry in a fresh window",
			cfg:  Config{Limit: 5, Interval: 2},
			steps: []policytest.Step{
				consume(0, 5, allowed(5, 0, 4)),
				consume(0, 5, rejected(5, 0, 4, 4)),
				consume(3, 5, rejected(5, 3, 1, 1)),
				consume(4, 5, allowed(5, 0, 4)),
			},
			final: State{Start: t0 + 4, Prev: 0, Hits: 5},
		},
		{
			name: "two idle windows start a fresh window at now",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 20*sec)),
				consume(20*sec, 3, allowed(3, 0, 20*sec)),
				consume(30*sec, 1, rejected(3, 0, 1, 10*sec)),
			},
			final: State{Start: t0 + 20*sec, Prev: 0, Hits: 3},
		},
		{
			// 1 ns before the second window ends: 3·1ns/10s floors to 0.
			name: "the next window keeps the alignment",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 20*sec)),
				consume(20*sec-1, 3, allowed(3, 0, 10*sec+1)),
				consume(20*sec-1, 1, rejected(3, 0, 2, 10*sec+1)),
			},
			final: State{Start: t0 + 10*sec, Prev: 3, Hits: 3},
		},
		{
			// Back at +5s, before the window [10s, 20s) started, the 4
			// previous hits weigh in full: 4+7 = 11. One more fits when
			// 4·(10s−e)/10s < 3, that is e > 2.5s: at 12.5s+1ns.
			name: "a clock that goes back counts the previous hits in full",
			cfg:  Config{Limit: 10, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 4, allowed(10, 6, 20*sec)),
				consume(12*sec, 7, allowed(10, 0, 18*sec)),
				consume(5*sec, 1, rejected(10, 0, 7*sec+500_000_001, 25*sec)),
				consume(12*sec+500_000_000, 1, rejected(10, 0, 1, 17*sec+500_000_000)),
				consume(12*sec+500_000_001, 1, allowed(10, 0, 17*sec+499_999_999)),
			},
			final: State{Start: t0 + 10*sec, Prev: 4, Hits: 8},
		},
		{
			name: "more than the limit is rejected for good",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 4, rejected(3, 3, never, 0)),
				consume(0, 1, allowed(3, 2, 20*sec)),
				consume(sec, 4, rejected(3, 2, never, 19*sec)),
				consume(sec, math.MaxInt64, rejected(3, 2, never, 19*sec)),
			},
			final: State{Start: t0, Prev: 0, Hits: 1},
		},
		{
			name: "limit 0 rejects everything",
			cfg:  Config{Limit: 0, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 1, rejected(0, 0, never, 0)),
			},
		},
		{
			name: "non-positive tokens are an argument error",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 0, policy.Result{Code: policy.NonPositiveTokens}),
				consume(0, -1, policy.Result{Code: policy.NonPositiveTokens}),
				consume(0, math.MinInt64, policy.Result{Code: policy.NonPositiveTokens}),
				consume(0, 3, allowed(3, 0, 20*sec)),
				consume(0, 0, policy.Result{Code: policy.NonPositiveTokens}),
			},
			final: State{Start: t0, Prev: 0, Hits: 3},
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

func TestReserveNotSupported(t *testing.T) {
	cfg := Config{Limit: 3, Interval: 10 * sec}
	s := State{Start: t0, Prev: 1, Hits: 1}
	before := s
	for _, exists := range []bool{false, true} {
		got, changed := cfg.Reserve(&s, exists, t0, 1, never)
		if want := (policy.Result{Code: policy.ReserveNotSupported}); got != want || changed {
			t.Errorf("Reserve(exists=%v) = %+v, %v, want %+v, false", exists, got, changed, want)
		}
	}
	if s != before {
		t.Errorf("Reserve changed the state from %+v to %+v", before, s)
	}
}

func TestExpiresAt(t *testing.T) {
	const iv = 10 * sec
	cfg := Config{Limit: 5, Interval: iv}
	tests := []struct {
		name string
		s    State
		want int64
	}{
		{"hits roll over into the next window", State{Start: t0, Hits: 1}, t0 + 2*iv},
		{"hits and previous hits", State{Start: t0, Prev: 3, Hits: 1}, t0 + 2*iv},
		{"previous hits only fade with the window", State{Start: t0, Prev: 3}, t0 + iv},
		{"empty", State{Start: t0}, t0 + iv},
		{"saturates", State{Start: math.MaxInt64 - iv - 1, Hits: 1}, math.MaxInt64},
		{"from the past", State{Start: math.MinInt64, Hits: 1}, math.MinInt64 + 2*iv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cfg.ExpiresAt(&tt.s); got != tt.want {
				t.Errorf("ExpiresAt(%+v) = %d, want %d", tt.s, got, tt.want)
			}
		})
	}
}

// TestExpiredStateIsNoState checks ExpiresAt against the decisions: from
// ExpiresAt on, a state answers as no state does, and 1 ns before it does
// not, for a state with hits.
func TestExpiredStateIsNoState(t *testing.T) {
	const iv = 10 * sec
	cfg := Config{Limit: 5, Interval: iv}
	s := State{Start: t0, Prev: 2, Hits: 5}
	at := cfg.ExpiresAt(&s)
	for _, n := range []int64{1, 5} {
		a, b := s, State{}
		ra, ca := policytest.Decide(t, cfg, &a, true, at, n)
		rb, cb := policytest.Decide(t, cfg, &b, false, at, n)
		if ra != rb || ca != cb || a != b {
			t.Errorf("Consume(%d) at ExpiresAt: state gives %+v %v %+v, no state gives %+v %v %+v", n, ra, ca, a, rb, cb, b)
		}
	}
	// 1 ns earlier, 5·1ns/10s previous hits floor to 0, so Consume(5) is
	// accepted as on a new key, but the window is aligned to t0+10s and
	// ends 1 ns later.
	a := s
	res, _ := policytest.Decide(t, cfg, &a, true, at-1, 5)
	if want := allowed(5, 0, iv+1); res != want {
		t.Errorf("Consume(5) 1 ns before ExpiresAt = %+v, want %+v", res, want)
	}
}

// TestDecodeStateErrors: states that decode but that no window holds are
// refused too (policytest checks the malformed ones).
func TestDecodeStateErrors(t *testing.T) {
	cfg := Config{Limit: 5, Interval: 10 * sec}
	tests := []struct {
		name string
		src  []byte
	}{
		{"negative previous hits", policy.AppendInt(policy.AppendInt(policy.AppendInt(policy.AppendHeader(nil, policy.TagSlidingWindow), t0), -1), 0)},
		{"negative hits", policy.AppendInt(policy.AppendInt(policy.AppendInt(policy.AppendHeader(nil, policy.TagSlidingWindow), t0), 0), -1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Start: 1, Prev: 2, Hits: 3}
			err := cfg.DecodeState(tt.src, &s)
			if !errors.Is(err, policy.ErrBadState) {
				t.Errorf("DecodeState(%x) = %v, want an error matching ErrBadState", tt.src, err)
			}
			if want := (State{Start: 1, Prev: 2, Hits: 3}); s != want {
				t.Errorf("DecodeState(%x) left %+v, want %+v untouched", tt.src, s, want)
			}
		})
	}
}

// TestContract runs the contract's suite on windows of a few tokens.
func TestContract(t *testing.T) {
	policytest.Run(t, Config{Limit: 3, Interval: 10}, Config{Limit: 1, Interval: 7}, Config{Limit: 5, Interval: 1000})
}

func TestQuota(t *testing.T) {
	if got := (Config{Limit: 7, Interval: sec}).Quota(); got != 7 {
		t.Errorf("Quota() = %d, want 7", got)
	}
}

func BenchmarkConsume(b *testing.B) {
	cfg := Config{Limit: 1_000_000, Interval: 60 * sec}
	s := State{Start: t0, Prev: 500_000, Hits: 1}
	now := t0 + 30*sec
	b.ReportAllocs()
	for b.Loop() {
		if _, changed := cfg.Consume(&s, true, now, 1); !changed {
			s.Hits = 1
		}
	}
}

// TestPacked: the packed form answers as the machine, and refuses to
// decode a state it cannot hold.
func TestPacked(t *testing.T) {
	for _, c := range []Config{{Limit: 3, Interval: 10}, {Limit: 1, Interval: 7}, {Limit: 5, Interval: 1000}, {Limit: math.MaxUint32, Interval: sec}} {
		p, ok := c.Packed()
		if !ok {
			t.Fatalf("%+v does not pack", c)
		}
		policytest.Same(t, policy.Machine[State](c), policy.Machine[PackedState](p))
		policytest.Run(t, policy.Machine[PackedState](p))
	}
	if _, ok := (Config{Limit: math.MaxUint32 + 1, Interval: sec}).Packed(); ok {
		t.Error("a limit above MaxUint32 packs")
	}
	c := Config{Limit: 3, Interval: 10}
	big := c.AppendState(nil, &State{Start: 1, Prev: math.MaxUint32 + 1})
	var s PackedState
	p, _ := c.Packed()
	if err := p.DecodeState(big, &s); !errors.Is(err, policy.ErrBadState) {
		t.Errorf("DecodeState of a count above MaxUint32: %v, want ErrBadState", err)
	}
}

func BenchmarkConsumePacked(b *testing.B) {
	cfg, _ := Config{Limit: 1_000_000, Interval: 60 * sec}.Packed()
	s := PackedState{Start: t0, Prev: 500_000, Hits: 1}
	now := t0 + 30*sec
	b.ReportAllocs()
	for b.Loop() {
		if _, changed := cfg.Consume(&s, true, now, 1); !changed {
			s.Hits = 1
		}
	}
}
