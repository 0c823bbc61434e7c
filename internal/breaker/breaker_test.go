package breaker

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// newTest returns a breaker of threshold on a fake time, which the
// returned function advances, and the states it reported.
func newTest(threshold int) (*Breaker, func(time.Duration), *[]State) {
	var states []State
	b := New(threshold, func(s State) { states = append(states, s) })
	now := time.Unix(1e9, 0)
	b.now = func() time.Time { return now }
	return b, func(d time.Duration) { now = now.Add(d) }, &states
}

var errDown = errors.New("store down")

func TestOpensAfterThreshold(t *testing.T) {
	b, _, states := newTest(3)
	for i := range 2 {
		b.Result(errDown)
		if _, err := b.Allow(); err != nil {
			t.Fatalf("Allow after %d failures = %v, want closed", i+1, err)
		}
	}
	b.Result(nil) // a success resets the count
	for range 2 {
		b.Result(errDown)
	}
	if _, err := b.Allow(); err != nil {
		t.Fatalf("Allow after a success and 2 failures = %v, want closed", err)
	}
	b.Result(errDown)
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Errorf("Allow after 3 failures in a row = %v, want ErrOpen", err)
	}
	if !b.Blocking() || b.Refusing() == nil {
		t.Error("an open circuit is not blocking and refusing")
	}
	if fmt.Sprint(*states) != "[1]" {
		t.Errorf("states = %v, want [open]", *states)
	}
}

func TestProbe(t *testing.T) {
	b, advance, states := newTest(1)
	b.Result(errDown)
	advance(MinOpen - 1)
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Allow before MinOpen = %v, want ErrOpen", err)
	}
	advance(1)
	probe, err := b.Allow()
	if err != nil || probe == 0 {
		t.Fatalf("Allow at MinOpen = %d, %v, want a probe", probe, err)
	}
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Errorf("a second Allow beside the probe = %v, want ErrOpen", err)
	}
	if b.Refusing() != nil {
		t.Error("a half-open circuit refuses the calls queued behind its probe")
	}
	b.Result(errDown) // the probe failed: open twice as long
	b.EndProbe(probe)
	advance(2*MinOpen - 1)
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Allow before 2·MinOpen after a failed probe = %v, want ErrOpen", err)
	}
	advance(1)
	probe, err = b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.Result(nil)
	b.EndProbe(probe)
	if _, err := b.Allow(); err != nil || b.Blocking() {
		t.Errorf("Allow after a successful probe = %v, want closed", err)
	}
	if fmt.Sprint(*states) != "[1 2 1 2 0]" {
		t.Errorf("states = %v, want open, half-open, open, half-open, closed", *states)
	}
}

// TestProbeAbandoned: a probe that never reached the store opens the
// circuit again, so that another call probes later.
func TestProbeAbandoned(t *testing.T) {
	b, advance, _ := newTest(1)
	b.Result(errDown)
	advance(MinOpen)
	probe, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.EndProbe(probe)
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Errorf("Allow after an abandoned probe = %v, want ErrOpen", err)
	}
}

func TestMaxOpen(t *testing.T) {
	b, advance, _ := newTest(1)
	b.Result(errDown)
	for range 10 { // every probe fails
		advance(MaxOpen)
		probe, err := b.Allow()
		if err != nil {
			t.Fatalf("no probe after MaxOpen: %v", err)
		}
		b.Result(errDown)
		b.EndProbe(probe)
	}
}

func TestOff(t *testing.T) {
	b, _, states := newTest(-1)
	for range 100 {
		b.Result(errDown)
	}
	if _, err := b.Allow(); err != nil || len(*states) != 0 {
		t.Errorf("a breaker turned off: Allow = %v, states %v; want always closed", err, *states)
	}
}
