package envoyrls_test

import (
	"testing"

	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/docsnippets"
)

// yamlBlocks returns the ```yaml blocks of docs/envoy.md: the config's
// and Envoy's.
func yamlBlocks(t *testing.T) []string {
	t.Helper()
	return docsnippets.Blocks(t, "../../../docs/envoy.md", "yaml", 3)
}

// TestDocsConfig: the example config of docs/envoy.md decodes, and its
// descriptors name limiters of its limiters: section.
func TestDocsConfig(t *testing.T) {
	var doc struct {
		Limiters map[string]any `yaml:"limiters"`
		Envoy    yaml.Node      `yaml:"envoy"`
	}
	if err := yaml.Unmarshal([]byte(yamlBlocks(t)[0]), &doc); err != nil {
		t.Fatal(err)
	}
	d, err := envoyrls.Decode("envoy", &doc.Envoy, func(name string) bool { return doc.Limiters[name] != nil })
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if _, err := envoyrls.Load(d, envoyrls.DefaultSettings()); err != nil {
		t.Errorf("Load: %v", err)
	}
}

// TestDocsEnvoy: the Envoy configuration of docs/envoy.md is a valid
// bootstrap by go-control-plane's types and validation rules, and asks for
// the domain of the example config over the v3 API.
func TestDocsEnvoy(t *testing.T) {
	hcm := docsnippets.EnvoyHTTP(t, yamlBlocks(t)[1])
	var rl ratelimitfilterv3.RateLimit
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if err := rl.ValidateAll(); err != nil {
		t.Fatalf("invalid ratelimit filter: %v", err)
	}
	if rl.GetDomain() != "edge" || rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != "sluice" ||
		rl.GetRateLimitService().GetTransportApiVersion().String() != "V3" {
		t.Errorf("ratelimit filter = %v, want domain edge on cluster sluice over V3", &rl)
	}
}

// TestDocsStreamDone: the Envoy configuration of docs/envoy.md's model
// tokens is a valid bootstrap whose route checks the tenant with 0 hits
// and charges it its tokens when the stream is done.
func TestDocsStreamDone(t *testing.T) {
	hcm := docsnippets.EnvoyHTTP(t, yamlBlocks(t)[2])
	limits := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()
	if len(limits) != 2 || limits[0].GetHitsAddend().GetNumber().GetValue() != 0 || limits[0].GetApplyOnStreamDone() ||
		!limits[1].GetApplyOnStreamDone() || limits[1].GetHitsAddend().GetFormat() == "" {
		t.Errorf("rate_limits = %v, want a check of 0 hits and a charge on stream done", limits)
	}
}
