package smooth

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// t0 is the fake clock's reading at creation: not a whole microsecond, so
// truncation to Guava's microseconds shows.
const t0 = 1_700_000_000_123_456_789

const us = time.Microsecond

type fixture struct {
	l   *RateLimiter
	clk *sluicetest.FakeClock
}

type step struct {
	name string
	run  func(t *testing.T, f fixture)
}

func advance(d time.Duration) step {
	return step{"advance " + d.String(), func(t *testing.T, f fixture) { f.clk.Advance(d) }}
}

// acquire checks Acquire(permits) and that the fake clock slept as much.
func acquire(permits int64, want time.Duration) step {
	return step{"acquire", func(t *testing.T, f fixture) {
		t.Helper()
		before := f.clk.Slept()
		got, err := f.l.Acquire(context.Background(), permits)
		if slept := f.clk.Slept() - before; err != nil || got != want || slept != want {
			t.Errorf("Acquire(%d) = %v, %v after sleeping %v; want %v, nil", permits, got, err, slept, want)
		}
	}}
}

// try checks TryAcquire(permits, timeout) and how long it slept.
func try(permits int64, timeout time.Duration, want bool, wantSlept time.Duration) step {
	return step{"try acquire", func(t *testing.T, f fixture) {
		t.Helper()
		before := f.clk.Slept()
		got, err := f.l.TryAcquire(context.Background(), permits, timeout)
		if slept := f.clk.Slept() - before; err != nil || got != want || slept != wantSlept {
			t.Errorf("TryAcquire(%d, %v) = %v, %v after sleeping %v; want %v, nil after %v", permits, timeout, got, err, slept, want, wantSlept)
		}
	}}
}

func setRate(pps float64) step {
	return step{"set rate", func(t *testing.T, f fixture) {
		t.Helper()
		if err := f.l.SetRate(pps); err != nil {
			t.Errorf("SetRate(%v) = %v", pps, err)
		}
		if got := f.l.Rate(); got != pps {
			t.Errorf("Rate() = %v, want %v", got, pps)
		}
	}}
}

func bursty(pps float64, opts ...Option) func(*sluicetest.FakeClock) (*RateLimiter, error) {
	return func(clk *sluicetest.FakeClock) (*RateLimiter, error) {
		return NewBursty(pps, append(opts, WithClock(clk))...)
	}
}

func warmingUp(pps float64, warmup time.Duration, opts ...Option) func(*sluicetest.FakeClock) (*RateLimiter, error) {
	return func(clk *sluicetest.FakeClock) (*RateLimiter, error) {
		return NewWarmingUp(pps, warmup, append(opts, WithClock(clk))...)
	}
}

// The expected waits are Guava's. Each sequence was run through a
// transcription of Guava's SmoothRateLimiter in Python (IEEE doubles, as
// Java's), and the round ones were also worked by hand; the comments show
// the arithmetic.
func TestScenarios(t *testing.T) {
	tests := []struct {
		name  string
		new   func(*sluicetest.FakeClock) (*RateLimiter, error)
		steps []step
	}{
		{
			// stable interval 1e6/3 = 333333.33µs, truncated per request.
			name:  "3/s waits 333333µs",
			new:   bursty(3),
			steps: []step{acquire(1, 0), acquire(1, 333333*us), acquire(1, 333333*us), acquire(1, 333333*us)},
		},
		{
			// The first ticket is 333333; at 333334 one microsecond of
			// refill is stored, so the next ticket is 333332 later.
			name:  "3/s after a fractional refill waits 333332µs",
			new:   bursty(3),
			steps: []step{acquire(1, 0), advance(333334 * us), acquire(1, 0), acquire(1, 333332*us)},
		},
		{
			name:  "acquire(10) at 5/s is free and the next waits 2s",
			new:   bursty(5),
			steps: []step{acquire(10, 0), acquire(1, 2*time.Second), acquire(1, 200000*us)},
		},
		{
			name:  "idle time stores one second of permits, spent free",
			new:   bursty(5),
			steps: []step{acquire(1, 0), advance(10 * time.Second), acquire(5, 0), acquire(1, 0), acquire(1, 200000*us), acquire(1, 200000*us)},
		},
		{
			name:  "maxBurstSeconds 0 disables bursts",
			new:   bursty(5, WithMaxBurstSeconds(0)),
			steps: []step{acquire(1, 0), advance(10 * time.Second), acquire(1, 0), acquire(1, 200000*us)},
		},
		{
			name:  "maxBurstSeconds 2 stores two seconds",
			new:   bursty(5, WithMaxBurstSeconds(2)),
			steps: []step{acquire(1, 0), advance(10 * time.Second), acquire(10, 0), acquire(1, 0), acquire(1, 200000*us)},
		},
		{
			// Exact arithmetic gives 66666µs: 3 - 233334/100000 = 0.66666,
			// but in doubles it is 0.6666599999999998.
			name:  "10/s: Guava's double rounding, not exact arithmetic",
			new:   bursty(10),
			steps: []step{acquire(1, 0), advance(333334 * us), acquire(3, 0), acquire(1, 66665*us)},
		},
		{
			name:  "2.5/s with partial refills",
			new:   bursty(2.5),
			steps: []step{acquire(1, 0), acquire(2, 400000*us), advance(123457 * us), acquire(1, 676543*us), acquire(3, 400000*us)},
		},
		{
			name:  "the clock's nanoseconds are truncated to microseconds",
			new:   bursty(1e6),
			steps: []step{acquire(1, 0), acquire(1, us), advance(999), acquire(1, us), advance(1001), acquire(1, 0)},
		},
		{
			name:  "an infinite rate never waits",
			new:   bursty(math.Inf(1)),
			steps: []step{acquire(1, 0), acquire(1000, 0), acquire(1, 0)},
		},
		{
			// stable 500000µs, cold 1500000µs, threshold 4, maxPermits 8,
			// slope 250000µs per permit; the first four permits cost the
			// trapezoids (1.75+1.0)/2, (1.25+1.0)/2, ... seconds.
			name: "warming up 2/s over 4s from cold",
			new:  warmingUp(2, 4*time.Second),
			steps: []step{
				acquire(1, 0), acquire(1, 1375000*us), acquire(1, 1125000*us), acquire(1, 875000*us),
				acquire(1, 625000*us), acquire(1, 500000*us), acquire(1, 500000*us),
			},
		},
		{
			// Cool-down is warmup/maxPermits = 500000µs per permit: 1.5s
			// idle past the ticket stores 3 permits.
			name: "warming up cools down when idle",
			new:  warmingUp(2, 4*time.Second),
			steps: []step{
				acquire(1, 0), acquire(1, 1375000*us), acquire(1, 1125000*us), acquire(1, 875000*us),
				acquire(1, 625000*us), acquire(1, 500000*us), advance(2 * time.Second),
				acquire(1, 0), acquire(1, 625000*us), acquire(1, 500000*us), acquire(1, 500000*us),
			},
		},
		{
			// threshold 1.5, maxPermits 3.2142857, slope 291666.67µs.
			name: "warming up 3/s over 1s with cold factor 2.5",
			new:  warmingUp(3, time.Second, WithColdFactor(2.5)),
			steps: []step{
				acquire(1, 0), acquire(2, 687500*us), acquire(1, 741071*us), advance(250001 * us),
				acquire(3, 83331*us), acquire(1, 1000000*us), acquire(1, 333333*us),
			},
		},
		{
			name:  "warming up: a large first request is free, the next pays the ramp",
			new:   warmingUp(10, 2*time.Second),
			steps: []step{acquire(30, 0), acquire(1, 4*time.Second), acquire(5, 100000*us), acquire(1, 500000*us)},
		},
		{
			// Guava becomes unlimited here (stored permits 0/0 = NaN).
			name:  "warming up over 0s spaces evenly and stores nothing",
			new:   warmingUp(5, 0),
			steps: []step{acquire(1, 0), advance(time.Second), acquire(1, 0), acquire(1, 200000*us), acquire(1, 200000*us)},
		},
		{
			name:  "SetRate scales stored permits",
			new:   bursty(5),
			steps: []step{acquire(1, 0), advance(600000 * us), setRate(10), acquire(3, 0), acquire(1, 0), acquire(1, 0), acquire(1, 100000*us)},
		},
		{
			name: "SetRate while warming up",
			new:  warmingUp(2, 4*time.Second),
			steps: []step{
				acquire(1, 0), acquire(1, 1375000*us), setRate(4), acquire(1, 1125000*us),
				acquire(1, 468750*us), acquire(1, 406250*us),
			},
		},
		{
			name: "TryAcquire: equality succeeds and a granted request sleeps",
			new:  bursty(5),
			steps: []step{
				acquire(1, 0), try(1, 199999*us, false, 0), try(1, 200000*us, true, 200000*us),
				try(1, 0, false, 0), advance(500000 * us), try(1, -5, true, 0),
			},
		},
		{
			name:  "TryAcquire truncates the timeout to microseconds",
			new:   bursty(5),
			steps: []step{acquire(1, 0), try(1, 200000*us-1, false, 0), try(1, 200000*us+999, true, 200000*us)},
		},
		{
			name:  "TryAcquire is not delayed by its own size",
			new:   bursty(5),
			steps: []step{try(100, 0, true, 0), try(1, 19*time.Second, false, 0), try(1, 20*time.Second, true, 20*time.Second)},
		},
		{
			name:  "the smallest positive rate acquires exactly once",
			new:   bursty(math.SmallestNonzeroFloat64),
			steps: []step{acquire(1, 0), try(1, 100*365*24*time.Hour, false, 0), advance(100 * 365 * 24 * time.Hour), try(1, 0, false, 0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := sluicetest.NewFakeClock(t0)
			l, err := tt.new(clk)
			if err != nil {
				t.Fatalf("new limiter: %v", err)
			}
			f := fixture{l, clk}
			for i, s := range tt.steps {
				t.Logf("step %d: %s", i, s.name)
				s.run(t, f)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name     string
		new      func() (*RateLimiter, error)
		wantRule sluice.Rule
		wantMsg  string
	}{
		{"bursty rate 0", func() (*RateLimiter, error) { return NewBursty(0) }, RuleNonPositiveRate, "sluice: config: permitsPerSecond must be positive, got 0"},
		{"bursty negative rate", func() (*RateLimiter, error) { return NewBursty(-1) }, RuleNonPositiveRate, "sluice: config: permitsPerSecond must be positive, got -1"},
		{"bursty NaN rate", func() (*RateLimiter, error) { return NewBursty(math.NaN()) }, RuleNonPositiveRate, "sluice: config: permitsPerSecond must be positive, got NaN"},
		{"negative max burst", func() (*RateLimiter, error) { return NewBursty(1, WithMaxBurstSeconds(-0.5)) }, RuleBadMaxBurst, "sluice: config: maxBurstSeconds must be finite and not negative, got -0.5"},
		{"NaN max burst", func() (*RateLimiter, error) { return NewBursty(1, WithMaxBurstSeconds(math.NaN())) }, RuleBadMaxBurst, "sluice: config: maxBurstSeconds must be finite and not negative, got NaN"},
		{"infinite max burst", func() (*RateLimiter, error) { return NewBursty(1, WithMaxBurstSeconds(math.Inf(1))) }, RuleBadMaxBurst, "sluice: config: maxBurstSeconds must be finite and not negative, got +Inf"},
		{"cold factor on bursty", func() (*RateLimiter, error) { return NewBursty(1, WithColdFactor(3)) }, RuleOptionNotApplicable, "sluice: config: WithColdFactor applies only to NewWarmingUp"},
		{"warming up rate 0", func() (*RateLimiter, error) { return NewWarmingUp(0, time.Second) }, RuleNonPositiveRate, "sluice: config: permitsPerSecond must be positive, got 0"},
		{"negative warmup", func() (*RateLimiter, error) { return NewWarmingUp(1, -time.Second) }, RuleNegativeWarmup, "sluice: config: warmup must not be negative, got -1s"},
		{"cold factor below 1", func() (*RateLimiter, error) { return NewWarmingUp(1, time.Second, WithColdFactor(0.5)) }, RuleBadColdFactor, "sluice: config: coldFactor must be finite and at least 1, got 0.5"},
		{"NaN cold factor", func() (*RateLimiter, error) { return NewWarmingUp(1, time.Second, WithColdFactor(math.NaN())) }, RuleBadColdFactor, "sluice: config: coldFactor must be finite and at least 1, got NaN"},
		{"max burst on warming up", func() (*RateLimiter, error) { return NewWarmingUp(1, time.Second, WithMaxBurstSeconds(1)) }, RuleOptionNotApplicable, "sluice: config: WithMaxBurstSeconds applies only to NewBursty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := tt.new()
			var ce *sluice.ConfigError
			if l != nil || !errors.Is(err, sluice.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Rule != tt.wantRule || err.Error() != tt.wantMsg {
				t.Errorf("got %v, %v; want nil, %q (rule %s)", l, err, tt.wantMsg, tt.wantRule)
			}
		})
	}
}

func TestArgumentErrors(t *testing.T) {
	clk := sluicetest.NewFakeClock(t0)
	l, err := NewBursty(5, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"Acquire(0)", func() error { _, err := l.Acquire(ctx, 0); return err }},
		{"Acquire(-1)", func() error { _, err := l.Acquire(ctx, -1); return err }},
		{"TryAcquire(0)", func() error { _, err := l.TryAcquire(ctx, 0, time.Second); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ae *sluice.ArgumentError
			if err := tt.call(); !errors.As(err, &ae) || !errors.Is(err, sluice.ErrInvalidArgument) {
				t.Errorf("%s = %v, want an *sluice.ArgumentError", tt.name, err)
			}
		})
	}
	for _, r := range []float64{0, -2, math.NaN()} {
		if err := l.SetRate(r); !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("SetRate(%v) = %v, want a *sluice.ConfigError", r, err)
		}
	}
	if got := l.Rate(); got != 5 {
		t.Errorf("Rate() = %v, want 5", got)
	}
	// Nothing above took a permit: the first request is still free and the
	// second still pays.
	if d, err := l.Acquire(ctx, 1); d != 0 || err != nil {
		t.Errorf("Acquire(1) = %v, %v; want 0, nil", d, err)
	}
	if d, err := l.Acquire(ctx, 1); d != 200*time.Millisecond || err != nil {
		t.Errorf("Acquire(1) = %v, %v; want 200ms, nil", d, err)
	}
}

// blockingSleeper sleeps until ctx is done, telling started when it begins.
// blockingSleeper is a clock that sleeps until ctx is done, telling
// started when it begins.
type blockingSleeper struct {
	sluice.Clock
	started chan time.Duration
}

func (s blockingSleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.started <- d
	<-ctx.Done()
	return ctx.Err()
}

func TestCancelledSleepKeepsTheReservation(t *testing.T) {
	clk := sluicetest.NewFakeClock(t0)
	sl := blockingSleeper{clk, make(chan time.Duration)}
	l, err := NewBursty(5, WithClock(sl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if d, err := l.Acquire(ctx, 1); d != 0 || err != nil {
		t.Fatalf("Acquire(1) = %v, %v; want 0, nil", d, err)
	}
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result)
	go func() {
		d, err := l.Acquire(ctx, 1)
		done <- result{d, err}
	}()
	if d := <-sl.started; d != 200*time.Millisecond {
		t.Errorf("sleeping %v, want 200ms", d)
	}
	cancel()
	if r := <-done; r.d != 0 || !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled Acquire(1) = %v, %v; want 0, context.Canceled", r.d, r.err)
	}
	if ok, err := l.TryAcquire(ctx, 1, time.Second); ok || !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquire with a done context = %v, %v; want false, context.Canceled", ok, err)
	}
	// The cancelled request's permit stays reserved: the next request's
	// ticket is 400ms away.
	if ok, err := l.TryAcquire(context.Background(), 1, 399999*us); ok || err != nil {
		t.Errorf("TryAcquire(1, 399999µs) = %v, %v; want false, nil", ok, err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { <-sl.started; cancel2() }()
	if ok, err := l.TryAcquire(ctx2, 1, 400*time.Millisecond); ok || !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquire cancelled in its sleep = %v, %v; want false, context.Canceled", ok, err)
	}
}

func TestConcurrentAcquire(t *testing.T) {
	clk := sluicetest.NewFakeClock(t0)
	l, err := NewWarmingUp(1000, time.Second, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := l.Acquire(context.Background(), 2); err != nil {
					t.Errorf("Acquire(2) = %v", err)
				}
				if _, err := l.TryAcquire(context.Background(), 1, time.Millisecond); err != nil {
					t.Errorf("TryAcquire(1) = %v", err)
				}
				_ = l.Rate()
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			_ = l.SetRate(1000)
		}
	})
	wg.Wait()
}
