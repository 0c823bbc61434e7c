package sleep

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	tests := []struct {
		base  time.Duration
		shift int
		most  time.Duration
		want  time.Duration
	}{
		{50 * time.Microsecond, 0, 10 * time.Millisecond, 50 * time.Microsecond},
		{50 * time.Microsecond, 3, 10 * time.Millisecond, 400 * time.Microsecond},
		{50 * time.Microsecond, 8, 10 * time.Millisecond, 10 * time.Millisecond}, // 12.8ms capped
		{time.Second, 4, 16 * time.Second, 16 * time.Second},                     // exactly most
		{time.Second, 40, 16 * time.Second, 16 * time.Second},                    // would overflow
		{1, 62, math.MaxInt64, 1 << 62},
		{1, 63, math.MaxInt64, math.MaxInt64},
		{1, 200, time.Millisecond, time.Millisecond},
	}
	for _, tt := range tests {
		if got := Ceiling(tt.base, tt.shift, tt.most); got != tt.want {
			t.Errorf("Ceiling(%v, %d, %v) = %v, want %v", tt.base, tt.shift, tt.most, got, tt.want)
		}
	}
}

func TestForEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := For(ctx, time.Hour); err != context.Canceled {
		t.Errorf("For(cancelled, 1h) = %v, want context.Canceled", err)
	}
	if err := Backoff(ctx, time.Hour, 0, time.Hour); err != context.Canceled {
		t.Errorf("Backoff(cancelled, 1h) = %v, want context.Canceled", err)
	}
}

func TestForReturnsNilAfterTheWait(t *testing.T) {
	if err := For(context.Background(), time.Nanosecond); err != nil {
		t.Errorf("For(1ns) = %v, want nil", err)
	}
	if err := Backoff(context.Background(), 1, 0, 1); err != nil {
		t.Errorf("Backoff(1ns) = %v, want nil", err)
	}
}

// fakeSleeper is a clock whose Sleep records d and returns at once.
type fakeSleeper struct{ slept *time.Duration }

func (f fakeSleeper) Sleep(_ context.Context, d time.Duration) error {
	*f.slept += d
	return nil
}

// TestOn: a clock that sleeps is slept on; another sleeps on a timer,
// which a done context ends at once.
func TestOn(t *testing.T) {
	var slept time.Duration
	if err := On(t.Context(), fakeSleeper{&slept}, time.Hour); err != nil || slept != time.Hour {
		t.Errorf("On(sleeper, 1h) = %v and slept %v, want nil and 1h", err, slept)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := On(ctx, struct{}{}, time.Hour); err != context.Canceled {
		t.Errorf("On(no sleeper, done ctx, 1h) = %v, want context.Canceled", err)
	}
	if err := On(t.Context(), struct{}{}, 0); err != nil {
		t.Errorf("On(no sleeper, 0) = %v, want nil", err)
	}
}
