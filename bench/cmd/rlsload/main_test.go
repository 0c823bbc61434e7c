package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestOverallCode: the code read from a reply's bytes is the one
// protobuf decodes, whatever other fields come before and after it.
func TestOverallCode(t *testing.T) {
	for _, resp := range []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_OK},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 100, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			DurationUntilReset: durationpb.New(1500000000),
		}}, RawBody: []byte("x")},
	} {
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := overallCode(b)
		if err != nil || got != resp.OverallCode {
			t.Errorf("overallCode(%x) = %v, %v; want %v", b, got, err, resp.OverallCode)
		}
		if len(b) > 1 {
			if _, err := overallCode(b[:len(b)-1]); err == nil {
				t.Errorf("overallCode of %x cut short: no error", b)
			}
		}
	}
}

// rls answers ShouldRateLimit by the descriptor value's last digit: odd is
// over the limit, and a value ending in 7 fails with Unavailable.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (rls) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	v := req.GetDescriptors()[0].GetEntries()[0].GetValue()
	switch d := v[len(v)-1]; {
	case d == '7':
		return nil, status.Error(codes.Unavailable, "store down")
	case d%2 == 1:
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func serve(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(g, rls{})
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestRun: the HTTP/2 client's calls reach a grpc-go server as gRPC calls,
// and each is counted by its reply: ok, over_limit, or an error with its
// status.
func TestRun(t *testing.T) {
	addr := serve(t)
	// 10 keys: k0..k9, of which k1, k3, k5, k9 are over the limit and k7
	// fails. Every caller walks the keys in steps of 10 callers, so each
	// caller keeps to one key.
	r, err := run(addr, "load", "client", 10, 10, 3, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(r.lat))
	if total != r.ok+r.over {
		t.Errorf("%d latencies for %d ok and %d over_limit", total, r.ok, r.over)
	}
	if r.ok == 0 || r.over == 0 || r.failed == 0 {
		t.Fatalf("ok %d, over_limit %d, errors %d: want some of each", r.ok, r.over, r.failed)
	}
	// 5 callers ok, 4 over, 1 failing, at about the same pace.
	if f := float64(r.over) / float64(r.ok); f < 0.5 || f > 1.2 {
		t.Errorf("over_limit/ok = %d/%d, want about 4/5", r.over, r.ok)
	}
	if f := float64(r.failed) / float64(r.ok); f < 0.08 || f > 0.4 {
		t.Errorf("errors/ok = %d/%d, want about 1/5", r.failed, r.ok)
	}
	if r.firstErr == nil || !strings.Contains(r.firstErr.Error(), "grpc-status 14: store down") {
		t.Errorf("first error %v, want grpc-status 14 (Unavailable) with its message", r.firstErr)
	}
}

// TestRunStreamBound: callers that would overrun the server's concurrent
// streams on a connection are refused up front, not queued or reset.
func TestRunStreamBound(t *testing.T) {
	addr := serve(t, grpc.MaxConcurrentStreams(4))
	_, err := run(addr, "load", "client", 10, 10, 2, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "allows 4 concurrent streams") {
		t.Fatalf("10 callers on 2 connections, 4 streams each: err = %v, want the bound named", err)
	}
	if _, err := run(addr, "load", "client", 10, 8, 2, 100*time.Millisecond); err != nil {
		t.Fatalf("8 callers on 2 connections, 4 streams each: %v", err)
	}
}

// TestRunNoServer: a refused connection is an error, not a run of zero.
func TestRunNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := run(addr, "load", "client", 10, 4, 1, 100*time.Millisecond); err == nil {
		t.Fatal("no server: no error")
	}
}
