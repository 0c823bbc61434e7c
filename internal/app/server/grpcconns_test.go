package server

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcFrom is a gRPC client of addr whose connections come from the
// loopback address from (127.0.0.2 for another client than the tests'
// 127.0.0.1), counting them in dials.
func grpcFrom(t *testing.T, addr, from string, dials *atomic.Int64) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func withToken(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
}

// idleAttack opens n gRPC connections from from, each making one health
// check (open with auth on) or one ShouldRateLimit without a token
// (refused), and leaves them open and idle. It returns how many of them
// the server answered.
func idleAttack(t *testing.T, addr, from string, n int) (answered int) {
	t.Helper()
	for i := range n {
		cc := grpcFrom(t, addr, from, nil)
		var err error
		if i%2 == 0 {
			_, err = healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{})
		} else if _, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(t.Context(), rlRequest("k", "v")); status.Code(err) == codes.Unauthenticated {
			err = nil
		}
		if err == nil {
			answered++
		}
	}
	return answered
}

// TestGRPCIdleConnectionsLockNoOneOut: connections that only made a
// health check (open even with auth on) or a call refused for its token,
// then sit idle, past max_connections from one client, do not keep a new
// client's ShouldRateLimit out: at the bound, a new connection closes the
// one idle the longest. Before, the listener refused every new connection
// once full, and Envoy's calls failed Unavailable.
func TestGRPCIdleConnectionsLockNoOneOut(t *testing.T) {
	const max = 16
	s, gaddr := serve(t, envoyYAML+fmt.Sprintf(`server:
  auth: {tokens: [s3cret]}
  limits:
    grpc: {max_connections: %d, max_connections_per_client: %d}
`, max, max), true, withGRPCGrace(0))
	n := idleAttack(t, gaddr, "127.0.0.1", 3*max)
	if open := s.grpcCap.Load().open(); open > max {
		t.Errorf("%d gRPC connections open, more than max_connections %d", open, max)
	}
	cc := grpcFrom(t, gaddr, "127.0.0.1", nil)
	if _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(withToken(t.Context()), rlRequest("k", "v")); err != nil {
		t.Errorf("ShouldRateLimit of a new client after %d idle connections (%d answered) = %v, want an answer", 3*max, n, err)
	}
}

// TestGRPCPerClientCap: one client address holds at most
// max_connections_per_client connections, however many it opens, and
// another's ShouldRateLimit is answered.
func TestGRPCPerClientCap(t *testing.T) {
	const max, perClient = 32, 8
	s, gaddr := serve(t, envoyYAML+fmt.Sprintf(`server:
  auth: {tokens: [s3cret]}
  limits:
    grpc: {max_connections: %d, max_connections_per_client: %d}
`, max, perClient), true, withGRPCGrace(0))
	idleAttack(t, gaddr, "127.0.0.2", 5*perClient)
	l := s.grpcCap.Load()
	l.mu.Lock()
	held := l.clients[netip.MustParseAddr("127.0.0.2")]
	l.mu.Unlock()
	if held > perClient {
		t.Errorf("127.0.0.2 holds %d connections, want at most max_connections_per_client %d", held, perClient)
	}
	cc := grpcFrom(t, gaddr, "127.0.0.1", nil)
	if _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(withToken(t.Context()), rlRequest("k", "v")); err != nil {
		t.Errorf("ShouldRateLimit of another client = %v, want an answer", err)
	}
}

// TestGRPCHealthChecksNeverCloseCallers: connections that only make
// health checks, however many, never close one that made rate-limit
// calls while no more than reserved_for_calls of those are open: the
// callers' next calls go out on the connections they had.
func TestGRPCHealthChecksNeverCloseCallers(t *testing.T) {
	const max, reserved = 8, 4
	_, gaddr := serve(t, envoyYAML+fmt.Sprintf(`server:
  limits:
    grpc: {max_connections: %d, reserved_for_calls: %d, max_connections_per_client: %d}
`, max, reserved, max), true, withGRPCGrace(0))
	var dials atomic.Int64
	callers := make([]rlsv3.RateLimitServiceClient, reserved)
	for i := range callers {
		callers[i] = rlsv3.NewRateLimitServiceClient(grpcFrom(t, gaddr, "127.0.0.1", &dials))
		if _, err := callers[i].ShouldRateLimit(t.Context(), rlRequest("k", "v")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 * max {
		cc := grpcFrom(t, gaddr, "127.0.0.1", nil)
		if _, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("health check %d = %v, want an answer: it closes another health check's connection", i, err)
		}
	}
	for i, c := range callers {
		if _, err := c.ShouldRateLimit(t.Context(), rlRequest("k", "v")); err != nil {
			t.Errorf("caller %d after the health checks = %v", i, err)
		}
	}
	if n := dials.Load(); n != reserved {
		t.Errorf("the %d callers dialled %d times, want once each: a health check closed a caller's connection", reserved, n)
	}
}

// TestGRPCCapAdmit pins grpcCap's rules on explicit times: which
// connection a new one closes, and when it is refused. The cap is 4
// connections, 3 per client, 1 kept for callers (so at most 3 that made
// no rate-limit call), a grace of 1s, and 50ms among a client's own.
func TestGRPCCapAdmit(t *testing.T) {
	const ms = int64(time.Millisecond)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	type conn struct {
		client       netip.Addr
		ago          int64 // the last call's start or end, or the accept, before now
		caller, busy bool
	}
	for _, tt := range []struct {
		name   string
		conns  []conn
		from   netip.Addr
		closed int // the index of the connection closed for room; -1 none
		ok     bool
	}{
		{"room", []conn{{a, 0, false, false}}, b, -1, true},
		{"a client at its bound closes its own that made no call, the oldest past 50ms",
			[]conn{{a, 60 * ms, true, false}, {a, 100 * ms, false, false}, {a, 70 * ms, false, false}, {b, 5000 * ms, false, false}}, a, 1, true},
		{"... or is refused when they are younger",
			[]conn{{a, 10 * ms, false, false}, {a, 20 * ms, false, false}, {a, 30 * ms, false, false}}, a, -1, false},
		{"... or closes its own caller idle past 50ms",
			[]conn{{a, 10 * ms, false, false}, {a, 2000 * ms, true, false}, {a, 20 * ms, false, false}}, a, 1, true},
		{"those that made no call hold at most 3: the oldest past 1s closes",
			[]conn{{a, 1500 * ms, false, false}, {b, 3000 * ms, false, false}, {a, 500 * ms, false, false}}, b, 1, true},
		{"... and none younger: refused",
			[]conn{{a, 500 * ms, false, false}, {b, 600 * ms, false, false}, {a, 700 * ms, false, false}}, b, -1, false},
		{"full: a caller idle past 1s, the one idle the longest",
			[]conn{{a, 2000 * ms, true, false}, {b, 9000 * ms, true, true}, {b, 3000 * ms, true, false}, {a, 100 * ms, false, false}}, a, 2, true},
		{"... never one in a call: refused",
			[]conn{{a, 2000 * ms, true, true}, {b, 9000 * ms, true, true}, {b, 3000 * ms, true, true}, {a, 100 * ms, false, false}}, b, -1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newGRPCCap(nil, GRPCLimits{MaxConnections: 4, MaxConnectionsPerClient: 3, ReservedForCalls: 1}, time.Second, nil)
			const now = int64(1e18)
			conns := make([]*grpcConn, len(tt.conns))
			for i, c := range tt.conns {
				gc := &grpcConn{l: l, client: c.client}
				gc.last.Store(now - c.ago)
				l.conns[gc] = struct{}{}
				l.clients[c.client]++
				if c.caller {
					gc.caller = true
					l.callers++
				}
				if c.busy {
					gc.active.Add(1)
				}
				conns[i] = gc
			}
			victims, ok := l.admit(&grpcConn{l: l, client: tt.from}, now)
			var want []*grpcConn
			if tt.closed >= 0 {
				want = []*grpcConn{conns[tt.closed]}
			}
			if ok != tt.ok || fmt.Sprint(victims) != fmt.Sprint(want) {
				t.Errorf("admit = %v, %v; want %v, %v", victims, ok, want, tt.ok)
			}
		})
	}
}
