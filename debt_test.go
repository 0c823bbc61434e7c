package sluice_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestDebtBound is docs/policies.md's bound on a long random run of holds
// settled one at a time: the tokens taken never exceed the burst plus the
// refill by more than the debt outstanding, and that debt never exceeds
// the largest single charge.
func TestDebtBound(t *testing.T) {
	const maxCharge = 400
	for _, tt := range []struct {
		p      sluice.Policy
		earned func(d time.Duration) int64 // the refill over d
	}{
		{sluice.TokenBucket(1000, 1000, time.Minute), func(d time.Duration) int64 { return 1000 * int64(d/time.Minute) }},
		{sluice.GCRA(1000, 1000, time.Minute), func(d time.Duration) int64 { return int64(d / (60 * time.Millisecond)) }},
	} {
		t.Run(tt.p.String(), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			l, err := sluice.NewLimiter(tt.p, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			ctx, rng := context.Background(), rand.New(rand.NewPCG(1, 2))
			var taken, settled int64
			for step := range 20000 {
				clock.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))))
				h, err := l.Hold(ctx, "k", 1+rng.Int64N(200), time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if !h.Allowed {
					continue
				}
				actual := rng.Int64N(maxCharge + 1)
				c, err := l.Settle(ctx, h.ID, actual)
				if err != nil || !c.Settled {
					t.Fatalf("step %d: Settle = %+v, %v", step, c, err)
				}
				taken += actual
				settled++
				elapsed := time.Duration(clock.Now() - t0)
				if c.Debt > maxCharge {
					t.Fatalf("step %d: debt %d, above the largest charge %d", step, c.Debt, maxCharge)
				}
				if bound := 1000 + tt.earned(elapsed) + c.Debt; taken > bound {
					t.Fatalf("step %d at %v: %d taken, above the burst, the refill and the debt: %d", step, elapsed, taken, bound)
				}
			}
			if settled < 1000 {
				t.Errorf("only %d holds were settled: the run did not test much", settled)
			}
		})
	}
}

// TestDebtUnsupported: a policy that cannot owe tokens says so on every
// call, with errors.ErrUnsupported, and changes nothing.
func TestDebtUnsupported(t *testing.T) {
	l, err := sluice.NewLimiter(sluice.SlidingWindow(10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Charge(ctx, "k", 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Charge = %v, want ErrUnsupported", err)
	}
	if _, err := l.Hold(ctx, "k", 1, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Hold = %v, want ErrUnsupported", err)
	}
	if _, err := l.Settle(ctx, "AAAAAAAAAAA", 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Settle = %v, want ErrUnsupported", err)
	}
	if r, _ := l.PeekN(ctx, "k", 10); !r.Allowed {
		t.Errorf("PeekN(10) = %+v after the refused calls, want allowed", r)
	}
}

// TestDebtArguments: bad arguments are *ArgumentErrors naming them.
func TestDebtArguments(t *testing.T) {
	l, err := sluice.NewLimiter(sluice.TokenBucket(10, 10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Charge(0)":         func() error { _, err := l.Charge(ctx, "k", 0); return err },
		"Hold(0)":           func() error { _, err := l.Hold(ctx, "k", 0, time.Minute); return err },
		"Hold(11)":          func() error { _, err := l.Hold(ctx, "k", 11, time.Minute); return err },
		"Hold(ttl 0)":       func() error { _, err := l.Hold(ctx, "k", 1, 0); return err },
		"Settle(-1)":        func() error { _, err := l.Settle(ctx, "AAAAAAAAAAA", -1); return err },
		"Settle(not an ID)": func() error { _, err := l.Settle(ctx, "!", 1); return err },
		"Settle(too short)": func() error { _, err := l.Settle(ctx, "AAAA", 1); return err },
	} {
		var ae *sluice.ArgumentError
		if err := call(); !errors.As(err, &ae) {
			t.Errorf("%s = %v, want an *ArgumentError", name, err)
		}
	}
	if r, _ := l.PeekN(ctx, "k", 10); !r.Allowed {
		t.Errorf("PeekN(10) = %+v after the bad calls, want allowed: nothing taken", r)
	}
}
