package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
)

// slotFree reports whether the concurrency limit's slot for the Watch
// method is free, taking nothing.
func slotFree(t *testing.T, l *sluice.Limiter, key string) bool {
	t.Helper()
	r, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return r.Allowed
}

// awaitSlotFree waits, until a deadline within the lease, for the slot
// to be given back: a release, not a lapse.
func awaitSlotFree(t *testing.T, l *sluice.Limiter, key, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !slotFree(t, l, key); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the call's slot was not given back", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSlotHeldByStream: a Watch stream holds its slot for longer than a
// lease, renewed, refusing another, and gives it back when the client
// cancels it.
func TestSlotHeldByStream(t *testing.T) {
	const lease = time.Second
	const method = "/grpc.health.v1.Health/Watch"
	l := newLimiter(t, sluice.Concurrency(1, lease))
	s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "inflight", Limiter: l, Key: grpclimit.Method}}), setup{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first Watch: %v", err)
	}
	time.Sleep(2 * lease) // renewed meanwhile, or lapsed
	second, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); err == nil {
		t.Fatal("a second Watch two leases into the first was let through: its slot lapsed")
	}
	cancel()
	awaitSlotFree(t, l, method, "after the client cancelled its stream")
}

// TestSlotReleasedAfterPanic: a unary handler that panics gives its slot
// back as the panic goes through the interceptor.
func TestSlotReleasedAfterPanic(t *testing.T) {
	l := newLimiter(t, sluice.Concurrency(1, time.Minute))
	in := newInterceptor(t, []grpclimit.Limit{{Name: "inflight", Limiter: l, Key: grpclimit.Method}})
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/Call"}
	func() {
		defer func() {
			if v := recover(); v != "handler bug" {
				t.Fatalf("recovered %v, want the handler's panic", v)
			}
		}()
		in.Unary(context.Background(), nil, info, func(ctx context.Context, req any) (any, error) {
			if slotFree(t, l, "/svc/Call") {
				t.Error("the slot is free while the handler runs")
			}
			panic("handler bug")
		})
	}()
	if !slotFree(t, l, "/svc/Call") {
		t.Fatal("the slot of a call whose handler panicked was not given back")
	}
}
