package grpclimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// t0 is the fake clocks' start: a Unix time in nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

func newLimiter(t *testing.T, p sluice.Policy, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l, err := sluice.NewLimiter(p, opts...)
	if err != nil {
		t.Fatalf("NewLimiter(%v): %v", p, err)
	}
	return l
}

func newInterceptor(t *testing.T, limits []grpclimit.Limit, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	in, err := grpclimit.New(limits, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return in
}

// server is a real gRPC server running the health service behind an
// Interceptor, with a client connected to it.
type server struct {
	client healthpb.HealthClient
	calls  atomic.Int64 // calls that got past the Interceptor
}

// setup varies a server.
type setup struct {
	tcp    bool                        // loopback TCP instead of an in-memory listener
	before grpc.UnaryServerInterceptor // runs before the Interceptor on unary calls
	dial   []grpc.DialOption           // more client options
}

func start(t *testing.T, in *grpclimit.Interceptor, su setup) *server {
	t.Helper()
	s := &server{}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		s.calls.Add(1)
		return handler(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s.calls.Add(1)
		return handler(srv, ss)
	}
	unary := []grpc.UnaryServerInterceptor{in.Unary, count}
	if su.before != nil {
		unary = append([]grpc.UnaryServerInterceptor{su.before}, unary...)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(in.Stream, countStream))
	healthpb.RegisterHealthServer(srv, health.NewServer())

	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	var lis net.Listener
	var target string
	if su.tcp {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		target = lis.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 20)
		lis, target = bl, "passthrough:///bufconn"
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(target, append(dial, su.dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s.client = healthpb.NewHealthClient(cc)
	return s
}

// check makes a unary call with the metadata pairs kv and returns its
// trailer and error.
func (s *server) check(kv ...string) (metadata.MD, error) {
	var trailer metadata.MD
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
	_, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	return trailer, err
}

// rejection is what a client can read of a RESOURCE_EXHAUSTED answer.
type rejection struct {
	msg        string
	retryDelay string // RetryInfo's, "" without one
	quota      string // QuotaFailure's violations, "subject: description; …"
	pushback   string // the grpc-retry-pushback-ms trailer
	retryAfter string // the retry-after trailer
}

func readRejection(t *testing.T, err error, trailer metadata.MD) rejection {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("call: %v, want RESOURCE_EXHAUSTED", err)
	}
	r := rejection{msg: st.Message(), pushback: strings.Join(trailer.Get("grpc-retry-pushback-ms"), ","),
		retryAfter: strings.Join(trailer.Get("retry-after"), ",")}
	var quota []string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			r.retryDelay = d.GetRetryDelay().AsDuration().String()
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				quota = append(quota, v.GetSubject()+": "+v.GetDescription())
			}
		default:
			t.Errorf("unexpected detail %T %v", d, d)
		}
	}
	r.quota = strings.Join(quota, "; ")
	return r
}

func ceilMs(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

func ceilSec(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// TestRejectionMatchesResult sends calls through an Interceptor on a
// memstore-backed limiter and checks every rejection (its message,
// RetryInfo, QuotaFailure and trailer) against the Result of a twin
// in-memory limiter of the same policy on the same timeline.
func TestRejectionMatchesResult(t *testing.T) {
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(3, time.Second),
		sluice.SlidingWindow(3, time.Second),
		sluice.SlidingLog(3, time.Second),
		sluice.TokenBucket(3, 1, 500*time.Millisecond),
		sluice.LeakyBucket(3, 2, time.Second),
		sluice.GCRA(3, 2, time.Second),
		sluice.Shaper(5, time.Second, 2),
		sluice.Compound(sluice.FixedWindow(3, time.Second), sluice.TokenBucket(5, 1, time.Second)),
	} {
		t.Run(p.String(), func(t *testing.T) {
			clock, twinClock := sluicetest.NewFakeClock(t0), sluicetest.NewFakeClock(t0)
			l := newLimiter(t, p, sluice.WithClock(clock), sluice.WithStore(memstore.New()))
			twin := newLimiter(t, p, sluice.WithClock(twinClock))
			s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "api", Limiter: l, Key: grpclimit.Metadata("x-api-key")}}), setup{})
			rejections := 0
			for step := range 16 {
				// Uneven steps, so that waits are not whole milliseconds.
				advance := time.Duration(step%3)*90*time.Millisecond + 333*time.Microsecond
				clock.Advance(advance)
				twinClock.Advance(advance)
				trailer, err := s.check("x-api-key", "k1")
				res, terr := twin.Allow(context.Background(), "k1")
				if terr != nil {
					t.Fatal(terr)
				}
				if res.Allowed {
					if err != nil {
						t.Errorf("step %d: %v, want OK (twin: %+v)", step, err, res)
					}
					continue
				}
				rejections++
				got := readRejection(t, err, trailer)
				wait := res.RetryAfter
				shown := (wait + time.Millisecond - 1) / time.Millisecond * time.Millisecond
				want := rejection{
					msg:        fmt.Sprintf(`rate limit "api" exceeded, retry after %v`, shown),
					retryDelay: wait.String(),
					quota:      fmt.Sprintf("api: retry after %v", shown),
					pushback:   ceilMs(wait),
					retryAfter: ceilSec(wait),
				}
				if got != want {
					t.Errorf("step %d: rejection\n got %+v\nwant %+v", step, got, want)
				}
			}
			if rejections == 0 {
				t.Errorf("no call was rejected: the test checks no rejection")
			}
		})
	}
}

// TestStream: a stream is limited when it opens, and its rejection
// carries the same details and trailer as a unary call's.
func TestStream(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	l := newLimiter(t, sluice.FixedWindow(1, time.Minute), sluice.WithClock(clock))
	s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "watch", Limiter: l, Key: grpclimit.Method}}), setup{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := first.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch: %v, %v; want SERVING", resp, err)
	}
	clock.Advance(20*time.Second + 500*time.Millisecond)
	second, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	got := readRejection(t, err, second.Trailer())
	want := rejection{msg: `rate limit "watch" exceeded, retry after 39.5s`, retryDelay: "39.5s",
		quota: "watch: retry after 39.5s", pushback: "39500", retryAfter: "40"}
	if got != want {
		t.Errorf("second Watch: rejection\n got %+v\nwant %+v", got, want)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("%d streams reached the service, want 1", n)
	}
}

// TestRetryAfterNever: a call that can never pass gets no wait: a
// pushback of -1, which tells gRPC clients not to retry, no RetryInfo and
// no retry-after.
//
// Every policy answers alike: those that refuse such a cost as an
// argument error (a fixed window, a token bucket) as those that reject it.
func TestRetryAfterNever(t *testing.T) {
	cost := func(context.Context, grpclimit.Call) (int64, error) { return 4, nil }
	for _, p := range []sluice.Policy{
		sluice.SlidingWindow(3, time.Second),
		sluice.FixedWindow(3, time.Second),
		sluice.TokenBucket(3, 1, time.Second),
		sluice.Compound(sluice.FixedWindow(3, time.Second), sluice.SlidingWindow(10, time.Minute)),
	} {
		t.Run(p.String(), func(t *testing.T) {
			l := newLimiter(t, p)
			s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "api", Limiter: l, Key: grpclimit.Method, Cost: cost}}), setup{})
			trailer, err := s.check()
			got := readRejection(t, err, trailer)
			want := rejection{msg: `rate limit "api" exceeded: the call is larger than the limit allows`,
				quota: "api: the call is larger than the limit allows", pushback: "-1"}
			if got != want {
				t.Errorf("rejection\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestSeveralLimits: a call that one limit rejects takes nothing from the
// others, and the rejection names only the limits that rejected it.
func TestSeveralLimits(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	perMethod := newLimiter(t, sluice.FixedWindow(5, time.Minute), sluice.WithClock(clock))
	perUser := newLimiter(t, sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	s := start(t, newInterceptor(t, []grpclimit.Limit{
		{Name: "method", Limiter: perMethod, Key: grpclimit.Method},
		{Name: "user", Limiter: perUser, Key: grpclimit.Metadata("x-user")},
	}), setup{})
	for i, wantCode := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted} {
		trailer, err := s.check("x-user", "ann")
		if got := status.Code(err); got != wantCode {
			t.Fatalf("call %d: %v, want %v", i, err, wantCode)
		}
		if wantCode == codes.ResourceExhausted {
			if got := readRejection(t, err, trailer).quota; got != "user: retry after 1m0s" {
				t.Errorf("call %d: QuotaFailure %q, want only the user limit's", i, got)
			}
		}
	}
	// Only the two calls that passed took from the method's limit.
	res, err := perMethod.Peek(context.Background(), checkMethod)
	if err != nil || res.Remaining != 2 {
		t.Errorf("method limit: Peek = %+v, %v; want 3 left (Remaining 2 after a probe of 1)", res, err)
	}
	// Another user still has the method's 3.
	for i, wantCode := range []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted} {
		user := []string{"bob", "bob", "cy", "cy"}[i]
		trailer, err := s.check("x-user", user)
		if got := status.Code(err); got != wantCode {
			t.Fatalf("%s: %v, want %v", user, err, wantCode)
		}
		if wantCode == codes.ResourceExhausted {
			if got := readRejection(t, err, trailer).quota; got != "method: retry after 1m0s" {
				t.Errorf("%s: QuotaFailure %q, want only the method limit's", user, got)
			}
		}
	}
	if n := s.calls.Load(); n != 5 {
		t.Errorf("%d calls reached the service, want 5", n)
	}
}

// TestMatch: a limit applies only to the methods it matches.
func TestMatch(t *testing.T) {
	l := newLimiter(t, sluice.FixedWindow(1, time.Minute))
	s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "watch", Limiter: l, Key: grpclimit.Method,
		Match: func(m string) bool { return m == watchMethod }}}), setup{})
	for i := range 3 {
		if _, err := s.check(); err != nil {
			t.Errorf("Check %d: %v, want OK: the limit is on Watch only", i, err)
		}
	}
	if res, err := l.Peek(context.Background(), watchMethod); err != nil || !res.Allowed {
		t.Errorf("Watch's limit: Peek = %+v, %v; want it untouched", res, err)
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

// TestCallErrors: key, cost and match functions that fail or panic, and
// bad costs, answer INVALID_ARGUMENT or INTERNAL without calling the
// service, are logged, and say nothing of why to the client.
func TestCallErrors(t *testing.T) {
	fails := func(context.Context, grpclimit.Call) (string, error) { return "", errors.New("no database") }
	panics := func(context.Context, grpclimit.Call) (string, error) { panic("key boom") }
	cost := func(n int64) grpclimit.CostFunc {
		return func(context.Context, grpclimit.Call) (int64, error) { return n, nil }
	}
	for _, tt := range []struct {
		name     string
		key      grpclimit.KeyFunc
		cost     grpclimit.CostFunc
		match    func(string) bool
		wantCode codes.Code
		wantLog  string
	}{
		{"missing metadata", grpclimit.Metadata("X-API-Key"), nil, nil, codes.InvalidArgument, "metadata x-api-key is missing"},
		{"missing context value", grpclimit.ContextValue(stringer("user")), nil, nil, codes.InvalidArgument, "no context value for user"},
		{"key error", fails, nil, nil, codes.Internal, "no database"},
		{"key panic", panics, nil, nil, codes.Internal, "key boom"},
		{"zero cost", grpclimit.Method, cost(0), nil, codes.Internal, "cost must be positive, got 0"},
		{"negative cost", grpclimit.Method, cost(-3), nil, codes.Internal, "cost must be positive, got -3"},
		{"cost error", grpclimit.Method, func(context.Context, grpclimit.Call) (int64, error) { return 0, errors.New("bad batch") }, nil, codes.Internal, "bad batch"},
		{"cost panic", grpclimit.Method, func(context.Context, grpclimit.Call) (int64, error) { panic("cost boom") }, nil, codes.Internal, "cost boom"},
		{"match panic", grpclimit.Method, nil, func(string) bool { panic("match boom") }, codes.Internal, "match boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			l := newLimiter(t, sluice.FixedWindow(5, time.Minute))
			in := newInterceptor(t, []grpclimit.Limit{{Name: "api", Limiter: l, Key: tt.key, Cost: tt.cost, Match: tt.match}},
				grpclimit.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			s := start(t, in, setup{})
			trailer, err := s.check()
			if got := status.Code(err); got != tt.wantCode {
				t.Errorf("call: %v, want %v", err, tt.wantCode)
			}
			if n := s.calls.Load(); n != 0 {
				t.Errorf("%d calls reached the service", n)
			}
			if !strings.Contains(log.String(), tt.wantLog) {
				t.Errorf("log %q does not contain %q", log.String(), tt.wantLog)
			}
			if msg := status.Convert(err).Message(); strings.Contains(msg, tt.wantLog) {
				t.Errorf("the client was told why: %q", msg)
			}
			if v := trailer.Get("grpc-retry-pushback-ms"); v != nil {
				t.Errorf("pushback %q, want none", v)
			}
		})
	}
}

// failingStore is a store that is down.
type failingStore struct{}

func (failingStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return fmt.Errorf("failingStore: %w", driver.ErrUnavailable)
}

func TestStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		failure  sluice.StoreFailure
		opts     []grpclimit.Option
		wantCode []codes.Code // of two calls, with a limit of 1
	}{
		{sluice.FailClosed, nil, []codes.Code{codes.Unavailable, codes.Unavailable}},
		{sluice.FailClosed, []grpclimit.Option{grpclimit.WithErrorCode(codes.Internal)}, []codes.Code{codes.Internal, codes.Internal}},
		{sluice.FailOpen, nil, []codes.Code{codes.OK, codes.OK}},
		{sluice.FailLocal, nil, []codes.Code{codes.OK, codes.ResourceExhausted}},
	} {
		t.Run(fmt.Sprint(tt.failure, tt.wantCode), func(t *testing.T) {
			l := newLimiter(t, sluice.FixedWindow(1, time.Minute), sluice.WithStore(failingStore{}), sluice.WithStoreFailure(tt.failure))
			opts := append([]grpclimit.Option{grpclimit.WithLogger(slog.New(slog.DiscardHandler))}, tt.opts...)
			s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "api", Limiter: l, Key: grpclimit.Method}}, opts...), setup{})
			for i, want := range tt.wantCode {
				if _, err := s.check(); status.Code(err) != want {
					t.Errorf("call %d: %v, want %v", i, err, want)
				}
			}
		})
	}
}

// retryConfig makes a client retry the health service's calls on
// RESOURCE_EXHAUSTED, with a backoff of 1ms when the server sends no
// pushback.
const retryConfig = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "retryPolicy": {
	"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
	"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// TestClientRetryObeysPushback: a gRPC client whose retry policy covers
// RESOURCE_EXHAUSTED waits the pushback before it retries, and does not
// retry a call that can never pass.
func TestClientRetryObeysPushback(t *testing.T) {
	t.Run("wait", func(t *testing.T) {
		const wait = 150 * time.Millisecond
		clock := sluicetest.NewFakeClock(t0)
		l := newLimiter(t, sluice.FixedWindow(1, wait), sluice.WithClock(clock))
		var mu sync.Mutex
		var attempts []time.Time
		// The attempt after a rejection finds the window over: the fake
		// clock moves on by the wait, whatever real time passed.
		before := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			mu.Lock()
			attempts = append(attempts, time.Now())
			if len(attempts) == 3 {
				clock.Advance(wait)
			}
			mu.Unlock()
			return handler(ctx, req)
		}
		s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "api", Limiter: l, Key: grpclimit.Method}}),
			setup{before: before, dial: []grpc.DialOption{grpc.WithDefaultServiceConfig(retryConfig)}})
		if _, err := s.check(); err != nil {
			t.Fatalf("first call: %v", err)
		}
		if _, err := s.check(); err != nil {
			t.Fatalf("second call: %v, want OK after a retry", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 3 {
			t.Fatalf("%d attempts reached the server, want 3: one call, then a rejection and its retry", len(attempts))
		}
		// A lower bound only: without the pushback the retry would come
		// after the policy's 1ms backoff.
		if gap := attempts[2].Sub(attempts[1]); gap < wait {
			t.Errorf("the client retried %v after the rejection, want at least the pushback %v", gap, wait)
		}
	})
	t.Run("never", func(t *testing.T) {
		l := newLimiter(t, sluice.SlidingWindow(3, time.Second))
		cost := func(context.Context, grpclimit.Call) (int64, error) { return 4, nil }
		var attempts atomic.Int64
		before := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			attempts.Add(1)
			return handler(ctx, req)
		}
		s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "api", Limiter: l, Key: grpclimit.Method, Cost: cost}}),
			setup{before: before, dial: []grpc.DialOption{grpc.WithDefaultServiceConfig(retryConfig)}})
		if _, err := s.check(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call: %v, want RESOURCE_EXHAUSTED", err)
		}
		if n := attempts.Load(); n != 1 {
			t.Errorf("%d attempts reached the server, want 1: a pushback of -1 stops retries", n)
		}
	})
}

func TestNewErrors(t *testing.T) {
	l := newLimiter(t, sluice.NoLimit())
	ok := []grpclimit.Limit{{Name: "a", Limiter: l, Key: grpclimit.Method}}
	for _, tt := range []struct {
		name      string
		limits    []grpclimit.Limit
		opts      []grpclimit.Option
		wantField string
	}{
		{"no limits", nil, nil, "limits"},
		{"no name", []grpclimit.Limit{{Limiter: l, Key: grpclimit.Method}}, nil, "limits[0].Name"},
		{"bad name", []grpclimit.Limit{{Name: "a\nb", Limiter: l, Key: grpclimit.Method}}, nil, "limits[0].Name"},
		{"same name", []grpclimit.Limit{{Name: "a", Limiter: l, Key: grpclimit.Method}, {Name: "a", Limiter: l, Key: grpclimit.Method}}, nil, "limits[1].Name"},
		{"no limiter", []grpclimit.Limit{{Name: "a", Key: grpclimit.Method}}, nil, "limits[0].Limiter"},
		{"no key", []grpclimit.Limit{{Name: "a", Limiter: l}}, nil, "limits[0].Key"},
		{"error code OK", ok, []grpclimit.Option{grpclimit.WithErrorCode(codes.OK)}, "WithErrorCode"},
		{"error code unknown", ok, []grpclimit.Option{grpclimit.WithErrorCode(17)}, "WithErrorCode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := grpclimit.New(tt.limits, tt.opts...)
			var ce *grpclimit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.wantField {
				t.Errorf("New: %v, want a *ConfigError of %s", err, tt.wantField)
			}
		})
	}
}
