package policytest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// Op is the call a Step makes.
type Op uint8

// The calls of a Step.
const (
	OpConsume Op = iota // Consume, after a Peek that must answer the same
	OpPeek
	OpReserve
)

func (o Op) String() string {
	switch o {
	case OpConsume:
		return "Consume"
	case OpPeek:
		return "Peek"
	}
	return "Reserve"
}

// Step is one call of a policy's worked example: Op of N tokens (with
// the bound MaxWait for a Reserve) at At after the example's base time,
// answering Want and changing the key's state exactly when Changes.
type Step struct {
	Op      Op
	At, N   int64
	MaxWait int64
	Want    policy.Result
	Changes bool
}

// Consume is a Consume that answers want, changing the state when it is
// allowed.
func Consume(at, n int64, want policy.Result) Step {
	return Step{Op: OpConsume, At: at, N: n, Want: want, Changes: want.Allowed}
}

// Peek is a Peek that answers want.
func Peek(at, n int64, want policy.Result) Step {
	return Step{Op: OpPeek, At: at, N: n, Want: want}
}

// Reserve is a Reserve within maxWait that answers want, changing the
// state when it is granted.
func Reserve(at, n, maxWait int64, want policy.Result) Step {
	return Step{Op: OpReserve, At: at, N: n, MaxWait: maxWait, Want: want, Changes: want.Allowed}
}

// Allowed is the result of an allowed call.
func Allowed(limit, remaining, resetAfter int64) policy.Result {
	return policy.Result{Allowed: true, Remaining: remaining, ResetAfter: resetAfter, Limit: limit}
}

// Granted is the result of a granted reservation: allowed, with its wait.
func Granted(limit, remaining, resetAfter, wait int64) policy.Result {
	return policy.Result{Allowed: true, Remaining: remaining, ResetAfter: resetAfter, Limit: limit, Wait: wait}
}

// Rejected is the result of a rejected call.
func Rejected(limit, remaining, retryAfter, resetAfter int64) policy.Result {
	return policy.Result{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter, Limit: limit}
}

// Steps makes the calls of steps in order on *s, the state of one key of
// m (exists: the key has one), each at base plus its At, and returns
// whether the key has a state after them. Each step must answer its Want
// and report a change exactly when it Changes; a call that reports none
// must leave the state's encoding as it was, and a Consume must answer as
// a Peek made just before it, which changes nothing.
func Steps[S any](t testing.TB, m policy.Machine[S], s *S, exists bool, base int64, steps []Step) bool {
	t.Helper()
	for i, st := range steps {
		exists = Call(t, fmt.Sprintf("step %d", i), m, s, exists, base, st)
	}
	return exists
}

// Call makes the call of st as Steps does, naming it label in failures.
func Call[S any](t testing.TB, label string, m policy.Machine[S], s *S, exists bool, base int64, st Step) bool {
	t.Helper()
	now := base + st.At
	before := m.AppendState(nil, s)
	var res policy.Result
	var changed bool
	switch st.Op {
	case OpConsume:
		peek := m.Peek(s, exists, now, st.N)
		if after := m.AppendState(nil, s); !bytes.Equal(after, before) {
			t.Fatalf("%s: Peek(%d) at base%+d changed the state from %x to %x", label, st.N, st.At, before, after)
		}
		res, changed = Decide(t, m, s, exists, now, st.N)
		if peek != res {
			t.Fatalf("%s: Peek(%d) at base%+d = %+v, want %+v as Consume", label, st.N, st.At, peek, res)
		}
	case OpPeek:
		res = m.Peek(s, exists, now, st.N)
	case OpReserve:
		res, changed = m.Reserve(s, exists, now, st.N, st.MaxWait)
	}
	if res != st.Want {
		t.Fatalf("%s: %v(%d, maxWait %d) at base%+d = %+v, want %+v", label, st.Op, st.N, st.MaxWait, st.At, res, st.Want)
	}
	if changed != st.Changes {
		t.Fatalf("%s: %v(%d) at base%+d changed = %v, want %v", label, st.Op, st.N, st.At, changed, st.Changes)
	}
	if after := m.AppendState(nil, s); !changed && !bytes.Equal(after, before) {
		t.Fatalf("%s: %v(%d) at base%+d reported no change but changed the state from %x to %x", label, st.Op, st.N, st.At, before, after)
	}
	return exists || changed
}
