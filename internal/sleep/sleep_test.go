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
