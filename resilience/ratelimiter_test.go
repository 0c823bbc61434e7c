package resilience

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// t0 is the fake clock's reading when a limiter is created: half a second
// past a whole second of the Unix epoch, so cycles counted from the epoch
// would show.
const t0 = 1_700_000_000_500_000_000

// fixture is a limiter on a fake clock that is also its sleeper.
type fixture struct {
	l   *RateLimiter
	clk *sluicetest.FakeClock
}

func newFixture(t *testing.T, cfg Config, opts ...Option) fixture {
	t.Helper()
	clk := sluicetest.NewFakeClock(t0)
	l, err := New(cfg, append([]Option{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return fixture{l, clk}
}

// step is one action on a fixture, with its checks.
type step struct {
	name string
	run  func(t *testing.T, f fixture)
}

func advance(d time.Duration) step {
	return step{"advance " + d.String(), func(t *testing.T, f fixture) { f.clk.Advance(d) }}
}

// acquire checks AcquirePermission(n) and how long it slept.
func acquire(n int64, want bool, wantSlept time.Duration) step {
	return step{"acquire", func(t *testing.T, f fixture) {
		t.Helper()
		before := f.clk.Slept()
		got, err := f.l.AcquirePermission(context.Background(), n)
		slept := f.clk.Slept() - before
		if err != nil || got != want || slept != wantSlept {
			t.Errorf("AcquirePermission(%d) = %v, %v after sleeping %v; want %v, nil after %v", n, got, err, slept, want, wantSlept)
		}
	}}
}

// reserve checks ReservePermission(n) when it succeeds.
func reserve(n int64, want time.Duration) step {
	return step{"reserve", func(t *testing.T, f fixture) {
		t.Helper()
		if got, err := f.l.ReservePermission(n); err != nil || got != want {
			t.Errorf("ReservePermission(%d) = %v, %v; want %v, nil", n, got, err, want)
		}
	}}
}

// reserveRefused checks that ReservePermission(n) reports a wait past the
// timeout.
func reserveRefused(n int64, wantWait time.Duration) step {
	return step{"reserve refused", func(t *testing.T, f fixture) {
		t.Helper()
		_, err := f.l.ReservePermission(n)
		var mw *sluice.MaxWaitError
		if !errors.Is(err, sluice.ErrMaxWaitExceeded) || !errors.As(err, &mw) || mw.Wait != time.Duration(wantWait) || mw.Tokens != n {
			t.Errorf("ReservePermission(%d) error = %v; want *MaxWaitError with wait %v", n, err, wantWait)
		}
	}}
}

func available(want int64) step {
	return step{"available", func(t *testing.T, f fixture) {
		t.Helper()
		if got := f.l.AvailablePermissions(); got != want {
			t.Errorf("AvailablePermissions() = %d, want %d", got, want)
		}
	}}
}

func nanosToWait(want time.Duration) step {
	return step{"nanos to wait", func(t *testing.T, f fixture) {
		t.Helper()
		if got := f.l.NanosToWait(); got != want {
			t.Errorf("NanosToWait() = %v, want %v", got, want)
		}
	}}
}

func drain() step {
	return step{"drain", func(t *testing.T, f fixture) { f.l.Drain() }}
}

func changeLimit(n int64) step {
	return step{"change limit", func(t *testing.T, f fixture) {
		t.Helper()
		if err := f.l.ChangeLimitForPeriod(n); err != nil {
			t.Errorf("ChangeLimitForPeriod(%d) = %v", n, err)
		}
	}}
}

func changeTimeout(d time.Duration) step {
	return step{"change timeout", func(t *testing.T, f fixture) {
		t.Helper()
		if err := f.l.ChangeTimeout(d); err != nil {
			t.Errorf("ChangeTimeout(%v) = %v", d, err)
		}
	}}
}

func TestRateLimiterScenarios(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		failFast bool
		steps    []step
	}{
		{
			name: "a cycle's permissions, then refused at once with no timeout",
			cfg:  Config{LimitForPeriod: 10, LimitRefreshPeriod: time.Second},
			steps: []step{
				available(10), acquire(4, true, 0), acquire(6, true, 0), available(0),
				acquire(1, false, 0), available(0), nanosToWait(time.Second),
			},
		},
		{
			name: "cycles count from creation, not from the epoch",
			cfg:  Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Second},
			steps: []step{
				acquire(2, true, 0),
				advance(500 * time.Millisecond), available(0), nanosToWait(500 * time.Millisecond),
				advance(499 * time.Millisecond), available(0),
				advance(time.Millisecond), available(2),
			},
		},
		{
			name:  "unused permissions do not accumulate beyond one cycle",
			cfg:   Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second},
			steps: []step{advance(time.Hour), available(5), acquire(6, false, 0)},
		},
		{
			name: "wait = time to the next cycle + ceil((n - p - limit)/limit) cycles",
			cfg:  Config{LimitForPeriod: 10, LimitRefreshPeriod: time.Second, Timeout: 5 * time.Second},
			steps: []step{
				acquire(10, true, 0), advance(300 * time.Millisecond),
				reserve(25, 2700*time.Millisecond), available(-25), nanosToWait(2700 * time.Millisecond),
				advance(2700 * time.Millisecond), available(5),
			},
		},
		{
			name:  "n above the limit takes several cycles",
			cfg:   Config{LimitForPeriod: 10, LimitRefreshPeriod: time.Second, Timeout: 5 * time.Second},
			steps: []step{acquire(25, true, 2*time.Second), available(5), advance(time.Second), available(10)},
		},
		{
			name:  "timeout equal to the wait succeeds",
			cfg:   Config{LimitForPeriod: 1, LimitRefreshPeriod: time.Second, Timeout: time.Second},
			steps: []step{acquire(1, true, 0), acquire(1, true, time.Second), available(0)},
		},
		{
			// Resilience4j parks a caller it refuses for the whole timeout.
			name: "a wait one nanosecond past the timeout is refused after the timeout",
			cfg:  Config{LimitForPeriod: 1, LimitRefreshPeriod: time.Second, Timeout: time.Second - 1},
			steps: []step{
				acquire(1, true, 0), acquire(1, false, time.Second-1), available(0), nanosToWait(1),
				acquire(1, true, 1), available(0),
			},
		},
		{
			name:     "WithFailFast: a wait one nanosecond past the timeout returns false at once",
			cfg:      Config{LimitForPeriod: 1, LimitRefreshPeriod: time.Second, Timeout: time.Second - 1},
			failFast: true,
			steps:    []step{acquire(1, true, 0), acquire(1, false, 0), available(0), reserveRefused(1, time.Second)},
		},
		{
			name: "reserved permits queue later callers",
			cfg:  Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Second, Timeout: 3 * time.Second},
			steps: []step{
				reserve(2, 0), reserve(1, time.Second), reserve(1, time.Second),
				reserve(1, 2*time.Second), available(-3), reserveRefused(4, 4*time.Second),
				available(-3), acquire(1, true, 2*time.Second), available(0),
			},
		},
		{
			name:  "ChangeLimitForPeriod 10 -> 3 with 8 left keeps 8 until the next cycle",
			cfg:   Config{LimitForPeriod: 10, LimitRefreshPeriod: time.Second},
			steps: []step{acquire(2, true, 0), changeLimit(3), available(8), advance(time.Second), available(3)},
		},
		{
			name:  "permissions above a lowered limit are usable in their cycle",
			cfg:   Config{LimitForPeriod: 10, LimitRefreshPeriod: time.Second},
			steps: []step{acquire(2, true, 0), changeLimit(3), acquire(8, true, 0), available(0), acquire(1, false, 0)},
		},
		{
			name:  "ChangeLimitForPeriod upward applies from the next cycle",
			cfg:   Config{LimitForPeriod: 3, LimitRefreshPeriod: time.Second},
			steps: []step{acquire(3, true, 0), changeLimit(10), available(0), advance(time.Second), available(10)},
		},
		{
			name:  "ChangeTimeout applies to later calls",
			cfg:   Config{LimitForPeriod: 1, LimitRefreshPeriod: time.Second},
			steps: []step{acquire(1, true, 0), acquire(1, false, 0), changeTimeout(time.Second), acquire(1, true, time.Second)},
		},
		{
			name: "a refused caller parked for the timeout counts as waiting, and takes nothing",
			cfg:  Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Second, Timeout: 300 * time.Millisecond},
			steps: []step{
				acquire(2, true, 0), acquire(1, false, 300*time.Millisecond), available(0),
				advance(700 * time.Millisecond), available(2),
			},
		},
		{
			name:  "Drain in the current cycle leaves 0",
			cfg:   Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second},
			steps: []step{acquire(2, true, 0), drain(), available(0)},
		},
		{
			// Resilience4j drains the stale count 3 and leaves 2.
			name:  "Drain after idle cycles takes the refreshed permissions",
			cfg:   Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second},
			steps: []step{acquire(2, true, 0), advance(2 * time.Second), drain(), available(0)},
		},
		{
			// Resilience4j erases the debt to 0.
			name:  "Drain leaves debt owed",
			cfg:   Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second, Timeout: 2 * time.Second},
			steps: []step{reserve(9, time.Second), available(-4), drain(), available(-4), advance(time.Second), available(1)},
		},
		{
			name: "a clock set back refreshes nothing",
			cfg:  Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second},
			steps: []step{
				advance(3 * time.Second), acquire(5, true, 0), advance(-2 * time.Second), available(0),
				nanosToWait(3 * time.Second), advance(2 * time.Second), available(0), advance(time.Second), available(5),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.cfg, WithFailFast(tt.failFast))
			for i, s := range tt.steps {
				t.Logf("step %d: %s", i, s.name)
				s.run(t, f)
			}
		})
	}
}

func TestNewConfigErrors(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		wantRule sluice.Rule
		wantMsg  string
	}{
		{"zero Config", Config{}, RuleNonPositiveLimitForPeriod, "sluice: config: LimitForPeriod must be positive, got 0"},
		{"negative limit", Config{LimitForPeriod: -1, LimitRefreshPeriod: 1}, RuleNonPositiveLimitForPeriod, "sluice: config: LimitForPeriod must be positive, got -1"},
		{"zero period", Config{LimitForPeriod: 1}, sluice.RuleNonPositivePeriod, "sluice: config: LimitRefreshPeriod must be positive, got 0s"},
		{"negative timeout", Config{LimitForPeriod: 1, LimitRefreshPeriod: 1, Timeout: -time.Millisecond}, RuleNegativeTimeout, "sluice: config: Timeout must not be negative, got -1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(tt.cfg)
			var ce *sluice.ConfigError
			if l != nil || !errors.Is(err, sluice.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Rule != tt.wantRule || err.Error() != tt.wantMsg {
				t.Errorf("New(%+v) = %v, %v; want nil, %q (rule %s)", tt.cfg, l, err, tt.wantMsg, tt.wantRule)
			}
		})
	}
}

func TestNewValidEdges(t *testing.T) {
	for _, cfg := range []Config{
		DefaultConfig(),
		{LimitForPeriod: 1, LimitRefreshPeriod: 1},
		{LimitForPeriod: math.MaxInt64, LimitRefreshPeriod: math.MaxInt64, Timeout: math.MaxInt64},
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v) = %v, want nil", cfg, err)
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	f := newFixture(t, Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second, Timeout: time.Second})
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"AcquirePermission(0)", func() error { _, err := f.l.AcquirePermission(ctx, 0); return err }},
		{"AcquirePermission(-1)", func() error { _, err := f.l.AcquirePermission(ctx, -1); return err }},
		{"ReservePermission(0)", func() error { _, err := f.l.ReservePermission(0); return err }},
		{"ReservePermission(-3)", func() error { _, err := f.l.ReservePermission(-3); return err }},
		{"ChangeLimitForPeriod(0)", func() error { return f.l.ChangeLimitForPeriod(0) }},
		{"ChangeTimeout(-1ns)", func() error { return f.l.ChangeTimeout(-1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ae *sluice.ArgumentError
			if !errors.Is(err, sluice.ErrInvalidArgument) || !errors.As(err, &ae) {
				t.Errorf("%s = %v, want an *sluice.ArgumentError", tt.name, err)
			}
			if got, want := f.l.AvailablePermissions(), int64(5); got != want {
				t.Errorf("after %s AvailablePermissions() = %d, want %d", tt.name, got, want)
			}
			if got, want := f.l.Config(), (Config{LimitForPeriod: 5, LimitRefreshPeriod: time.Second, Timeout: time.Second}); got != want {
				t.Errorf("after %s Config() = %+v, want %+v", tt.name, got, want)
			}
		})
	}
}

func TestReserveNeverFits(t *testing.T) {
	f := newFixture(t, Config{LimitForPeriod: 1, LimitRefreshPeriod: time.Second, Timeout: math.MaxInt64})
	_, err := f.l.ReservePermission(math.MaxInt64)
	var mw *sluice.MaxWaitError
	if !errors.As(err, &mw) || mw.Wait != math.MaxInt64 {
		t.Errorf("ReservePermission(MaxInt64) = %v, want *MaxWaitError with wait MaxInt64", err)
	}
	if got := f.l.AvailablePermissions(); got != 1 {
		t.Errorf("AvailablePermissions() = %d, want 1", got)
	}
}

// blockingSleeper is a clock that sleeps until ctx is done, telling
// started when it begins.
type blockingSleeper struct {
	sluice.Clock
	started chan struct{}
}

func (s blockingSleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func TestAcquireCancelledGivesPermitsBack(t *testing.T) {
	clk := sluicetest.NewFakeClock(t0)
	sl := blockingSleeper{clk, make(chan struct{})}
	l, err := New(Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Second, Timeout: time.Minute}, WithClock(sl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if ok, err := l.AcquirePermission(ctx, 2); !ok || err != nil {
		t.Fatalf("AcquirePermission(2) = %v, %v; want true, nil", ok, err)
	}
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result)
	go func() {
		ok, err := l.AcquirePermission(ctx, 3)
		done <- result{ok, err}
	}()
	<-sl.started
	if got := l.NumberOfWaitingCallers(); got != 1 {
		t.Errorf("NumberOfWaitingCallers() while waiting = %d, want 1", got)
	}
	if got := l.AvailablePermissions(); got != -3 {
		t.Errorf("AvailablePermissions() while waiting = %d, want -3", got)
	}
	cancel()
	r := <-done
	if r.ok || !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled AcquirePermission(3) = %v, %v; want false, context.Canceled", r.ok, r.err)
	}
	if got := l.NumberOfWaitingCallers(); got != 0 {
		t.Errorf("NumberOfWaitingCallers() after = %d, want 0", got)
	}
	if got := l.AvailablePermissions(); got != 0 {
		t.Errorf("AvailablePermissions() after the give-back = %d, want 0", got)
	}
	// A context already done takes nothing.
	clk.Advance(time.Second)
	if ok, err := l.AcquirePermission(ctx, 1); ok || !errors.Is(err, context.Canceled) {
		t.Errorf("AcquirePermission with a done context = %v, %v; want false, context.Canceled", ok, err)
	}
	if got := l.AvailablePermissions(); got != 2 {
		t.Errorf("AvailablePermissions() = %d, want 2", got)
	}
}

func TestConcurrentAcquireAdmitsExactlyTheLimit(t *testing.T) {
	clk := sluicetest.NewFakeClock(t0)
	l, err := New(Config{LimitForPeriod: 50, LimitRefreshPeriod: time.Second}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 10 {
				ok, err := l.AcquirePermission(context.Background(), 1)
				if err != nil {
					t.Errorf("AcquirePermission(1) = %v", err)
				}
				if ok {
					admitted.Add(1)
				}
				_ = l.AvailablePermissions()
				_ = l.NumberOfWaitingCallers()
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 50 {
		t.Errorf("admitted %d of 200, want 50", got)
	}
}

func TestConcurrentAcquireWithWaits(t *testing.T) {
	clk := sluicetest.NewFakeClock(t0)
	l, err := New(Config{LimitForPeriod: 3, LimitRefreshPeriod: time.Millisecond, Timeout: time.Hour}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if ok, err := l.AcquirePermission(context.Background(), 2); !ok || err != nil {
					t.Errorf("AcquirePermission(2) = %v, %v; want true, nil", ok, err)
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 25 {
				_ = l.ChangeLimitForPeriod(3)
				_ = l.ChangeTimeout(time.Hour)
				l.Drain()
			}
		})
	}
	wg.Wait()
	if got := l.NumberOfWaitingCallers(); got != 0 {
		t.Errorf("NumberOfWaitingCallers() = %d, want 0", got)
	}
}

// TestAcquireDeadline: a context whose deadline comes before the sleep
// fails at once with a *sluice.MaxWaitError of the deadline and takes
// nothing: for permits that would come within the timeout, and for a
// refusal that would park for the whole timeout.
func TestAcquireDeadline(t *testing.T) {
	for _, tt := range []struct {
		name   string
		n      int64
		wait   time.Duration
		permit int64 // AvailablePermissions after: nothing taken
	}{
		{"permits after the deadline", 1, time.Hour, 0},
		{"a refusal parked past the deadline", 5, 3 * time.Hour, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Hour, Timeout: 2 * time.Hour})
			acquire(2, true, 0).run(t, f)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ok, err := f.l.AcquirePermission(ctx, tt.n)
			var mw *sluice.MaxWaitError
			if ok || !errors.As(err, &mw) || !mw.Deadline || mw.Wait != time.Duration(tt.wait) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("AcquirePermission(%d) with a deadline in a minute = %v, %v; want false, a *MaxWaitError of the deadline and a %v wait", tt.n, ok, err, tt.wait)
			}
			if f.clk.Slept() != 0 || f.l.AvailablePermissions() != tt.permit {
				t.Errorf("slept %v, %d permissions left; want 0, %d", f.clk.Slept(), f.l.AvailablePermissions(), tt.permit)
			}
		})
	}
}
