package sluicetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

const ms = time.Millisecond

func TestFakeClock(t *testing.T) {
	c := NewFakeClock(t0)
	steps := []struct {
		name  string
		do    func()
		now   int64
		slept time.Duration
	}{
		{"start", func() {}, t0, 0},
		{"Advance(1s)", func() { c.Advance(time.Second) }, t0 + int64(time.Second), 0},
		{"Advance(-2s)", func() { c.Advance(-2 * time.Second) }, t0 - int64(time.Second), 0},
		{"Set(5)", func() { c.Set(5) }, 5, 0},
		{"Sleep(3ms)", func() { c.Sleep(t.Context(), 3*ms) }, 5 + int64(3*ms), 3 * ms},
		{"Sleep(2ms)", func() { c.Sleep(t.Context(), 2*ms) }, 5 + int64(5*ms), 5 * ms},
	}
	for _, s := range steps {
		s.do()
		if c.Now() != s.now || c.Slept() != s.slept {
			t.Errorf("after %s: Now(), Slept() = %d, %v, want %d, %v", s.name, c.Now(), c.Slept(), s.now, s.slept)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep(done ctx, 1h) = %v, want context.Canceled", err)
	}
	if c.Now() != 5+int64(5*ms) || c.Slept() != 5*ms {
		t.Errorf("Sleep(done ctx) moved the clock to %d, slept %v", c.Now(), c.Slept())
	}
}

// TestFakeClockSleepsWaits: a bucket on a FakeClock sleeps on it, so a
// wait advances the clock by what it waited.
func TestFakeClockSleepsWaits(t *testing.T) {
	c := NewFakeClock(t0)
	b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)}},
		sluice.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitN(t.Context(), 2, time.Minute); err != nil {
		t.Fatalf("WaitN(2, 1m) = %v", err)
	}
	if c.Slept() != 200*ms || c.Now() != t0+int64(200*ms) {
		t.Errorf("after WaitN(2): Slept(), Now() = %v, %d; want 200ms, %d", c.Slept(), c.Now(), t0+int64(200*ms))
	}
}

// TestCounter: each kind is counted with its tokens and durations, store
// failures by policy and the circuit's openings.
func TestCounter(t *testing.T) {
	var c Counter
	for _, e := range []sluice.Event{
		{Kind: sluice.EventAllowed, Tokens: 2},
		{Kind: sluice.EventAllowed, Tokens: 3},
		{Kind: sluice.EventRejected, Tokens: 7},
		{Kind: sluice.EventWaited, Duration: time.Second},
		{Kind: sluice.EventStoreFailure, Failure: sluice.FailOpen},
		{Kind: sluice.EventCircuit, Circuit: sluice.CircuitOpen},
		{Kind: sluice.EventCircuit, Circuit: sluice.CircuitHalfOpen},
		{Kind: 200},
	} {
		c.Observe(e)
	}
	checks := []struct {
		name      string
		got, want int64
	}{
		{"Events(EventAllowed)", c.Events(sluice.EventAllowed), 2},
		{"Tokens(EventAllowed)", c.Tokens(sluice.EventAllowed), 5},
		{"Tokens(EventRejected)", c.Tokens(sluice.EventRejected), 7},
		{"Duration(EventWaited)", int64(c.Duration(sluice.EventWaited)), int64(time.Second)},
		{"StoreFailures(FailOpen)", c.StoreFailures(sluice.FailOpen), 1},
		{"StoreFailures(FailClosed)", c.StoreFailures(sluice.FailClosed), 0},
		{"Events(EventCircuit)", c.Events(sluice.EventCircuit), 2},
		{"CircuitOpened", c.CircuitOpened(), 1},
		{"Events(200)", c.Events(200), 0},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %d, want %d", ck.name, ck.got, ck.want)
		}
	}
}
