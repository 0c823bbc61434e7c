package penaltybox

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/policytest"
	"github.com/sluicehq/sluice/internal/policy/slidingwindow"
)

const (
	sec    = int64(time.Second)
	minute = 60 * sec
	t0     = int64(1_700_000_000_000_000_000)
	never  = policy.Never
)

// The steps and results of the worked examples.
var (
	consume, peek, reserve     = policytest.Consume, policytest.Peek, policytest.Reserve
	allowed, granted, rejected = policytest.Allowed, policytest.Granted, policytest.Rejected
)

// offence is a Consume refused by the inner policy: it changes the state
// (it starts a block).
func offence(at, n int64, want policy.Result) policytest.Step {
	st := consume(at, n, want)
	st.Changes = true
	return st
}

func box(inner policy.Erased, forgive int64, penalties ...int64) Config {
	return Config{Inner: inner, Penalties: penalties, Forgive: forgive}
}

// TestDecisions works through blocks, escalation and forgiveness by hand.
func TestDecisions(t *testing.T) {
	// 5 a minute, in a window from the first hit: a login form.
	five := policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 5, Interval: minute})
	tests := []struct {
		name  string
		cfg   Config
		steps []policytest.Step
	}{
		{
			// The 6th request in the minute is an offence: blocked for 10
			// minutes, although the window ends at +60s. During the block
			// even a request the window would take is refused, and does
			// not extend it.
			name: "an offence blocks the key for the penalty",
			cfg:  box(five, 0, 10*minute),
			steps: []policytest.Step{
				consume(0, 5, allowed(5, 0, minute)),
				offence(10*sec, 1, rejected(5, 0, 10*minute, 10*minute)),
				consume(2*minute, 1, rejected(5, 0, 8*minute+10*sec, 8*minute+10*sec)),
				consume(10*minute+10*sec-1, 1, rejected(5, 0, 1, 1)),
				consume(10*minute+10*sec, 5, allowed(5, 0, minute)),
			},
		},
		{
			// Offences escalate, 1, 10 then 60 minutes, the last
			// repeating, while they come within 30 minutes of the last
			// block's end; after a quiet 30 minutes the count starts over.
			name: "escalation and forgiveness",
			cfg:  box(policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 1, Interval: sec}), 30*minute, minute, 10*minute, 60*minute),
			steps: []policytest.Step{
				consume(0, 1, allowed(1, 0, sec)),
				offence(0, 1, rejected(1, 0, minute, minute)),
				consume(minute, 1, allowed(1, 0, sec)),
				offence(minute, 1, rejected(1, 0, 10*minute, 10*minute)),
				consume(11*minute, 1, allowed(1, 0, sec)),
				offence(11*minute, 1, rejected(1, 0, 60*minute, 60*minute)),
				consume(71*minute, 1, allowed(1, 0, sec)),
				offence(71*minute, 1, rejected(1, 0, 60*minute, 60*minute)), // the last repeats
				// The block ended at 131m; 30m later, at 161m, the
				// offences are forgiven: 1 minute again.
				consume(161*minute-sec, 1, allowed(1, 0, sec)),
				offence(161*minute-sec, 1, rejected(1, 0, 60*minute, 60*minute)),
				consume(221*minute-sec, 1, allowed(1, 0, sec)),
				peek(251*minute-sec-1, 1, allowed(1, 0, sec)),
				consume(251*minute-sec, 1, allowed(1, 0, sec)),
				offence(251*minute-sec, 1, rejected(1, 0, minute, minute)),
			},
		},
		{
			// When the inner policy still refuses at the block's end, the
			// wait runs on to when it allows: a GCRA of 1 a minute, empty
			// after a burst of 3, has a token again at +60s, 30s after a
			// block of 30s. An offence at 60s−1ns would block until 90s−1ns,
			// when the GCRA has the token: 30s.
			name: "retry after waits for the inner policy too",
			cfg:  box(policy.Erase[gcra.State](gcra.Config{Limit: 3, Rate: 1, Period: minute}), 0, 30*sec),
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 3*minute)),
				offence(0, 1, rejected(3, 0, minute, 3*minute)),
				peek(minute-1, 1, rejected(3, 0, 30*sec, 2*minute+1)),
				consume(minute, 1, allowed(3, 0, 3*minute)),
			},
		},
		{
			// Reservations go through while the key is not blocked; one
			// the window cannot grant within its bound is refused and is
			// no offence; a blocked key grants none.
			name: "reservations",
			cfg:  box(five, 0, 10*minute),
			steps: []policytest.Step{
				reserve(0, 5, 0, granted(5, 0, minute, 0)),
				reserve(0, 1, sec, rejected(5, 0, minute, minute)),
				reserve(0, 1, never, granted(5, 0, 2*minute, minute)),
				offence(sec, 5, rejected(5, 0, 10*minute, 10*minute)),
				reserve(2*sec, 1, never, rejected(5, 0, 10*minute-sec, 10*minute-sec)),
			},
		},
		{
			// A sliding window refuses more than its limit as a request
			// that can never pass: an offence, whose wait is Never.
			name: "a request that can never pass",
			cfg:  box(policy.Erase[slidingwindow.State](slidingwindow.Config{Limit: 2, Interval: minute}), 0, minute),
			steps: []policytest.Step{
				offence(0, 3, rejected(2, 0, never, minute)),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			policytest.Steps(t, tt.cfg, &s, false, t0, tt.steps)
		})
	}
}

// TestArgumentErrors: the inner policy's argument errors are the box's,
// blocked or not, and no offence.
func TestArgumentErrors(t *testing.T) {
	c := box(policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 2, Interval: minute}), 0, minute)
	var s State
	exists := false
	for _, blocked := range []bool{false, true} {
		if blocked {
			policytest.Decide(t, c, &s, exists, t0, 2)
			if _, changed := policytest.Decide(t, c, &s, true, t0, 1); !changed {
				t.Fatal("the offence changed nothing")
			}
			exists = true
		}
		before := c.AppendState(nil, &s)
		for _, n := range []int64{0, 3} {
			res, changed := policytest.Decide(t, c, &s, exists, t0+1, n)
			if res.Code == policy.OK || changed {
				t.Errorf("blocked %v: Consume(%d) = %+v, %v; want an argument error", blocked, n, res, changed)
			}
			if p := c.Peek(&s, exists, t0+1, n); p != res {
				t.Errorf("blocked %v: Peek(%d) = %+v, want %+v", blocked, n, p, res)
			}
		}
		if after := c.AppendState(nil, &s); string(after) != string(before) {
			t.Errorf("argument errors changed the state from %x to %x", before, after)
		}
	}
}

// TestEncoding pins the encoding, and refuses strikes beyond the
// penalties.
func TestEncoding(t *testing.T) {
	c := box(policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 2, Interval: minute}), minute, minute, 2*minute)
	s := State{Until: 3, Strikes: 2, Inner: []byte{1, 1, 0, 2}}
	// Header 1, tag 13; zig-zag 3 → 6, 2 → 4, 4 → 8; the inner state.
	want := []byte{1, 13, 6, 4, 8, 1, 1, 0, 2}
	if got := c.AppendState(nil, &s); string(got) != string(want) {
		t.Fatalf("AppendState = %x, want %x", got, want)
	}
	var got State
	if err := c.DecodeState(want, &got); err != nil || got.Until != 3 || got.Strikes != 2 || string(got.Inner) != string(s.Inner) {
		t.Fatalf("DecodeState(%x) = %+v, %v", want, got, err)
	}
	for _, bad := range [][]byte{{1, 13, 6, 6, 0}, {1, 13, 6, 1, 0}, {1, 13, 6, 4, 2, 1, 2, 3}} {
		if err := c.DecodeState(bad, &got); !errors.Is(err, policy.ErrBadState) {
			t.Errorf("DecodeState(%x) = %v, want ErrBadState", bad, err)
		}
	}
}

// contractConfigs are boxes around policies of every kind of state and
// capability: windows, a rate, a log, a compound's bytes.
func contractConfigs() []policy.Machine[State] {
	fw := policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 3, Interval: 10})
	g := policy.Erase[gcra.State](gcra.Config{Limit: 2, Rate: 1, Period: 7})
	sw := policy.Erase[slidingwindow.State](slidingwindow.Config{Limit: 3, Interval: 12})
	return []policy.Machine[State]{
		box(fw, 0, 15),
		box(fw, 20, 3, 11, 40),
		box(g, 5, 1, 2),
		box(sw, 0, 30),
	}
}

func TestContract(t *testing.T) {
	policytest.Run(t, contractConfigs()...)
}

func FuzzDecodeState(f *testing.F) {
	c := contractConfigs()[1]
	var s State
	policytest.Decide(f, c, &s, false, 7, 3)
	policytest.Decide(f, c, &s, true, 8, 1)
	f.Add(c.AppendState(nil, &s))
	f.Add([]byte{1, 13, 0, 0, 0})
	f.Fuzz(func(t *testing.T, src []byte) { policytest.DecodeState(t, c, src) })
}
