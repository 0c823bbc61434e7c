package shaper

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

const never = policy.Never

// step is a call on one key, with the state it must leave.
type step struct {
	name string
	policytest.Step
	wantState State
}

var consume, peek, reserve = policytest.Consume, policytest.Peek, policytest.Reserve

// run applies steps in order to one key that starts with no state, as
// policytest.Steps does, and checks the state each leaves.
func run(t *testing.T, c Config, steps []step) {
	t.Helper()
	var s State
	exists := false
	for i, st := range steps {
		exists = policytest.Call(t, fmt.Sprintf("step %d (%s)", i, st.name), c, &s, exists, 0, st.Step)
		if s != st.wantState {
			t.Fatalf("step %d (%s): state = %+v, want %+v", i, st.name, s, st.wantState)
		}
	}
}

// TestThreePerTen follows a shaper of 3 tokens per 10 ns, a token every
// 3⅓ ns, with room for 2 waiting requests. Times below are in ns; the
// state is the next free slot as Next + Frac/3.
func TestThreePerTen(t *testing.T) {
	c := Config{Amount: 3, Interval: 10, MaxQueue: 2}
	run(t, c, []step{
		// The line is idle: the first request goes at once, the slot after
		// it is 3⅓, a backlog of 1 slot.
		{name: "idle line", Step: reserve(0, 1, never, policy.Result{Allowed: true, Remaining: 2, ResetAfter: 4, Limit: 3}),
			wantState: State{3, 1}},
		{name: "first in the queue departs at 3⅓", Step: reserve(0, 1, never, policy.Result{Allowed: true, Remaining: 1, ResetAfter: 7, Limit: 3, Wait: 4}),
			wantState: State{6, 2}},
		{name: "second in the queue departs at 6⅔", Step: reserve(0, 1, never, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 10, Limit: 3, Wait: 7}),
			wantState: State{10, 0}},
		// A third would wait 10 > 2 slots: the queue has room at 10-6⅔.
		{name: "queue full", Step: reserve(0, 1, never, policy.Result{Remaining: 0, RetryAfter: 4, ResetAfter: 10, Limit: 3}),
			wantState: State{10, 0}},
		{name: "consume does not wait", Step: consume(0, 1, policy.Result{Remaining: 0, RetryAfter: 10, ResetAfter: 10, Limit: 3}),
			wantState: State{10, 0}},
		// At 3 the wait would be 7 > 6⅔: full for ⅓ ns more.
		{name: "still full at 3", Step: reserve(3, 1, 6, policy.Result{Remaining: 0, RetryAfter: 1, ResetAfter: 7, Limit: 3}),
			wantState: State{10, 0}},
		// At 4 the wait is 6 ≤ 6⅔: the queue has room. 6 ns is 1.8 slots,
		// so 1 more request fits after this one.
		{name: "room at 4, but past max wait", Step: reserve(4, 1, 5, policy.Result{Remaining: 1, RetryAfter: 6, ResetAfter: 6, Limit: 3}),
			wantState: State{10, 0}},
		{name: "room at 4 within max wait", Step: reserve(4, 1, 6, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 10, Limit: 3, Wait: 6}),
			wantState: State{13, 1}},
		// 13⅓ < 14: the line is idle again. 2 tokens take 6⅔ ns.
		{name: "two tokens on an idle line", Step: consume(14, 2, policy.Result{Allowed: true, Remaining: 1, ResetAfter: 7, Limit: 3}),
			wantState: State{20, 2}},
		// At 20 the slot at 20⅔ is not free yet.
		{name: "a fraction of a nanosecond early", Step: consume(20, 1, policy.Result{Remaining: 2, RetryAfter: 1, ResetAfter: 1, Limit: 3}),
			wantState: State{20, 2}},
		{name: "idle at 21", Step: consume(21, 1, policy.Result{Allowed: true, Remaining: 2, ResetAfter: 4, Limit: 3}),
			wantState: State{24, 1}},
		{name: "peek", Step: peek(21, 1, policy.Result{Remaining: 2, RetryAfter: 4, ResetAfter: 4, Limit: 3}),
			wantState: State{24, 1}},
		// 5 tokens take 16⅔ ns: 5 slots ahead, more than the queue holds,
		// which has room again at 116⅔-6⅔.
		{name: "a large request on an idle line", Step: reserve(100, 5, 0, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 17, Limit: 3}),
			wantState: State{116, 2}},
		{name: "behind it, the queue is full", Step: reserve(100, 1, never, policy.Result{Remaining: 0, RetryAfter: 10, ResetAfter: 17, Limit: 3}),
			wantState: State{116, 2}},
		{name: "zero tokens", Step: consume(200, 0, policy.Result{Code: policy.NonPositiveTokens}),
			wantState: State{116, 2}},
		{name: "negative tokens", Step: reserve(200, -1, 1, policy.Result{Code: policy.NonPositiveTokens}),
			wantState: State{116, 2}},
		{name: "negative max wait", Step: reserve(200, 1, -1, policy.Result{Code: policy.NonPositiveMaxWait}),
			wantState: State{116, 2}},
		{name: "peek zero tokens", Step: peek(200, 0, policy.Result{Code: policy.NonPositiveTokens}),
			wantState: State{116, 2}},
	})
}

// TestNoQueue is a shaper that queues nothing: one request per 100 ns,
// the others rejected, whatever they would wait.
func TestNoQueue(t *testing.T) {
	c := Config{Amount: 1, Interval: 100, MaxQueue: 0}
	run(t, c, []step{
		{name: "idle", Step: reserve(0, 1, never, policy.Result{Allowed: true, ResetAfter: 100, Limit: 1}),
			wantState: State{100, 0}},
		{name: "no queue", Step: reserve(50, 1, never, policy.Result{RetryAfter: 50, ResetAfter: 50, Limit: 1}),
			wantState: State{100, 0}},
		{name: "consume alike", Step: consume(99, 1, policy.Result{RetryAfter: 1, ResetAfter: 1, Limit: 1}),
			wantState: State{100, 0}},
		{name: "idle again on the slot", Step: consume(100, 1, policy.Result{Allowed: true, ResetAfter: 100, Limit: 1}),
			wantState: State{200, 0}},
		// The clock going back sees a longer backlog; nothing is reset.
		{name: "clock back", Step: consume(50, 1, policy.Result{RetryAfter: 150, ResetAfter: 150, Limit: 1}),
			wantState: State{200, 0}},
	})
}

// TestFineSlots has slots far below a nanosecond: a billion tokens per ns.
func TestFineSlots(t *testing.T) {
	c := Config{Amount: 1_000_000_000, Interval: 1, MaxQueue: 5}
	run(t, c, []step{
		{name: "idle", Step: consume(7, 1, policy.Result{Allowed: true, Remaining: 5, ResetAfter: 1, Limit: 6}),
			wantState: State{7, 1}},
		{name: "a billionth of a ns to wait", Step: consume(7, 1, policy.Result{Remaining: 5, RetryAfter: 1, ResetAfter: 1, Limit: 6}),
			wantState: State{7, 1}},
		{name: "queued", Step: reserve(7, 4, 1, policy.Result{Allowed: true, Remaining: 1, ResetAfter: 1, Limit: 6, Wait: 1}),
			wantState: State{7, 5}},
		// 5 slots ahead, room for 5 waiting: one more fits.
		{name: "last place", Step: reserve(7, 1, 1, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 1, Limit: 6, Wait: 1}),
			wantState: State{7, 6}},
		{name: "full", Step: reserve(7, 1, 1, policy.Result{Remaining: 0, RetryAfter: 1, ResetAfter: 1, Limit: 6}),
			wantState: State{7, 6}},
		// A billion tokens take exactly 1 ns.
		{name: "a billion tokens", Step: consume(8, 1_000_000_000, policy.Result{Allowed: true, Remaining: 0, ResetAfter: 1, Limit: 6}),
			wantState: State{9, 0}},
	})
}

// TestQueueOfOneTokenRequests checks that with 1-token requests, at most
// MaxQueue wait at any time: of a burst at t, MaxQueue+1 pass (one at
// once), and one more passes each time a request departs.
func TestQueueOfOneTokenRequests(t *testing.T) {
	for _, c := range []Config{
		{Amount: 1, Interval: 10, MaxQueue: 4},
		{Amount: 3, Interval: 10, MaxQueue: 4},
		{Amount: 7, Interval: 1, MaxQueue: 9},
		{Amount: 10, Interval: 1007, MaxQueue: 1},
	} {
		var s State
		exists := false
		// departures[k] is the departure of the k-th request, in units of
		// 1/Amount ns: k·Interval, the burst starting at 0.
		var departures []int64
		admit := func(now int64) bool {
			res, changed := c.Reserve(&s, exists, now, 1, never)
			exists = exists || changed
			if res.Allowed {
				departures = append(departures, (now+res.Wait)*c.Amount)
			}
			return res.Allowed
		}
		for range c.MaxQueue + 1 {
			if !admit(0) {
				t.Fatalf("%+v: burst request %d rejected, want %d accepted", c, len(departures), c.MaxQueue+1)
			}
		}
		if admit(0) {
			t.Fatalf("%+v: burst request %d accepted, want the queue full", c, len(departures)-1)
		}
		// Walk the clock: count the requests waiting after each admission.
		for now := int64(1); now < 20*policy.CeilDiv(c.Interval, c.Amount); now++ {
			for admit(now) {
			}
			waiting := int64(0)
			for _, d := range departures {
				if d > now*c.Amount {
					waiting++
				}
			}
			if waiting > c.MaxQueue {
				t.Fatalf("%+v: at %d, %d requests wait, want at most %d", c, now, waiting, c.MaxQueue)
			}
		}
		for k, d := range departures {
			// Each departure is on its slot k·Interval/Amount, rounded up.
			if want := policy.CeilDiv(int64(k)*c.Interval, c.Amount) * c.Amount; d != want {
				t.Fatalf("%+v: request %d departs at %d/%d ns, want %d/%d", c, k, d, c.Amount, want, c.Amount)
			}
		}
	}
}

// TestNoDrift checks that a long run of departures stays on the exact grid
// k·Interval/Amount, with no rounding error accumulating.
func TestNoDrift(t *testing.T) {
	c := Config{Amount: 7, Interval: 1_000_000_000, MaxQueue: math.MaxInt64}
	var s State
	exists := false
	const start = 1_700_000_000_000_000_000
	for k := int64(0); k < 100_000; k++ {
		// Arrive in groups of 10, a bit before the first of them has its
		// slot: the waits fill the gaps.
		now := start + k/10*(10*c.Interval/c.Amount)
		res, changed := c.Reserve(&s, exists, now, 1, never)
		exists = exists || changed
		// ⌈k·10⁹/7⌉, k·10⁹ < 2^63.
		depart := start + (k*c.Interval+c.Amount-1)/c.Amount
		if !res.Allowed || now+res.Wait != depart {
			t.Fatalf("request %d at %d: Allowed %v, departs at %d, want at %d", k, now, res.Allowed, now+res.Wait, depart)
		}
	}
	if want := (State{start + 100_000*c.Interval/c.Amount, 100_000 * c.Interval % c.Amount}); s != want {
		t.Errorf("after 100000 requests the state is %+v, want %+v", s, want)
	}
}

// TestHorizon checks the int64 bounds: slots beyond the horizon saturate,
// and waits from far in the past saturate at policy.Never.
func TestHorizon(t *testing.T) {
	t.Run("slot past the horizon", func(t *testing.T) {
		c := Config{Amount: 1, Interval: math.MaxInt64, MaxQueue: 0}
		run(t, c, []step{
			{name: "2·MaxInt64 ns of line", Step: consume(0, 2, policy.Result{Allowed: true, ResetAfter: math.MaxInt64, Limit: 1}),
				wantState: State{math.MaxInt64, 0}},
			{name: "1 ns before the horizon", Step: consume(math.MaxInt64-1, 1, policy.Result{RetryAfter: 1, ResetAfter: 1, Limit: 1}),
				wantState: State{math.MaxInt64, 0}},
			{name: "from the far past", Step: consume(math.MinInt64, 1, policy.Result{RetryAfter: never, ResetAfter: never, Limit: 1}),
				wantState: State{math.MaxInt64, 0}},
			// Allowed, on a state that stays saturated: nothing changes.
			{name: "at the horizon", Step: policytest.Step{Op: policytest.OpConsume, At: math.MaxInt64, N: 1,
				Want: policy.Result{Allowed: true, Remaining: 1, Limit: 1}},
				wantState: State{math.MaxInt64, 0}},
		})
	})
	t.Run("product past 128 bits of room", func(t *testing.T) {
		c := Config{Amount: 1, Interval: math.MaxInt64, MaxQueue: math.MaxInt64}
		var s State
		res, changed := c.Reserve(&s, false, math.MinInt64, math.MaxInt64, 0)
		// From MinInt64, the slot at MaxInt64 is 2^64-1 ns ahead, 3 slots of
		// MaxInt64 ns: MaxInt64+1-3 more fit.
		want := policy.Result{Allowed: true, Remaining: math.MaxInt64 - 2, ResetAfter: never, Limit: never}
		if res != want || !changed || s != (State{math.MaxInt64, 0}) {
			t.Errorf("Reserve(MaxInt64 tokens) = %+v, %v, state %+v; want %+v, true, {MaxInt64 0}", res, changed, s, want)
		}
		if got := c.Quota(); got != never {
			t.Errorf("Quota() = %d, want %d", got, never)
		}
	})
	t.Run("slots ahead past 64 bits", func(t *testing.T) {
		// (2^64-1)·(2^63-1) slots of 1/(2^63-1) ns ahead.
		c := Config{Amount: math.MaxInt64, Interval: 1, MaxQueue: 0}
		s := State{math.MaxInt64, 0}
		res := c.Peek(&s, true, math.MinInt64, 1)
		want := policy.Result{RetryAfter: never, ResetAfter: never, Limit: 1}
		if res != want {
			t.Errorf("Peek from MinInt64 = %+v, want %+v", res, want)
		}
	})
	t.Run("a queue of MaxInt64 is full", func(t *testing.T) {
		// MaxInt64 slots of 1/MaxInt64 ns are 1 ns; MaxInt64 ns are ahead.
		c := Config{Amount: math.MaxInt64, Interval: 1, MaxQueue: math.MaxInt64}
		s := State{math.MaxInt64, 0}
		res, changed := c.Reserve(&s, true, 0, 1, never)
		want := policy.Result{Remaining: 0, RetryAfter: math.MaxInt64 - 1, ResetAfter: math.MaxInt64, Limit: never}
		if res != want || changed {
			t.Errorf("Reserve = %+v, %v, want %+v, false", res, changed, want)
		}
	})
	t.Run("whole nanoseconds and the carry of the fraction reach 2^64", func(t *testing.T) {
		// n·Interval/Amount is 2^64-1 ns and r/Amount, and the fraction
		// already there adds up with r to exactly 1 ns more: the slot is
		// MinInt64 + 2^64 ns, past the horizon.
		const (
			amount   = 291029959374715844
			interval = 3215342961708437287
			n        = 1669667977040604101
			r        = 129600289877225927 // n·interval mod amount
		)
		c := Config{Amount: amount, Interval: interval, MaxQueue: 1}
		s := State{math.MinInt64, amount - r}
		res, changed := c.Reserve(&s, true, math.MinInt64, n, never)
		want := policy.Result{Allowed: true, ResetAfter: never, Limit: 2, Wait: 1}
		if res != want || !changed || s != (State{math.MaxInt64, 0}) {
			t.Errorf("Reserve = %+v, %v, state %+v; want %+v, true, {MaxInt64 0}", res, changed, s, want)
		}
	})
	t.Run("slot ends on the horizon with a fraction", func(t *testing.T) {
		c := Config{Amount: 2, Interval: 1, MaxQueue: 0}
		s := State{math.MaxInt64, 1}
		if got := c.ExpiresAt(&s); got != math.MaxInt64 {
			t.Errorf("ExpiresAt(%+v) = %d, want MaxInt64", s, got)
		}
		res := c.Peek(&s, true, math.MaxInt64, 1)
		want := policy.Result{RetryAfter: 1, ResetAfter: 1, Limit: 1}
		if res != want {
			t.Errorf("Peek at MaxInt64 = %+v, want %+v", res, want)
		}
	})
}

func TestExpiresAt(t *testing.T) {
	c := Config{Amount: 3, Interval: 10, MaxQueue: 1}
	tests := []struct {
		s    State
		want int64
	}{
		{State{0, 0}, 0},
		{State{10, 0}, 10},
		{State{10, 1}, 11},
		{State{-5, 2}, -4},
		{State{math.MinInt64, 0}, math.MinInt64},
	}
	for _, tt := range tests {
		if got := c.ExpiresAt(&tt.s); got != tt.want {
			t.Errorf("ExpiresAt(%+v) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

func TestQuota(t *testing.T) {
	tests := []struct {
		maxQueue, want int64
	}{
		{0, 1},
		{5, 6},
		{math.MaxInt64 - 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		c := Config{Amount: 1, Interval: 1, MaxQueue: tt.maxQueue}
		if got := c.Quota(); got != tt.want {
			t.Errorf("Config{MaxQueue: %d}.Quota() = %d, want %d", tt.maxQueue, got, tt.want)
		}
	}
}

func TestEncoding(t *testing.T) {
	c := Config{Amount: 3, Interval: 10, MaxQueue: 1}
	tests := []struct {
		s    State
		want []byte
	}{
		// Version 1, tag 5, then zig-zag varints: 2v for v ≥ 0, -2v-1 below.
		{State{0, 0}, []byte{1, 5, 0, 0}},
		{State{116, 2}, []byte{1, 5, 0xe8, 0x01, 4}},
		{State{-1, 1}, []byte{1, 5, 1, 2}},
		{State{math.MaxInt64, 0}, []byte{1, 5, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}},
	}
	for _, tt := range tests {
		got := c.AppendState([]byte{9}, &tt.s)
		if !bytes.Equal(got, append([]byte{9}, tt.want...)) {
			t.Errorf("AppendState([9], %+v) = %v, want [9] + %v", tt.s, got, tt.want)
		}
		var s State
		if err := c.DecodeState(tt.want, &s); err != nil || s != tt.s {
			t.Errorf("DecodeState(%v) = %+v, %v, want %+v", tt.want, s, err, tt.s)
		}
	}
}

// TestDecodeStateErrors: states that decode to a fraction out of range are
// refused too (policytest checks the malformed ones).
func TestDecodeStateErrors(t *testing.T) {
	c := Config{Amount: 3, Interval: 10, MaxQueue: 1}
	tests := []struct {
		name string
		src  []byte
	}{
		{"fraction = Amount", []byte{1, 5, 0, 6}},
		{"fraction -1", []byte{1, 5, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{42, 1}
			err := c.DecodeState(tt.src, &s)
			if !errors.Is(err, policy.ErrBadState) {
				t.Errorf("DecodeState(%v) = %v, want an ErrBadState", tt.src, err)
			}
			if s != (State{42, 1}) {
				t.Errorf("DecodeState(%v) changed the state to %+v", tt.src, s)
			}
		})
	}
}

// TestErased runs the shaper through policy.Erase, as a store of bytes
// would.
func TestErased(t *testing.T) {
	e := policy.Erase(Config{Amount: 3, Interval: 10, MaxQueue: 2})
	res, state, changed := e.Reserve(nil, 0, 1, never, nil)
	if want := (policy.Result{Allowed: true, Remaining: 2, ResetAfter: 4, Limit: 3}); res != want || !changed {
		t.Fatalf("Reserve(nil) = %+v, %v, want %+v, true", res, changed, want)
	}
	if want := []byte{1, 5, 6, 2}; !bytes.Equal(state, want) {
		t.Fatalf("state = %v, want %v", state, want)
	}
	res, _, changed = policytest.DecideBytes(t, e, state, 3, 1, nil)
	if want := (policy.Result{Remaining: 2, RetryAfter: 1, ResetAfter: 1, Limit: 3}); res != want || changed {
		t.Errorf("Consume at 3 = %+v, %v, want %+v, false", res, changed, want)
	}
	if got := e.ExpiresAt(state); got != 4 {
		t.Errorf("ExpiresAt = %d, want 4", got)
	}
}

func TestAllocs(t *testing.T) {
	c := Config{Amount: 3, Interval: 10, MaxQueue: 2}
	s := State{3, 1}
	allocs := testing.AllocsPerRun(100, func() {
		c.Consume(&s, true, 0, 1)
		c.Reserve(&s, true, 0, 1, never)
		c.Peek(&s, true, 0, 1)
		s = State{3, 1}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decision, want 0", allocs)
	}
}

// BenchmarkConsume is a Consume on an existing key whose line is always
// idle: every call takes a slot.
func BenchmarkConsume(b *testing.B) {
	c := Config{Amount: 3, Interval: 10, MaxQueue: 2}
	s := State{3, 1}
	now := int64(1_700_000_000_000_000_000)
	b.ReportAllocs()
	for b.Loop() {
		now += 4
		if res, _ := c.Consume(&s, true, now, 1); !res.Allowed {
			b.Fatal("rejected")
		}
	}
}

// TestContract runs the contract's suite on short lines, with a queue and
// without, and with slots of a fraction of a nanosecond.
func TestContract(t *testing.T) {
	policytest.Run(t, Config{Amount: 2, Interval: 7, MaxQueue: 4}, Config{Amount: 3, Interval: 10, MaxQueue: 0},
		Config{Amount: 1, Interval: 10, MaxQueue: 5})
}

// TestInvalidState checks that a State with its fraction out of range, which
// DecodeState refuses but a caller may build, gives no panic.
func TestInvalidState(t *testing.T) {
	c := Config{Amount: 2, Interval: 3, MaxQueue: 1}
	for _, s := range []State{
		{math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, -1},
		{0, math.MinInt64},
	} {
		c.Peek(&s, true, math.MinInt64, 1)
		c.Reserve(&s, true, math.MinInt64, math.MaxInt64, math.MaxInt64)
		policytest.Decide(t, c, &s, true, 0, 1)
		c.ExpiresAt(&s)
	}
}
