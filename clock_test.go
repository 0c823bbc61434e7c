package sluice_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
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
	clock := sluicetest.NewFakeClock(0)
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
		clock := sluicetest.NewFakeClock(reading)
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
		{"fake", sluicetest.NewFakeClock(0), true},
		{"millis of monotonic", sluice.Millis(sluice.MonotonicClock()), false},
		{"millis of wall", sluice.Millis(sluice.WallClock()), true},
		{"millis of fake", sluice.Millis(sluicetest.NewFakeClock(0)), true},
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
