package fixedwindow

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// The expected numbers are worked out by hand in the comments, from
// Symfony's fixed window and the differences the
// package documents: exact nanoseconds, a window that ends at exactly
// start+Interval, and reservations that are debt repaid window by window.

const (
	t0    = int64(1_700_000_000_000_000_000)
	sec   = int64(time.Second)
	ms    = int64(time.Millisecond)
	never = policy.Never
)

// The steps and results of the worked examples.
var (
	consume, peek, reserve     = policytest.Consume, policytest.Peek, policytest.Reserve
	allowed, granted, rejected = policytest.Allowed, policytest.Granted, policytest.Rejected
)

// run runs steps on a key of c whose state is s, as policytest.Steps
// does, and returns the state they leave.
func run(t *testing.T, c Config, s State, exists bool, base int64, steps []policytest.Step) State {
	t.Helper()
	policytest.Steps(t, c, &s, exists, base, steps)
	return s
}

func TestDecisions(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []policytest.Step
		final State // start relative to t0
	}{
		{
			// The first hit at +10s opens [10s, 70s). 1 ns before its end
			// the window is full and the wait is that 1 ns; at exactly
			// 70s a new window opens at the hit.
			name: "the window opens at the first hit and ends at start+Interval",
			cfg:  Config{Limit: 3, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(10*sec, 1, allowed(3, 2, 60*sec)),
				consume(40*sec, 2, allowed(3, 0, 30*sec)),
				consume(70*sec-1, 1, rejected(3, 0, 1, 1)),
				consume(70*sec, 3, allowed(3, 0, 60*sec)),
			},
			final: State{Start: 70 * sec, Hits: 3},
		},
		{
			// [0, 60s) is full; the next hit at 150s opens [150s, 210s),
			// not the grid's [120s, 180s).
			name: "a new window is anchored at the next hit, not on the grid",
			cfg:  Config{Limit: 3, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 60*sec)),
				consume(150*sec, 1, allowed(3, 2, 60*sec)),
				consume(200*sec, 2, allowed(3, 0, 10*sec)),
				consume(209*sec, 1, rejected(3, 0, sec, sec)),
				consume(210*sec, 1, allowed(3, 2, 60*sec)),
			},
			final: State{Start: 210 * sec, Hits: 1},
		},
		{
			// 4 of 5 taken: two rejected requests for 2 leave the 1 that
			// is left, and it is still there for a request for 1.
			name: "a rejection spends nothing",
			cfg:  Config{Limit: 5, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(0, 4, allowed(5, 1, 10*sec)),
				consume(sec, 2, rejected(5, 1, 9*sec, 9*sec)),
				consume(2*sec, 2, rejected(5, 1, 8*sec, 8*sec)),
				consume(3*sec, 1, allowed(5, 0, 7*sec)),
			},
			final: State{Start: 0, Hits: 5},
		},
		{
			// Symfony's quirk (limiter-windows.json pins the exact value): it says 9.25s where 9.75s are
			// left of a window that opened at +250ms, seen at +500ms.
			name: "retry after is the exact time left in the window",
			cfg:  Config{Limit: 2, Interval: 10 * sec},
			steps: []policytest.Step{
				consume(250*ms, 2, allowed(2, 0, 10*sec)),
				consume(500*ms, 1, rejected(2, 0, 9750*ms, 9750*ms)),
				consume(10250*ms-1, 2, rejected(2, 0, 1, 1)),
				consume(10250*ms, 2, allowed(2, 0, 10*sec)),
			},
			final: State{Start: 10250 * ms, Hits: 2},
		},
		{
			// A Peek on no state does not open the window: the first
			// Consume at +5s does, [5s, 65s). At +65s a Peek sees the new
			// window it would open; a Consume back at +64s still counts
			// in the old one.
			name: "peek answers as consume would and takes nothing",
			cfg:  Config{Limit: 3, Interval: 60 * sec},
			steps: []policytest.Step{
				peek(0, 3, allowed(3, 0, 60*sec)),
				consume(5*sec, 2, allowed(3, 1, 60*sec)),
				peek(6*sec, 2, rejected(3, 1, 59*sec, 59*sec)),
				peek(6*sec, 1, allowed(3, 0, 59*sec)),
				peek(65*sec, 3, allowed(3, 0, 60*sec)),
				consume(64*sec, 1, allowed(3, 0, sec)),
			},
			final: State{Start: 5 * sec, Hits: 3},
		},
		{
			// [0, 60s) is full. At +15s a token goes to [60s, 120s): a
			// wait of 45s, refused with a bound of 45s−1ns, granted with
			// 45s. 2 more do not fit in the 1 left in [60s, 120s): they
			// go to [120s, 180s), 105s away, and that 1 is spent (6 hits,
			// ending at 180s). So a request for 1 at 59s, 60s or 120s
			// waits for 180s. At 180s the debt is repaid and a new window
			// opens at the hit.
			name: "reservations wait for the first window with room",
			cfg:  Config{Limit: 2, Interval: 60 * sec},
			steps: []policytest.Step{
				reserve(0, 2, 0, granted(2, 0, 60*sec, 0)),
				reserve(15*sec, 1, 45*sec-1, rejected(2, 0, 45*sec, 45*sec)),
				reserve(15*sec, 1, 45*sec, granted(2, 0, 105*sec, 45*sec)),
				reserve(15*sec, 2, never, granted(2, 0, 165*sec, 105*sec)),
				consume(59*sec, 1, rejected(2, 0, 121*sec, 121*sec)),
				consume(60*sec, 1, rejected(2, 0, 120*sec, 120*sec)),
				consume(120*sec, 1, rejected(2, 0, 60*sec, 60*sec)),
				consume(180*sec, 1, allowed(2, 1, 60*sec)),
				consume(210*sec, 1, allowed(2, 0, 30*sec)),
			},
			final: State{Start: 180 * sec, Hits: 2},
		},
		{
			// 1 is left in [0, 60s), and 2 are reserved: they go to
			// [60s, 120s) and the 1 left is spent, so [60s, 120s) serves
			// the 2 and 1 more, never 4. A request for 1 at 0s waits for
			// 60s, and the 5 hits end at 120s.
			name: "a reservation spends the room it skips",
			cfg:  Config{Limit: 3, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(0, 2, allowed(3, 1, 60*sec)),
				reserve(0, 2, never, granted(3, 0, 120*sec, 60*sec)),
				consume(0, 1, rejected(3, 0, 60*sec, 120*sec)),
				consume(60*sec, 1, allowed(3, 0, 60*sec)),
				consume(60*sec, 1, rejected(3, 0, 60*sec, 60*sec)),
			},
			final: State{Start: 60 * sec, Hits: 3},
		},
		{
			// Reserve with room now is a Consume: wait 0. 3 more when
			// [0, 60s) is full wait for [60s, 120s), 30s; 1 more then
			// lands in [120s, 180s), 90s away. At 60s, 4 hits are left
			// for [60s, 120s) and later: 1 more waits for 120s. At 120s
			// one reserved token is left, and 2 fill the window.
			name: "reservations with room now wait nothing",
			cfg:  Config{Limit: 3, Interval: 60 * sec},
			steps: []policytest.Step{
				reserve(0, 1, 0, granted(3, 2, 60*sec, 0)),
				reserve(30*sec, 2, 0, granted(3, 0, 30*sec, 0)),
				reserve(30*sec, 1, 0, rejected(3, 0, 30*sec, 30*sec)),
				reserve(30*sec, 3, 30*sec, granted(3, 0, 90*sec, 30*sec)),
				reserve(30*sec, 1, never, granted(3, 0, 150*sec, 90*sec)),
				consume(60*sec, 1, rejected(3, 0, 60*sec, 120*sec)),
				consume(120*sec, 2, allowed(3, 0, 60*sec)),
			},
			final: State{Start: 120 * sec, Hits: 3},
		},
		{
			// 1 per 10s, 2 tokens of debt: [10s, 20s) and [20s, 30s) hold
			// them, on the grid of the first hit, however late the next
			// request comes within them. At 35s all are repaid and the
			// window opens at the hit.
			name: "debt is repaid window by window on the same grid",
			cfg:  Config{Limit: 1, Interval: 10 * sec},
			steps: []policytest.Step{
				reserve(0, 1, never, granted(1, 0, 10*sec, 0)),
				reserve(0, 1, never, granted(1, 0, 20*sec, 10*sec)),
				reserve(0, 1, never, granted(1, 0, 30*sec, 20*sec)),
				consume(19*sec, 1, rejected(1, 0, 11*sec, 11*sec)),
				consume(25*sec, 1, rejected(1, 0, 5*sec, 5*sec)),
				peek(30*sec-1, 1, rejected(1, 0, 1, 1)),
				consume(35*sec, 1, allowed(1, 0, 10*sec)),
			},
			final: State{Start: 35 * sec, Hits: 1},
		},
		{
			// [30s, 90s) is full. Times before 30s still count in it; the
			// wait runs to 90s from the earlier now. A reservation back
			// at 40s in [90s, 150s) goes to [150s, 210s): 110s.
			name: "a clock that goes back stays in the window",
			cfg:  Config{Limit: 2, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(30*sec, 2, allowed(2, 0, 60*sec)),
				consume(10*sec, 1, rejected(2, 0, 80*sec, 80*sec)),
				consume(-1000*sec, 1, rejected(2, 0, 1090*sec, 1090*sec)),
				consume(89*sec, 1, rejected(2, 0, sec, sec)),
				consume(90*sec, 1, allowed(2, 1, 60*sec)),
				consume(50*sec, 1, allowed(2, 0, 100*sec)),
				reserve(40*sec, 1, never, granted(2, 0, 170*sec, 110*sec)),
			},
			final: State{Start: 90 * sec, Hits: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, tt.cfg, State{}, false, t0, tt.steps)
			want := State{Start: t0 + tt.final.Start, Hits: tt.final.Hits}
			if got != want {
				t.Errorf("final state = %+v, want %+v", got, want)
			}
		})
	}
}

func TestArgumentErrors(t *testing.T) {
	c := Config{Limit: 3, Interval: 60 * sec}
	tests := []struct {
		name       string
		s          State
		reserve    bool
		n, maxWait int64
		want       policy.Code
	}{
		{"zero tokens", State{Start: t0, Hits: 1}, false, 0, 0, policy.NonPositiveTokens},
		{"negative tokens", State{Start: t0, Hits: 1}, false, -1, 0, policy.NonPositiveTokens},
		{"MinInt64 tokens", State{Start: t0, Hits: 1}, false, math.MinInt64, 0, policy.NonPositiveTokens},
		{"zero tokens in debt", State{Start: t0, Hits: 7}, false, 0, 0, policy.NonPositiveTokens},
		{"above the limit", State{Start: t0, Hits: 0}, false, 4, 0, policy.TokensAboveLimit},
		{"MaxInt64 tokens", State{Start: t0, Hits: 1}, false, math.MaxInt64, 0, policy.TokensAboveLimit},
		{"reserve zero tokens", State{Start: t0, Hits: 1}, true, 0, 0, policy.NonPositiveTokens},
		{"reserve above the limit", State{Start: t0, Hits: 1}, true, 4, never, policy.TokensAboveLimit},
		{"negative maxWait", State{Start: t0, Hits: 1}, true, 1, -1, policy.NonPositiveMaxWait},
		{"MinInt64 maxWait", State{Start: t0, Hits: 1}, true, 1, math.MinInt64, policy.NonPositiveMaxWait},
		{"tokens are checked before maxWait", State{Start: t0, Hits: 1}, true, 0, -1, policy.NonPositiveTokens},
		{"the limit is checked before maxWait", State{Start: t0, Hits: 1}, true, 4, -1, policy.TokensAboveLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := policy.Result{Code: tt.want}
			if tt.want == policy.TokensAboveLimit {
				want.Limit = c.Limit // the limit the tokens are above
			}
			for _, exists := range []bool{false, true} {
				s := tt.s
				var res policy.Result
				var changed bool
				if tt.reserve {
					res, changed = c.Reserve(&s, exists, t0+sec, tt.n, tt.maxWait)
				} else {
					res, changed = policytest.Decide(t, c, &s, exists, t0+sec, tt.n)
					if p := c.Peek(&s, exists, t0+sec, tt.n); p != want {
						t.Errorf("Peek(%d) = %+v, want %+v", tt.n, p, want)
					}
				}
				if res != want || changed || s != tt.s {
					t.Errorf("exists %v: (%d, maxWait %d) = %+v, %v, state %+v; want %+v, false, %+v", exists, tt.n, tt.maxWait, res, changed, s, want, tt.s)
				}
			}
		})
	}
}

func TestExpiresAt(t *testing.T) {
	minute := Config{Limit: 2, Interval: 60 * sec}
	tests := []struct {
		name string
		cfg  Config
		s    State
		want int64
	}{
		{"no hits", minute, State{Start: t0}, t0 + 60*sec},
		{"some hits", minute, State{Start: t0, Hits: 1}, t0 + 60*sec},
		{"full", minute, State{Start: t0, Hits: 2}, t0 + 60*sec},
		// 3 hits: the third is debt in [60s, 120s).
		{"one token of debt", minute, State{Start: t0, Hits: 3}, t0 + 120*sec},
		{"a full window of debt", minute, State{Start: t0, Hits: 4}, t0 + 120*sec},
		{"debt in two windows", minute, State{Start: t0, Hits: 5}, t0 + 180*sec},
		{"at the start of time", minute, State{Start: math.MinInt64, Hits: 1}, math.MinInt64 + 60*sec},
		{"past the end of time", minute, State{Start: math.MaxInt64 - sec, Hits: 1}, math.MaxInt64},
		// ⌈MaxInt64/2⌉ = 2^62 windows of a minute: far past the end.
		{"debt past the end of time", minute, State{Start: t0, Hits: math.MaxInt64}, math.MaxInt64},
		// The same 2^62 minutes from −10^18 ns: still far past the end,
		// not MaxInt64−10^18 (a saturated product plus a negative start).
		{"debt past the end of time from before 0", minute, State{Start: -1e18, Hits: math.MaxInt64}, math.MaxInt64},
		// MaxInt64 windows of 1 ns from 0 end at exactly MaxInt64.
		{"debt to the end of time", Config{Limit: 1, Interval: 1}, State{Start: 0, Hits: math.MaxInt64}, math.MaxInt64},
		{"a limit of MaxInt64", Config{Limit: math.MaxInt64, Interval: 1}, State{Start: 5, Hits: math.MaxInt64}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			if got := tt.cfg.ExpiresAt(&s); got != tt.want {
				t.Fatalf("ExpiresAt(%+v) = %d, want %d", tt.s, got, tt.want)
			}
			if tt.want == math.MaxInt64 {
				return
			}
			// From ExpiresAt on, the state is worth no more than none.
			for _, n := range []int64{1, tt.cfg.Limit} {
				a, b := tt.s, State{}
				ra, ca := tt.cfg.Consume(&a, true, tt.want, n)
				rb, cb := tt.cfg.Consume(&b, false, tt.want, n)
				if ra != rb || ca != cb || a != b {
					t.Errorf("at ExpiresAt, Consume(%d) = %+v %v %+v, but on no state %+v %v %+v", n, ra, ca, a, rb, cb, b)
				}
			}
		})
	}
}

func TestEncoding(t *testing.T) {
	c := Config{Limit: 10, Interval: 60 * sec}
	// Header: version 1, tag 1; then zig-zag varints: 1→2, 2→4, −1→1, 3→6.
	tests := []struct {
		name string
		s    State
		want []byte
	}{
		{"small", State{Start: 1, Hits: 2}, []byte{1, 1, 2, 4}},
		{"negative start", State{Start: -1, Hits: 3}, []byte{1, 1, 1, 6}},
		{"zero", State{}, []byte{1, 1, 0, 0}},
		// 300 → 600 = 0b100_1011000: 0xd8 0x04.
		{"two-byte varint", State{Start: 0, Hits: 300}, []byte{1, 1, 0, 0xd8, 0x04}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.AppendState([]byte{0xee}, &tt.s)
			if string(got[1:]) != string(tt.want) || got[0] != 0xee {
				t.Fatalf("AppendState(%+v) = %x, want ee%x", tt.s, got, tt.want)
			}
			var s State
			if err := c.DecodeState(tt.want, &s); err != nil || s != tt.s {
				t.Fatalf("DecodeState(%x) = %+v, %v; want %+v", tt.want, s, err, tt.s)
			}
		})
	}
	for _, s := range []State{
		{Start: t0, Hits: 7},
		{Start: math.MinInt64, Hits: math.MaxInt64},
		{Start: math.MaxInt64, Hits: 0},
	} {
		var got State
		if err := c.DecodeState(c.AppendState(nil, &s), &got); err != nil || got != s {
			t.Errorf("DecodeState(AppendState(%+v)) = %+v, %v", s, got, err)
		}
	}
}

// TestDecodeStateErrors: states that decode but that no window holds are
// refused too (policytest checks the malformed ones).
func TestDecodeStateErrors(t *testing.T) {
	c := Config{Limit: 10, Interval: 60 * sec}
	tests := []struct {
		name string
		src  []byte
	}{
		// Zig-zag 1 is −1: a window cannot hold −1 hits. A negative
		// count would let more than Limit through (Remaining is
		// Limit−Hits) and feeds CeilDiv, which requires a ≥ 0; the
		// sliding window refuses negative hits.
		{"negative hits", []byte{1, 1, 0, 1}},
		{"MinInt64 hits", c.AppendState(nil, &State{Start: t0, Hits: math.MinInt64})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sentinel := State{Start: 7, Hits: 8}
			s := sentinel
			err := c.DecodeState(tt.src, &s)
			if !errors.Is(err, policy.ErrBadState) {
				t.Fatalf("DecodeState(%x) = %+v, %v; want an error matching ErrBadState", tt.src, s, err)
			}
			if s != sentinel {
				t.Errorf("DecodeState(%x) failed but changed the state to %+v", tt.src, s)
			}
		})
	}
}

// TestContract runs the contract's suite on windows of a few tokens.
func TestContract(t *testing.T) {
	policytest.Run(t, Config{Limit: 3, Interval: 10}, Config{Limit: 1, Interval: 7},
		Config{Limit: 4, Interval: 16, Aligned: true})
}

// TestTimeLineEdges runs the policy at the ends of int64: times are
// absolute here.
func TestTimeLineEdges(t *testing.T) {
	const maxI = math.MaxInt64
	bigLimit := int64(3 << 61) // above MaxInt64/2: two of them do not fit in int64
	tests := []struct {
		name   string
		cfg    Config
		s      State
		exists bool
		steps  []policytest.Step
		final  State
	}{
		{
			// MaxInt64 tokens fill the window: 1 more must wait for its
			// end, 59s after +1s.
			name:  "a limit of MaxInt64 holds",
			cfg:   Config{Limit: maxI, Interval: 60 * sec},
			steps: []policytest.Step{consume(t0, maxI, allowed(maxI, 0, 60*sec)), consume(t0+sec, 1, rejected(maxI, 0, 59*sec, 59*sec))},
			final: State{Start: t0, Hits: maxI},
		},
		{
			// Two windows' worth cannot be counted in an int64; the
			// second reservation, due at the window's end (+60s), must
			// not be granted at once. It is refused: no maxWait makes it
			// fit now.
			name: "a reservation whose hits do not fit in int64",
			cfg:  Config{Limit: bigLimit, Interval: 60 * sec},
			steps: []policytest.Step{
				reserve(t0, bigLimit, never, granted(bigLimit, 0, 60*sec, 0)),
				reserve(t0, bigLimit, never, rejected(bigLimit, 0, never, 60*sec)),
			},
			final: State{Start: t0, Hits: bigLimit},
		},
		{
			// With 1 taken, a whole limit goes to the next window and
			// spends the room it skips: Limit hits, then Limit more,
			// which do not fit in int64 either. The state stays usable.
			name: "a reservation into the next window whose hits do not fit in int64",
			cfg:  Config{Limit: bigLimit, Interval: 60 * sec},
			steps: []policytest.Step{
				consume(t0, 1, allowed(bigLimit, bigLimit-1, 60*sec)),
				reserve(t0, bigLimit, never, rejected(bigLimit, bigLimit-1, never, 60*sec)),
				consume(t0+sec, 1, allowed(bigLimit, bigLimit-2, 59*sec)),
			},
			final: State{Start: t0, Hits: 2},
		},
		{
			// The window [MaxInt64−30s, MaxInt64+30s) ends past the time
			// line, 60s after the hit that opens it.
			name:  "a window that ends past the end of time",
			cfg:   Config{Limit: 2, Interval: 60 * sec},
			steps: []policytest.Step{consume(maxI-30*sec, 2, allowed(2, 0, 60*sec))},
			final: State{Start: maxI - 30*sec, Hits: 2},
		},
		{
			// In the same window at MaxInt64, a rejected request still
			// has 30s to wait: never 0, which means allowed.
			name:   "a rejection at the end of time",
			cfg:    Config{Limit: 2, Interval: 60 * sec},
			s:      State{Start: maxI - 30*sec, Hits: 2},
			exists: true,
			steps:  []policytest.Step{consume(maxI, 1, rejected(2, 0, 30*sec, 30*sec))},
			final:  State{Start: maxI - 30*sec, Hits: 2},
		},
		{
			// A window opened at the start of time ended long before 0:
			// a fresh window opens at the hit. 0 − MinInt64 overflows
			// int64.
			name:   "a window from the start of time",
			cfg:    Config{Limit: 2, Interval: 60 * sec},
			s:      State{Start: math.MinInt64, Hits: 2},
			exists: true,
			steps:  []policytest.Step{consume(0, 1, allowed(2, 1, 60*sec))},
			final:  State{Start: 0, Hits: 1},
		},
		{
			// Back from [MaxInt64−30s, MaxInt64+30s) to −1, the window
			// ends MaxInt64+30s+1ns away: beyond any duration, so the
			// wait is Never and no reservation is granted.
			name:   "a clock that goes back across the time line",
			cfg:    Config{Limit: 2, Interval: 60 * sec},
			s:      State{Start: maxI - 30*sec, Hits: 2},
			exists: true,
			steps: []policytest.Step{
				reserve(-1, 1, never, rejected(2, 0, never, never)),
				consume(-1, 1, rejected(2, 0, never, never)),
			},
			final: State{Start: maxI - 30*sec, Hits: 2},
		},
		{
			// MaxInt64−1 hits, 2 a minute, from −40s: the window with room
			// for 1 more is the (2^62−1)th, about 2^62 minutes away, and
			// the hits end there too. Both are beyond any duration, not
			// MaxInt64 ns minus the 40s before 0 (a saturated product
			// added to a negative start).
			name:   "debt past the end of time from before 0",
			cfg:    Config{Limit: 2, Interval: 60 * sec},
			s:      State{Start: -40 * sec, Hits: maxI - 1},
			exists: true,
			steps: []policytest.Step{
				reserve(0, 1, never, rejected(2, 0, never, never)),
				consume(0, 1, rejected(2, 0, never, never)),
			},
			final: State{Start: -40 * sec, Hits: maxI - 1},
		},
		{
			// 1 token per ns from the start of time: the window ends at
			// MinInt64+1, and the request at MinInt64 waits 1 ns.
			name: "windows of 1 ns",
			cfg:  Config{Limit: 1, Interval: 1},
			steps: []policytest.Step{
				consume(math.MinInt64, 1, allowed(1, 0, 1)),
				consume(math.MinInt64, 1, rejected(1, 0, 1, 1)),
				reserve(math.MinInt64, 1, 1, granted(1, 0, 2, 1)),
				consume(math.MinInt64+1, 1, rejected(1, 0, 1, 1)),
				consume(math.MinInt64+2, 1, allowed(1, 0, 1)),
			},
			final: State{Start: math.MinInt64 + 2, Hits: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(t, tt.cfg, tt.s, tt.exists, 0, tt.steps); got != tt.final {
				t.Errorf("final state = %+v, want %+v", got, tt.final)
			}
		})
	}
}

// model is the fixed window from its definition, in exact arithmetic.
//
// The tokens charged to a key fill its windows in order, Limit to a window:
// window i of the grid anchored at start, [start+i·Interval,
// start+(i+1)·Interval), holds inWindow(i) = min(max(hits−i·Limit, 0),
// Limit) of them. Windows before the one that holds now are gone; when
// they held every charged token, the next hit anchors a new grid at its
// own time. A request for n goes whole to the first window with room for
// n, at its start; a reservation spends the room left in the windows
// before it. No Limit·window arithmetic may wrap around.
type model struct {
	limit, interval *big.Int
	aligned         bool
	exists          bool
	start, hits     *big.Int
}

func bi(v int64) *big.Int { return big.NewInt(v) }

var (
	maxInt64 = bi(math.MaxInt64)
	bigZero  = bi(0)
)

func newModel(c Config, s State, exists bool) *model {
	return &model{limit: bi(c.Limit), interval: bi(c.Interval), aligned: c.Aligned, exists: exists, start: bi(s.Start), hits: bi(s.Hits)}
}

// state is the model's state as a State; it fits in int64 by
// construction (every start is at most some now, and hits are checked).
func (m *model) state() State { return State{Start: m.start.Int64(), Hits: m.hits.Int64()} }

// inWindow is the tokens that window i of the grid holds.
func (m *model) inWindow(hits, i *big.Int) *big.Int {
	v := new(big.Int).Sub(hits, new(big.Int).Mul(i, m.limit))
	if v.Sign() < 0 {
		return v.SetInt64(0)
	}
	if v.Cmp(m.limit) > 0 {
		v.Set(m.limit)
	}
	return v
}

// current is the window that holds now: its start and the hits charged
// to it and later windows.
func (m *model) current(now int64) (start, hits *big.Int) {
	t := bi(now)
	if !m.exists {
		return m.open(t), new(big.Int)
	}
	end := new(big.Int).Add(m.start, m.interval)
	if t.Cmp(end) < 0 { // in the window, or before it: the clock went back
		return m.start, m.hits
	}
	k := new(big.Int).Quo(new(big.Int).Sub(t, m.start), m.interval)
	if m.inWindow(m.hits, k).Sign() == 0 {
		return m.open(t), new(big.Int) // every charged token was in a window gone by
	}
	return new(big.Int).Add(m.start, new(big.Int).Mul(k, m.interval)),
		new(big.Int).Sub(m.hits, new(big.Int).Mul(k, m.limit))
}

// open is the start of a fresh window at t: t, or when aligned the
// multiple of the interval at or before t if it is an int64.
func (m *model) open(t *big.Int) *big.Int {
	if !m.aligned {
		return t
	}
	g := new(big.Int).Div(t, m.interval) // Euclidean: rounds towards -∞ here
	g.Mul(g, m.interval)
	if g.Cmp(bi(math.MinInt64)) < 0 {
		return t
	}
	return g
}

// dur is v as a duration: 0 below 0, Never above MaxInt64.
func dur(v *big.Int) int64 {
	switch {
	case v.Sign() < 0:
		return 0
	case v.Cmp(maxInt64) > 0:
		return never
	}
	return v.Int64()
}

// describe is the Result for the window (start, hits) at now.
func (m *model) describe(start, hits *big.Int, now int64) policy.Result {
	// The state is back to none at the end of the last window that holds
	// a hit, or of the current one.
	windows := new(big.Int).Add(hits, new(big.Int).Sub(m.limit, bi(1)))
	windows.Quo(windows, m.limit)
	if windows.Sign() <= 0 {
		windows.SetInt64(1)
	}
	end := new(big.Int).Add(start, windows.Mul(windows, m.interval))
	return policy.Result{
		Remaining:  dur(new(big.Int).Sub(m.limit, hits)),
		ResetAfter: dur(end.Sub(end, bi(now))),
		Limit:      m.limit.Int64(),
	}
}

// decide answers n tokens at now, for a Reserve within maxWait if reserve
// is set, and returns whether the model's state changes (it then has).
func (m *model) decide(now, n, maxWait int64, reserve bool) (policy.Result, bool) {
	switch {
	case n <= 0:
		return policy.Result{Code: policy.NonPositiveTokens}, false
	case n > m.limit.Int64():
		return policy.Result{Code: policy.TokensAboveLimit, Limit: m.limit.Int64()}, false
	case reserve && maxWait < 0:
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	start, hits := m.current(now)
	// Window j is the first with room for n: the first window that is
	// not full, or the one after it if its room is too small.
	j := new(big.Int).Quo(hits, m.limit)
	if room := new(big.Int).Sub(m.limit, m.inWindow(hits, j)); room.Cmp(bi(n)) < 0 {
		j.Add(j, bi(1))
	}
	// The n tokens fill window j after the windows before it.
	after := new(big.Int).Mul(j, m.limit)
	if after.Cmp(hits) < 0 {
		after.Set(hits)
	}
	after.Add(after, bi(n))
	if lastFull := new(big.Int).Add(j, bi(1)); after.Cmp(lastFull.Mul(lastFull, m.limit)) > 0 {
		panic("model: a request overfills its window")
	}
	wait := new(big.Int) // the time from now until window j starts
	if j.Sign() > 0 {
		wait.Add(start, new(big.Int).Mul(j, m.interval)).Sub(wait, bi(now))
	}
	bound := bigZero // a Consume waits for nothing
	if reserve {
		bound = bi(maxWait)
	}
	// A wait of Never is never over: a reservation is refused then, as
	// one whose hits cannot be counted in int64, which no maxWait helps.
	if wait.Cmp(bound) > 0 || dur(wait) == never || after.Cmp(maxInt64) > 0 {
		res := m.describe(start, hits, now)
		res.RetryAfter = dur(wait)
		if reserve && after.Cmp(maxInt64) > 0 {
			res.RetryAfter = never
		}
		return res, false
	}
	m.exists, m.start, m.hits = true, start, after
	res := m.describe(start, after, now)
	res.Allowed = true
	if reserve {
		res.Wait = wait.Int64()
	}
	return res, true
}

// fuzzConfig maps arbitrary integers onto a valid config; bit 0 of small
// keeps the numbers near real sizes, bit 1 aligns the windows.
func fuzzConfig(limit, interval int64, small uint8) Config {
	limit, interval = limit&math.MaxInt64, interval&math.MaxInt64
	if small&1 != 0 {
		limit, interval = limit%20, interval%1000
	}
	return Config{Limit: max(limit, 1), Interval: max(interval, 1), Aligned: small&2 != 0}
}

// fuzzStepLen is the length of one step: kind, time, tokens, maxWait.
const fuzzStepLen = 25

func fuzzSteps(ops ...[4]int64) []byte {
	var b []byte
	for _, op := range ops {
		b = append(b, byte(op[0]))
		for _, v := range op[1:] {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

// Step kinds: bit 0 makes the time absolute (else it is added to the
// clock); bits 1-2 choose Consume (0), Peek (1) or Reserve (2, 3).
func FuzzDecisions(f *testing.F) {
	f.Add(int64(3), int64(60*sec), uint8(0), int64(0), int64(0), false,
		fuzzSteps([4]int64{1, t0, 3, 0}, [4]int64{0, 15 * sec, 1, 0}, [4]int64{4, 0, 1, 45 * sec}, [4]int64{4, 0, 3, never},
			[4]int64{2, 45 * sec, 1, 0}, [4]int64{0, 60 * sec, 2, 0}, [4]int64{0, -90 * sec, 1, 0}, [4]int64{0, 400 * sec, 3, 0}))
	f.Add(int64(4), int64(10), uint8(1), int64(-3), int64(9), true,
		fuzzSteps([4]int64{4, 1, 3, 25}, [4]int64{0, 7, 2, 0}, [4]int64{6, -30, 4, 100}, [4]int64{0, 11, 1, 0}))
	f.Add(int64(math.MaxInt64), int64(60*sec), uint8(0), t0, int64(math.MaxInt64), true,
		fuzzSteps([4]int64{0, sec, 1, 0}, [4]int64{4, 0, math.MaxInt64, never}))
	f.Add(int64(2), int64(60*sec), uint8(0), int64(math.MinInt64), int64(2), true,
		fuzzSteps([4]int64{1, 0, 1, 0}, [4]int64{1, math.MaxInt64 - 30*sec, 2, 0}, [4]int64{1, math.MaxInt64, 1, 0}, [4]int64{5, -1, 1, never}))
	f.Add(int64(3), int64(60*sec), uint8(2), int64(0), int64(0), false,
		fuzzSteps([4]int64{1, t0 + 7*sec, 3, 0}, [4]int64{0, 15 * sec, 1, 0}, [4]int64{4, 0, 1, 45 * sec},
			[4]int64{0, 60 * sec, 2, 0}, [4]int64{0, -90 * sec, 1, 0}, [4]int64{0, 400 * sec, 3, 0}))
	f.Add(int64(2), int64(7), uint8(3), int64(0), int64(0), false,
		fuzzSteps([4]int64{1, -10, 1, 0}, [4]int64{0, 3, 2, 0}, [4]int64{4, 0, 2, 20}, [4]int64{1, math.MinInt64 + 3, 1, 0}))
	f.Add(int64(1), int64(1), uint8(0), int64(math.MinInt64), int64(0), false,
		fuzzSteps([4]int64{5, math.MinInt64, 1, never}, [4]int64{4, 0, 1, never}, [4]int64{0, 1, 1, 0}, [4]int64{2, 1, 1, 0}))
	f.Fuzz(func(t *testing.T, limit, interval int64, small uint8, start, hits int64, exists bool, ops []byte) {
		c := fuzzConfig(limit, interval, small)
		hits &= math.MaxInt64
		if small&1 != 0 {
			hits %= 4 * c.Limit
		}
		s := State{Start: start, Hits: hits}
		m := newModel(c, s, exists)
		var now int64
		if exists {
			now = start
		}
		for ; len(ops) >= fuzzStepLen; ops = ops[fuzzStepLen:] {
			kind := ops[0]
			at := int64(binary.LittleEndian.Uint64(ops[1:]))
			n := int64(binary.LittleEndian.Uint64(ops[9:]))
			maxWait := int64(binary.LittleEndian.Uint64(ops[17:]))
			if small&1 != 0 {
				at %= 4 * c.Interval
				n %= c.Limit + 2
				maxWait %= 4 * c.Interval
			}
			if kind&1 != 0 {
				now = at
			} else {
				now = policy.SatAdd(now, at)
			}
			checkStep(t, c, m, &s, &exists, policytest.Op(kind>>1&3), now, n, maxWait)
		}
	})
}

// checkStep runs one call on *s at now, checks it against the model and
// the invariants, and moves the model on with it.
func checkStep(t *testing.T, c Config, m *model, s *State, exists *bool, o policytest.Op, now, n, maxWait int64) {
	t.Helper()
	if o > policytest.OpReserve {
		o = policytest.OpReserve
	}
	before, existed := *s, *exists
	var res policy.Result
	var changed bool
	switch o {
	case policytest.OpPeek:
		res = c.Peek(s, *exists, now, n)
		if *s != before {
			t.Fatalf("Peek(%d) at %d changed the state from %+v to %+v", n, now, before, *s)
		}
	case policytest.OpConsume:
		peek := c.Peek(s, *exists, now, n)
		res, changed = policytest.Decide(t, c, s, *exists, now, n)
		if peek != res {
			t.Fatalf("from %+v at %d: Peek(%d) = %+v, but Consume = %+v", before, now, n, peek, res)
		}
		// Reserve with no wait allowed is Consume, but for the RetryAfter
		// of a reservation whose hits cannot be counted (Never).
		r, shadow := before, *m
		rr, rc := c.Reserve(&r, existed, now, n, 0)
		if wr, wc := shadow.decide(now, n, 0, true); rr != wr || rc != wc {
			t.Fatalf("from %+v at %d: Reserve(%d, 0) = %+v, %v; model %+v, %v", before, now, n, rr, rc, wr, wc)
		}
		if (rr.RetryAfter != never || res.RetryAfter == never) && (rr != res || rc != changed || r != *s) {
			t.Fatalf("from %+v at %d: Reserve(%d, 0) = %+v %v %+v, but Consume = %+v %v %+v", before, now, n, rr, rc, r, res, changed, *s)
		}
	case policytest.OpReserve:
		res, changed = c.Reserve(s, *exists, now, n, maxWait)
	}
	decider := m
	if o == policytest.OpPeek {
		shadow := *m // decide replaces the model's numbers, never changes them
		decider = &shadow
	}
	want, wantChanged := decider.decide(now, n, maxWait, o == policytest.OpReserve)
	wantChanged = wantChanged && o != policytest.OpPeek
	if res != want || changed != wantChanged {
		t.Fatalf("from %+v (exists %v) at %d: %v(%d, maxWait %d) = %+v, %v; model %+v, %v",
			before, existed, now, o, n, maxWait, res, changed, want, wantChanged)
	}
	if !changed {
		if *s != before {
			t.Fatalf("%v(%d) at %d reported no change but changed the state from %+v to %+v", o, n, now, before, *s)
		}
	} else {
		*exists = true
		if got := m.state(); *s != got {
			t.Fatalf("from %+v at %d: %v(%d) left %+v, model %+v", before, now, o, n, *s, got)
		}
	}
	if res.Code != policy.OK {
		return
	}
	switch {
	case o != policytest.OpReserve && !res.Allowed:
		policytest.CheckRetry(t, c, &before, existed, now, n, res.RetryAfter)
	case o == policytest.OpReserve:
		policytest.CheckReserveWait(t, c, &before, existed, now, n, res)
		checkRefusedWait(t, c, before, existed, now, n, res)
	}
	if *exists {
		policytest.CheckExpiry(t, c, s, n)
	}
}

// checkRefusedWait checks that a refused reservation's RetryAfter is the
// wait it needs: with that maxWait it is granted, with that wait.
func checkRefusedWait(t *testing.T, c Config, s State, exists bool, now, n int64, res policy.Result) {
	t.Helper()
	if res.Allowed || res.RetryAfter == never {
		return
	}
	if got, _ := c.Reserve(&s, exists, now, n, res.RetryAfter); !got.Allowed || got.Wait != res.RetryAfter {
		t.Fatalf("from %+v at %d: Reserve(%d) refused with RetryAfter %d, but with that maxWait = %+v", s, now, n, res.RetryAfter, got)
	}
}

func FuzzDecodeState(f *testing.F) {
	c := Config{Limit: 10, Interval: 60 * sec}
	f.Add(c.AppendState(nil, &State{Start: t0, Hits: 3}), int64(10), int64(60*sec))
	f.Add(c.AppendState(nil, &State{Start: math.MinInt64, Hits: math.MaxInt64}), int64(math.MaxInt64), int64(1))
	f.Add([]byte{1, 1, 0}, int64(1), int64(1))
	f.Add([]byte{1, 2, 0, 0}, int64(1), int64(1))
	f.Add([]byte{}, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, src []byte, limit, interval int64) {
		c := fuzzConfig(limit, interval, 0)
		s := policytest.DecodeState(t, c, src)
		if s == nil {
			return
		}
		if s.Hits < 0 {
			t.Fatalf("DecodeState(%x) = %+v, with negative hits", src, *s)
		}
		// A decoded state agrees with the model.
		exists := true
		for _, n := range []int64{1, c.Limit} {
			r := *s
			checkStep(t, c, newModel(c, r, true), &r, &exists, policytest.OpConsume, s.Start, n, 0)
			r = *s
			checkStep(t, c, newModel(c, r, true), &r, &exists, policytest.OpReserve, s.Start, n, never)
		}
	})
}

// TestAligned: aligned windows open on the grid of multiples of the
// interval, whichever hit finds none open. t0 is 20s past a multiple of a
// minute (1,700,000,000 = 28,333,333·60 + 20).
func TestAligned(t *testing.T) {
	c := Config{Limit: 3, Interval: 60 * sec, Aligned: true}
	s := run(t, c, State{}, false, t0, []policytest.Step{
		consume(0, 1, allowed(3, 2, 40*sec)),                       // the window [t0-20s, t0+40s)
		consume(39*sec, 2, allowed(3, 0, 1*sec)),                   // full 1s before its end
		consume(39*sec+500*ms, 1, rejected(3, 0, 500*ms, 500*ms)),  // the next window opens at t0+40s
		consume(40*sec, 1, allowed(3, 2, 60*sec)),                  // on the grid, not at its own time
		consume(200*sec, 1, allowed(3, 2, 20*sec)),                 // after a gap: the window [t0+160s, t0+220s)
		reserve(201*sec, 3, 19*sec, granted(3, 0, 79*sec, 19*sec)), // the next grid window, whole
	})
	if want := (State{Start: t0 + 160*sec, Hits: 6}); s != want { // the room left at 201s is spent
		t.Errorf("state = %+v, want %+v", s, want)
	}
	// Before the epoch the grid still runs through multiples of the
	// interval: -90s opens the window [-120s, -60s).
	run(t, c, State{}, false, 0, []policytest.Step{consume(-90*sec, 1, allowed(3, 2, 30*sec))})
	// Where the multiple is not an int64, the window opens at the hit.
	run(t, c, State{}, false, math.MinInt64, []policytest.Step{consume(1, 1, allowed(3, 2, 60*sec))})
}

// BenchmarkConsume is a call on a window with room (allow) and on a full
// one (reject), the two decisions a keyed limiter makes most.
func BenchmarkConsume(b *testing.B) {
	c := Config{Limit: 100, Interval: 60 * sec}
	b.Run("allow", func(b *testing.B) {
		s := State{Start: t0}
		now := t0
		for b.Loop() {
			if _, ok := c.Consume(&s, true, now, 1); !ok {
				s.Hits = 0 // a fresh window's room, without the roll's division
			}
			now++
		}
	})
	b.Run("reject", func(b *testing.B) {
		s := State{Start: t0, Hits: c.Limit}
		now := t0
		for b.Loop() {
			c.Consume(&s, true, now, 1)
			now++
		}
	})
}
