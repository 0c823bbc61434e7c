package main

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
