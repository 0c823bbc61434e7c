package rlqs

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPeerStreamFlood: one client, with the default limits, opens 300
// connections of 4 streams each, as many as the server's bound and more;
// it gets MaxStreamsPerPeer of them, and an Envoy on another host still
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
	if got := admitted.Load(); got != int64(DefaultLimits.MaxStreamsPerPeer) {
		t.Errorf("the flooding client holds %d streams, want MaxStreamsPerPeer = %d", got, DefaultLimits.MaxStreamsPerPeer)
	}
	if got := testutil.ToFloat64(h.svc.opts.metrics.rejected.WithLabelValues("too_many_streams_per_peer")); got != float64(refused.Load()) || got == 0 {
		t.Errorf("sluice_rlqs_streams_refused_total{too_many_streams_per_peer} = %v, want the %d refused", got, refused.Load())
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
