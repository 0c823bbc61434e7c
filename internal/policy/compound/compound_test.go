package compound

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/policytest"
	"github.com/sluicehq/sluice/internal/policy/shaper"
	"github.com/sluicehq/sluice/internal/policy/slidinglog"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

const never = policy.Never

// The members of the tables below: 3 tokens per window of 100 ns, and one
// token every 10 ns with 1 waiting at most.
var (
	window = fixedwindow.Config{Limit: 3, Interval: 100}
	spacer = shaper.Config{Amount: 1, Interval: 10, MaxQueue: 1}
)

func windowAndSpacer() Config {
	return Config{Members: []policy.Erased{policy.Erase(window), policy.Erase(spacer)}}
}

// The encodings of the members' states, worked out by hand: version 1,
// the tag, then zig-zag varints (2v for 0 ≤ v < 64).
func windowPart(start, hits byte) []byte { return []byte{1, 1, 2 * start, 2 * hits} }
func spacerPart(next byte) []byte        { return []byte{1, 5, 2 * next, 0} }

// step is a call on one key, with the parts it must leave (nil: no
// check).
type step struct {
	name string
	policytest.Step
	wantParts [][]byte
}

var consume, peek, reserve = policytest.Consume, policytest.Peek, policytest.Reserve

// run applies steps in order to one key that starts with no state, as
// policytest.Steps does, and checks the parts each leaves.
func run(t *testing.T, c Config, steps []step) {
	t.Helper()
	var s State
	exists := false
	for i, st := range steps {
		exists = policytest.Call(t, fmt.Sprintf("step %d (%s)", i, st.name), c, &s, exists, 0, st.Step)
		if st.wantParts != nil && !equalParts(s.Parts, st.wantParts) {
			t.Fatalf("step %d (%s): parts = %v, want %v", i, st.name, s.Parts, st.wantParts)
		}
	}
}

// equalParts compares parts, an empty part being equal to a nil one.
func equalParts(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y []byte) bool { return bytes.Equal(x, y) })
}

func TestConsume(t *testing.T) {
	run(t, windowAndSpacer(), []step{
		// Both allow; the spacer has the fewer left: 1 more may queue.
		{name: "new key", Step: consume(0, 1, policy.Result{Allowed: true, Remaining: 1, ResetAfter: 100, Limit: 2}),
			wantParts: [][]byte{windowPart(0, 1), spacerPart(10)}},
		// The spacer rejects: the window, which would allow, keeps 1 hit.
		{name: "spacer rejects, window not charged", Step: consume(5, 1, policy.Result{Remaining: 1, RetryAfter: 5, ResetAfter: 95, Limit: 2}),
			wantParts: [][]byte{windowPart(0, 1), spacerPart(10)}},
		// Both allow with 1 left: the first member wins the tie.
		{name: "tie on remaining", Step: consume(10, 1, policy.Result{Allowed: true, Remaining: 1, ResetAfter: 90, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 2), spacerPart(20)}},
		// The window rejects: the idle spacer, which would allow, keeps its
		// slot at 20.
		{name: "window rejects, spacer not charged", Step: consume(20, 2, policy.Result{Remaining: 1, RetryAfter: 80, ResetAfter: 80, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 2), spacerPart(20)}},
		{name: "window at 0", Step: consume(20, 1, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 80, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 3), spacerPart(30)}},
		// Both reject: the longer RetryAfter, the window's, is reported.
		{name: "both reject", Step: consume(25, 1, policy.Result{Remaining: 0, RetryAfter: 75, ResetAfter: 75, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 3), spacerPart(30)}},
		{name: "peek", Step: peek(25, 1, policy.Result{Remaining: 0, RetryAfter: 75, ResetAfter: 75, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 3), spacerPart(30)}},
		{name: "above the window's limit", Step: consume(200, 4, policy.Result{Code: policy.TokensAboveLimit, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 3), spacerPart(30)}},
		{name: "zero tokens", Step: consume(200, 0, policy.Result{Code: policy.NonPositiveTokens}),
			wantParts: [][]byte{windowPart(0, 3), spacerPart(30)}},
		{name: "peek zero tokens", Step: peek(200, 0, policy.Result{Code: policy.NonPositiveTokens}),
			wantParts: [][]byte{windowPart(0, 3), spacerPart(30)}},
		// Both expired: a fresh window at 200, the line idle.
		{name: "later", Step: consume(200, 2, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 100, Limit: 2}),
			wantParts: [][]byte{{1, 1, 0x90, 0x03, 4}, {1, 5, 0xb8, 0x03, 0}}},
	})
}

func TestReserve(t *testing.T) {
	run(t, windowAndSpacer(), []step{
		{name: "new key", Step: reserve(0, 1, 50, policy.Result{Allowed: true, Remaining: 1, ResetAfter: 100, Limit: 2}),
			wantParts: [][]byte{windowPart(0, 1), spacerPart(10)}},
		// The spacer queues it for its slot at 10; the window has it now.
		{name: "the longest wait", Step: reserve(0, 1, 50, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 100, Limit: 2, Wait: 10}),
			wantParts: [][]byte{windowPart(0, 2), spacerPart(20)}},
		// The spacer's queue is full: the window, which would grant, keeps 2.
		{name: "queue full", Step: reserve(0, 1, 50, policy.Result{Remaining: 0, RetryAfter: 10, ResetAfter: 100, Limit: 2}),
			wantParts: [][]byte{windowPart(0, 2), spacerPart(20)}},
		// The window grants it in the next window, at 100, spending the one
		// place left in this one (hits 2+1+2 = 5); the spacer at 20.
		{name: "waits 85 for the window", Step: reserve(15, 2, 100, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 185, Limit: 3, Wait: 85}),
			wantParts: [][]byte{windowPart(0, 5), spacerPart(40)}},
		// Both refuse: the window's 85 is the longer.
		{name: "both refuse", Step: reserve(15, 1, 50, policy.Result{Remaining: 0, RetryAfter: 85, ResetAfter: 185, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 5), spacerPart(40)}},
		{name: "negative max wait", Step: reserve(15, 1, -1, policy.Result{Code: policy.NonPositiveMaxWait}),
			wantParts: [][]byte{windowPart(0, 5), spacerPart(40)}},
		{name: "zero tokens", Step: reserve(15, 0, 1, policy.Result{Code: policy.NonPositiveTokens}),
			wantParts: [][]byte{windowPart(0, 5), spacerPart(40)}},
		{name: "above the window's limit", Step: reserve(15, 4, never, policy.Result{Code: policy.TokensAboveLimit, Limit: 3}),
			wantParts: [][]byte{windowPart(0, 5), spacerPart(40)}},
	})
}

// fixed is a member with a fixed answer that never changes its state, and
// cannot reserve: a stand-in for no limit, or a sliding log.
type fixed struct {
	res        policy.Result
	expiresAt  int64
	canReserve bool
}

func (f fixed) Consume(_ []byte, _, n int64, dst []byte) (policy.Decision, []byte, bool) {
	return f.Peek(nil, 0, n).Decision(0), dst[:0], false
}

func (f fixed) Reserve(_ []byte, _, n, _ int64, dst []byte) (policy.Result, []byte, bool) {
	if !f.canReserve {
		return policy.Result{Code: policy.ReserveNotSupported}, dst[:0], false
	}
	return f.Peek(nil, 0, n), dst[:0], false
}

func (f fixed) Peek(_ []byte, _, n int64) policy.Result {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}
	}
	return f.res
}

func (f fixed) Cancel(_ []byte, _ int64, _ *policy.Receipt, dst []byte) ([]byte, bool) {
	return dst[:0], false
}
func (f fixed) ExpiresAt([]byte) int64 { return f.expiresAt }
func (f fixed) Quota() int64           { return f.res.Limit }
func (f fixed) Limits() []int64        { return []int64{f.res.Limit} }
func (f fixed) Window() int64          { return 0 }

var noLimit = fixed{
	res:        policy.Result{Allowed: true, Remaining: never, Limit: never},
	expiresAt:  math.MinInt64,
	canReserve: true,
}

func TestReserveNotSupported(t *testing.T) {
	noReserve := fixed{res: policy.Result{Allowed: true, Remaining: 9, Limit: 10}, expiresAt: math.MinInt64}
	c := Config{Members: []policy.Erased{policy.Erase(fixedwindow.Config{Limit: 1, Interval: 100}), noReserve}}
	run(t, c, []step{
		{name: "reserve", Step: reserve(0, 1, never, policy.Result{Code: policy.ReserveNotSupported}),
			wantParts: [][]byte{}},
		// The window's argument error comes first, but cannot reserve wins.
		{name: "reserve above the window's limit", Step: reserve(0, 2, never, policy.Result{Code: policy.ReserveNotSupported}),
			wantParts: [][]byte{}},
		{name: "consume", Step: consume(0, 1, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 100, Limit: 1}),
			wantParts: [][]byte{windowPart(0, 1), nil}},
		{name: "consume above the window's limit", Step: consume(0, 2, policy.Result{Code: policy.TokensAboveLimit, Limit: 1}),
			wantParts: [][]byte{windowPart(0, 1), nil}},
	})
}

// TestUnchanged checks a compound whose members allow without changing
// anything: it reports no change, and leaves the state alone.
func TestUnchanged(t *testing.T) {
	c := Config{Members: []policy.Erased{noLimit, noLimit}}
	want := policy.Result{Allowed: true, Remaining: never, Limit: never}
	for _, exists := range []bool{false, true} {
		s := State{Parts: [][]byte{{7}, nil}}
		if res, changed := policytest.Decide(t, c, &s, exists, 5, 1); res != want || changed {
			t.Errorf("Consume (exists %v) = %+v, %v, want %+v, false", exists, res, changed, want)
		}
		if res, changed := c.Reserve(&s, exists, 5, 1, 0); res != want || changed {
			t.Errorf("Reserve (exists %v) = %+v, %v, want %+v, false", exists, res, changed, want)
		}
		if !equalParts(s.Parts, [][]byte{{7}, nil}) {
			t.Errorf("parts = %v, want [[7] []]", s.Parts)
		}
	}
}

// TestResetAfterOnRejection checks that a rejection reports the time until
// the members' actual states expire, not a take that did not happen.
func TestResetAfterOnRejection(t *testing.T) {
	// A member that rejects, with state until 30, and a window that would
	// allow and then report a window until now+100, but has no state.
	rejecting := fixed{res: policy.Result{Remaining: 0, RetryAfter: 20, ResetAfter: 20, Limit: 5}, expiresAt: 30}
	c := Config{Members: []policy.Erased{policy.Erase(window), rejecting}}
	s := State{Parts: [][]byte{nil, {1}}}
	want := policy.Result{Remaining: 0, RetryAfter: 20, ResetAfter: 20, Limit: 5}
	if res, changed := policytest.Decide(t, c, &s, true, 10, 1); res != want || changed {
		t.Errorf("Consume = %+v, %v, want %+v, false", res, changed, want)
	}
	// With the window's state until 100, that is the later.
	s.Parts[0] = windowPart(0, 1)
	want.ResetAfter = 90
	if res, changed := policytest.Decide(t, c, &s, true, 10, 1); res != want || changed {
		t.Errorf("Consume = %+v, %v, want %+v, false", res, changed, want)
	}
	// A new key has nothing to reset.
	want.ResetAfter = 0
	if res := c.Peek(&s, false, 10, 1); res != want {
		t.Errorf("Peek on a new key = %+v, want %+v", res, want)
	}
}

func TestNoMember(t *testing.T) {
	var c Config
	var s State
	want := policy.Result{Allowed: true, Remaining: never, Limit: never}
	if res, changed := policytest.Decide(t, c, &s, false, 0, 1); res != want || changed {
		t.Errorf("Consume = %+v, %v, want %+v, false", res, changed, want)
	}
	if res, changed := c.Reserve(&s, false, 0, 1, 0); res != want || changed {
		t.Errorf("Reserve = %+v, %v, want %+v, false", res, changed, want)
	}
	if res := c.Peek(&s, false, 0, 1); res != want {
		t.Errorf("Peek = %+v, want %+v", res, want)
	}
	if res, _ := policytest.Decide(t, c, &s, false, 0, 0); res.Code != policy.NonPositiveTokens {
		t.Errorf("Consume(0).Code = %v, want NonPositiveTokens", res.Code)
	}
	if got := c.ExpiresAt(&s); got != math.MinInt64 {
		t.Errorf("ExpiresAt = %d, want math.MinInt64", got)
	}
	if got := c.Quota(); got != never {
		t.Errorf("Quota = %d, want %d", got, never)
	}
	if got := c.AppendState(nil, &s); !bytes.Equal(got, []byte{1, 9}) {
		t.Errorf("AppendState = %v, want [1 9]", got)
	}
}

func TestExpiresAtAndQuota(t *testing.T) {
	c := windowAndSpacer()
	tests := []struct {
		name  string
		parts [][]byte
		want  int64
	}{
		{"no parts", nil, math.MinInt64},
		{"window only", [][]byte{windowPart(5, 4)}, 205},
		{"spacer only", [][]byte{nil, spacerPart(30)}, 30},
		{"window later", [][]byte{windowPart(5, 1), spacerPart(30)}, 105},
		{"spacer later", [][]byte{windowPart(5, 1), {1, 5, 0xf0, 0x01, 0}}, 120},
		{"an undecodable part is no state", [][]byte{{1, 5, 0, 0}, spacerPart(30)}, 30},
	}
	for _, tt := range tests {
		s := State{Parts: tt.parts}
		if got := c.ExpiresAt(&s); got != tt.want {
			t.Errorf("%s: ExpiresAt = %d, want %d", tt.name, got, tt.want)
		}
	}
	if got := c.Quota(); got != 2 {
		t.Errorf("Quota = %d, want 2 (the spacer's)", got)
	}
}

// TestPartsLength checks states whose Parts do not have one part per
// member: missing parts are no state, extra ones are dropped on a change.
func TestPartsLength(t *testing.T) {
	c := windowAndSpacer()
	t.Run("missing", func(t *testing.T) {
		s := State{Parts: [][]byte{windowPart(0, 1)}}
		res, changed := policytest.Decide(t, c, &s, true, 5, 1)
		if !res.Allowed || !changed || !equalParts(s.Parts, [][]byte{windowPart(0, 2), spacerPart(15)}) {
			t.Errorf("Consume = %+v, %v, parts %v", res, changed, s.Parts)
		}
	})
	t.Run("extra", func(t *testing.T) {
		s := State{Parts: [][]byte{windowPart(0, 1), nil, {1, 2, 3}}}
		res, changed := policytest.Decide(t, c, &s, true, 5, 1)
		if !res.Allowed || !changed || !equalParts(s.Parts, [][]byte{windowPart(0, 2), spacerPart(15)}) {
			t.Errorf("Consume = %+v, %v, parts %v", res, changed, s.Parts)
		}
	})
	t.Run("stale parts of a new key", func(t *testing.T) {
		// exists=false: whatever Parts holds is not the key's state.
		s := State{Parts: [][]byte{windowPart(0, 3), spacerPart(50)}}
		res, changed := policytest.Decide(t, c, &s, false, 5, 1)
		want := policy.Result{Allowed: true, Remaining: 1, ResetAfter: 100, Limit: 2}
		if res != want || !changed || !equalParts(s.Parts, [][]byte{windowPart(5, 1), spacerPart(15)}) {
			t.Errorf("Consume = %+v, %v, parts %v; want %+v, true", res, changed, s.Parts, want)
		}
	})
	t.Run("stale parts beyond the length", func(t *testing.T) {
		// A member with no change, on a new key, gets no state, even where
		// an old array lies beyond len(Parts).
		c := Config{Members: []policy.Erased{policy.Erase(window), noLimit}}
		backing := [][]byte{windowPart(0, 3), {9, 9}}
		s := State{Parts: backing[:0]}
		if _, changed := policytest.Decide(t, c, &s, false, 5, 1); !changed || !equalParts(s.Parts, [][]byte{windowPart(5, 1), nil}) {
			t.Errorf("Consume changed %v, parts %v, want [%v []]", changed, s.Parts, windowPart(5, 1))
		}
	})
}

func TestClone(t *testing.T) {
	s := State{Parts: [][]byte{{1, 2}, nil, {}}}
	c := s.Clone()
	c.Parts[0][0] = 9
	if s.Parts[0][0] != 1 {
		t.Error("Clone shares a part's array")
	}
	if c.Parts[1] != nil || c.Parts[2] == nil {
		t.Errorf("Clone = %#v, want nil kept nil and empty kept empty", c.Parts)
	}
	if z := (State{}).Clone(); z.Parts != nil {
		t.Errorf("zero State's Clone = %#v, want nil Parts", z.Parts)
	}
}

func TestEncoding(t *testing.T) {
	c := windowAndSpacer()
	tests := []struct {
		name  string
		parts [][]byte
		want  []byte
	}{
		// Header 1, 9; each part's length as a zig-zag varint (2·len).
		{"both", [][]byte{windowPart(0, 1), spacerPart(10)}, []byte{1, 9, 8, 1, 1, 0, 2, 8, 1, 5, 20, 0}},
		{"window only", [][]byte{windowPart(0, 1), nil}, []byte{1, 9, 8, 1, 1, 0, 2, 0}},
		{"none", [][]byte{nil, nil}, []byte{1, 9, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Parts: tt.parts}
			got := c.AppendState([]byte{7}, &s)
			if !bytes.Equal(got, append([]byte{7}, tt.want...)) {
				t.Errorf("AppendState([7]) = %v, want [7] + %v", got, tt.want)
			}
			var back State
			if err := c.DecodeState(tt.want, &back); err != nil || !equalParts(back.Parts, tt.parts) {
				t.Errorf("DecodeState(%v) = %v, %v, want %v", tt.want, back.Parts, err, tt.parts)
			}
		})
	}
	t.Run("missing parts encode empty", func(t *testing.T) {
		s := State{Parts: [][]byte{windowPart(0, 1)}}
		if got, want := c.AppendState(nil, &s), []byte{1, 9, 8, 1, 1, 0, 2, 0}; !bytes.Equal(got, want) {
			t.Errorf("AppendState = %v, want %v", got, want)
		}
	})
}

func TestDecodeStateReusesArrays(t *testing.T) {
	c := windowAndSpacer()
	src := []byte{1, 9, 8, 1, 1, 0, 2, 8, 1, 5, 20, 0}
	s := State{Parts: [][]byte{make([]byte, 0, 8), make([]byte, 0, 8)}}
	p0, p1 := &s.Parts[0][:1][0], &s.Parts[1][:1][0]
	if err := c.DecodeState(src, &s); err != nil {
		t.Fatal(err)
	}
	if &s.Parts[0][0] != p0 || &s.Parts[1][0] != p1 {
		t.Error("DecodeState did not reuse the parts' arrays")
	}
	// The parts do not alias src.
	src[3] = 99
	if !equalParts(s.Parts, [][]byte{windowPart(0, 1), spacerPart(10)}) {
		t.Errorf("parts = %v after src changed", s.Parts)
	}
	if a := testing.AllocsPerRun(100, func() { _ = c.DecodeState(src, &s) }); a != 0 {
		t.Errorf("DecodeState into a used State: %v allocations, want 0", a)
	}
}

// TestDecodeStateErrors: states of another number of parts than members,
// written for another compound, are refused too (policytest checks the
// malformed ones).
func TestDecodeStateErrors(t *testing.T) {
	c := windowAndSpacer()
	tests := []struct {
		name string
		src  []byte
	}{
		{"one part", []byte{1, 9, 0}},
		{"three parts", []byte{1, 9, 0, 0, 0}},
		{"negative length", []byte{1, 9, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Parts: [][]byte{{4, 2}, {4, 3}}}
			err := c.DecodeState(tt.src, &s)
			if !errors.Is(err, policy.ErrBadState) {
				t.Errorf("DecodeState(%v) = %v, want an ErrBadState", tt.src, err)
			}
			if !equalParts(s.Parts, [][]byte{{4, 2}, {4, 3}}) {
				t.Errorf("failed DecodeState changed the parts to %v", s.Parts)
			}
		})
	}
}

// TestContract runs the contract's suite on compounds of members that
// reserve, and of one that cannot.
func TestContract(t *testing.T) {
	leaky := tokenbucket.NewSingle(tokenbucket.Bandwidth{Capacity: 5, RefillTokens: 2, Period: 10, Initial: 5}, false)
	policytest.Run(t,
		windowAndSpacer(),
		Config{Members: []policy.Erased{
			policy.Erase(fixedwindow.Config{Limit: 4, Interval: 20}),
			policy.Erase[tokenbucket.BandwidthState](leaky),
		}},
		Config{Members: []policy.Erased{
			policy.Erase(slidinglog.Config{Limit: 3, Interval: 15}),
			policy.Erase(windowAndSpacer()),
		}},
	)
}

// TestErased runs a compound inside a compound, through policy.Erase.
func TestErased(t *testing.T) {
	inner := policy.Erase(windowAndSpacer())
	c := Config{Members: []policy.Erased{inner, policy.Erase(fixedwindow.Config{Limit: 1, Interval: 50})}}
	run(t, c, []step{
		{name: "new key", Step: consume(0, 1, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 100, Limit: 1}),
			wantParts: [][]byte{{1, 9, 8, 1, 1, 0, 2, 8, 1, 5, 20, 0}, windowPart(0, 1)}},
		{name: "outer window rejects", Step: consume(20, 1, policy.Result{Remaining: 0, RetryAfter: 30, ResetAfter: 80, Limit: 1}),
			wantParts: [][]byte{{1, 9, 8, 1, 1, 0, 2, 8, 1, 5, 20, 0}, windowPart(0, 1)}},
	})
	if got := inner.Quota(); got != 2 {
		t.Errorf("inner Quota = %d, want 2", got)
	}
}

// raceEnabled reports whether the test binary was built with -race, under
// which sync.Pool (in policy.Erase) drops values at random and so
// allocates.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// steady is a compound and a key in it whose parts keep their sizes from
// one call to the next: times near 2^60, where varints have 9 bytes.
func steady() (Config, *State, int64) {
	c := Config{Members: []policy.Erased{
		policy.Erase(fixedwindow.Config{Limit: 1 << 40, Interval: 1 << 50}),
		policy.Erase(shaper.Config{Amount: 1, Interval: 10, MaxQueue: 1}),
	}}
	return c, &State{}, 1 << 60
}

func TestAllocs(t *testing.T) {
	c, s, now := steady()
	noAllocs(t, policy.Machine[State](c), s, now, false)
}

// noAllocs checks that m's calls on an existing key, s, allocate nothing
// once the pools are filled, and with newKey neither does a new key's
// first Consume.
func noAllocs[S any](t *testing.T, m policy.Machine[S], s *S, now int64, newKey bool) {
	t.Helper()
	if raceEnabled() {
		t.Skip("sync.Pool allocates under -race")
	}
	m.Consume(s, false, now, 1)
	type call struct {
		name string
		f    func()
	}
	var calls []call
	if newKey {
		calls = append(calls, call{"new key", func() { var zero S; *s = zero; m.Consume(s, false, now, 1) }})
	}
	calls = append(calls,
		call{"Consume", func() { now += 10; m.Consume(s, true, now, 1) }},
		call{"rejected Consume", func() { m.Consume(s, true, now, 1) }},
		call{"Reserve", func() { now += 10; m.Reserve(s, true, now, 2, never) }},
		call{"Peek", func() { m.Peek(s, true, now, 1) }},
		call{"ExpiresAt", func() { m.ExpiresAt(s) }},
	)
	for _, c := range calls {
		c.f() // fills the pools and spare buffers
		if a := testing.AllocsPerRun(100, c.f); a != 0 {
			t.Errorf("%s: %v allocations, want 0", c.name, a)
		}
	}
}

// BenchmarkConsume is a Consume on an existing key of a fixed window and a
// shaper, both allowing it.
func BenchmarkConsume(b *testing.B) {
	c, s, now := steady()
	c.Consume(s, false, now, 1)
	b.ReportAllocs()
	for b.Loop() {
		now += 10
		if res, _ := c.Consume(s, true, now, 1); !res.Allowed {
			b.Fatal("rejected")
		}
	}
}

// TestConcurrentKeys runs independent keys through one Config from many
// goroutines; run it with -race.
func TestConcurrentKeys(t *testing.T) {
	c := windowAndSpacer()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var s State
			exists := false
			for i := range 200 {
				// Every 10 ns the spacer lets one through, every 100 ns the
				// window 3: of each 10 requests 10 ns apart, 3 pass.
				res, changed := policytest.Decide(t, c, &s, exists, int64(10*i), 1)
				if want := i%10 < 3; res.Allowed != want {
					errs <- fmt.Errorf("goroutine %d, request %d: Allowed %v, want %v", g, i, res.Allowed, want)
					return
				}
				exists = exists || changed
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
