package slidinglog

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// The expected numbers are Symfony's sliding log's (its documented
// examples; conformance/vectors/limiter-windows.json pins the same rule)
// or are worked out in the comments; a Python model of the semantics (a plain list of entries,
// RetryAfter found by searching the time line) agrees with every one.

const (
	t0    = int64(1_700_000_000_000_000_000)
	sec   = int64(time.Second)
	never = policy.Never
)

// The steps and results of the worked examples.
var consume, allowed, rejected = policytest.Consume, policytest.Allowed, policytest.Rejected

// entries builds a log, times after t0.
func entries(pairs ...int64) []Entry {
	var out []Entry
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, Entry{Time: t0 + pairs[i], Tokens: pairs[i+1]})
	}
	return out
}

func TestConsume(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []policytest.Step
		final []Entry
	}{
		{
			// Symfony's example. At +30s the hit at 0 frees a token at
			// +60s; at +71s, 2 tokens need the hit at +20s gone: +80s.
			name: "basics: every hit counts for one interval",
			cfg:  Config{Limit: 3, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(0, 1, allowed(3, 2, 60*sec)),
				consume(10*sec, 1, allowed(3, 1, 60*sec)),
				consume(20*sec, 1, allowed(3, 0, 60*sec)),
				consume(30*sec, 1, rejected(3, 0, 30*sec, 50*sec)),
				consume(61*sec, 1, allowed(3, 0, 60*sec)),
				consume(71*sec, 2, rejected(3, 1, 9*sec, 50*sec)),
				consume(71*sec, 1, allowed(3, 0, 60*sec)),
			},
			final: entries(20*sec, 1, 61*sec, 1, 71*sec, 1),
		},
		{
			name: "basics: rejected requests are not logged",
			cfg:  Config{Limit: 2, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 2, allowed(2, 0, 10*sec)),
				consume(5*sec, 1, rejected(2, 0, 5*sec, 5*sec)),
				consume(5*sec, 1, rejected(2, 0, 5*sec, 5*sec)),
				consume(10*sec+1_000_000, 2, allowed(2, 0, 10*sec)),
			},
			final: entries(10*sec+1_000_000, 2),
		},
		{
			// 3+4+2 = 9 count at +3s. 5 more need 4 freed: the 3 of +0s
			// are not enough, the 4 of +1s are, at +11s. At +11s the
			// entries of +0s and +1s are gone and 2+1 count.
			name: "multi-token entries",
			cfg:  Config{Limit: 10, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 3, allowed(10, 7, 10*sec)),
				consume(sec, 4, allowed(10, 3, 10*sec)),
				consume(2*sec, 2, allowed(10, 1, 10*sec)),
				consume(3*sec, 5, rejected(10, 1, 8*sec, 9*sec)),
				consume(3*sec, 1, allowed(10, 0, 10*sec)),
				consume(3*sec, 1, rejected(10, 0, 7*sec, 10*sec)),
				consume(11*sec, 5, allowed(10, 2, 10*sec)),
				consume(11*sec, 1, allowed(10, 1, 10*sec)),
			},
			final: entries(2*sec, 2, 3*sec, 1, 11*sec, 6),
		},
		{
			name: "an entry stops counting exactly one interval after it",
			cfg:  Config{Limit: 2, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 1, allowed(2, 1, 10*sec)),
				consume(sec, 1, allowed(2, 0, 10*sec)),
				consume(10*sec-1, 1, rejected(2, 0, 1, sec+1)),
				consume(10*sec, 1, allowed(2, 0, 10*sec)),
				consume(10*sec, 1, rejected(2, 0, sec, 10*sec)),
			},
			final: entries(sec, 1, 10*sec, 1),
		},
		{
			name: "entries at the same time merge",
			cfg:  Config{Limit: 5, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 1, allowed(5, 4, 10*sec)),
				consume(0, 2, allowed(5, 2, 10*sec)),
				consume(0, 3, rejected(5, 2, 10*sec, 10*sec)),
				consume(0, 2, allowed(5, 0, 10*sec)),
			},
			final: entries(0, 5),
		},
		{
			// Back at +3s, the hit is logged at +5s with the newest entry,
			// so it counts until +15s.
			name: "a clock that goes back logs at the newest entry",
			cfg:  Config{Limit: 4, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(5*sec, 2, allowed(4, 2, 10*sec)),
				consume(3*sec, 1, allowed(4, 1, 12*sec)),
				consume(14*sec, 2, rejected(4, 1, sec, sec)),
				consume(15*sec-1, 2, rejected(4, 1, 1, 1)),
				consume(15*sec, 2, allowed(4, 2, 10*sec)),
			},
			final: entries(15*sec, 2),
		},
		{
			name: "more than the limit is rejected for good",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 4, rejected(3, 3, never, 0)),
				consume(0, 2, allowed(3, 1, 10*sec)),
				consume(sec, 4, rejected(3, 1, never, 9*sec)),
				consume(sec, math.MaxInt64, rejected(3, 1, never, 9*sec)),
			},
			final: entries(0, 2),
		},
		{
			name: "a log that stopped counting is cleared",
			cfg:  Config{Limit: 3, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 10*sec)),
				consume(100*sec, 1, allowed(3, 2, 10*sec)),
			},
			final: entries(100*sec, 1),
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
				consume(0, 3, allowed(3, 0, 10*sec)),
				consume(0, math.MinInt64, policy.Result{Code: policy.NonPositiveTokens}),
			},
			final: entries(0, 3),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			policytest.Steps(t, tt.cfg, &s, false, t0, tt.steps)
			if got := s.Entries(); !slices.Equal(got, tt.final) {
				t.Errorf("final log = %v, want %v", got, tt.final)
			}
		})
	}
}

func TestReserveNotSupported(t *testing.T) {
	cfg := Config{Limit: 3, Interval: 10 * sec}
	var s State
	policytest.Decide(t, cfg, &s, false, t0, 1)
	for _, exists := range []bool{false, true} {
		got, changed := cfg.Reserve(&s, exists, t0, 1, never)
		if want := (policy.Result{Code: policy.ReserveNotSupported}); got != want || changed {
			t.Errorf("Reserve(exists=%v) = %+v, %v, want %+v, false", exists, got, changed, want)
		}
	}
	if got, want := s.Entries(), entries(0, 1); !slices.Equal(got, want) {
		t.Errorf("Reserve changed the log to %v, want %v", got, want)
	}
}

func TestExpiresAt(t *testing.T) {
	const iv = 10 * sec
	cfg := Config{Limit: 5, Interval: iv}
	tests := []struct {
		name string
		log  []Entry
		want int64
	}{
		{"empty", nil, math.MinInt64},
		{"one entry", entries(0, 1), t0 + iv},
		{"the newest entry counts", entries(0, 1, 3*sec, 2), t0 + 3*sec + iv},
		{"saturates", []Entry{{Time: math.MaxInt64 - 1, Tokens: 1}}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := decodeLog(t, cfg, tt.log)
			if got := cfg.ExpiresAt(&s); got != tt.want {
				t.Errorf("ExpiresAt(%v) = %d, want %d", tt.log, got, tt.want)
			}
		})
	}
}

// decodeLog builds a State holding log through the encoding.
func decodeLog(t *testing.T, cfg Config, log []Entry) State {
	t.Helper()
	b := policy.AppendInt(policy.AppendHeader(nil, policy.TagSlidingLog), int64(len(log)))
	prev := int64(0)
	for _, e := range log {
		b = policy.AppendInt(policy.AppendInt(b, e.Time-prev), e.Tokens)
		prev = e.Time
	}
	var s State
	if err := cfg.DecodeState(b, &s); err != nil {
		t.Fatalf("DecodeState(%v) = %v", log, err)
	}
	return s
}

// TestSteadyStateReusesMemory runs a log at its limit for many intervals:
// it never holds more than Limit entries, stops allocating, and its
// backing array stays within twice the limit.
func TestSteadyStateReusesMemory(t *testing.T) {
	const limit = 100
	cfg := Config{Limit: limit, Interval: sec}
	var s State
	exists := false
	now := t0
	step := sec / limit // exactly one entry stops counting per request
	for range 10 * limit {
		if _, changed := policytest.Decide(t, cfg, &s, exists, now, 1); !changed {
			t.Fatalf("Consume(1) at +%d rejected", now-t0)
		}
		exists = true
		now += step
		if n := len(s.Entries()); n > limit {
			t.Fatalf("log of %d entries, want at most %d", n, limit)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, changed := cfg.Consume(&s, true, now, 1); !changed {
			t.Fatalf("Consume(1) at +%d rejected", now-t0)
		}
		now += step
	})
	if allocs != 0 {
		t.Errorf("Consume on a steady log: %v allocations, want 0", allocs)
	}
	if c := cap(s.log); c > 2*limit+1 {
		t.Errorf("backing array of %d entries, want at most %d", c, 2*limit+1)
	}
}

func TestClone(t *testing.T) {
	cfg := Config{Limit: 5, Interval: 10 * sec}
	var s State
	policytest.Decide(t, cfg, &s, false, t0, 1)
	policytest.Decide(t, cfg, &s, true, t0+sec, 1)
	c := s.Clone()
	policytest.Decide(t, cfg, &s, true, t0+10*sec, 1) // drops the first entry, appends
	policytest.Decide(t, cfg, &c, true, t0+2*sec, 2)
	if got, want := s.Entries(), entries(sec, 1, 10*sec, 1); !slices.Equal(got, want) {
		t.Errorf("original log = %v, want %v", got, want)
	}
	if got, want := c.Entries(), entries(0, 1, sec, 1, 2*sec, 2); !slices.Equal(got, want) {
		t.Errorf("cloned log = %v, want %v", got, want)
	}
}

func TestStateEncoding(t *testing.T) {
	cfg := Config{Limit: 5, Interval: 10 * sec}
	var s State
	for _, st := range []struct{ at, n int64 }{{0, 1}, {sec, 2}, {2 * sec, 1}, {11 * sec, 1}} {
		policytest.Decide(t, cfg, &s, true, t0+st.at, st.n)
	}
	b := cfg.AppendState([]byte("prefix"), &s)
	// A state with a larger backing array is decoded into in place.
	got := State{log: make([]mark, 7, 16), head: 3, base: 99}
	backing := &got.log[:1][0]
	if err := cfg.DecodeState(b[len("prefix"):], &got); err != nil {
		t.Fatalf("DecodeState(AppendState) = %v", err)
	}
	// At +11s the entries of +0s and +1s stopped counting and were dropped.
	if want := entries(2*sec, 1, 11*sec, 1); !slices.Equal(got.Entries(), want) {
		t.Errorf("DecodeState(AppendState) = %v, want %v", got.Entries(), want)
	}
	if &got.log[0] != backing {
		t.Errorf("DecodeState allocated a new log instead of reusing the state's")
	}
	// Decisions on the decoded log match the original's.
	for _, n := range []int64{1, 2, 3} {
		a, b := cfg.Peek(&s, true, t0+12*sec, n), cfg.Peek(&got, true, t0+12*sec, n)
		if a != b {
			t.Errorf("Peek(%d) on the decoded log = %+v, want %+v", n, b, a)
		}
	}
	for _, log := range [][]Entry{
		nil,
		{{Time: math.MinInt64, Tokens: 1}, {Time: -1, Tokens: 1}, {Time: math.MaxInt64 - 1, Tokens: math.MaxInt64 - 2}},
	} {
		s := decodeLog(t, cfg, log)
		var again State
		if err := cfg.DecodeState(cfg.AppendState(nil, &s), &again); err != nil || !slices.Equal(again.Entries(), s.Entries()) {
			t.Errorf("DecodeState(AppendState(%v)) = %v, %v", log, again.Entries(), err)
		}
	}
}

func TestDecodeStateErrors(t *testing.T) {
	cfg := Config{Limit: 5, Interval: 10 * sec}
	hdr := func() []byte { return policy.AppendHeader(nil, policy.TagSlidingLog) }
	ints := func(vs ...int64) []byte {
		b := hdr()
		for _, v := range vs {
			b = policy.AppendInt(b, v)
		}
		return b
	}
	// policytest checks the malformed states; these decode to logs that
	// cannot be.
	tests := []struct {
		name string
		src  []byte
	}{
		{"negative count", ints(-1)},
		{"count beyond the bytes", ints(3, t0, 1, sec, 2)},
		{"huge count", ints(math.MaxInt64)},
		{"zero tokens", ints(1, t0, 0)},
		{"negative tokens", ints(1, t0, -3)},
		{"out of order", ints(2, t0, 1, -1, 1)},
		{"after the end of time", ints(2, math.MaxInt64, 1, 1, 1)},
		{"too many tokens", ints(2, t0, math.MaxInt64, 0, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := decodeLog(t, cfg, entries(0, 1))
			err := cfg.DecodeState(tt.src, &s)
			if !errors.Is(err, policy.ErrBadState) {
				t.Errorf("DecodeState(%x) = %v, want an error matching ErrBadState", tt.src, err)
			}
			if got, want := s.Entries(), entries(0, 1); !slices.Equal(got, want) {
				t.Errorf("DecodeState(%x) left %v, want %v untouched", tt.src, got, want)
			}
		})
	}
}

// TestContract runs the contract's suite on logs of a few tokens.
func TestContract(t *testing.T) {
	policytest.Run(t, Config{Limit: 3, Interval: 10}, Config{Limit: 1, Interval: 7}, Config{Limit: 6, Interval: 1000})
}

func TestQuota(t *testing.T) {
	if got := (Config{Limit: 7, Interval: sec}).Quota(); got != 7 {
		t.Errorf("Quota() = %d, want 7", got)
	}
}

// BenchmarkConsume runs a log of 1000 entries at its limit: every request
// drops the oldest entry and logs a new one.
func BenchmarkConsume(b *testing.B) {
	const limit = 1000
	cfg := Config{Limit: limit, Interval: sec}
	var s State
	now := t0
	step := sec / limit
	for i := range 2 * limit {
		cfg.Consume(&s, i > 0, now, 1)
		now += step
	}
	b.ReportAllocs()
	for b.Loop() {
		cfg.Consume(&s, true, now, 1)
		now += step
	}
}
