package server

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testserver"
)

// detailedYAML has a descriptor whose stat key, and so the labels of its
// series in /metrics, is the request's values: ratelimit_service_
// rate_limit_total_hits{key1="user_alice-ssn-…"}.
const detailedYAML = `limiters:
  api: {policy: fixed_window, limit: 3, interval: 1 minute}
envoy:
  - domain: d
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
`

const rlqsSection = `rlqs:
  - domain: edge
    buckets:
      - {bucket: {name: api}, limiter: api}
`

// TestMetricsRequestValues: a config whose /metrics series would carry
// requests' values (detailed_metric, value_to_metric, RLQS bucket ids) is
// refused, with the place that asks for them and what to do, unless
// /metrics is behind tokens or a client CA, or the operator opted in;
// before, /metrics, open by default, showed them to anyone.
func TestMetricsRequestValues(t *testing.T) {
	const fix = "set server.auth.metrics: true with tokens or a client_ca, or server.auth.open_metrics_with_request_values: true"
	for _, tt := range []struct {
		name, yaml string
		addr       string // WithHTTPAddress's; "" for none
		want       string // in the error; "" for none
	}{
		{name: "detailed_metric, metrics open", yaml: detailedYAML, want: "envoy[0].descriptors[0].detailed_metric (line 6): detailed_metric puts the request's values in the rule's stat key; /metrics is open: " + fix},
		{name: "rlqs, metrics open", yaml: "limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n" + rlqsSection, want: "rlqs (line 4): the RLQS service labels its series with bucket ids, which Envoy builds from requests; /metrics is open: " + fix},
		{name: "metrics auth without a token", yaml: detailedYAML + "server: {auth: {metrics: true}}\n", want: "/metrics is open (server.auth.metrics is set, but there is no token nor client_ca)"},
		{name: "tokens without metrics auth", yaml: detailedYAML + "server: {auth: {tokens: [s3cret]}}\n", want: "/metrics is open: "},
		{name: "metrics behind tokens", yaml: detailedYAML + "server: {auth: {metrics: true, tokens: [s3cret]}}\n"},
		{name: "opted in", yaml: detailedYAML + "server: {auth: {open_metrics_with_request_values: true}}\n"},
		{name: "config stat keys only", yaml: "limiters:\n  api: {policy: no_limit}\nenvoy:\n  - domain: d\n    descriptors:\n      - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}\n"},
		{name: "HTTP on loopback", yaml: detailedYAML, addr: "127.0.0.1:8080"},
		{name: "HTTP on IPv6 loopback", yaml: detailedYAML, addr: "[::1]:8080"},
		{name: "HTTP on localhost", yaml: detailedYAML, addr: "localhost:0"},
		{name: "HTTP on every address", yaml: detailedYAML, addr: ":8080", want: "/metrics is open: " + fix},
		{name: "HTTP on a public address", yaml: detailedYAML, addr: "10.0.0.5:8080", want: "/metrics is open: " + fix},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfig([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var opts []Option
			if tt.addr != "" {
				opts = append(opts, WithHTTPAddress(tt.addr))
			}
			s, err := New(t.Context(), cfg, opts...)
			if err == nil {
				s.Close()
			}
			var ce *config.Error
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("New = %v, want a server", err)
			case tt.want != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("New = %v, want a *config.Error with %q", err, tt.want)
			}
		})
	}
}

// TestMetricsRequestValuesReload: a reload that would put requests'
// values in open /metrics is refused and the old config stays, whether
// it comes from the config file or from envoyproxy/ratelimit's files.
func TestMetricsRequestValuesReload(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	mustDo(t, os.MkdirAll(dir, 0o755))
	file := func(detailed string) {
		mustDo(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: files\ndescriptors:\n  - key: user\n"+detailed+
			"    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644))
	}
	file("")
	base := "limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\nratelimit: {runtime_root: " + root + ", runtime_subdirectory: ratelimit}\n"
	cfg, err := LoadConfig([]byte(base))
	mustDo(t, err)
	var log testserver.Buffer
	s, err := New(t.Context(), cfg, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	mustDo(t, err)
	defer s.Close()
	running := s.cur.Load()

	withRLQS, err := LoadConfig([]byte(base + rlqsSection))
	mustDo(t, err)
	if err := s.Reload(withRLQS); err == nil || !strings.Contains(err.Error(), "bucket ids") {
		t.Errorf("Reload adding an rlqs section with /metrics open = %v, want it refused", err)
	}
	file("    detailed_metric: true\n")
	s.reloadEnvoyFiles()
	if s.cur.Load() != running {
		t.Error("a reload put requests' values in open /metrics")
	}
	if !strings.Contains(log.String(), filepath.Join(dir, "d.yaml")) || !strings.Contains(log.String(), "detailed_metric") {
		t.Errorf("the refused reload of the files is not logged with the file and the key:\n%s", log.String())
	}
}
