package docsnippets

import (
	"encoding/json"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// EnvoyHTTP reads src, an Envoy bootstrap in YAML from the docs, fails tb
// unless it is one by go-control-plane's types and validation rules, and
// returns the http_connection_manager of its first listener, validated
// too (validation does not look into typed_config on its own). The
// caller unpacks and checks the filter it documents.
func EnvoyHTTP(tb testing.TB, src string) *hcmv3.HttpConnectionManager {
	tb.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		tb.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		tb.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		tb.Fatalf("invalid Envoy bootstrap: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		tb.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		tb.Fatalf("invalid http_connection_manager: %v", err)
	}
	return &hcm
}
