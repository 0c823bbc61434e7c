package server

import (
	"errors"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/app/rlqs"
	"github.com/sluicehq/sluice/internal/app/tracing"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

const limitersYAML = "limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1s}\n"

func TestLoadConfig(t *testing.T) {
	c, err := LoadConfig([]byte(limitersYAML + `store: redis://127.0.0.1:6379/0
server:
  http: ":9000"
  grpc: "off"
  auth: {tokens: [a, b], token_file: /etc/sluice/tokens, metrics: true, admin_tokens: {ops: c}}
  plans: {enabled: true, poll_interval: 2s}
  tls: {cert: c.pem, key: k.pem, client_ca: ca.pem}
  allowed_origins: [https://app.example.com, "http://localhost:3000"]
  limits:
    http: {read_header_timeout: 1s, read_timeout: 2s, write_timeout: 3s, idle_timeout: 4s, max_header_bytes: 8192,
           max_connections: 100, reserved_for_health: 10}
    grpc: {max_connections: 50, max_concurrent_streams: 10, max_recv_msg_bytes: 65536, handshake_timeout: 5s,
           keepalive_time: 30s, keepalive_timeout: 6s, min_ping_interval: 20s, max_connection_idle: 1m,
           max_connection_age: 10m, max_connection_age_grace: 7s}
    rlqs: {max_streams: 10, max_streams_per_connection: 2, max_streams_per_client: 3, max_buckets: 400, max_buckets_per_client: 200,
           max_buckets_per_stream: 100, max_report_buckets: 50, max_bucket_id_bytes: 512}
  simulate: {enabled: false, max_concurrent: 1, max_requests: 1000}
  drain_timeout: 30 seconds
  start_without_store: false
  store_timeout: 250ms
  store_failure: fail_local
  inheritance: as_is
  health: {window: 5m, threshold: 0.75, min_requests: 100}
envoy:
  - domain: edge
    descriptors: [{key: remote_address, limiter: api}]
ratelimit:
  runtime_root: /srv/rl
  runtime_subdirectory: ratelimit
  limit_response_headers_enabled: true
  near_limit_ratio: 0.5
`))
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	c.Limiters, c.Envoy = nil, nil
	rl := envoyrls.DefaultSettings()
	rl.Files, rl.RuntimeRoot, rl.RuntimeSubdirectory, rl.ResponseHeaders, rl.NearLimitRatio = true, "/srv/rl", "ratelimit", true, 0.5
	want := Config{
		Store: "redis://127.0.0.1:6379/0", HTTP: ":9000", GRPC: "off",
		Tokens: []string{"a", "b"}, TokenFile: "/etc/sluice/tokens", AuthMetrics: true,
		TLSCert: "c.pem", TLSKey: "k.pem", DrainTimeout: 30 * time.Second, StartWithoutStore: false,
		HealthWindow: 5 * time.Minute, HealthThreshold: 0.75, HealthMinRequests: 100,
		StoreTimeout: 250 * time.Millisecond, StoreFailure: sluice.FailLocal, Inheritance: sluice.InheritAsIs,
		RateLimit: rl,
		ClientCA:  "ca.pem", AllowedOrigins: []string{"https://app.example.com", "http://localhost:3000"},
		HTTPLimits: HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second,
			IdleTimeout: 4 * time.Second, MaxHeaderBytes: 8192, MaxConnections: 100, ReservedForHealth: 10,
			MaxConnectionsPerClient: 100}, // max_connections set below the default
		// Below the defaults too: all, and a quarter.
		GRPCLimits: GRPCLimits{MaxConnections: 50, MaxConnectionsPerClient: 50, ReservedForCalls: 12, MaxConcurrentStreams: 10, MaxRecvMsgBytes: 65536, HandshakeTimeout: 5 * time.Second,
			KeepaliveTime: 30 * time.Second, KeepaliveTimeout: 6 * time.Second, MinPingInterval: 20 * time.Second,
			MaxConnectionIdle: time.Minute, MaxConnectionAge: 10 * time.Minute, MaxConnectionAgeGrace: 7 * time.Second},
		RLQSLimits: rlqs.Limits{MaxStreams: 10, MaxStreamsPerConn: 2, MaxStreamsPerClient: 3, MaxBuckets: 400, MaxBucketsPerClient: 200,
			MaxBucketsPerStream: 100, MaxReportBuckets: 50, MaxIDBytes: 512},
		MaxKeys:     DefaultMaxKeys,
		Simulate:    Simulate{Enabled: false, MaxConcurrent: 1, MaxRequests: 1000},
		AdminTokens: map[string]string{"ops": "c"},
		Plans:       PlansConfig{Enabled: true, PollInterval: 2 * time.Second},
	}
	if d := diff(want, *c); d != "" {
		t.Errorf("LoadConfig:\n%s", d)
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig([]byte(limitersYAML))
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	if c.Store != "mem://" || !c.StartWithoutStore || c.DrainTimeout != DefaultDrainTimeout || c.Inheritance != sluice.InheritProportionally || c.Envoy != nil ||
		c.HTTPLimits != DefaultHTTPLimits || c.GRPCLimits != DefaultGRPCLimits || c.Simulate != DefaultSimulate || c.MaxKeys != DefaultMaxKeys {
		t.Errorf("LoadConfig of limiters alone = %+v, want the defaults", c)
	}
	m, err := LoadConfig([]byte(limitersYAML + "server:\n  limits: {max_keys: 10}\n"))
	if err != nil || m.MaxKeys != 10 {
		t.Errorf("LoadConfig with max_keys 10 = %v, %v", m, err)
	}
}

func TestExampleLoads(t *testing.T) {
	c, err := LoadConfig(Example())
	if err != nil {
		t.Fatalf("LoadConfig(Example()) = %v", err)
	}
	if len(c.Limiters.Order) < 3 || c.Envoy == nil {
		t.Errorf("the example has limiters %v and envoy %v, want several and an envoy section", c.Limiters.Order, c.Envoy)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []configErrorCase{
		{"unknown section", "stores: mem://\n" + limitersYAML, `config: stores (line 1): unknown key "stores"; valid keys: limiters, envoy, ratelimit, rlqs, server, store`},
		{"store not a string", "store: 5\n" + limitersYAML, `config: store (line 1): must be a string, got integer 5 (quote it)`},
		// A typo of redis:// ran on the in-memory store, every instance with a limit of its own.
		{"store without a scheme", "store: redis//127.0.0.1:6379/9\n" + limitersYAML,
			`config: store (line 1): store redis//127.0.0.1:6379/9: no scheme; want a URL starting with dynamodb://, mem://, mysql://, postgres://, postgresql://, redis://, redis+cluster://, redis+sentinel://, rediss://`},
		{"store empty", "store: ''\n" + limitersYAML, `config: store (line 1): store : no scheme`},
		{"store unknown scheme", "store: memory://\n" + limitersYAML, `config: store (line 1): store memory://: unknown scheme "memory"`},
		{"unknown server key", "server:\n  htp: x\n" + limitersYAML, `config: server.htp (line 2): unknown key "htp"; valid keys: allowed_origins, auth, drain_timeout, grpc, health, http, inheritance, limits, plans, simulate, start_without_store, store_failure, store_timeout, tls, tracing`},
		{"empty token", "server:\n  auth: {tokens: [a, \"\"]}\n" + limitersYAML, `config: server.auth.tokens[1] (line 2): a token must not be empty nor hold whitespace`},
		{"token with a space", "server:\n  auth: {tokens: [\"a b\"]}\n" + limitersYAML, `config: server.auth.tokens[0] (line 2): a token must not be empty nor hold whitespace`},
		{"admin token with a space", "server:\n  auth: {admin_tokens: {ops: \"a b\"}}\n" + limitersYAML, `config: server.auth.admin_tokens.ops (line 2): a token must not be empty nor hold whitespace`},
		{"plans poll of 0", "server:\n  plans: {enabled: true, poll_interval: 0s}\n" + limitersYAML, `config: server.plans.poll_interval (line 2): must be positive`},
		{"client CA without TLS", "server:\n  tls: {client_ca: ca.pem}\n" + limitersYAML, `config: server.tls: client_ca needs cert and key`},
		{"bad origin", "server:\n  allowed_origins: [app.example.com]\n" + limitersYAML, `config: server.allowed_origins[0] (line 2): must be an origin such as https://app.example.com, got "app.example.com"`},
		{"origin with a path", "server:\n  allowed_origins: [\"https://a.example/x\"]\n" + limitersYAML, `config: server.allowed_origins[0] (line 2): must be an origin`},
		{"headroom above the bound", "server:\n  limits:\n    http: {max_connections: 10, reserved_for_health: 10}\n" + limitersYAML, `config: server.limits.http: reserved_for_health (10) must be below max_connections (10)`},
		{"http per client above the bound", "server:\n  limits:\n    http: {max_connections: 100, max_connections_per_client: 101}\n" + limitersYAML,
			`config: server.limits.http.max_connections_per_client (line 3): must be at most max_connections (100), got 101`},
		{"grpc per client above the bound", "server:\n  limits:\n    grpc: {max_connections_per_client: 1025}\n" + limitersYAML,
			`config: server.limits.grpc.max_connections_per_client (line 3): must be at most max_connections (1024), got 1025`},
		{"reserved for calls at the bound", "server:\n  limits:\n    grpc: {max_connections: 8, reserved_for_calls: 8}\n" + limitersYAML,
			`config: server.limits.grpc.reserved_for_calls (line 3): must be below max_connections (8), got 8`},
		{"unknown limit", "server:\n  limits:\n    grpc: {max_streams: 10}\n" + limitersYAML, `config: server.limits.grpc.max_streams (line 3): unknown key "max_streams"`},
		{"zero connections", "server:\n  limits:\n    grpc: {max_connections: 0}\n" + limitersYAML, `config: server.limits.grpc.max_connections (line 3): must be positive, got 0`},
		{"zero rlqs streams", "server:\n  limits:\n    rlqs: {max_streams: 0}\n" + limitersYAML, `config: server.limits.rlqs.max_streams (line 3): must be positive, got 0`},
		{"rlqs bound past int32", "server:\n  limits:\n    rlqs: {max_report_buckets: 4294967296}\n" + limitersYAML, `config: server.limits.rlqs.max_report_buckets (line 3): must be at most 2147483647`},
		{"simulate enabled", "server:\n  simulate: {enabled: no way}\n" + limitersYAML, `config: server.simulate.enabled (line 2)`},
		{"duplicate key", "server:\n  http: x\n  http: y\n" + limitersYAML, `config: server.http (line 3): duplicate key "http", first at line 2`},
		{"port as a number", "server: {http: 8080}\n" + limitersYAML, `config: server.http (line 1): must be a string, got integer 8080 (quote it)`},
		{"bare duration", "server: {drain_timeout: 10}\n" + limitersYAML, `config: server.drain_timeout (line 1): must be a duration with a unit, as in 10s or 1 minute`},
		{"zero duration", "server: {store_timeout: 0s}\n" + limitersYAML, `config: server.store_timeout (line 1): must be positive, got 0s`},
		{"failure policy", "server: {store_failure: open}\n" + limitersYAML, `config: server.store_failure (line 1): must be one of fail_closed, fail_local, fail_open, fail_share, got "open"`},
		{"threshold", "server:\n  health: {threshold: 1.5}\n" + limitersYAML, `config: server.health.threshold (line 2): must be a number above 0 and at most 1, got 1.5`},
		{"min requests", "server:\n  health: {min_requests: -1}\n" + limitersYAML, `config: server.health.min_requests (line 2): must be positive, got -1`},
		{"tokens not a list", "server:\n  auth: {tokens: abc}\n" + limitersYAML, `config: server.auth.tokens (line 2): must be a list, got string "abc"`},
		{"cert without key", "server:\n  tls: {cert: c.pem}\n" + limitersYAML, `config: server.tls: cert and key go together, got only one`},
		{"tracing sample ratio above 1", "server:\n  tracing: {endpoint: 127.0.0.1:4317, sample_ratio: 1.5}\n" + limitersYAML,
			`config: server.tracing.sample_ratio (line 2): must be a number from 0 to 1, got 1.5`},
		{"tracing sample ratio below 0", "server:\n  tracing:\n    endpoint: 127.0.0.1:4317\n    sample_ratio: -0.1\n" + limitersYAML,
			`config: server.tracing.sample_ratio (line 4): must be a number from 0 to 1, got -0.1`},
		{"tracing sample ratio not a number", "server:\n  tracing: {endpoint: 127.0.0.1:4317, sample_ratio: all}\n" + limitersYAML,
			`config: server.tracing.sample_ratio (line 2): must be a number from 0 to 1, got all`},
		{"tracing endpoint as a URL", "server:\n  tracing: {endpoint: \"http://collector:4317\"}\n" + limitersYAML,
			`config: server.tracing.endpoint (line 2): must be the receiver's host:port, as in 127.0.0.1:4317, got "http://collector:4317"`},
		{"tracing endpoint without a port", "server:\n  tracing: {endpoint: collector}\n" + limitersYAML,
			`config: server.tracing.endpoint (line 2): must be the receiver's host:port`},
		{"tracing insecure and a CA", "server:\n  tracing: {endpoint: \"collector:4317\", insecure: true, ca_file: ca.pem}\n" + limitersYAML,
			`config: server.tracing (line 2): insecure and ca_file exclude each other`},
		{"tracing empty service name", "server:\n  tracing: {endpoint: \"collector:4317\", service_name: ''}\n" + limitersYAML,
			`config: server.tracing.service_name (line 2): must not be empty`},
		{"tracing unknown key", "server:\n  tracing: {endpoint: \"collector:4317\", sampler: always_on}\n" + limitersYAML,
			`config: server.tracing.sampler (line 2): unknown key "sampler"; valid keys: ca_file, endpoint, insecure, sample_ratio, service_name`},
		{"bad limiter", "limiters:\n  api: {policy: fixed_window, limit: 0, interval: 1s}\n", `config: limiters.api.limit (line 2): must be positive, got 0`},
		{"envoy unknown limiter", limitersYAML + "envoy:\n  - domain: edge\n    descriptors: [{key: k, limiter: nope}]\n", `(line 5)`},
	}
	checkConfigErrors(t, tests)
}

// TestDeployDocCoversKeys checks docs/deploy.md against the decoder: every
// key that a section accepts, as its unknown-key error lists them, is in
// the doc's reference as `section.key`.
// configErrorCase is a config that LoadConfig must refuse with a
// *config.Error whose message holds want.
type configErrorCase struct{ name, yaml, want string }

func checkConfigErrors(t *testing.T, tests []configErrorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig([]byte(tt.yaml))
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadConfig = %v, want a *config.Error with %q", err, tt.want)
			}
		})
	}
}

func TestDeployDocCoversKeys(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	validKeys := regexp.MustCompile(`valid keys: (.*)$`)
	for _, section := range []string{"", "server", "server.auth", "server.tls", "server.health", "ratelimit", "server.limits",
		"server.limits.http", "server.limits.grpc", "server.limits.rlqs", "server.simulate", "server.tracing"} {
		yaml := "bogus_key: 1\n"
		parts := strings.Split(section, ".")
		for i := len(parts) - 1; i >= 0 && parts[i] != ""; i-- {
			yaml = parts[i] + ":\n" + indent(yaml)
		}
		if section != "" {
			yaml += limitersYAML
		}
		_, err := LoadConfig([]byte(yaml))
		m := validKeys.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("LoadConfig with a bogus key in %q = %v, want a list of valid keys", section, err)
		}
		for _, k := range strings.Split(m[1], ", ") {
			if section != "" {
				k = section + "." + k
			}
			if !strings.Contains(string(doc), "`"+k+"`") {
				t.Errorf("docs/deploy.md does not describe `%s`", k)
			}
		}
	}
}

// TestLoadConfigTracing: server.tracing turns tracing on, with its
// defaults (all traces, service sluice) for the keys it leaves out; its
// endpoint may come from the exporter's environment variable instead,
// and a section with neither is refused.
func TestLoadConfigTracing(t *testing.T) {
	if c, err := LoadConfig([]byte(limitersYAML)); err != nil || c.Tracing != nil {
		t.Errorf("LoadConfig without server.tracing = %+v, %v, want tracing off (nil)", c.Tracing, err)
	}
	node := func(src string) *yaml.Node {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Content[0]
	}
	noEnv := func(string) (string, bool) { return "", false }
	env := func(name string) (string, bool) {
		return "http://collector:4317", name == "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	for _, tt := range []struct {
		name, yaml string
		env        func(string) (string, bool)
		want       tracing.Config
	}{
		{"defaults", "{endpoint: 127.0.0.1:4317}", noEnv, tracing.Config{Endpoint: "127.0.0.1:4317", SampleRatio: 1, ServiceName: "sluice"}},
		{"every key", "{endpoint: \"collector.example:4317\", ca_file: /etc/ca.pem, sample_ratio: 0.25, service_name: edge-limits}", noEnv,
			tracing.Config{Endpoint: "collector.example:4317", CAFile: "/etc/ca.pem", SampleRatio: 0.25, ServiceName: "edge-limits"}},
		{"insecure, none sampled but the callers'", "{endpoint: \"[::1]:4317\", insecure: true, sample_ratio: 0}", noEnv,
			tracing.Config{Endpoint: "[::1]:4317", Insecure: true, SampleRatio: 0, ServiceName: "sluice"}},
		{"endpoint from the environment", "{}", env, tracing.Config{SampleRatio: 1, ServiceName: "sluice"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeTracing("server.tracing", node(tt.yaml), tt.env)
			if err != nil || *got != tt.want {
				t.Errorf("decodeTracing(%s) = %+v, %v, want %+v", tt.yaml, got, err, tt.want)
			}
		})
	}
	_, err := decodeTracing("server.tracing", node("{sample_ratio: 0.5}"), noEnv)
	var ye *yamlnode.Error
	if !errors.As(err, &ye) || !strings.Contains(err.Error(), "server.tracing (line 1): needs an endpoint: the receiver's host:port, or the environment variable OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("decodeTracing without an endpoint or OTEL_EXPORTER_OTLP_ENDPOINT = %v, want a *yamlnode.Error asking for one", err)
	}
}

// indent indents each line of s by two spaces.
func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "")
}

// quotaYAML is a limiter for rlqsMemoryYAML, an rlqs section, whose
// buckets the memory limit counts.
const quotaYAML = "  q: {policy: fixed_window, limit: 100, interval: 1 minute}\n"

const rlqsMemoryYAML = "rlqs:\n  - domain: d\n    buckets:\n      - {bucket: {name: q}, limiter: q}\n"

// TestMemoryLimit: the memory limit sluice serve sets is what
// docs/deploy.md says, max_keys × 256 bytes + the local cache + the quota
// service's buckets × 2 KiB with an rlqs section + 128 MiB, and does not
// overflow.
func TestMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want int64
	}{
		{limitersYAML, 1_000_000*256 + 128<<20}, // 372 MiB
		{limitersYAML + "server:\n  limits: {max_keys: 10}\n", 10*256 + 128<<20},
		{limitersYAML + "ratelimit: {local_cache_size_in_bytes: 1048576}\n", 1_000_000*256 + 1<<20 + 128<<20},
		{limitersYAML + quotaYAML + rlqsMemoryYAML, 1_000_000*256 + 20_000*2048 + 128<<20}, // 411 MiB
		{limitersYAML + quotaYAML + rlqsMemoryYAML + "server:\n  limits: {rlqs: {max_buckets: 10}}\n", 1_000_000*256 + 10*2048 + 128<<20},
		{limitersYAML + "server:\n  limits: {max_keys: 9223372036854775807}\n", math.MaxInt64},
		{limitersYAML + "server:\n  limits: {max_keys: 36028797018439679}\n", 36028797018439679*256 + 128<<20}, // the largest sum
		{limitersYAML + "server:\n  limits: {max_keys: 36028797018439680}\n", math.MaxInt64},                   // one key past it
	} {
		c, err := LoadConfig([]byte(tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.MemoryLimit(); got != tt.want {
			t.Errorf("MemoryLimit of %q = %d, want %d", tt.yaml, got, tt.want)
		}
	}
}
