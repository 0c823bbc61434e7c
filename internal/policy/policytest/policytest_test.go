package policytest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// fatal is what recorder's Fatalf panics with.
type fatal string

// recorder is a testing.TB whose Fatalf stops the check under test and
// records why, so that a test can see a broken machine fail.
type recorder struct{ testing.TB }

func (recorder) Helper() {}

func (recorder) Fatalf(format string, args ...any) { panic(fatal(fmt.Sprintf(format, args...))) }

// caught runs f, which fails through a recorder, and returns its first
// failure, "" if none.
func caught(f func()) (msg string) {
	defer func() {
		if f, ok := recover().(fatal); ok {
			msg = string(f)
		}
	}()
	f()
	return ""
}

// failure runs the suite on m and returns its first failure, "" if none.
func failure[S any](m policy.Machine[S]) string {
	return caught(func() { run(recorder{}, m, 1) })
}

var fw = fixedwindow.Config{Limit: 3, Interval: 10}

// base is the sound fixed window that the mutants below break, without
// its claim to lapse (policy.Lapsing), so that each is caught by the check
// it targets; the lapse check has a mutant of its own.
type base struct{ fixedwindow.Config }

func (base) Lapses() bool { return false }

// lapsing claims that a token bucket lapses, which an intervally refilled
// one does not: past its expiry it keeps its refill grid, where a new
// bucket starts one of its own.
type lapsing struct{ tokenbucket.Single }

func (lapsing) Lapses() bool { return true }

// trailing accepts a trailing byte.
type trailing struct{ base }

func (m trailing) DecodeState(src []byte, s *fixedwindow.State) error {
	if err := m.Config.DecodeState(src, s); err != nil && len(src) > 4 {
		return m.Config.DecodeState(src[:len(src)-1], s)
	} else {
		return err
	}
}

// early says to retry 1ns before the request would pass.
type early struct{ base }

func (m early) Consume(s *fixedwindow.State, exists bool, now, n int64) (policy.Decision, bool) {
	res, changed := m.Config.Consume(s, exists, now, n)
	if !res.Allowed && res.RetryAfter > 1 && res.RetryAfter != policy.Never {
		res.RetryAfter--
	}
	return res, changed
}

func (m early) Peek(s *fixedwindow.State, exists bool, now, n int64) policy.Result {
	c := *s
	d, _ := m.Consume(&c, exists, now, n)
	return d.Result(m.Limit)
}

// peeking takes what it peeks at.
type peeking struct{ base }

func (m peeking) Peek(s *fixedwindow.State, exists bool, now, n int64) policy.Result {
	d, _ := m.Config.Consume(s, exists, now, n)
	return d.Result(m.Limit)
}

// forgetful expires a window 1ns early, while it still counts.
type forgetful struct{ base }

func (m forgetful) ExpiresAt(s *fixedwindow.State) int64 { return m.Config.ExpiresAt(s) - 1 }

// generous waits 1ns less than its tokens need.
type generous struct{ base }

func (m generous) Reserve(s *fixedwindow.State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	res, changed := m.Config.Reserve(s, exists, now, n, maxWait)
	if res.Allowed && res.Wait > 0 {
		res.Wait--
	}
	return res, changed
}

// mutant is a broken machine and what its failure must say.
type mutant struct {
	name string
	m    policy.Machine[fixedwindow.State]
	want string
}

// TestCatches: the suite passes a sound machine and fails each broken one
// with the property it breaks.
func TestCatches(t *testing.T) {
	if msg := failure(fw); msg != "" {
		t.Fatalf("a sound fixed window fails: %s", msg)
	}
	tests := []mutant{
		{"accepts a trailing byte", trailing{base{fw}}, "want an error matching ErrBadState"},
		{"retry too early", early{base{fw}}, "but then Peek"},
		{"peek takes", peeking{base{fw}}, "Peek"},
		{"expires early", forgetful{base{fw}}, "at its ExpiresAt"},
		{"reservation too short", generous{base{fw}}, "its wait"},
	}
	for _, tt := range tests {
		if msg := failure(tt.m); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: suite failure = %q, want one containing %q", tt.name, msg, tt.want)
		}
	}
	cfg := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: 3, RefillTokens: 3, Period: 25, Intervally: true})
	if msg := failure[tokenbucket.BandwidthState](lapsing{tokenbucket.NewSingle(cfg.Bandwidths[0], true)}); !strings.Contains(msg, "lapsed state") {
		t.Errorf("a token bucket claiming to lapse: suite failure = %q, want one containing %q", msg, "lapsed state")
	}
}

// stepsFailure runs steps on m from base 100 and returns their first
// failure, "" if none.
func stepsFailure[S any](m policy.Machine[S], steps []Step) string {
	return caught(func() { Steps(recorder{}, m, new(S), false, 100, steps) })
}

// silent takes its tokens but reports no change.
type silent struct{ base }

func (m silent) Consume(s *fixedwindow.State, exists bool, now, n int64) (policy.Decision, bool) {
	res, _ := m.Config.Consume(s, exists, now, n)
	return res, false
}

// counting counts a refused request but reports no change.
type counting struct{ base }

func (m counting) Consume(s *fixedwindow.State, exists bool, now, n int64) (policy.Decision, bool) {
	res, changed := m.Config.Consume(s, exists, now, n)
	if !res.Allowed {
		s.Hits++
	}
	return res, changed
}

// TestStepsCatch: Steps passes a fixed window's worked example and fails a
// wrong answer, a Peek that takes, and a change reported wrongly.
func TestStepsCatch(t *testing.T) {
	steps := []Step{
		Consume(0, 2, Allowed(3, 1, 10)),
		Peek(1, 1, Allowed(3, 0, 9)),
		Consume(1, 2, Rejected(3, 1, 9, 9)),
		Reserve(2, 2, 8, Granted(3, 0, 18, 8)),
	}
	if msg := stepsFailure(fw, steps); msg != "" {
		t.Fatalf("a sound fixed window fails: %s", msg)
	}
	wrong := append([]Step(nil), steps...)
	wrong[2].Want.RetryAfter++
	if msg := stepsFailure(fw, wrong); !strings.Contains(msg, "step 2: Consume(2, maxWait 0) at base+1 =") {
		t.Errorf("a wrong RetryAfter: failure = %q", msg)
	}
	for _, tt := range []mutant{
		{"peek takes", peeking{base{fw}}, "step 0: Peek(2) at base+0 changed the state"},
		{"change not reported", silent{base{fw}}, "step 0: Consume(2) at base+0 changed = false, want true"},
		{"refusal counted", counting{base{fw}}, "step 2: Consume(2) at base+1 reported no change but changed the state"},
	} {
		if msg := stepsFailure(tt.m, steps); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: failure = %q, want one containing %q", tt.name, msg, tt.want)
		}
	}
}
