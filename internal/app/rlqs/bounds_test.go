package rlqs

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestPeerStreamFlood: one client, with the default limits, opens 300
// connections of 4 streams each, as many as the server's bound and more;
// it gets MaxStreamsPerClient of them, and an Envoy on another host still
// gets its stream.
func TestPeerStreamFlood(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for range 300 {
		cc := h.dialFrom(t, "127.0.0.1")
		wg.Go(func() {
			for range DefaultLimits.MaxStreamsPerConn {
				s, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
					use(map[string]string{"other": "x"}, 0, 1, 0)}}); err != nil {
					t.Error(err)
					return
				}
				switch _, err := s.Recv(); status.Code(err) {
				case codes.OK:
					admitted.Add(1) // it stays open until cancel
				case codes.ResourceExhausted:
					refused.Add(1)
				default:
					t.Errorf("a flooding stream's Recv = %v, want an answer or ResourceExhausted", err)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != int64(DefaultLimits.MaxStreamsPerClient) {
		t.Errorf("the flooding client holds %d streams, want MaxStreamsPerClient = %d", got, DefaultLimits.MaxStreamsPerClient)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.rejected.WithLabelValues("too_many_streams_per_client")); got != float64(refused.Load()) || got == 0 {
		t.Errorf("sluice_rlqs_streams_refused_total{too_many_streams_per_client} = %v, want the %d refused", got, refused.Load())
	}
	// An Envoy on another host.
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(h.dialFrom(t, "127.0.0.2")).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		use(map[string]string{"name": "api"}, 0, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("another host's stream, while one client floods: Recv = %v, want its assignment", err)
	}
	if got := describe(resp.GetBucketAction()[0]); !strings.HasPrefix(got, "token_bucket") {
		t.Errorf("another host's assignment = %q, want a token bucket", got)
	}
}

// ids returns n usages of distinct bucket ids of the api rule, named by
// prefix, each of about pad bytes more.
func ids(prefix string, n, pad int) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	us := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, n)
	for i := range us {
		us[i] = use(map[string]string{"name": "api", "i": fmt.Sprint(prefix, "-", i, strings.Repeat("x", pad))}, 0, 1, 0)
	}
	return us
}

// TestBucketBounds: past a peer's bound, or the server's, a new bucket
// gets no action and the stream goes on; the buckets a stream held are
// freed when it ends.
func TestBucketBounds(t *testing.T) {
	h := newHarness(t, WithLimits(Limits{MaxBuckets: 30, MaxBucketsPerClient: 20, MaxBucketsPerStream: 15}))
	a1 := rlqsv3.NewRateLimitQuotaServiceClient(h.dialFrom(t, "127.0.0.1"))
	b1 := rlqsv3.NewRateLimitQuotaServiceClient(h.dialFrom(t, "127.0.0.2"))
	open := func(c rlqsv3.RateLimitQuotaServiceClient) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
		s, err := c.StreamRateLimitQuotas(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	actions := func(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, domain string, us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) int {
		t.Helper()
		return len(exchange(t, s, domain, us...).GetBucketAction())
	}
	s1, s2 := open(a1), open(a1)
	if got := actions(s1, "edge", ids("a", 15, 0)); got != 15 {
		t.Fatalf("first stream's 15 buckets got %d actions, want 15", got)
	}
	// Peer a holds 15 of its 20: 5 more fit.
	if got := actions(s2, "edge", ids("b", 10, 0)); got != 5 {
		t.Fatalf("second stream of the peer: %d of 10 buckets answered, want the 5 within MaxBucketsPerClient", got)
	}
	if got := actions(s2, "", ids("b", 3, 0)); got != 3 {
		t.Fatalf("the stream goes on: %d of its 3 buckets answered, want 3", got)
	}
	// Peer b: 10 of the server's 30 are left.
	s3 := open(b1)
	if got := actions(s3, "edge", ids("c", 15, 0)); got != 10 {
		t.Fatalf("another peer: %d of 15 buckets answered, want the 10 within MaxBuckets", got)
	}
	if got := h.svc.bucketCount(); got != 30 {
		t.Errorf("buckets held = %d, want 30", got)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.liveBuckets); got != 30 {
		t.Errorf("sluice_rlqs_buckets = %v, want 30", got)
	}
	for reason, want := range map[string]float64{"too_many_buckets_per_client": 5, "too_many_buckets": 5} {
		if got := testutil.ToFloat64(h.svc.opts.metrics.bucketsRejected.WithLabelValues(reason)); got != want {
			t.Errorf("sluice_rlqs_buckets_refused_total{%s} = %v, want %v", reason, got, want)
		}
	}
	// Peer a's first stream ends: its 15 are free for anyone.
	s1.CloseSend()
	if _, err := s1.Recv(); err == nil {
		t.Fatal("Recv after CloseSend answered, want the stream's end")
	}
	waitFor(t, func() bool { return h.svc.bucketCount() == 15 })
	if got := actions(s3, "", ids("c", 15, 0)); got != 15 {
		t.Fatalf("once a stream ended, the other peer's 15 buckets got %d actions, want 15", got)
	}
}

// sumCounter returns the sum of the series of counter name in reg.
func sumCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// heapNow returns the live heap, after collections.
func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// maxBucketBytes is a generous bound on the heap one bucket of an id of
// about 30 bytes takes, its client's side in the test included
// (BenchmarkBucketMemory measures 1.5 KB in the service, docs/envoy.md).
const maxBucketBytes = 8 << 10

// TestMemoryBound: the attacks of issue 27, each against a service whose
// bound is scaled down: 16 streams of 8 hosts sending new bucket ids as
// fast as they are answered, and streams that never read their answers.
// Under each, the buckets held never pass the bound, nor the heap what
// they may take; once the streams end, both return to what they were.
func TestMemoryBound(t *testing.T) {
	t.Run("new bucket ids", func(t *testing.T) {
		const maxBuckets = 3000
		h := newHarness(t, WithLimits(Limits{MaxBuckets: maxBuckets, MaxBucketsPerClient: 600}))
		base := heapNow()
		var streams []rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
		for p := range 8 {
			cc := h.dialFrom(t, fmt.Sprint("127.0.0.", 11+p))
			for range 2 {
				s, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, s)
			}
		}
		// Each stream first holds a bucket, so that each of its reports
		// has an answer when its new buckets are all refused.
		other := use(map[string]string{"other": "x"}, 0, 1, 0)
		for _, s := range streams {
			exchange(t, s, "edge", other)
		}
		var wg sync.WaitGroup
		for i, s := range streams {
			wg.Go(func() {
				for r := range 10 {
					us := append(ids(fmt.Sprint(i, "-", r), 100, 0), other)
					if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: us}); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.Recv(); err != nil {
						t.Error(err)
						return
					}
					if n := h.svc.bucketCount(); n > maxBuckets {
						t.Errorf("%d buckets held, over the bound of %d", n, maxBuckets)
					}
				}
			})
		}
		wg.Wait()
		if n := h.svc.bucketCount(); n != maxBuckets {
			t.Errorf("buckets held after 16,000 new ids = %d, want the bound, %d", n, maxBuckets)
		}
		peak := heapNow()
		t.Logf("heap: %d bytes above the start with %d buckets, %d per bucket", peak-base, maxBuckets, (peak-base)/maxBuckets)
		if peak-base > maxBuckets*maxBucketBytes {
			t.Errorf("heap grew by %d bytes for %d buckets, over %d each", peak-base, maxBuckets, maxBucketBytes)
		}
		for _, s := range streams {
			s.CloseSend()
		}
		waitFor(t, func() bool { return h.svc.bucketCount() == 0 && h.svc.streamCount() == 0 })
		h.svc.fleetsMu.Lock()
		fleets := len(h.svc.fleets)
		h.svc.fleetsMu.Unlock()
		if fleets != 0 {
			t.Errorf("%d fleets left once every stream ended, want 0", fleets)
		}
		after := heapNow()
		t.Logf("heap once the streams ended: %d bytes above the start, %d per bucket freed", after-base, (peak-after)/maxBuckets)
		// What stays: the limiter's keys (their clock stands still) and
		// the series of the first MaxBucketSeries buckets, about 1 KB a
		// bucket here.
		if freed := (peak - after) / maxBuckets; freed < 500 {
			t.Errorf("%d bytes a bucket freed once the streams ended, want at least 500 of the %d a bucket took", freed, (peak-base)/maxBuckets)
		}
	})
	t.Run("never reads", func(t *testing.T) {
		const streams, buckets = 8, 100
		h := newHarness(t, WithLimits(Limits{MaxBuckets: 1000}))
		base := heapNow()
		ctx, cancel := context.WithCancel(t.Context())
		var ccs []*grpc.ClientConn
		for range streams / DefaultLimits.MaxStreamsPerConn {
			ccs = append(ccs, h.dialFrom(t, "127.0.0.21", grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(1<<20), grpc.WithDisableRetry()))
		}
		var sent atomic.Int64
		var wg sync.WaitGroup
		for i := range streams {
			s, err := rlqsv3.NewRateLimitQuotaServiceClient(ccs[i%len(ccs)]).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Ids of 300 bytes: each answer is 2 messages of about 16 KiB.
			us := ids(fmt.Sprint(i), buckets, 300)
			wg.Go(func() {
				for r := 0; ctx.Err() == nil; r++ {
					domain := ""
					if r == 0 {
						domain = "edge"
					}
					if s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}) != nil {
						return
					}
					sent.Add(1)
				}
			})
		}
		// Until the sends stop: the server stops reading once its answers
		// are not read.
		for last := int64(-1); sent.Load() != last; time.Sleep(500 * time.Millisecond) {
			last = sent.Load()
		}
		held := h.svc.bucketCount()
		peak := heapNow()
		// Each report adds a denied request per bucket.
		read := int64(sumCounter(t, h.reg, "sluice_rlqs_requests_total")) / buckets
		t.Logf("never reading: %d reports sent before the sends blocked, %d read and answered, %d buckets held; heap %d bytes above the start, the client's buffers included",
			sent.Load(), read, held, peak-base)
		if held != streams*buckets {
			t.Errorf("buckets held = %d, want the %d reported", held, streams*buckets)
		}
		// The answers not read fill the client's window (64 KiB), then
		// gRPC's write quota (64 KiB), then a stream's sends block and it
		// reads no more: a few answers of 2 messages of 16 KiB each.
		if read > streams*8 {
			t.Errorf("%d reports read from %d streams that do not read their answers, want at most 8 each", read, streams)
		}
		cancel()
		wg.Wait()
		waitFor(t, func() bool { return h.svc.bucketCount() == 0 && h.svc.streamCount() == 0 })
		after := heapNow()
		t.Logf("heap once the streams ended: %d bytes above the start", after-base)
		if after-base > (peak-base)/2 {
			t.Errorf("heap once the streams ended is %d bytes above the start, more than half the %d with them", after-base, peak-base)
		}
	})
}

// BenchmarkBucketMemory reports the heap one bucket takes in the service,
// with its limiter key (in a memory store, as on mem://) and its fleet,
// for bucket ids of a few sizes: 20,000 buckets reported on 20 streams,
// each in a fleet of its own, the service's series included (bounded at
// MaxBucketSeries, so a small part). docs/envoy.md's bound is these
// figures times max_buckets.
func BenchmarkBucketMemory(b *testing.B) {
	for _, pad := range []int{0, 256, DefaultLimits.MaxIDBytes - 40} {
		b.Run(fmt.Sprint("id=", 20+pad, "B"), func(b *testing.B) {
			const streams, perStream = 20, 1000
			c, err := decodeWith(b, serviceDoc, serviceLimiters)
			if err != nil {
				b.Fatal(err)
			}
			l, err := sluice.NewLimiter(sluice.LeakyBucket(100, 50, time.Second), sluice.WithStore(memstore.New()))
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				svc := New(c, func(string) (*sluice.Limiter, bool) { return l, true },
					WithRegistry(prometheus.NewRegistry()), WithLimits(Limits{MaxBuckets: streams * perStream}))
				// The reports as they come, made before the heap is
				// measured; decoded after, as the buckets keep their ids.
				reports := make([][][]byte, streams)
				for i := range reports {
					for r := range perStream / 100 {
						raw, err := proto.Marshal(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge",
							BucketQuotaUsages: ids(fmt.Sprint(i, "-", r), 100, pad)})
						if err != nil {
							b.Fatal(err)
						}
						reports[i] = append(reports[i], raw)
					}
				}
				base := heapNow()
				sts := make([]*stream, streams)
				for i := range sts {
					sts[i] = &stream{id: fmt.Sprint("s", i), peer: fmt.Sprint("p", i), buckets: map[string]*bucket{}}
					for r, raw := range reports[i] {
						in := new(rlqsv3.RateLimitQuotaUsageReports)
						if err := proto.Unmarshal(raw, in); err != nil {
							b.Fatal(err)
						}
						if _, err := svc.answer(b.Context(), sts[i], in, r == 0); err != nil {
							b.Fatal(err)
						}
					}
				}
				if n := svc.bucketCount(); n != streams*perStream {
					b.Fatalf("%d buckets, want %d", n, streams*perStream)
				}
				b.ReportMetric(float64(heapNow()-base)/(streams*perStream), "B/bucket")
				runtime.KeepAlive(sts)
				runtime.KeepAlive(reports)
			}
		})
	}
}
