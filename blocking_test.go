package sluice_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestBlockingTryConsume: the FakeClock is the sleeper, so a wait moves the
// clock by exactly the time slept. Simple(10, 1s) refills one token per
// 100ms; a caller reserves its tokens (going negative) and then sleeps.
func TestBlockingTryConsume(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)})
	steps := []struct {
		n       int64
		maxWait time.Duration
		want    bool
		slept   time.Duration
		avail   int64
	}{
		{10, time.Second, true, 0, 0},
		{3, time.Second, true, 300 * ms, 0},
		{5, 400 * ms, false, 0, 0}, // needs 500ms: rejected without sleeping
		{5, 500 * ms, true, 500 * ms, 0},
		{1000, time.Hour, true, 100 * time.Second, 0}, // no capacity check when waiting
		{11, sluice.Never, true, 1100 * ms, 0},
		{math.MaxInt64, time.Hour, false, 0, 0}, // can never be had
	}
	for _, s := range steps {
		before := clock.Slept()
		got, err := block(b).TryConsume(t.Context(), s.n, s.maxWait)
		if got != s.want || err != nil {
			t.Errorf("TryConsume(%d, %v) = %v, %v, want %v", s.n, s.maxWait, got, err, s.want)
		}
		if slept := clock.Slept() - before; slept != s.slept {
			t.Errorf("TryConsume(%d, %v) slept %v, want %v", s.n, s.maxWait, slept, s.slept)
		}
		checkAvailable(t, b, s.avail)
	}
}

// TestBlockingMoreThanCapacity: waits have no capacity check (SEMANTICS
// §1.4). At 10 tokens per 100ns, 1000 tokens lack 1000 - available.
func TestBlockingMoreThanCapacity(t *testing.T) {
	tests := []struct {
		name  string
		bw    sluice.Bandwidth
		slept time.Duration
	}{
		{"full", sluice.Capacity(10, sluice.Greedy(10, 100)), 9900},
		{"one token", sluice.Capacity(10, sluice.Greedy(10, 100)).WithInitialTokens(1), 9990},
		{"empty", sluice.Capacity(10, sluice.Greedy(10, 100)).WithInitialTokens(0), 10000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			b := newBucket(t, clock, []sluice.Bandwidth{tt.bw})
			if ok, err := block(b).TryConsume(t.Context(), 1000, time.Hour); !ok || err != nil {
				t.Errorf("TryConsume(1000, 1h) = %v, %v, want true", ok, err)
			}
			if clock.Slept() != tt.slept {
				t.Errorf("slept %v, want %v", clock.Slept(), tt.slept)
			}
			checkAvailable(t, b, 0)
		})
	}
}

func TestBlockingConsume(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	var l sluicetest.Counter
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)}, sluice.WithObserver(&l))
	steps := []struct {
		n     int64
		slept time.Duration
	}{
		{10, 0},
		{3, 300 * ms},
		{1000, 100 * time.Second},
		{1, 100 * ms},
	}
	for _, s := range steps {
		before := clock.Slept()
		if err := block(b).Consume(t.Context(), s.n); err != nil {
			t.Errorf("Consume(%d) = %v, want nil", s.n, err)
		}
		if slept := clock.Slept() - before; slept != s.slept {
			t.Errorf("Consume(%d) slept %v, want %v", s.n, slept, s.slept)
		}
		checkAvailable(t, b, 0)
	}
	if got, want := countsOf(&l), (counts{consumed: 1014, waited: 100*time.Second + 400*ms}); got != want {
		t.Errorf("observer saw %+v, want %+v", got, want)
	}
}

// parkingSleeper is a clock that reports each wait on parked and then
// blocks until its context is done, as a timer would for a long wait.
type parkingSleeper struct {
	sluice.Clock
	parked chan time.Duration
}

func (s parkingSleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.parked <- d
	<-ctx.Done()
	return ctx.Err()
}

// TestBlockingCancel: when the context ends during the wait, the reserved
// tokens are given back and ctx.Err() is returned as it is.
func TestBlockingCancel(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, bb blocking) error
	}{
		{"TryConsume", func(ctx context.Context, bb blocking) error {
			ok, err := bb.TryConsume(ctx, 6, time.Minute)
			if ok {
				return errors.New("TryConsume reported true")
			}
			return err
		}},
		{"Consume", func(ctx context.Context, bb blocking) error { return bb.Consume(ctx, 6) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			sleeper := parkingSleeper{Clock: clock, parked: make(chan time.Duration)}
			var l sluicetest.Counter
			b, err := sluice.NewBucket(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(4)}},
				sluice.WithClock(sleeper), sluice.WithObserver(&l))
			if err != nil {
				t.Fatalf("NewBucket: %v", err)
			}
			before := stateOf(t, b)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error)
			go func() { done <- tt.call(ctx, block(b)) }()
			if d := <-sleeper.parked; d != 200*ms {
				t.Errorf("waiting %v, want 200ms", d)
			}
			// While it waits, its 6 tokens are taken.
			checkAvailable(t, b, -2)
			cancel()
			if err := <-done; err != context.Canceled {
				t.Errorf("%s = %v, want context.Canceled", tt.name, err)
			}
			checkUnchanged(t, b, before)
			if got, want := countsOf(&l), (counts{consumed: 6, cancelled: 6}); got != want {
				t.Errorf("observer saw %+v, want %+v", got, want)
			}
		})
	}
}

// TestBlockingContextAlreadyDone: a done context takes nothing, even when
// the tokens are there.
func TestBlockingContextAlreadyDone(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, bb blocking) error
	}{
		{"TryConsume available", func(ctx context.Context, bb blocking) error {
			_, err := bb.TryConsume(ctx, 1, time.Second)
			return err
		}},
		{"TryConsume with a wait", func(ctx context.Context, bb blocking) error {
			_, err := bb.TryConsume(ctx, 8, time.Second)
			return err
		}},
		{"Consume available", func(ctx context.Context, bb blocking) error { return bb.Consume(ctx, 1) }},
		{"Consume with a wait", func(ctx context.Context, bb blocking) error { return bb.Consume(ctx, 8) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			var l sluicetest.Counter
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(4)}, sluice.WithObserver(&l))
			before := stateOf(t, b)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if err := tt.call(ctx, block(b)); err != context.Canceled {
				t.Errorf("%s = %v, want context.Canceled", tt.name, err)
			}
			checkUnchanged(t, b, before)
			if got := countsOf(&l); got != (counts{}) {
				t.Errorf("observer saw %+v, want nothing", got)
			}
			if clock.Slept() != 0 {
				t.Errorf("slept %v, want 0", clock.Slept())
			}
		})
	}
}

func TestReserve(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)})
	steps := []struct {
		n       int64
		maxWait time.Duration
		delay   time.Duration
		avail   int64
	}{
		{10, time.Second, 0, 0},
		{5, time.Second, 500 * ms, -5},
		{5, time.Second, time.Second, -10}, // queued behind the first
		{1000, sluice.Never, 101 * time.Second, -1010},
	}
	for _, s := range steps {
		r, err := b.ReserveN(s.n, s.maxWait)
		if err != nil {
			t.Fatalf("Reserve(%d, %v) = %v", s.n, s.maxWait, err)
		}
		if r.Delay() != s.delay || r.Tokens() != s.n {
			t.Errorf("Reserve(%d, %v) = delay %v, tokens %d, want %v, %d", s.n, s.maxWait, r.Delay(), r.Tokens(), s.delay, s.n)
		}
		checkAvailable(t, b, s.avail)
	}
	if clock.Slept() != 0 {
		t.Errorf("Reserve slept %v, want 0", clock.Slept())
	}
}

// TestReservationCancel: Cancel gives the tokens back until their due
// time, as x/time/rate's CancelAt, and only once. Each case reserves 5
// tokens of an empty Simple(10, 1s), due in 500ms.
func TestReservationCancel(t *testing.T) {
	tests := []struct {
		name    string
		elapsed time.Duration // between Reserve and Cancel
		before  int64         // AvailableTokens before Cancel
		after   int64
	}{
		{"at once", 0, -5, 0},
		// -5 + 4.99 = -0.01, shown as -1; with 5 back, 4.99.
		{"just before the due time", 499 * ms, -1, 4},
		{"at the due time", 500 * ms, 0, 5},
		{"after the due time", 600 * ms, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)})
			r, err := b.ReserveN(5, time.Second)
			if err != nil || r.Delay() != 500*ms {
				t.Fatalf("Reserve(5, 1s) = %+v, %v, want a delay of 500ms", r, err)
			}
			clock.Advance(tt.elapsed)
			checkAvailable(t, b, tt.before)
			r.Cancel()
			checkAvailable(t, b, tt.after)
			r.Cancel()
			checkAvailable(t, b, tt.after)
		})
	}
}

// TestReservationCancelWithoutDelay: tokens that were there at once are due
// at once: Cancel at that instant gives them back, later it does not.
func TestReservationCancelWithoutDelay(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)})
	r, err := b.ReserveN(3, time.Second)
	if err != nil || r.Delay() != 0 {
		t.Fatalf("Reserve(3, 1s) = %+v, %v, want no delay", r, err)
	}
	r.Cancel()
	checkAvailable(t, b, 10)

	r, _ = b.ReserveN(3, time.Second)
	clock.Advance(ms)
	r.Cancel()
	checkAvailable(t, b, 7)
}

// TestReservationCancelAfterLater: a reservation cancelled after a later
// one gives back only what the later one did not take after it (as
// x/time/rate does), so that the later one's tokens are not handed out
// twice.
func TestReservationCancelAfterLater(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)})
	first, _ := b.ReserveN(5, time.Second)  // due at 500ms
	second, _ := b.ReserveN(2, time.Second) // due at 700ms
	checkAvailable(t, b, -7)
	first.Cancel()
	checkAvailable(t, b, -4) // 5 less the 2 the second took after it
	if d := second.Delay(); d != 700*ms {
		t.Errorf("second Delay() = %v, want 700ms", d)
	}
	// Cancelling the last one restores what it took.
	second.Cancel()
	checkAvailable(t, b, -2)
}

// TestReserveRefused: tokens that would come after maxWait, or never, are
// a reservation that is not OK, which takes nothing.
func TestReserveRefused(t *testing.T) {
	tests := []struct {
		name    string
		n       int64
		maxWait time.Duration
		wait    time.Duration
	}{
		{"too long", 5, 100 * ms, 500 * ms},
		{"one ns too long", 5, 500*ms - 1, 500 * ms},
		{"not now", 1, 0, 100 * ms},
		{"never", math.MaxInt64, time.Hour, sluice.Never},
		{"never, without a bound", math.MaxInt64, sluice.Never, sluice.Never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			var l sluicetest.Counter
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)}, sluice.WithObserver(&l))
			before := stateOf(t, b)
			r, err := b.ReserveN(tt.n, tt.maxWait)
			if err != nil || r.OK() {
				t.Fatalf("Reserve(%d, %v) = %v, %v, want a reservation that is not OK", tt.n, tt.maxWait, r, err)
			}
			want := sluice.Result{RetryAfter: tt.wait, ResetAfter: time.Second, Limit: 10}
			if r.Result() != want || r.Delay() != sluice.Never || r.Tokens() != tt.n {
				t.Errorf("Reserve(%d, %v) = %v, delay %v; want %+v, delay Never", tt.n, tt.maxWait, r, r.Delay(), want)
			}
			r.Cancel()
			checkUnchanged(t, b, before)
			if got := countsOf(&l); got != (counts{rejected: tt.n}) {
				t.Errorf("observer saw %+v, want %d rejected", got, tt.n)
			}
		})
	}
}

// TestReserveMaxWaitBoundary: a wait equal to maxWait is granted.
func TestReserveMaxWaitBoundary(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)})
	r, err := b.ReserveN(5, 500*ms)
	if err != nil || r.Delay() != 500*ms {
		t.Errorf("Reserve(5, 500ms) = %+v, %v, want a delay of 500ms", r, err)
	}
}
