package rlqs_test

import (
	"testing"

	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/sluicehq/sluice/internal/app/server"
	"github.com/sluicehq/sluice/internal/docsnippets"
)

// rlqsBlocks returns the ```yaml rlqs blocks of docs/envoy.md: the
// config's and Envoy's.
func rlqsBlocks(t *testing.T) []string {
	t.Helper()
	return docsnippets.Blocks(t, "../../../docs/envoy.md", "yaml rlqs", 2)
}

// TestDocs: the rlqs config of docs/envoy.md loads as a server config;
// its Envoy configuration is a valid bootstrap by go-control-plane's types
// and validation rules, whose rate_limit_quota filter asks for the
// config's domain on cluster sluice, reports more often than assignments
// expire, denies without an assignment, and builds bucket ids that rules
// of the config match.
func TestDocs(t *testing.T) {
	blocks := rlqsBlocks(t)
	cfg, err := server.LoadConfig([]byte(blocks[0]))
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	dom := cfg.RLQS.Domain("edge")
	if dom == nil {
		t.Fatal("the config has no domain edge")
	}

	hcm := docsnippets.EnvoyHTTP(t, blocks[1])
	var f rlqsfilterv3.RateLimitQuotaFilterConfig
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&f); err != nil {
		t.Fatal(err)
	}
	if err := f.ValidateAll(); err != nil {
		t.Fatalf("invalid rate_limit_quota filter: %v", err)
	}
	if f.GetDomain() != "edge" || f.GetRlqsServer().GetEnvoyGrpc().GetClusterName() != "sluice" {
		t.Errorf("rate_limit_quota filter = domain %q on %v, want edge on cluster sluice", f.GetDomain(), f.GetRlqsServer())
	}
	// Validation does not look into the matcher's actions: unpack them.
	m := f.GetBucketMatchers()
	actions := []*rlqsfilterv3.RateLimitQuotaBucketSettings{}
	for _, a := range append(m.GetMatcherList().GetMatchers(), nil) {
		var tc = m.GetOnNoMatch().GetAction().GetTypedConfig()
		if a != nil {
			tc = a.GetOnMatch().GetAction().GetTypedConfig()
		}
		var s rlqsfilterv3.RateLimitQuotaBucketSettings
		if err := tc.UnmarshalTo(&s); err != nil {
			t.Fatal(err)
		}
		if err := s.ValidateAll(); err != nil {
			t.Fatalf("invalid bucket settings: %v", err)
		}
		actions = append(actions, &s)
	}
	for i, s := range actions {
		if got := s.GetReportingInterval().AsDuration(); got >= dom.AssignmentTTL {
			t.Errorf("bucket settings %d: reporting_interval %v, want below assignment_ttl %v", i, got, dom.AssignmentTTL)
		}
		if s.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String() != "DENY_ALL" ||
			s.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String() != "DENY_ALL" {
			t.Errorf("bucket settings %d: behaviours without an assignment %v, %v, want DENY_ALL both", i, s.GetNoAssignmentBehavior(), s.GetExpiredAssignmentBehavior())
		}
		// A request's bucket id: string values as they are, custom ones
		// some value.
		id := map[string]string{}
		for k, vb := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			id[k] = vb.GetStringValue()
			if vb.GetCustomValue() != nil {
				id[k] = "some-value"
			}
		}
		if r := dom.Match(id); r == nil || r.Limiter == "" {
			t.Errorf("bucket settings %d: bucket id %v matches no limiter rule of the config", i, id)
		}
	}
}
