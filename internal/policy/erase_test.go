package policy_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// fw is the fixed window the tables below are worked out for: 3 tokens per
// window of 10 ns, the window opening at the first hit.
var fw = fixedwindow.Config{Limit: 3, Interval: 10}

// fwState is the encoding of a fixed window's state, worked out by hand:
// version 1, tag 1, then Start and Hits as zig-zag varints (2v for v ≥ 0,
// one byte below 64).
func fwState(start, hits byte) []byte { return []byte{1, 1, 2 * start, 2 * hits} }

type erasedOp struct {
	name      string
	op        string // consume, reserve, peek
	now, n    int64
	maxWait   int64
	want      policy.Result
	wantState []byte // the state after the call; nil for no state
}

// TestErasedFixedWindow runs one key through the erased fixed window, the
// state living only as bytes between calls.
func TestErasedFixedWindow(t *testing.T) {
	steps := []erasedOp{
		{name: "first hit opens the window at 5", op: "consume", now: 5, n: 2,
			want:      policy.Result{Allowed: true, Remaining: 1, ResetAfter: 10, Limit: 3},
			wantState: fwState(5, 2)},
		{name: "two more do not fit until the window at 15", op: "consume", now: 8, n: 2,
			want:      policy.Result{Remaining: 1, RetryAfter: 7, ResetAfter: 7, Limit: 3},
			wantState: fwState(5, 2)},
		{name: "peek one fits", op: "peek", now: 8, n: 1,
			want:      policy.Result{Allowed: true, ResetAfter: 7, Limit: 3},
			wantState: fwState(5, 2)},
		{name: "reserve refused past max wait", op: "reserve", now: 8, n: 2, maxWait: 6,
			want:      policy.Result{Remaining: 1, RetryAfter: 7, ResetAfter: 7, Limit: 3},
			wantState: fwState(5, 2)},
		{name: "reserve granted at exactly max wait", op: "reserve", now: 8, n: 2, maxWait: 7,
			want:      policy.Result{Allowed: true, ResetAfter: 17, Limit: 3, Wait: 7},
			wantState: fwState(5, 5)}, // the place left in this window is spent
		{name: "next window starts with the debt of 2", op: "consume", now: 15, n: 1,
			want:      policy.Result{Allowed: true, Remaining: 0, ResetAfter: 10, Limit: 3},
			wantState: fwState(15, 3)},
		{name: "above the limit is an argument error", op: "consume", now: 15, n: 4,
			want:      policy.Result{Code: policy.TokensAboveLimit, Limit: 3},
			wantState: fwState(15, 3)},
		{name: "zero tokens is an argument error", op: "consume", now: 15, n: 0,
			want:      policy.Result{Code: policy.NonPositiveTokens},
			wantState: fwState(15, 3)},
		{name: "negative max wait is an argument error", op: "reserve", now: 15, n: 1, maxWait: -1,
			want:      policy.Result{Code: policy.NonPositiveMaxWait},
			wantState: fwState(15, 3)},
		{name: "a fresh window once the old one is spent", op: "consume", now: 40, n: 3,
			want:      policy.Result{Allowed: true, ResetAfter: 10, Limit: 3},
			wantState: fwState(40, 3)},
	}
	e := policy.Erase(fw)
	var state []byte
	dst := make([]byte, 0, 16)
	for i, st := range steps {
		var (
			res     policy.Result
			next    []byte
			changed bool
		)
		switch st.op {
		case "consume":
			res, next, changed = policytest.DecideBytes(t, e, state, st.now, st.n, dst)
		case "reserve":
			res, next, changed = e.Reserve(state, st.now, st.n, st.maxWait, dst)
		case "peek":
			res, next = e.Peek(state, st.now, st.n), dst[:0]
		}
		if res != st.want {
			t.Fatalf("step %d (%s): %s(now=%d, n=%d) = %+v, want %+v", i, st.name, st.op, st.now, st.n, res, st.want)
		}
		if changed {
			state, dst = next, state[:0]
		} else if len(next) != 0 {
			t.Fatalf("step %d (%s): unchanged, but next = %v, want empty", i, st.name, next)
		}
		if !bytes.Equal(state, st.wantState) {
			t.Fatalf("step %d (%s): state = %v, want %v", i, st.name, state, st.wantState)
		}
	}
	if got, want := e.ExpiresAt(state), int64(50); got != want {
		t.Errorf("ExpiresAt(%v) = %d, want %d", state, got, want)
	}
	if got := e.Quota(); got != 3 {
		t.Errorf("Quota() = %d, want 3", got)
	}
}

// TestErasedNoState checks that an empty state and every state that does
// not decode are no state: the key is new.
func TestErasedNoState(t *testing.T) {
	states := []struct {
		name  string
		state []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"version 2", []byte{2, 1, 10, 4}},
		{"sliding window tag", []byte{1, 2, 10, 4}},
		{"header only", []byte{1, 1}},
		{"truncated", []byte{1, 1, 10}},
		{"trailing byte", []byte{1, 1, 10, 4, 0}},
		{"overlong varint", []byte{1, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 4}},
	}
	e := policy.Erase(fw)
	for _, tc := range states {
		t.Run(tc.name, func(t *testing.T) {
			// A new key at 8 opens a window at 8.
			wantRes := policy.Result{Allowed: true, Remaining: 1, ResetAfter: 10, Limit: 3}
			res, next, changed := policytest.DecideBytes(t, e, tc.state, 8, 2, nil)
			if res != wantRes || !changed || !bytes.Equal(next, fwState(8, 2)) {
				t.Errorf("Consume(%v, 8, 2) = %+v, %v, %v, want %+v, %v, true", tc.state, res, next, changed, wantRes, fwState(8, 2))
			}
			res, next, changed = e.Reserve(tc.state, 8, 2, 0, nil)
			if res != wantRes || !changed || !bytes.Equal(next, fwState(8, 2)) {
				t.Errorf("Reserve(%v, 8, 2, 0) = %+v, %v, %v, want %+v, %v, true", tc.state, res, next, changed, wantRes, fwState(8, 2))
			}
			if res := e.Peek(tc.state, 8, 2); res != wantRes {
				t.Errorf("Peek(%v, 8, 2) = %+v, want %+v", tc.state, res, wantRes)
			}
			if got := e.ExpiresAt(tc.state); got != math.MinInt64 {
				t.Errorf("ExpiresAt(%v) = %d, want math.MinInt64", tc.state, got)
			}
		})
	}
}

// TestErasedBuffers checks what next is made of: dst's array when it has
// room, dst[:0] when nothing changed, and state itself may be dst.
func TestErasedBuffers(t *testing.T) {
	e := policy.Erase(fw)
	t.Run("next reuses dst", func(t *testing.T) {
		dst := make([]byte, 3, 16)
		_, next, changed := e.Consume(fwState(5, 1), 6, 1, dst)
		if !changed || !bytes.Equal(next, fwState(5, 2)) || &next[0] != &dst[0] {
			t.Errorf("Consume = %v (changed %v), want %v in dst's array", next, changed, fwState(5, 2))
		}
	})
	t.Run("next grows a short dst", func(t *testing.T) {
		dst := make([]byte, 0, 1)
		_, next, _ := e.Reserve(fwState(5, 1), 6, 1, 0, dst)
		if !bytes.Equal(next, fwState(5, 2)) {
			t.Errorf("Reserve = %v, want %v", next, fwState(5, 2))
		}
	})
	t.Run("unchanged gives dst[:0]", func(t *testing.T) {
		dst := make([]byte, 5, 16)
		_, next, changed := e.Consume(fwState(5, 3), 6, 1, dst)
		if changed || len(next) != 0 || cap(next) != 16 {
			t.Errorf("Consume on a full window = %v (len %d, cap %d), changed %v; want empty, cap 16, unchanged", next, len(next), cap(next), changed)
		}
		_, next, changed = e.Reserve(fwState(5, 3), 6, 1, 0, dst)
		if changed || len(next) != 0 || cap(next) != 16 {
			t.Errorf("refused Reserve = %v (len %d, cap %d), changed %v; want empty, cap 16, unchanged", next, len(next), cap(next), changed)
		}
	})
	t.Run("dst may be state", func(t *testing.T) {
		buf := append(make([]byte, 0, 16), fwState(5, 1)...)
		_, next, changed := e.Consume(buf, 6, 2, buf)
		if !changed || !bytes.Equal(next, fwState(5, 3)) {
			t.Errorf("Consume(buf, 6, 2, buf) = %v, want %v", next, fwState(5, 3))
		}
	})
	t.Run("nil dst", func(t *testing.T) {
		_, next, changed := e.Consume(fwState(5, 3), 6, 1, nil)
		if changed || next != nil {
			t.Errorf("unchanged Consume with nil dst = %v, want nil", next)
		}
	})
}

// probe is a machine that shows what Erase hands it: Remaining is the
// state's V, Allowed whether it exists. Its decoder writes into *s before
// it fails on a first byte 0xff, as a careless decoder may; Consume of 1
// adds 1 to V.
type probe struct{}

type probeState struct{ V int64 }

func (probe) Consume(s *probeState, exists bool, _, n int64) (policy.Decision, bool) {
	d := policy.Decision{Verdict: policy.Verdict{Allowed: exists}, Remaining: s.V}
	if n != 1 {
		return d, false
	}
	s.V++
	return d, true
}

func (p probe) Reserve(s *probeState, exists bool, now, n, _ int64) (policy.Result, bool) {
	d, changed := p.Consume(s, exists, now, n)
	return d.Result(p.Quota()), changed
}

func (probe) Peek(s *probeState, exists bool, _, _ int64) policy.Result {
	return policy.Result{Allowed: exists, Remaining: s.V, Limit: 7}
}

func (probe) Cancel(*probeState, int64, *policy.Receipt) bool { return false }

func (probe) ExpiresAt(s *probeState) int64 { return s.V }

func (probe) Quota() int64 { return 7 }

func (probe) Window() int64 { return 0 }

func (probe) AppendState(dst []byte, s *probeState) []byte { return append(dst, byte(s.V)) }

func (probe) DecodeState(src []byte, s *probeState) error {
	s.V = int64(src[0])
	if src[0] == 0xff {
		return fmt.Errorf("%w: probe", policy.ErrBadState)
	}
	return nil
}

// TestErasedZeroState checks that a machine sees the zero state whenever
// there is no state, whatever an earlier call or a failed decode left in
// the value Erase decodes into.
func TestErasedZeroState(t *testing.T) {
	e := policy.Erase[probeState](probe{})
	steps := []struct {
		state []byte
		want  policy.Result
		next  []byte
	}{
		{state: []byte{5}, want: policy.Result{Allowed: true, Remaining: 5, Limit: 7}, next: []byte{6}},
		{state: nil, want: policy.Result{Remaining: 0, Limit: 7}, next: []byte{1}},
		{state: []byte{9}, want: policy.Result{Allowed: true, Remaining: 9, Limit: 7}, next: []byte{10}},
		{state: []byte{0xff}, want: policy.Result{Remaining: 0, Limit: 7}, next: []byte{1}},
	}
	for i, st := range steps {
		res, next, changed := policytest.DecideBytes(t, e, st.state, 0, 1, nil)
		if res != st.want || !changed || !bytes.Equal(next, st.next) {
			t.Errorf("step %d: Consume(%v) = %+v, %v, %v, want %+v, %v, true", i, st.state, res, next, changed, st.want, st.next)
		}
		if res := e.Peek(st.state, 0, 1); res != st.want {
			t.Errorf("step %d: Peek(%v) = %+v, want %+v", i, st.state, res, st.want)
		}
	}
	if got := e.ExpiresAt([]byte{0xff}); got != math.MinInt64 {
		t.Errorf("ExpiresAt(0xff) = %d, want math.MinInt64", got)
	}
	if got := e.ExpiresAt([]byte{4}); got != 4 {
		t.Errorf("ExpiresAt(4) = %d, want 4", got)
	}
	if got := e.Quota(); got != 7 {
		t.Errorf("Quota() = %d, want 7", got)
	}
}

// TestErasedConcurrent runs independent keys through one Erased from many
// goroutines; run it with -race.
func TestErasedConcurrent(t *testing.T) {
	e := policy.Erase(fw)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var state, dst []byte
			for i := range 300 {
				// Key g hits 4 times per 10 ns window opened at 10·w: the
				// fourth is rejected.
				now := int64(10*(i/4) + i%4)
				res, next, changed := policytest.DecideBytes(t, e, state, now, 1, dst)
				if want := i%4 != 3; res.Allowed != want || changed != want {
					errs <- fmt.Errorf("goroutine %d, hit %d: Allowed %v, changed %v, want %v", g, i, res.Allowed, changed, want)
					return
				}
				if changed {
					state, dst = next, state
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// raceEnabled reports whether the test binary was built with -race, under
// which sync.Pool drops values at random and so allocates.
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

func TestErasedAllocs(t *testing.T) {
	if raceEnabled() {
		t.Skip("sync.Pool allocates under -race")
	}
	e := policy.Erase(fw)
	state := fwState(5, 1)
	dst := make([]byte, 0, 16)
	calls := []struct {
		name string
		f    func()
	}{
		{"Consume", func() { e.Consume(state, 6, 1, dst) }},
		{"rejected Consume", func() { e.Consume(state, 6, 3, dst) }},
		{"Reserve", func() { e.Reserve(state, 6, 3, 100, dst) }},
		{"Peek", func() { e.Peek(state, 6, 1) }},
		{"ExpiresAt", func() { e.ExpiresAt(state) }},
		{"no state", func() { e.Consume(nil, 6, 1, dst) }},
	}
	for _, c := range calls {
		if got := testing.AllocsPerRun(100, c.f); got != 0 {
			t.Errorf("%s: %v allocations, want 0", c.name, got)
		}
	}
}

// FuzzErased feeds arbitrary bytes as a fixed window's state: Erase never
// panics, and answers as the machine does for the state the bytes decode
// to, or for a new key when they do not decode or have expired at now.
func FuzzErased(f *testing.F) {
	f.Add([]byte{1, 1, 10, 4}, int64(8), int64(2), int64(7))
	f.Add([]byte{1, 1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2}, int64(math.MaxInt64), int64(1), int64(math.MaxInt64))
	f.Add([]byte{}, int64(math.MinInt64), int64(3), int64(0))
	f.Add([]byte{1, 9, 0, 0}, int64(0), int64(-1), int64(-1))
	e := policy.Erase(fw)
	f.Fuzz(func(t *testing.T, state []byte, now, n, maxWait int64) {
		var s fixedwindow.State
		err := fw.DecodeState(state, &s)
		if err != nil && !errors.Is(err, policy.ErrBadState) {
			t.Fatalf("DecodeState(%v) = %v, want an ErrBadState", state, err)
		}
		exists := err == nil && fw.ExpiresAt(&s) > now
		if !exists {
			s = fixedwindow.State{}
		}
		check := func(name string, got policy.Result, next []byte, gotChanged bool, want policy.Result, ws fixedwindow.State, wantChanged bool) {
			t.Helper()
			var wantNext []byte
			if wantChanged {
				wantNext = fw.AppendState(nil, &ws)
			}
			if got != want || gotChanged != wantChanged || !bytes.Equal(next, wantNext) {
				t.Fatalf("%s(%v, %d, %d) = %+v, %v, %v; the machine gives %+v, %v, %v", name, state, now, n, got, next, gotChanged, want, wantNext, wantChanged)
			}
		}
		cs := s
		want, changed := policytest.Decide(t, fw, &cs, exists, now, n)
		res, next, gotChanged := policytest.DecideBytes(t, e, state, now, n, nil)
		check("Consume", res, next, gotChanged, want, cs, changed)

		rs := s
		want, changed = fw.Reserve(&rs, exists, now, n, maxWait)
		res, next, gotChanged = e.Reserve(state, now, n, maxWait, nil)
		check("Reserve", res, next, gotChanged, want, rs, changed)

		ps := s
		if got, want := e.Peek(state, now, n), fw.Peek(&ps, exists, now, n); got != want {
			t.Fatalf("Peek(%v, %d, %d) = %+v, the machine gives %+v", state, now, n, got, want)
		}
		wantAt := int64(math.MinInt64)
		if err == nil {
			fw.DecodeState(state, &s)
			wantAt = fw.ExpiresAt(&s)
		}
		if got := e.ExpiresAt(state); got != wantAt {
			t.Fatalf("ExpiresAt(%v) = %d, want %d", state, got, wantAt)
		}
	})
}

// BenchmarkErasedConsume is a Consume on an existing fixed-window key, the
// state and the buffer swapping places as a byte-oriented store would.
func BenchmarkErasedConsume(b *testing.B) {
	e := policy.Erase(fixedwindow.Config{Limit: math.MaxInt64 / 2, Interval: math.MaxInt64 / 2})
	state, dst := fwState(5, 1), make([]byte, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		_, next, changed := e.Consume(state, 6, 1, dst)
		if changed {
			state, dst = next, state
		}
	}
}
