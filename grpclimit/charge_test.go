package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestCharge: a limit with Settle holds a call's estimate and settles it
// with what the handler reported, as httplimit's does.
func TestCharge(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	l, err := sluice.NewLimiter(sluice.TokenBucket(1000, 1000, time.Minute), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	in, err := grpclimit.New([]grpclimit.Limit{{Name: "tokens", Limiter: l, Key: grpclimit.Method,
		Cost:   func(context.Context, grpclimit.Call) (int64, error) { return 100, nil },
		Settle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/model.Model/Generate"}
	ctx := context.Background()
	for _, tt := range []struct {
		report    []int64
		remaining int64
		debt      int64
	}{
		{[]int64{15, 5}, 980, 0},    // refunded to 20
		{nil, 880, 0},               // the estimate
		{[]int64{900, 300}, 0, 320}, // 1,100 beyond the 100 held: 320 owed
	} {
		_, err := in.Unary(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
			for _, n := range tt.report {
				grpclimit.Charge(ctx, n)
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.Debt(ctx, info.FullMethod)
		if err != nil || c.Remaining != tt.remaining || c.Debt != tt.debt {
			t.Fatalf("after reporting %v: %+v, %v; want %d remaining, debt %d", tt.report, c, err, tt.remaining, tt.debt)
		}
	}
	if _, err := in.Unary(ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil }); err == nil {
		t.Error("a call in debt passed")
	}

	sw, err := sluice.NewLimiter(sluice.SlidingWindow(10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = grpclimit.New([]grpclimit.Limit{{Name: "n", Limiter: sw, Key: grpclimit.Method, Settle: time.Minute}})
	var ce *grpclimit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "limits[0].Settle" {
		t.Errorf("New with Settle on a sliding window = %v, want a *ConfigError of limits[0].Settle", err)
	}
}

// stream is the least of a grpc.ServerStream that Stream uses.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s stream) Context() context.Context { return s.ctx }

// TestChargeStream: a stream's handler reports through its stream's
// context, and the hold is settled when the handler returns.
func TestChargeStream(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	l, err := sluice.NewLimiter(sluice.TokenBucket(1000, 1000, time.Minute), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	in, err := grpclimit.New([]grpclimit.Limit{{Name: "tokens", Limiter: l, Key: grpclimit.Method,
		Cost: func(context.Context, grpclimit.Call) (int64, error) { return 100, nil }, Settle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	info := &grpc.StreamServerInfo{FullMethod: "/model.Model/Stream"}
	err = in.Stream(nil, stream{ctx: context.Background()}, info, func(_ any, ss grpc.ServerStream) error {
		for range 3 {
			grpclimit.Charge(ss.Context(), 10) // a message streamed
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := l.Debt(context.Background(), info.FullMethod); err != nil || c.Remaining != 970 {
		t.Errorf("after a stream of 30: %+v, %v; want 970 remaining", c, err)
	}
}
