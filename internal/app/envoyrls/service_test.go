package envoyrls_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// start is a fixed point in time for the fake clocks.
var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// edge is the example of docs/envoy.md.
const edge = `
envoy:
  - domain: edge
    descriptors:
      - key: remote_address
        limiter: per_ip
      - key: path
        value: /login
        limiter: login
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 5}
      - key: path
        value: /api/*
        limiter: per_api
      - key: path
        limiter: per_path
      - key: generic_key
        value: health
        unlimited: true
      - key: tenant
        shadow_mode: true
        limiter: per_tenant
`

// fixture is a Service on a real gRPC server on a loopback port, with a
// client from go-control-plane's generated stubs.
type fixture struct {
	clock    *sluicetest.FakeClock
	client   rlsv3.RateLimitServiceClient
	svc      *envoyrls.Service
	limiters map[string]*sluice.Limiter

	mu        sync.Mutex
	decisions []envoyrls.Decision
}

// wall is the fixture's clock as the wall clock of the windows.
func (f *fixture) wall() time.Time { return time.Unix(0, f.clock.Now()) }

// newFixture decodes the envoy: section of doc with the settings of set
// (nil: the defaults), makes the limiters of policies on a fake clock, and
// serves them.
func newFixture(t *testing.T, doc string, policies map[string]sluice.Policy, set *envoyrls.Settings, opts ...envoyrls.Option) *fixture {
	t.Helper()
	f := &fixture{clock: sluicetest.NewFakeClock(start)}
	d, limiters := f.config(t, doc, policies, set)
	f.limiters = limiters
	opts = append([]envoyrls.Option{envoyrls.WithObserver(f.observe), envoyrls.WithClock(f.wall)}, opts...)
	f.svc = envoyrls.New(d, lookup(limiters), opts...)
	f.client = serve(t, f.svc)
	return f
}

// config decodes doc with set and makes the limiters of policies, with
// opts, on f's clock.
func (f *fixture) config(t testing.TB, doc string, policies map[string]sluice.Policy, set *envoyrls.Settings, opts ...sluice.Option) (*envoyrls.Domains, map[string]*sluice.Limiter) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	section, err := envoyrls.Decode("envoy", root.Content[0].Content[1], func(name string) bool { return policies[name] != nil })
	if err != nil {
		t.Fatal(err)
	}
	settings := envoyrls.DefaultSettings()
	if set != nil {
		settings = *set
	}
	d, err := envoyrls.Load(section, settings)
	if err != nil {
		t.Fatal(err)
	}
	limiters := make(map[string]*sluice.Limiter)
	for name, p := range policies {
		l, err := sluice.NewLimiter(p, append([]sluice.Option{sluice.WithClock(f.clock)}, opts...)...)
		if err != nil {
			t.Fatalf("NewLimiter(%s): %v", name, err)
		}
		limiters[name] = l
	}
	return d, limiters
}

func lookup(limiters map[string]*sluice.Limiter) envoyrls.Lookup {
	return func(name string) (*sluice.Limiter, bool) {
		l, ok := limiters[name]
		return l, ok
	}
}

func (f *fixture) observe(d envoyrls.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decisions = append(f.decisions, d)
}

// takeDecisions returns the decisions since the last call.
func (f *fixture) takeDecisions() []envoyrls.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.decisions
	f.decisions = nil
	return d
}

// serve registers svc on a gRPC server on a free loopback port and returns
// a client of it.
func serve(t *testing.T, svc *envoyrls.Service) rlsv3.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// desc makes a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets a descriptor's hits_addend.
func hits(n uint64, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func req(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// call sends r and returns the overall code and the statuses shown.
func (f *fixture) call(t *testing.T, r *rlsv3.RateLimitRequest) (string, []string, *rlsv3.RateLimitResponse) {
	t.Helper()
	resp, err := f.client.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	var got []string
	for _, s := range resp.GetStatuses() {
		got = append(got, show(s))
	}
	return resp.GetOverallCode().String(), got, resp
}

// show writes a descriptor status as "CODE limit remaining=N reset=D".
func show(s *rlsv3.RateLimitResponse_DescriptorStatus) string {
	var b strings.Builder
	b.WriteString(s.GetCode().String())
	if l := s.GetCurrentLimit(); l != nil {
		fmt.Fprintf(&b, " %d/", l.GetRequestsPerUnit())
		if m := l.GetUnitMultiplier(); m != nil {
			fmt.Fprintf(&b, "%dx", m.GetValue())
		}
		fmt.Fprintf(&b, "%s(%s)", l.GetUnit(), l.GetName())
	}
	fmt.Fprintf(&b, " remaining=%d", s.GetLimitRemaining())
	if d := s.GetDurationUntilReset(); d != nil {
		fmt.Fprintf(&b, " reset=%v", d.AsDuration())
	}
	return b.String()
}

func headers(resp *rlsv3.RateLimitResponse) string {
	var hs []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		hs = append(hs, h.GetKey()+": "+h.GetValue())
	}
	return strings.Join(hs, ", ")
}

func check(t *testing.T, what, gotCode, wantCode string, got, want []string) {
	t.Helper()
	if gotCode != wantCode {
		t.Errorf("%s: overall_code = %s, want %s", what, gotCode, wantCode)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: statuses =\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func edgePolicies() map[string]sluice.Policy {
	return map[string]sluice.Policy{
		"per_ip":     sluice.FixedWindow(2, time.Minute),
		"login":      sluice.FixedWindow(3, time.Minute),
		"per_api":    sluice.FixedWindow(100, time.Hour),
		"per_path":   sluice.SlidingWindow(100, time.Hour),
		"per_tenant": sluice.FixedWindow(1, time.Minute),
	}
}

// TestShouldRateLimit runs the example config through a window: statuses in
// request order, OVER_LIMIT overall when one descriptor is, and every
// descriptor counted even when another is over its limit. A rate_limit
// counts as envoyproxy/ratelimit does, its rejected hits included.
func TestShouldRateLimit(t *testing.T) {
	f := newFixture(t, edge, edgePolicies(), nil)
	r := req("edge",
		desc("remote_address", "1.2.3.4"),
		desc("path", "/login"),
		desc("path", "/login", "user", "bob"),
		desc("generic_key", "health"),
		desc("unknown", "x"),
	)
	code, got, resp := f.call(t, r)
	check(t, "first", code, "OK", got, []string{
		"OK 2/MINUTE(per_ip) remaining=1 reset=1m0s",
		"OK 3/MINUTE(login) remaining=2 reset=1m0s",
		"OK 5/MINUTE() remaining=4 reset=1m0s",
		"OK remaining=4294967295",
		"OK remaining=0",
	})
	if h := headers(resp); h != "" {
		t.Errorf("first: response headers %q without LIMIT_RESPONSE_HEADERS_ENABLED, want none", h)
	}

	f.clock.Advance(10 * time.Second)
	code, got, _ = f.call(t, r)
	check(t, "second", code, "OK", got, []string{
		"OK 2/MINUTE(per_ip) remaining=0 reset=50s",
		"OK 3/MINUTE(login) remaining=1 reset=50s",
		"OK 5/MINUTE() remaining=3 reset=50s",
		"OK remaining=4294967295",
		"OK remaining=0",
	})

	code, got, _ = f.call(t, r)
	check(t, "third", code, "OVER_LIMIT", got, []string{
		"OVER_LIMIT 2/MINUTE(per_ip) remaining=0 reset=50s",
		"OK 3/MINUTE(login) remaining=0 reset=50s",
		"OK 5/MINUTE() remaining=2 reset=50s",
		"OK remaining=4294967295",
		"OK remaining=0",
	})

	code, got, _ = f.call(t, r)
	check(t, "fourth", code, "OVER_LIMIT", got, []string{
		"OVER_LIMIT 2/MINUTE(per_ip) remaining=0 reset=50s",
		"OVER_LIMIT 3/MINUTE(login) remaining=0 reset=50s",
		"OK 5/MINUTE() remaining=1 reset=50s", // counted though others are over
		"OK remaining=4294967295",
		"OK remaining=0",
	})

	f.clock.Advance(50 * time.Second) // the windows end
	code, got, _ = f.call(t, req("edge", desc("remote_address", "1.2.3.4"), desc("remote_address", "5.6.7.8")))
	check(t, "next window", code, "OK", got, []string{
		"OK 2/MINUTE(per_ip) remaining=1 reset=1m0s",
		"OK 2/MINUTE(per_ip) remaining=1 reset=1m0s",
	})

	// Decisions: one per descriptor a limiter decides, with its key.
	ds := f.takeDecisions()
	if len(ds) != 4*2+2 {
		t.Fatalf("%d decisions, want 10", len(ds))
	}
	for i, want := range []string{"edge|remote_address=1.2.3.4", "edge|path=/login"} {
		if ds[i].Key != want || ds[i].Hits != 1 {
			t.Errorf("decision %d: key %q hits %d, want %q hits 1", i, ds[i].Key, ds[i].Hits, want)
		}
	}
}

// TestCounting: a rate_limit counts every hit in its window, rejected ones
// included, so a window once over stays over, a check of 0 hits on it is
// over, and a request for more than the limit at once uses the window up.
func TestCounting(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: k, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: zero, rate_limit: {unit: second, requests_per_unit: 0}}
`, nil, nil)
	steps := []struct {
		r    *rlsv3.RateLimitRequest
		want string
	}{
		{req("d", hits(2, desc("k", "a"))), "OK 3/MINUTE() remaining=1 reset=1m0s"},
		{req("d", hits(2, desc("k", "a"))), "OVER_LIMIT 3/MINUTE() remaining=0 reset=1m0s"},
		{req("d", hits(0, desc("k", "a"))), "OVER_LIMIT 3/MINUTE() remaining=0 reset=1m0s"},
		{req("d", hits(5, desc("k", "b"))), "OVER_LIMIT 3/MINUTE() remaining=0 reset=1m0s"},
		{req("d", desc("k", "b")), "OVER_LIMIT 3/MINUTE() remaining=0 reset=1m0s"},
		{req("d", hits(0, desc("k", "c"))), "OK 3/MINUTE() remaining=3 reset=1m0s"},
		{req("d", desc("zero", "x")), "OVER_LIMIT 0/SECOND() remaining=0 reset=1s"},
	}
	for i, st := range steps {
		_, got, _ := f.call(t, st.r)
		if got[0] != st.want {
			t.Errorf("step %d: status %q, want %q", i, got[0], st.want)
		}
	}
	if ds := f.takeDecisions(); len(ds) != 0 {
		t.Errorf("decisions %+v for rate_limit descriptors, want none: no limiter decides them", ds)
	}
	f.clock.Advance(time.Minute)
	if _, got, _ := f.call(t, req("d", desc("k", "a"))); got[0] != "OK 3/MINUTE() remaining=2 reset=1m0s" {
		t.Errorf("next window: status %q, want a fresh window", got[0])
	}
}

// TestUnitMultiplier: a rate_limit with unit_multiplier 5 and unit second
// counts in 5-second windows aligned on multiples of 5 seconds since the
// epoch (start is one): 10 pass, the 11th does not, and the window stays
// over to its end, when the next one opens. current_limit carries the
// multiplier, and duration_until_reset counts to the 5-second window's
// end, also from the local cache of windows over their limit.
func TestUnitMultiplier(t *testing.T) {
	const doc = `
envoy:
  - domain: d
    descriptors:
      - {key: k, rate_limit: {unit: second, requests_per_unit: 10, unit_multiplier: 5}}
`
	cached := envoyrls.DefaultSettings()
	cached.LocalCacheSizeInBytes = 1 << 20
	for _, tc := range []struct {
		name string
		set  *envoyrls.Settings
	}{
		{"store", nil},
		{"local cache", &cached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, doc, nil, tc.set)
			ok := func(remaining int) string {
				return fmt.Sprintf("OK 10/5xSECOND() remaining=%d reset=5s", remaining)
			}
			for i := range 10 {
				if _, got, _ := f.call(t, req("d", desc("k", "a"))); got[0] != ok(9-i) {
					t.Errorf("hit %d: status %q, want %q", i+1, got[0], ok(9-i))
				}
			}
			steps := []struct {
				advance time.Duration
				code    string
				want    string
			}{
				{0, "OVER_LIMIT", "OVER_LIMIT 10/5xSECOND() remaining=0 reset=5s"},
				{4 * time.Second, "OVER_LIMIT", "OVER_LIMIT 10/5xSECOND() remaining=0 reset=1s"},
				{time.Second, "OK", ok(9)}, // the next window
			}
			for i, st := range steps {
				f.clock.Advance(st.advance)
				code, got, _ := f.call(t, req("d", desc("k", "a")))
				check(t, fmt.Sprintf("step %d", i), code, st.code, got, []string{st.want})
			}
		})
	}
}

// TestLateCall: a call whose clock read falls in a window before the one
// the store already counts (it read the clock and then waited for the
// store behind other calls, or its process's clock is a little behind) is
// counted in the stored window. Opening its own window afresh would throw
// the later window's count away, and the next call on time would open that
// afresh too: under contention, many times the limit got through.
func TestLateCall(t *testing.T) {
	var mu sync.Mutex
	at := time.Unix(0, start).Add(time.Second)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: k, rate_limit: {unit: second, requests_per_unit: 2}}
`, nil, nil, envoyrls.WithClock(clock))
	steps := []struct {
		at   time.Duration // from start
		hits uint64
		want string
	}{
		{time.Second, 1, "OK 2/SECOND() remaining=1 reset=1s"},
		{time.Second, 1, "OK 2/SECOND() remaining=0 reset=1s"},
		{0, 1, "OVER_LIMIT 2/SECOND() remaining=0 reset=1s"}, // late
		{0, 0, "OVER_LIMIT 2/SECOND() remaining=0 reset=1s"}, // late, and only reads
		{time.Second, 1, "OVER_LIMIT 2/SECOND() remaining=0 reset=1s"},
		{2 * time.Second, 1, "OK 2/SECOND() remaining=1 reset=1s"}, // the next window
	}
	for i, st := range steps {
		mu.Lock()
		at = time.Unix(0, start).Add(st.at)
		mu.Unlock()
		if _, got, _ := f.call(t, req("d", hits(st.hits, desc("k", "a")))); got[0] != st.want {
			t.Errorf("step %d (at start+%v): status %q, want %q", i, st.at, got[0], st.want)
		}
	}
}

// TestConcurrentCounting: calls on one key at once are counted as if one
// after the other, however they are batched: exactly the limit is
// allowed, and each allowed call sees its own remaining count. memstore
// is counted call by call; a store that takes its time, as one across the
// network does, gets batches.
func TestConcurrentCounting(t *testing.T) {
	const limit, callers, calls = 100, 40, 5
	for _, tc := range []struct {
		name  string
		store driver.Store
	}{
		{"memstore", memstore.New()},
		{"slow store", slowStore{memstore.New()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fmt.Sprintf(`
envoy:
  - domain: d
    descriptors:
      - {key: k, rate_limit: {unit: minute, requests_per_unit: %d}}
`, limit), nil, nil, envoyrls.WithStore(tc.store))
			var mu sync.Mutex
			remaining := map[uint32]int{}
			over := 0
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range calls {
						resp, err := f.client.ShouldRateLimit(context.Background(), req("d", desc("k", "hot")))
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if st := resp.GetStatuses()[0]; st.GetCode() == rlsv3.RateLimitResponse_OK {
							remaining[st.GetLimitRemaining()]++
						} else {
							over++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(remaining) != limit || over != callers*calls-limit {
				t.Errorf("%d distinct remaining counts among the allowed, %d over the limit; want %d and %d", len(remaining), over, limit, callers*calls-limit)
			}
			for r, n := range remaining {
				if n != 1 || r >= limit {
					t.Errorf("remaining %d seen %d times", r, n)
				}
			}
		})
	}
}

// slowStore is a memstore that takes 200µs an update, long enough for
// calls to queue behind one.
type slowStore struct{ *memstore.Store }

func (s slowStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	time.Sleep(200 * time.Microsecond)
	return s.Store.Update(ctx, key, fn)
}

// TestHitsAddend: the request's hits_addend (0 meaning 1), overridden by a
// descriptor's, and a descriptor's 0 that checks without taking, for a
// descriptor that a sluice limiter decides.
func TestHitsAddend(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: l}
`, map[string]sluice.Policy{"l": sluice.FixedWindow(10, time.Minute)}, nil)
	tests := []struct {
		name     string
		r        *rlsv3.RateLimitRequest
		code     string
		statuses []string
		hits     []int64
	}{
		{"unset is one", req("d", desc("k", "a")), "OK",
			[]string{"OK 10/MINUTE(l) remaining=9 reset=1m0s"}, []int64{1}},
		{"request level", &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("k", "a"), hits(1, desc("k", "b"))}}, "OK",
			[]string{"OK 10/MINUTE(l) remaining=6 reset=1m0s", "OK 10/MINUTE(l) remaining=9 reset=1m0s"}, []int64{3, 1}},
		{"descriptor level zero takes nothing", &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			hits(0, desc("k", "a"))}}, "OK",
			[]string{"OK 10/MINUTE(l) remaining=6 reset=1m0s"}, []int64{0}},
		{"descriptor level", req("d", hits(6, desc("k", "a"))), "OK",
			[]string{"OK 10/MINUTE(l) remaining=0 reset=1m0s"}, []int64{6}},
		{"zero on a full key is not over", req("d", hits(0, desc("k", "a"))), "OK",
			[]string{"OK 10/MINUTE(l) remaining=0 reset=1m0s"}, []int64{0}},
		{"more than the limit is over, not an error", req("d", hits(11, desc("k", "b"))), "OVER_LIMIT",
			[]string{"OVER_LIMIT 10/MINUTE(l) remaining=0 reset=1m0s"}, []int64{11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, got, _ := f.call(t, tt.r)
			check(t, tt.name, code, tt.code, got, tt.statuses)
			var gotHits []int64
			for _, d := range f.takeDecisions() {
				gotHits = append(gotHits, d.Hits)
			}
			if fmt.Sprint(gotHits) != fmt.Sprint(tt.hits) {
				t.Errorf("decided hits %v, want %v", gotHits, tt.hits)
			}
		})
	}
}

// TestShadowMode: a descriptor in shadow mode is decided and reported, but
// never makes the answer OVER_LIMIT.
func TestShadowMode(t *testing.T) {
	f := newFixture(t, edge, edgePolicies(), nil)
	r := req("edge", desc("tenant", "acme"))
	f.call(t, r)
	code, got, _ := f.call(t, r)
	check(t, "shadow over limit", code, "OK", got, []string{"OK 1/MINUTE(per_tenant) remaining=0 reset=1m0s"})
	ds := f.takeDecisions()
	if last := ds[len(ds)-1]; last.Result.Allowed || !last.Shadow || last.Limiter != "per_tenant" {
		t.Errorf("decision = %+v, want a rejection in shadow mode by per_tenant", last)
	}

	// Beside an enforced descriptor that is over, the answer is over.
	f.call(t, req("edge", hits(2, desc("remote_address", "1.2.3.4"))))
	code, got, _ = f.call(t, req("edge", desc("tenant", "acme"), desc("remote_address", "1.2.3.4")))
	check(t, "with an enforced one", code, "OVER_LIMIT", got, []string{
		"OK 1/MINUTE(per_tenant) remaining=0 reset=1m0s",
		"OVER_LIMIT 2/MINUTE(per_ip) remaining=0 reset=1m0s",
	})
}

// TestOtherPolicies: a token bucket and a sliding window back descriptors;
// every status equals the Result of a twin limiter of the same policy on
// the same clock, fed the same calls, and the observer's Result, the
// limiter's own.
func TestOtherPolicies(t *testing.T) {
	policies := map[string]sluice.Policy{
		"bucket":  sluice.TokenBucket(5, 1, 10*time.Second),
		"sliding": sluice.SlidingWindow(4, 15*time.Minute),
		"gcra":    sluice.GCRA(3, 1, 2*time.Second),
	}
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: bucket, limiter: bucket}
      - {key: sliding, limiter: sliding}
      - {key: gcra, limiter: gcra}
`, policies, nil)
	twins := make(map[string]*sluice.Limiter)
	for name, p := range policies {
		l, err := sluice.NewLimiter(p, sluice.WithClock(f.clock))
		if err != nil {
			t.Fatal(err)
		}
		twins[name] = l
	}
	units := map[string]string{"bucket": "UNKNOWN", "sliding": "15xMINUTE", "gcra": "UNKNOWN"}
	steps := []struct {
		advance time.Duration
		hits    uint32
	}{{0, 2}, {0, 2}, {time.Second, 2}, {0, 1}, {3 * time.Second, 1}, {7 * time.Second, 3}, {5 * time.Minute, 1}, {0, 3}, {20 * time.Minute, 1}}
	ctx := context.Background()
	for i, st := range steps {
		f.clock.Advance(st.advance)
		for _, name := range []string{"bucket", "sliding", "gcra"} {
			want, err := twins[name].AllowN(ctx, "d|"+name+"=k", int64(st.hits))
			if err != nil {
				t.Fatalf("step %d: twin %s: %v", i, name, err)
			}
			_, got, _ := f.call(t, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: st.hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(name, "k")}})
			code, reset, remaining := "OK", want.ResetAfter, want.Remaining
			if !want.Allowed {
				code, reset, remaining = "OVER_LIMIT", want.RetryAfter, 0
			}
			wantStatus := fmt.Sprintf("%s %d/%s(%s) remaining=%d reset=%v", code, want.Limit, units[name], name, remaining, reset)
			if got[0] != wantStatus {
				t.Errorf("step %d %s: status %q, want %q (twin %+v)", i, name, got[0], wantStatus, want)
			}
			ds := f.takeDecisions()
			if len(ds) != 1 || ds[0].Result != want {
				t.Errorf("step %d %s: decisions %+v, want the twin's result %+v", i, name, ds, want)
			}
		}
	}
}

// TestSwap replaces the config while requests run: every answer comes
// from one config or the other, a call in flight finishes on the config
// it started with, and calls after Swap see the new one.
func TestSwap(t *testing.T) {
	const docA = `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: a}
`
	const docB = `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: b}
`
	policiesA := map[string]sluice.Policy{"a": sluice.FixedWindow(1<<40, time.Hour)}
	f := newFixture(t, docA, policiesA, nil)
	dA, limA := f.config(t, docA, policiesA, nil)
	dB, limB := f.config(t, docB, map[string]sluice.Policy{"b": sluice.SlidingWindow(1<<40, time.Hour)}, nil)

	// In flight: the lookup of config A blocks until B is in place.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.svc.Swap(dA, func(name string) (*sluice.Limiter, bool) {
		once.Do(func() { close(entered); <-release })
		l, ok := limA[name]
		return l, ok
	})
	done := make(chan string)
	go func() {
		resp, err := f.client.ShouldRateLimit(context.Background(), req("d", desc("k", "v")))
		if err != nil {
			done <- err.Error()
			return
		}
		done <- resp.GetStatuses()[0].GetCurrentLimit().GetName()
	}()
	<-entered
	f.svc.Swap(dB, lookup(limB))
	close(release)
	if got := <-done; got != "a" {
		t.Errorf("call in flight across Swap decided by %q, want a", got)
	}
	if _, _, resp := f.call(t, req("d", desc("k", "v"))); resp.GetStatuses()[0].GetCurrentLimit().GetName() != "b" {
		t.Errorf("call after Swap decided by %q, want b", resp.GetStatuses()[0].GetCurrentLimit().GetName())
	}

	// Under traffic: swap until the callers have had 400 answers, each
	// of which must come from A or B.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var answered atomic.Int64
	seen := [2]atomic.Bool{}
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := f.client.ShouldRateLimit(ctx, req("d", desc("k", "v")))
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- err.Error()
					return
				}
				switch n := resp.GetStatuses()[0].GetCurrentLimit().GetName(); {
				case resp.GetOverallCode() != rlsv3.RateLimitResponse_OK:
					errs <- fmt.Sprintf("answer %v", resp)
					return
				case n == "a":
					seen[0].Store(true)
				case n == "b":
					seen[1].Store(true)
				default:
					errs <- fmt.Sprintf("answer from limiter %q", n)
					return
				}
				answered.Add(1)
			}
		})
	}
	for i := 0; answered.Load() < 400 && len(errs) == 0; i++ {
		if i%2 == 0 {
			f.svc.Swap(dA, lookup(limA))
		} else {
			f.svc.Swap(dB, lookup(limB))
		}
		runtime.Gosched()
	}
	cancel()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("during Swap: %s", e)
	}
	if !seen[0].Load() || !seen[1].Load() {
		t.Errorf("answers from A %v, from B %v; want both", seen[0].Load(), seen[1].Load())
	}
}

// downStore is a store that cannot be reached: fault injection for the
// failure path, which a real store cannot be made to take on demand.
type downStore struct{}

func (downStore) Update(context.Context, string, driver.UpdateFunc) error {
	return fmt.Errorf("down: %w", driver.ErrUnavailable)
}

// TestStoreFailure: a limiter that fails closed, or a rate_limit on a
// store that fails with the default policy, makes the call Unavailable,
// so that Envoy applies its failure_mode_deny, after the descriptors
// before it were counted; failing open answers OK, and failing locally
// counts in memory.
func TestStoreFailure(t *testing.T) {
	const doc = `
envoy:
  - domain: d
    descriptors:
      - {key: closed, limiter: closed}
      - {key: open, limiter: open}
      - {key: mem, limiter: mem}
      - {key: window, rate_limit: {unit: minute, requests_per_unit: 2}}
`
	policies := map[string]sluice.Policy{"mem": sluice.FixedWindow(5, time.Minute), "closed": sluice.NoLimit(), "open": sluice.NoLimit()}
	f := newFixture(t, doc, policies, nil, envoyrls.WithStore(downStore{}))
	for name, failure := range map[string]sluice.StoreFailure{"closed": sluice.FailClosed, "open": sluice.FailOpen} {
		l, err := sluice.NewLimiter(sluice.FixedWindow(5, time.Minute), sluice.WithClock(f.clock),
			sluice.WithStore(downStore{}), sluice.WithStoreFailure(failure))
		if err != nil {
			t.Fatal(err)
		}
		f.limiters[name] = l
	}
	_, err := f.client.ShouldRateLimit(context.Background(), req("d", desc("mem", "x"), desc("closed", "x")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("fail closed: error %v, want code Unavailable", err)
	}
	ds := f.takeDecisions()
	var se *sluice.StoreError
	if len(ds) != 2 || !errors.As(ds[1].Err, &se) || !errors.Is(ds[1].Err, driver.ErrUnavailable) {
		t.Errorf("decisions %+v, want the second with a *sluice.StoreError", ds)
	}
	// The descriptor before the failure was counted.
	if r, _ := f.limiters["mem"].PeekN(context.Background(), "d|mem=x", 1); r.Remaining != 3 {
		t.Errorf("mem Peek remaining %d after the failed call, want 3 (one of 5 taken)", r.Remaining)
	}
	code, got, _ := f.call(t, req("d", desc("open", "x")))
	check(t, "fail open", code, "OK", got, []string{"OK 5/MINUTE(open) remaining=0 reset=0s"})

	_, err = f.client.ShouldRateLimit(context.Background(), req("d", desc("window", "x")))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("rate_limit on a store that is down: error %v, want code Unavailable", err)
	}
	for _, tt := range []struct {
		failure sluice.StoreFailure
		want    []string
	}{
		{sluice.FailOpen, []string{"OK 2/MINUTE() remaining=1 reset=1m0s", "OK 2/MINUTE() remaining=1 reset=1m0s"}},
		{sluice.FailLocal, []string{"OK 2/MINUTE() remaining=1 reset=1m0s", "OK 2/MINUTE() remaining=0 reset=1m0s"}},
	} {
		f := newFixture(t, doc, policies, nil, envoyrls.WithStore(downStore{}), envoyrls.WithStoreFailure(tt.failure))
		for i, want := range tt.want {
			if _, got, _ := f.call(t, req("d", desc("window", "x"))); got[0] != want {
				t.Errorf("%v, call %d: status %q, want %q", tt.failure, i, got[0], want)
			}
		}
	}
}

// TestLocalMaxKeys: under FailLocal, the windows counted in this
// process's memory while the store fails are bounded by
// WithLocalMaxKeys, so that a client sending a new value each call during
// an outage cannot grow the memory without bound: with room for one key,
// a second key evicts the first, which then starts afresh. Before, every
// value ever sent during the outage stayed.
func TestLocalMaxKeys(t *testing.T) {
	f := newFixture(t, windowDoc, nil, nil, envoyrls.WithStore(downStore{}), envoyrls.WithStoreFailure(sluice.FailLocal),
		envoyrls.WithLocalMaxKeys(1))
	for i, tt := range []struct{ value, want string }{
		{"x", "OK 2/MINUTE() remaining=1 reset=1m0s"},
		{"x", "OK 2/MINUTE() remaining=0 reset=1m0s"},
		{"y", "OK 2/MINUTE() remaining=1 reset=1m0s"}, // evicts x
		{"x", "OK 2/MINUTE() remaining=1 reset=1m0s"},
	} {
		if _, got, _ := f.call(t, req("d", desc("window", tt.value))); got[0] != tt.want {
			t.Errorf("call %d (%s): status %q, want %q", i, tt.value, got[0], tt.want)
		}
	}
}

// deadlineStore is fault injection that notes the deadline of each
// Update's context (the zero Time for none), then fails at once, or with
// hang, does not answer before the context ends, as a store that hangs.
type deadlineStore struct {
	hang bool
	got  chan time.Time
}

func (s deadlineStore) Update(ctx context.Context, _ string, _ driver.UpdateFunc) error {
	d, _ := ctx.Deadline()
	s.got <- d
	if s.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return fmt.Errorf("test: %w", driver.ErrUnavailable)
}

// windowDoc is one rate_limit window, for the tests of store calls.
const windowDoc = `
envoy:
  - domain: d
    descriptors:
      - {key: window, rate_limit: {unit: minute, requests_per_unit: 2}}
`

// TestStoreTimeout: a rate_limit window's store call has the store
// timeout as its deadline, or the caller's deadline when that comes
// first, and then ends with it. Explicit times, not a measured latency:
// the deadlines are checked against the clock read around each call.
func TestStoreTimeout(t *testing.T) {
	const timeout = time.Hour // the calls end sooner: the store fails at once, or the caller's deadline passes
	for _, tt := range []struct {
		name     string
		deadline time.Duration // 0: none
	}{
		{"no deadline", 0},
		{"a later deadline", 2 * timeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := deadlineStore{got: make(chan time.Time, 1)}
			f := newFixture(t, windowDoc, nil, nil, envoyrls.WithStore(store), envoyrls.WithStoreTimeout(timeout))
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			before := time.Now()
			_, err := f.client.ShouldRateLimit(ctx, req("d", desc("window", "x")))
			after := time.Now()
			if status.Code(err) != codes.Unavailable {
				t.Errorf("ShouldRateLimit on a failing store = %v, want Unavailable", err)
			}
			select {
			case got := <-store.got:
				if got.Before(before.Add(timeout)) || got.After(after.Add(timeout)) {
					t.Errorf("the store's deadline is %v from the call's start, want the store timeout %v from a time within the call (which took %v)",
						got.Sub(before), timeout, after.Sub(before))
				}
			default:
				t.Fatal("the store was not asked")
			}
		})
	}
	t.Run("an earlier deadline", func(t *testing.T) {
		store := deadlineStore{hang: true, got: make(chan time.Time, 1)}
		f := newFixture(t, windowDoc, nil, nil, envoyrls.WithStore(store), envoyrls.WithStoreTimeout(timeout))
		// A deadline that passes before the call reaches the store, on a
		// busy machine, proves nothing: try again with a longer one.
		for d := 50 * time.Millisecond; ; d *= 2 {
			ctx, cancel := context.WithTimeout(t.Context(), d)
			callers, _ := ctx.Deadline()
			before := time.Now()
			_, err := f.client.ShouldRateLimit(ctx, req("d", desc("window", "x")))
			after := time.Now()
			cancel()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("ShouldRateLimit with a deadline of %v on a hanging store = %v, want DeadlineExceeded", d, err)
			}
			select {
			case got := <-store.got:
				// The server's deadline is the caller's, carried as the
				// time left when the call was sent (rounded up to the
				// microsecond), so it may lie past it by the call's
				// transit, which is within the call.
				if got.IsZero() || got.After(callers.Add(after.Sub(before)+time.Millisecond)) {
					t.Errorf("the store's deadline is %v from the call's start, want the caller's %v", got.Sub(before), d)
				}
				return
			default:
			}
			if d > 30*time.Second {
				t.Fatalf("the store was not asked within a deadline of %v", d)
			}
		}
	})
}

// TestShortDeadlineLeads: a call with a short deadline that leads a
// batch on a slow store ends at its deadline, and the call that comes
// for the same window while its batch runs, with time to spare, is
// counted: it does not fail at the other's deadline.
func TestShortDeadlineLeads(t *testing.T) {
	f := newFixture(t, windowDoc, nil, nil, envoyrls.WithStore(roundTrips{memstore.New(), 20 * time.Millisecond}))
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := f.client.ShouldRateLimit(short, req("d", desc("window", "x")))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // the short call's batch is reading
	if code, got, _ := f.call(t, req("d", desc("window", "x"))); code != "OK" {
		t.Errorf("the call with time to spare: %s %v, want OK", code, got)
	}
	if err := <-errc; status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("the call with 30ms: %v, want DeadlineExceeded", err)
	}
}

// roundTrips is a memstore that, as a store across the network, takes a
// round trip to read a state and another to write it, and gives up at its
// context's end.
type roundTrips struct {
	*memstore.Store
	rtt time.Duration
}

func (s roundTrips) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	wait := func() error {
		select {
		case <-time.After(s.rtt):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var cur []byte
	_ = s.Store.Update(ctx, key, func(st []byte) ([]byte, time.Duration, bool) {
		cur = append([]byte(nil), st...)
		return nil, 0, false
	})
	if err := wait(); err != nil {
		return err
	}
	next, ttl, changed := fn(cur)
	if err := wait(); err != nil || !changed {
		return err
	}
	return s.Store.Update(ctx, key, func([]byte) ([]byte, time.Duration, bool) { return next, ttl, true })
}

// allowRequestLimits are the settings that honour a request's limit
// override, as envoyproxy/ratelimit does.
var allowRequestLimits = func() envoyrls.Settings {
	s := envoyrls.DefaultSettings()
	s.AllowRequestLimits = true
	return s
}()

// TestRequestLimitOverride: a descriptor's limit override is ignored
// unless the settings allow it: the config chooses the limit.
func TestRequestLimitOverride(t *testing.T) {
	doc := `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: l}
`
	for _, tt := range []struct {
		name  string
		set   *envoyrls.Settings
		limit uint32
	}{{"default", nil, 5}, {"allowed", &allowRequestLimits, 100}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, doc, map[string]sluice.Policy{"l": sluice.FixedWindow(5, time.Minute)}, tt.set)
			d := desc("k", "v")
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_MINUTE}
			resp, err := f.client.ShouldRateLimit(context.Background(), req("d", d))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != tt.limit {
				t.Errorf("limit of a request overriding it with 100 = %d, want %d", got, tt.limit)
			}
		})
	}
}

// TestRequestLimitCeiling: a request may lower its descriptor's limit,
// or raise it up to the descriptor's ceiling; one that asks for more is
// limited at the ceiling and counted.
func TestRequestLimitCeiling(t *testing.T) {
	doc := `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: l, request_limit_ceiling: {unit: minute, requests_per_unit: 10}}
`
	reg := prometheus.NewRegistry()
	f := newFixture(t, doc, map[string]sluice.Policy{"l": sluice.FixedWindow(5, time.Minute)}, &allowRequestLimits, envoyrls.WithRegistry(reg))
	for _, tt := range []struct {
		name        string
		value       string
		perUnit     uint32
		unit        typev3.RateLimitUnit
		limit, pass uint32
	}{
		{"lower", "a", 3, typev3.RateLimitUnit_MINUTE, 3, 3},
		{"within", "b", 8, typev3.RateLimitUnit_MINUTE, 8, 8},
		{"above", "c", 100, typev3.RateLimitUnit_MINUTE, 10, 10},
		{"above in another unit", "e", 1000, typev3.RateLimitUnit_HOUR, 10, 10}, // 16.7 a minute
		{"within in another unit", "f", 300, typev3.RateLimitUnit_HOUR, 300, 300},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := desc("k", tt.value)
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: tt.perUnit, Unit: tt.unit}
			var passed uint32
			for range tt.pass + 1 {
				resp, err := f.client.ShouldRateLimit(context.Background(), req("d", d))
				if err != nil {
					t.Fatal(err)
				}
				if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != tt.limit {
					t.Fatalf("limit of a request asking for %d = %d, want %d", tt.perUnit, got, tt.limit)
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					passed++
				}
			}
			if passed != tt.pass {
				t.Errorf("%d requests asking for %d passed %d, want %d", tt.pass+1, tt.perUnit, passed, tt.pass)
			}
		})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range mfs {
		if mf.GetName() == "sluice_request_limits_ceiled_total" {
			for _, m := range mf.GetMetric() {
				got += m.GetCounter().GetValue()
			}
		}
	}
	if got != 2*11 {
		t.Errorf("sluice_request_limits_ceiled_total = %v, want 22: the requests above the ceiling", got)
	}
}

// TestInvalidRequest: the requests envoyproxy/ratelimit refuses are
// refused with its codes and messages, and count nothing.
func TestInvalidRequest(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: l}
`, map[string]sluice.Policy{"l": sluice.FixedWindow(5, time.Minute)}, &allowRequestLimits)
	ok := desc("k", "v")
	many := make([]*ratelimitv3.RateLimitDescriptor, envoyrls.MaxDescriptors+1)
	for i := range many {
		many[i] = ok
	}
	noUnit := desc("k", "v")
	noUnit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	override := func(unit typev3.RateLimitUnit, multiplier uint32) *ratelimitv3.RateLimitDescriptor {
		d := desc("k", "v")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: unit, UnitMultiplier: wrapperspb.UInt32(multiplier)}
		return d
	}
	tests := []struct {
		name string
		r    *rlsv3.RateLimitRequest
		code codes.Code
		want string
	}{
		{"no domain", req("", ok), codes.Unknown, "rate limit domain must not be empty"},
		{"no descriptors", req("d"), codes.Unknown, "rate limit descriptor list must not be empty"},
		{"too many descriptors", req("d", many...), codes.InvalidArgument, "at most 64 descriptors"},
		{"huge hits", req("d", ok, hits(math.MaxUint64, desc("k", "v"))), codes.InvalidArgument, "hits_addend must be at most 9223372036854775807"},
		{"override without a unit", req("d", ok, noUnit), codes.InvalidArgument, "descriptor 1: the limit override has no unit"},
		{"override of multiplier 0", req("d", ok, override(typev3.RateLimitUnit_SECOND, 0)), codes.InvalidArgument, "descriptor 1: the limit override's unit_multiplier must be at least 1"},
		{"override of too long a window", req("d", ok, override(typev3.RateLimitUnit_YEAR, math.MaxUint32)), codes.InvalidArgument, "descriptor 1: the limit override's unit_multiplier 4294967295 makes a window of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.client.ShouldRateLimit(context.Background(), tt.r)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %v containing %q", err, tt.code, tt.want)
			}
		})
	}
	// Peek reports what would remain after one more: 4 of 5 is untouched.
	if r, _ := f.limiters["l"].PeekN(context.Background(), "d|k=v", 1); r.Remaining != 4 {
		t.Errorf("Peek remaining %d after invalid requests, want 4: they counted", r.Remaining)
	}
	// As in envoyproxy/ratelimit, a descriptor without entries matches
	// nothing, an empty key is a key, and is_negative_hits is ignored.
	negative := desc("k", "v")
	negative.IsNegativeHits = true
	code, got, _ := f.call(t, req("d", desc(), desc("", "v"), negative))
	check(t, "accepted oddities", code, "OK", got, []string{
		"OK remaining=0", "OK remaining=0", "OK 5/MINUTE(l) remaining=4 reset=1m0s"})
}

// rawCodec sends a []byte as the request, as it is, to send malformed
// protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(_ []byte, _ any) error { return nil }
func (rawCodec) Name() string                    { return "proto" }

// TestMalformedRequest: bytes that are not a RateLimitRequest are the
// caller's error, InvalidArgument, not the server's (Internal, as gRPC's
// codec has it). A valid request still works through an interceptor.
func TestMalformedRequest(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var intercepted atomic.Int64
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		intercepted.Add(1)
		return h(ctx, req)
	}))
	f := &fixture{clock: sluicetest.NewFakeClock(start)}
	d, limiters := f.config(t, "envoy:\n  - domain: d\n    descriptors:\n      - {key: k, limiter: l}\n",
		map[string]sluice.Policy{"l": sluice.FixedWindow(5, time.Minute)}, nil)
	envoyrls.New(d, lookup(limiters), envoyrls.WithClock(f.wall)).Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, bad := range [][]byte{
		{0x0a, 0xff},       // field 1 (domain), length 255 cut short
		{0xff, 0xff, 0xff}, // a varint tag that never ends
		{0x12, 0x02, 0x0a}, // a descriptor cut inside
	} {
		err := conn.Invoke(t.Context(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, bad, new([]byte), grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("ShouldRateLimit(% x) = %v, want InvalidArgument", bad, err)
		}
	}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), req("d", desc("k", "v")))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || intercepted.Load() != 4 {
		t.Errorf("ShouldRateLimit = %v, %v after %d interceptions, want OK after 4", resp, err, intercepted.Load())
	}
}

// TestKeys: separators inside keys and values are escaped, so different
// descriptors never share a key.
func TestKeys(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: "a|b"
    descriptors:
      - key: a
        limiter: l
        descriptors:
          - {key: c, limiter: l}
`, map[string]sluice.Policy{"l": sluice.FixedWindow(5, time.Minute)}, nil)
	f.call(t, req("a|b", desc("a", "b|c=d"), desc("a", "b", "c", "d"), desc("a", "100%")))
	var keys []string
	for _, d := range f.takeDecisions() {
		keys = append(keys, d.Key)
	}
	want := []string{"a%7Cb|a=b%7Cc%3Dd", "a%7Cb|a=b|c=d", "a%7Cb|a=100%25"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("keys %q, want %q", keys, want)
	}

	// Long values are decided on keys of MaxKeyLen bytes that differ.
	long := strings.Repeat("x", 1000)
	code, got, _ := f.call(t, req("a|b", desc("a", long+"1"), desc("a", long+"2"), desc("a", long+"1")))
	check(t, "long keys", code, "OK", got, []string{
		"OK 5/MINUTE(l) remaining=4 reset=1m0s",
		"OK 5/MINUTE(l) remaining=4 reset=1m0s",
		"OK 5/MINUTE(l) remaining=3 reset=1m0s",
	})
	ds := f.takeDecisions()
	for _, d := range ds {
		if len(d.Key) != envoyrls.MaxKeyLen || !strings.HasPrefix(d.Key, "a%7Cb|a=xxx") {
			t.Errorf("long key %q (%d bytes), want %d bytes with the start of the key", d.Key, len(d.Key), envoyrls.MaxKeyLen)
		}
	}
	if ds[0].Key == ds[1].Key || ds[0].Key != ds[2].Key {
		t.Errorf("long keys %q, want the first and last equal and the second different", []string{ds[0].Key, ds[1].Key, ds[2].Key})
	}
}

// TestResponseHeaders: with LIMIT_RESPONSE_HEADERS_ENABLED the headers
// describe the descriptor with the fewest remaining, or the last one
// over its limit, by the configured names.
func TestResponseHeaders(t *testing.T) {
	doc := `
envoy:
  - domain: d
    descriptors:
      - {key: big, rate_limit: {unit: hour, requests_per_unit: 100}}
      - {key: small, limiter: small}
      - {key: tiny, rate_limit: {unit: minute, requests_per_unit: 1}}
`
	policies := map[string]sluice.Policy{"small": sluice.TokenBucket(3, 1, 1500*time.Millisecond)}
	on := envoyrls.DefaultSettings()
	on.ResponseHeaders = true
	renamed := on
	renamed.LimitHeader, renamed.RemainingHeader, renamed.ResetHeader = "x-l", "x-r", "x-s"
	tests := []struct {
		name string
		set  *envoyrls.Settings
		r    *rlsv3.RateLimitRequest
		want string
	}{
		{"off by default", nil, req("d", desc("big", "x"), desc("small", "x")), ""},
		{"fewest remaining", &on, req("d", desc("big", "x"), desc("small", "x")), "RateLimit-Limit: 3, RateLimit-Remaining: 2, RateLimit-Reset: 2"},
		{"renamed", &renamed, req("d", desc("big", "x"), desc("small", "x")), "x-l: 3, x-r: 2, x-s: 2"},
		{"the over one", &on, req("d", hits(2, desc("tiny", "x")), desc("big", "y")), "RateLimit-Limit: 1, RateLimit-Remaining: 0, RateLimit-Reset: 60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, doc, policies, tt.set)
			_, _, resp := f.call(t, tt.r)
			if got := headers(resp); got != tt.want {
				t.Errorf("headers %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMissingLimiter: a lookup that does not know a limiter of the config
// is the server's bug, Internal.
func TestMissingLimiter(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: l}
`, map[string]sluice.Policy{"l": sluice.FixedWindow(5, time.Minute)}, nil)
	delete(f.limiters, "l")
	_, err := f.client.ShouldRateLimit(context.Background(), req("d", desc("k", "v")))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), `limiter "l" not found`) {
		t.Errorf("error %v, want Internal naming the limiter", err)
	}
}

// TestLogs: invalid requests at Debug, rejections in shadow mode at Info,
// a store's outage at Warn once, whatever the number of calls it fails,
// without their keys; a limiter's store failures are its listener's to
// log. Before, each failed call logged a line with its key.
func TestLogs(t *testing.T) {
	var buf testserver.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: shadow, limiter: one, shadow_mode: true}
      - {key: down, limiter: down}
      - {key: count, rate_limit: {unit: minute, requests_per_unit: 5}}
`, map[string]sluice.Policy{"one": sluice.FixedWindow(1, time.Minute), "down": sluice.NoLimit()}, nil, envoyrls.WithLogger(logger),
		envoyrls.WithStore(downStore{}))
	l, err := sluice.NewLimiter(sluice.FixedWindow(5, time.Minute), sluice.WithStore(downStore{}))
	if err != nil {
		t.Fatal(err)
	}
	f.limiters["down"] = l
	ctx := context.Background()
	f.client.ShouldRateLimit(ctx, req("d", hits(math.MaxUint64, desc("k", "v"))))
	f.client.ShouldRateLimit(ctx, req("d", hits(2, desc("shadow", "x"))))
	f.client.ShouldRateLimit(ctx, req("d", desc("down", "x")))
	for i := range 100 {
		f.client.ShouldRateLimit(ctx, req("d", desc("count", fmt.Sprint("secret-", i))))
	}
	for _, want := range []string{
		`level=DEBUG msg="envoyrls: invalid request"`,
		`level=INFO msg="envoyrls: over limit in shadow mode" limiter=one key="d|shadow=x" hits=2`,
		`level=WARN msg="the store fails`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, buf.String())
		}
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 || strings.Contains(buf.String(), "secret") || strings.Contains(buf.String(), "down=x") {
		t.Errorf("100 calls on a store that fails logged %d warnings, or a key:\n%s", n, buf.String())
	}
}

// TestUnitMultiplierOverride: a request's limit override with a
// unit_multiplier counts in windows that many units long, as a
// rate_limit block's does.
func TestUnitMultiplierOverride(t *testing.T) {
	f := newFixture(t, `
envoy:
  - domain: d
    descriptors:
      - {key: k, rate_limit: {unit: hour, requests_per_unit: 1000}}
`, nil, &allowRequestLimits)
	d := desc("k", "a")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(5)}
	for i, want := range []string{"OK 2/5xSECOND() remaining=1 reset=5s", "OK 2/5xSECOND() remaining=0 reset=5s", "OVER_LIMIT 2/5xSECOND() remaining=0 reset=5s"} {
		if _, got, _ := f.call(t, req("d", d)); got[0] != want {
			t.Errorf("hit %d: status %q, want %q", i+1, got[0], want)
		}
	}
	f.clock.Advance(5 * time.Second)
	if _, got, _ := f.call(t, req("d", d)); got[0] != "OK 2/5xSECOND() remaining=1 reset=5s" {
		t.Errorf("in the next window: status %q, want it counted afresh", got[0])
	}
}
