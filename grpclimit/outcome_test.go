package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
)

// loginCall calls the interceptor's Unary as user, with a handler that
// answers UNAUTHENTICATED unless the password is right, and returns the
// call's code.
func loginCall(ctx context.Context, in *grpclimit.Interceptor, user, password string) codes.Code {
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-user", user))
	info := &grpc.UnaryServerInfo{FullMethod: "/auth.Auth/Login"}
	_, err := in.Unary(ctx, password, info, func(_ context.Context, req any) (any, error) {
		if req != "right" {
			return nil, status.Error(codes.Unauthenticated, "wrong password")
		}
		return "welcome", nil
	})
	return status.Code(err)
}

// TestLoginCountsFailures is httplimit's login test over gRPC: a limit
// that counts only UNAUTHENTICATED answers locks a user after 5 failed
// logins, and never counts a successful one.
func TestLoginCountsFailures(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(5, 15*time.Minute))
	in := newInterceptor(t, []grpclimit.Limit{{Name: "login", Limiter: l, Key: grpclimit.Metadata("x-user"),
		CountIf: grpclimit.Codes(codes.Unauthenticated)}})
	ctx := context.Background()
	steps := []struct {
		user, password string
		want           codes.Code
	}{
		{"alice", "wrong", codes.Unauthenticated},
		{"alice", "right", codes.OK},
		{"alice", "wrong", codes.Unauthenticated},
		{"alice", "right", codes.OK},
		{"alice", "wrong", codes.Unauthenticated},
		{"alice", "wrong", codes.Unauthenticated},
		{"alice", "right", codes.OK},
		{"alice", "wrong", codes.Unauthenticated},
		{"alice", "right", codes.ResourceExhausted}, // 5 failures: locked
		{"bob", "right", codes.OK},
	}
	for i, s := range steps {
		if got := loginCall(ctx, in, s.user, s.password); got != s.want {
			t.Errorf("step %d (%s, %s) = %v, want %v", i, s.user, s.password, got, s.want)
		}
	}
	if res, _ := l.Peek(ctx, "bob"); res.Remaining != 4 {
		t.Errorf("bob's window = %+v, want untouched (4 left after a peek of 1)", res)
	}
	// A call cancelled during the handler is counted all the same.
	cctx, cancel := context.WithCancel(metadata.NewIncomingContext(ctx, metadata.Pairs("x-user", "carol")))
	in.Unary(cctx, "wrong", &grpc.UnaryServerInfo{FullMethod: "/auth.Auth/Login"}, func(context.Context, any) (any, error) {
		cancel()
		return nil, status.Error(codes.Unauthenticated, "wrong password")
	})
	if res, _ := l.Peek(ctx, "carol"); res.Remaining != 3 {
		t.Errorf("carol's window after a cancelled failure = %+v, want it counted (3 left after a peek of 1)", res)
	}
}

// fakeStream is a server stream with a context and nothing else.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context    { return s.ctx }
func (s fakeStream) SetTrailer(metadata.MD)      {}
func (s fakeStream) SetHeader(metadata.MD) error { return nil }

// TestStreamCountIf counts a stream by the code its handler returns.
func TestStreamCountIf(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(5, time.Hour))
	in := newInterceptor(t, []grpclimit.Limit{{Name: "s", Limiter: l, Key: grpclimit.Metadata("x-user"),
		CountIf: grpclimit.Codes(codes.PermissionDenied)}})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "u"))
	info := &grpc.StreamServerInfo{FullMethod: "/s.S/Watch"}
	for _, code := range []codes.Code{codes.OK, codes.PermissionDenied, codes.NotFound, codes.PermissionDenied} {
		err := in.Stream(nil, fakeStream{ctx: ctx}, info, func(any, grpc.ServerStream) error { return status.Error(code, "") })
		if status.Code(err) != code {
			t.Fatalf("stream = %v, want %v", err, code)
		}
	}
	if res, _ := l.Peek(context.Background(), "u"); res.Remaining != 2 {
		t.Errorf("after 2 denied streams of 4, Peek = %+v, want 2 left", res)
	}
}

// TestShadowLimitPasses lets every call through a limit in shadow mode.
func TestShadowLimitPasses(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(1, time.Hour), sluice.WithShadow(true))
	in := newInterceptor(t, []grpclimit.Limit{{Name: "new", Limiter: l, Key: grpclimit.Metadata("x-user")}})
	for i := range 3 {
		if got := loginCall(context.Background(), in, "u", "right"); got != codes.OK {
			t.Errorf("call %d through a shadow limit = %v, want OK", i, got)
		}
	}
}
