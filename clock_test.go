package sluice_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestMillis: readings are rounded down to whole milliseconds, also before
// the epoch (floor, not truncation toward zero).
func TestMillis(t *testing.T) {
	tests := []struct {
		reading, want int64
	}{
		{0, 0},
		{1, 0},
		{999_999, 0},
		{1_000_000, 1_000_000},
		{1_999_999, 1_000_000},
		{t0 + 123_456_789, t0 + 123_000_000},
		{-1, -1_000_000},
		{-999_999, -1_000_000},
		{-1_000_000, -1_000_000},
		{-1_000_001, -2_000_000},
		{math.MaxInt64, 9_223_372_036_854_000_000},
		{math.MinInt64 + 1_000_000, -9_223_372_036_854_000_000},
	}
	clock := sluice.NewFakeClock(0)
	millis := sluice.Millis(clock)
	for _, tt := range tests {
		clock.Set(tt.reading)
		if got := millis.Now(); got != tt.want {
			t.Errorf("Millis(%d).Now() = %d, want %d", tt.reading, got, tt.want)
		}
	}
}

// TestMillisAtMinInt64: the floor of MinInt64 to whole milliseconds is below
// MinInt64; whatever Millis returns there must stay within a millisecond
// of the reading instead of wrapping around to the far future. MinInt64 +
// 775_807 is the last reading whose floor does not fit.
func TestMillisAtMinInt64(t *testing.T) {
	for _, reading := range []int64{math.MinInt64, math.MinInt64 + 775_807} {
		clock := sluice.NewFakeClock(reading)
		got := sluice.Millis(clock).Now()
		if got > 0 || got-reading >= 1_000_000 || reading-got >= 1_000_000 {
			t.Errorf("Millis(%d).Now() = %d, want a reading within 1ms of it", reading, got)
		}
	}
}

func TestIsWallClock(t *testing.T) {
	tests := []struct {
		name  string
		clock sluice.Clock
		want  bool
	}{
		{"monotonic", sluice.MonotonicClock(), false},
		{"wall", sluice.WallClock(), true},
		{"fake", sluice.NewFakeClock(0), true},
		{"millis of monotonic", sluice.Millis(sluice.MonotonicClock()), false},
		{"millis of wall", sluice.Millis(sluice.WallClock()), true},
		{"millis of fake", sluice.Millis(sluice.NewFakeClock(0)), true},
	}
	for _, tt := range tests {
		if got := tt.clock.IsWallClock(); got != tt.want {
			t.Errorf("%s: IsWallClock() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestMonotonicClock: it counts from the Unix time of its first reading and
// never goes back.
func TestMonotonicClock(t *testing.T) {
	c := sluice.MonotonicClock()
	a := c.Now()
	wall := time.Now().UnixNano()
	b := c.Now()
	if b < a {
		t.Errorf("Now() went back from %d to %d", a, b)
	}
	if d := time.Duration(wall - a); d < -time.Minute || d > time.Minute {
		t.Errorf("Now() = %d, %v from the wall clock, want within a minute", a, d)
	}
}

func TestFakeClock(t *testing.T) {
	c := sluice.NewFakeClock(t0)
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

// TestTimerSleeper checks only what needs no waiting: a done context and a
// zero duration.
func TestTimerSleeper(t *testing.T) {
	s := sluice.TimerSleeper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep(done ctx, 1h) = %v, want context.Canceled", err)
	}
	if err := s.Sleep(t.Context(), 0); err != nil {
		t.Errorf("Sleep(ctx, 0) = %v, want nil", err)
	}
}
