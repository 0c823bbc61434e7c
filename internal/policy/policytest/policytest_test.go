package policytest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
)

// fatal is what recorder's Fatalf panics with.
type fatal string

// recorder is a testing.TB whose Fatalf stops the check under test and
// records why, so that a test can see a broken machine fail.
type recorder struct{ testing.TB }

func (recorder) Helper() {}

func (recorder) Fatalf(format string, args ...any) { panic(fatal(fmt.Sprintf(format, args...))) }

// failure runs the suite on m and returns its first failure, "" if none.
func failure(m policy.Machine[fixedwindow.State]) (msg string) {
	defer func() {
		if f, ok := recover().(fatal); ok {
			msg = string(f)
		}
	}()
	run(recorder{}, m, 1)
	return ""
}

var fw = fixedwindow.Config{Limit: 3, Interval: 10}

// trailing accepts a trailing byte.
type trailing struct{ fixedwindow.Config }

func (m trailing) DecodeState(src []byte, s *fixedwindow.State) error {
	if err := m.Config.DecodeState(src, s); err != nil && len(src) > 4 {
		return m.Config.DecodeState(src[:len(src)-1], s)
	} else {
		return err
	}
}

// early says to retry 1ns before the request would pass.
type early struct{ fixedwindow.Config }

func (m early) Consume(s *fixedwindow.State, exists bool, now, n int64) (policy.Result, bool) {
	res, changed := m.Config.Consume(s, exists, now, n)
	if !res.Allowed && res.RetryAfter > 1 && res.RetryAfter != policy.Never {
		res.RetryAfter--
	}
	return res, changed
}

func (m early) Peek(s *fixedwindow.State, exists bool, now, n int64) policy.Result {
	c := *s
	res, _ := m.Consume(&c, exists, now, n)
	return res
}

// peeking takes what it peeks at.
type peeking struct{ fixedwindow.Config }

func (m peeking) Peek(s *fixedwindow.State, exists bool, now, n int64) policy.Result {
	res, _ := m.Config.Consume(s, exists, now, n)
	return res
}

// forgetful expires a window 1ns early, while it still counts.
type forgetful struct{ fixedwindow.Config }

func (m forgetful) ExpiresAt(s *fixedwindow.State) int64 { return m.Config.ExpiresAt(s) - 1 }

// generous waits 1ns less than its tokens need.
type generous struct{ fixedwindow.Config }

func (m generous) Reserve(s *fixedwindow.State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	res, changed := m.Config.Reserve(s, exists, now, n, maxWait)
	if res.Allowed && res.Wait > 0 {
		res.Wait--
	}
	return res, changed
}

// TestCatches: the suite passes a sound machine and fails each broken one
// with the property it breaks.
func TestCatches(t *testing.T) {
	if msg := failure(fw); msg != "" {
		t.Fatalf("a sound fixed window fails: %s", msg)
	}
	tests := []struct {
		name string
		m    policy.Machine[fixedwindow.State]
		want string
	}{
		{"accepts a trailing byte", trailing{fw}, "want an error matching ErrBadState"},
		{"retry too early", early{fw}, "but then Peek"},
		{"peek takes", peeking{fw}, "Peek"},
		{"expires early", forgetful{fw}, "at its ExpiresAt"},
		{"reservation too short", generous{fw}, "its wait"},
	}
	for _, tt := range tests {
		if msg := failure(tt.m); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: suite failure = %q, want one containing %q", tt.name, msg, tt.want)
		}
	}
}
