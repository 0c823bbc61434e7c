package envoyrls_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/app/envoyrls"
)

// yamlBlocks returns the ```yaml blocks of docs/envoy.md.
func yamlBlocks(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(data), "```yaml\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatal("unterminated yaml block in docs/envoy.md")
		}
		blocks = append(blocks, block)
	}
	if len(blocks) != 2 {
		t.Fatalf("docs/envoy.md has %d yaml blocks, want 2: the config and Envoy's", len(blocks))
	}
	return blocks
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
	var v any
	if err := yaml.Unmarshal([]byte(yamlBlocks(t)[1]), &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("invalid Envoy bootstrap: %v", err)
	}
	// Validation does not look into typed_config: unpack the filters.
	var hcm hcmv3.HttpConnectionManager
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("invalid http_connection_manager: %v", err)
	}
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
