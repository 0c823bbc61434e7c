// Package timing is for the tests that measure real elapsed time. Such a
// test logs what it measures, and fails on a bound only when it is told it
// may time things: with SLUICE_TIMING_TESTS=1 in its environment, as on a
// quiet machine when the figures of docs/benchmarks.md are taken. By
// default a test asserts the mechanism that keeps a call short (the
// deadline a store was given, a circuit that opened), never how long the
// call took: a bound on real time fails on a loaded 2-CPU CI machine under
// -race however generous it looks.
//
// A wait for a real event (a server start, a failover) with a generous
// deadline is a timeout, not a bound, and needs nothing from this package;
// write it as a deadline, `for deadline := time.Now().Add(30 *
// time.Second); ...; { if time.Now().After(deadline) { t.Fatal(...) } }`,
// which the guard in this package's tests tells apart from a bound.
package timing

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// Env is the environment variable that, set to 1, lets tests bound real
// elapsed time.
const Env = "SLUICE_TIMING_TESTS"

// Asserted reports whether tests may bound real elapsed time: whether Env
// is set to 1.
func Asserted() bool { return os.Getenv(Env) == "1" }

// AtMost logs the duration got of what, and fails t when got exceeds bound
// and Asserted is true; otherwise it only logs that got was over.
func AtMost(t testing.TB, what string, got, bound time.Duration) {
	t.Helper()
	switch {
	case got <= bound:
		t.Logf("%s: %v (at most %v)", what, got, bound)
	case Asserted():
		t.Errorf("%s: %v, want at most %v", what, got, bound)
	default:
		t.Logf("%s: %v, over %v; not asserted without %s=1", what, got, bound, Env)
	}
}

// Expiring returns a context whose deadline passes when expire is called:
// its Err is then context.DeadlineExceeded, as a context.WithTimeout's once
// its time is up. It ends earlier only with parent, with parent's error.
// A test uses it to end a call by its deadline at the point it chooses
// (say, once the database shows the call waiting for a lock), where a real
// timeout could pass before the call got there on a slow machine.
func Expiring(parent context.Context) (ctx context.Context, expire func()) {
	e := &expiring{Context: parent, done: make(chan struct{})}
	var once sync.Once
	end := func(err error) {
		once.Do(func() {
			e.err = err
			close(e.done)
		})
	}
	stop := context.AfterFunc(parent, func() { end(parent.Err()) })
	return e, func() {
		stop()
		end(context.DeadlineExceeded)
	}
}

// expiring is the context of Expiring. err is written once, before done
// is closed, and read only after.
type expiring struct {
	context.Context
	done chan struct{}
	err  error
}

func (e *expiring) Done() <-chan struct{} { return e.done }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}
