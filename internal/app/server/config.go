package server

import (
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/app/conffile"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/app/rlqs"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/app/tracing"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Config is a server config file: the limiters of package config plus the
// store, server and envoy sections. docs/deploy.md is its reference.
type Config struct {
	// Limiters are the file's limiters.
	Limiters *config.File
	// Store is the store's URL, for storeurl.Open; "mem://" by default.
	// LoadConfig refuses a URL whose scheme storeurl does not know.
	Store string
	// StartWithoutStore says what New does when the store does not answer
	// its check at start: true starts the server anyway, not ready, and
	// Serve checks again in the background; false refuses to start. A
	// store that answers with an error (a bad database, a wrong password)
	// always stops the start.
	StartWithoutStore bool
	// HTTP and GRPC are the listen addresses; "" leaves the choice to the
	// command line and its defaults. GRPC "off" turns gRPC off.
	HTTP, GRPC string
	// Tokens are the bearer tokens the API accepts, with those of
	// TokenFile (one per line) read when the server starts or reloads.
	// With neither, the API is open.
	Tokens    []string
	TokenFile string
	// AdminTokens are the bearer tokens that may write plans, by the name
	// that the audit log gives their writes; they may decide too. With
	// none, no one may write a plan.
	AdminTokens map[string]string
	// Plans is the server.plans section: plans kept in the store.
	Plans PlansConfig
	// AuthMetrics puts /metrics behind the tokens too.
	AuthMetrics bool
	// OpenMetricsWithRequestValues lets /metrics carry series labelled by
	// requests' values (the envoy section's detailed_metric and
	// value_to_metric stat keys, RLQS bucket ids) with /metrics open;
	// without it, such a config needs AuthMetrics with tokens or a
	// client CA, and New and Reload refuse it.
	OpenMetricsWithRequestValues bool
	// TLSCert and TLSKey are the PEM files of the certificate served on
	// HTTP and gRPC; both or neither.
	TLSCert, TLSKey string
	// DrainTimeout bounds the wait for requests in flight at shutdown.
	DrainTimeout time.Duration
	// HealthWindow, HealthThreshold and HealthMinRequests say when a
	// limiter is degraded: over the last HealthWindow it decided at least
	// HealthMinRequests requests and rejected more than HealthThreshold
	// (a fraction in (0, 1]) of them.
	HealthWindow      time.Duration
	HealthThreshold   float64
	HealthMinRequests int64
	// StoreTimeout, StoreFailure and Inheritance configure every limiter
	// (sluice.WithStoreTimeout, WithStoreFailure, WithInheritance).
	StoreTimeout time.Duration
	StoreFailure sluice.StoreFailure
	Inheritance  sluice.Inheritance
	// Envoy is the envoy section, or nil when the file has none.
	Envoy *envoyrls.Domains
	// RLQS is the rlqs section, Envoy's rate limit quota service, or nil
	// when the file has none.
	RLQS *rlqs.Config
	// RateLimit are envoyproxy/ratelimit's settings: the ratelimit
	// section's keys over its environment variables, which say where its
	// config files are and shape the answers of Envoy's service.
	RateLimit envoyrls.Settings

	// ClientCA is a PEM file of the certificate authorities whose client
	// certificates the APIs require, over TLS; "" requires none.
	ClientCA string
	// AllowedOrigins are the origins (scheme://host[:port]) whose web
	// pages may send the API requests that change state; other
	// cross-origin browser requests are refused.
	AllowedOrigins []string
	// HTTPLimits, GRPCLimits and MaxKeys bound what clients can make the
	// server hold, and Simulate its simulations: docs/deploy.md's
	// Hardening section lists them with their defaults.
	HTTPLimits HTTPLimits
	GRPCLimits GRPCLimits
	// RLQSLimits bound the streams of Envoy's rate limit quota service.
	RLQSLimits rlqs.Limits
	// MaxKeys bounds the keys of the in-memory store (mem://); with
	// another store, the keys that fail_local keeps in this process's
	// memory while the store fails, shared among the limiters and the
	// envoy section (fallbackKeys).
	MaxKeys  int64
	Simulate Simulate
	// Tracing is the server.tracing section, where OpenTelemetry traces
	// go; nil, without one, traces nothing.
	Tracing *tracing.Config

	// where the shares of max_connections were set, or nil: unset, they
	// follow a max_connections set below their defaults.
	httpPerClientNode, grpcPerClientNode, grpcReservedNode *yaml.Node
	rlqsNode                                               *yaml.Node // the rlqs section, or nil
}

// HTTPLimits bound the HTTP server's connections.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers,
	// ReadTimeout of the whole request, body included; WriteTimeout
	// bounds the writing of the response, counted from the end of the
	// headers (from the end of the wait for a consume with max_wait_ms);
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers of a request.
	MaxHeaderBytes int64
	// MaxConnections bounds the open connections. At the bound, a new
	// connection closes the one idle the longest, else the one that has
	// waited the longest for its first request, else it is closed. Of
	// them, ReservedForHealth are kept for /healthz, /readyz and
	// /healthz/limiters: other requests in progress may hold at most
	// MaxConnections-ReservedForHealth; past that they are answered 503.
	MaxConnections, ReservedForHealth int64
	// MaxConnectionsPerClient bounds the open connections of one client
	// address; at the bound, a new one closes one of the client's own
	// that the rules above would close, else it is closed. It is at most
	// MaxConnections.
	MaxConnectionsPerClient int64
}

// GRPCLimits bound the gRPC server's connections and calls.
type GRPCLimits struct {
	// MaxConnections bounds the open connections. At the bound, a new
	// connection closes one that made no call for a while, if any: first
	// of those that never made a rate-limit call (ShouldRateLimit, RLQS),
	// else of those that did; else it is closed. Of them,
	// ReservedForCalls are kept for connections that made a rate-limit
	// call: the others hold at most MaxConnections-ReservedForCalls.
	// MaxConnectionsPerClient bounds the connections of one client
	// address, which at its bound closes one of its own, or is refused.
	MaxConnections, ReservedForCalls, MaxConnectionsPerClient int64
	// MaxConcurrentStreams bounds the calls in progress on a connection,
	// and MaxRecvMsgBytes the size of a request.
	MaxConcurrentStreams, MaxRecvMsgBytes int64
	// HandshakeTimeout bounds a new connection's TLS and HTTP/2
	// handshakes.
	HandshakeTimeout time.Duration
	// KeepaliveTime is how long a connection may be silent before the
	// server pings it, and KeepaliveTimeout how long the server then
	// waits for the answer before it closes it.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MinPingInterval is the shortest interval between a client's pings
	// that the server tolerates; a client pinging more often is closed.
	MinPingInterval time.Duration
	// MaxConnectionIdle closes a connection that has had no call for that
	// long; MaxConnectionAge closes any connection after that long (with
	// a jitter of ±10%), giving its calls MaxConnectionAgeGrace to end.
	MaxConnectionIdle, MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// PlansConfig is the server.plans section.
type PlansConfig struct {
	// Enabled gives every limiter the plans of the store (docs/plans.md),
	// which the admin API writes.
	Enabled bool
	// PollInterval is how often the process reads the plans' change log:
	// a plan written through another process is enforced here within
	// PollInterval plus planCacheTTL and a store round trip.
	PollInterval time.Duration
}

// DefaultPlansPollInterval is server.plans.poll_interval's default.
const DefaultPlansPollInterval = time.Second

// Simulate configures GET /api/v1/simulate.
type Simulate struct {
	// Enabled serves it; when false it answers 404.
	Enabled bool
	// MaxConcurrent bounds the simulations that run at once; past it a
	// request is answered 503 with code busy.
	MaxConcurrent int64
	// MaxRequests bounds the requests of one simulation, counted from its
	// traffic spec before any is made.
	MaxRequests int64
}

// The defaults of a Config's fields.
const (
	DefaultHTTP              = "127.0.0.1:8080"
	DefaultGRPC              = "127.0.0.1:8081"
	DefaultStore             = "mem://"
	DefaultDrainTimeout      = 10 * time.Second
	DefaultHealthWindow      = time.Minute
	DefaultHealthThreshold   = 0.9
	DefaultHealthMinRequests = 10
	DefaultMaxKeys           = 1_000_000
)

// DefaultHTTPLimits, DefaultGRPCLimits and DefaultSimulate are the
// defaults of the server's limits.
var (
	DefaultHTTPLimits = HTTPLimits{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute, // past the 90s of Go's and most clients' pools
		MaxHeaderBytes:    16 << 10,
		MaxConnections:    4096,
		ReservedForHealth: 64,
		// An eighth: a client behind which many callers share an
		// address (a proxy, a NAT) needs its own setting anyway.
		MaxConnectionsPerClient: 512,
	}
	DefaultGRPCLimits = GRPCLimits{
		MaxConnections: 1024,
		// An Envoy opens a connection per worker thread (one per CPU)
		// and upstream cluster; a quarter of the slots is many Envoys.
		ReservedForCalls:        256,
		MaxConnectionsPerClient: 256,
		MaxConcurrentStreams:    100, // RFC 9113 §6.5.2's least recommended value
		MaxRecvMsgBytes:         256 << 10,
		HandshakeTimeout:        10 * time.Second,
		KeepaliveTime:           time.Minute,
		KeepaliveTimeout:        20 * time.Second,
		MinPingInterval:         10 * time.Second,
		MaxConnectionIdle:       5 * time.Minute,
		MaxConnectionAge:        30 * time.Minute,
		MaxConnectionAgeGrace:   10 * time.Second,
	}
	// One simulation at a time leaves the other cores to the API: one of
	// a million requests takes a core for a quarter to half a second.
	DefaultSimulate = Simulate{Enabled: true, MaxConcurrent: 1, MaxRequests: 1_000_000}
)

// The sizing of the Go memory limit, MemoryLimit.
const (
	// MemoryPerKey is the heap, in bytes, a key of the in-memory store
	// may take: above every policy of docs/deploy.md's table (115 to 203
	// bytes with keys of 16 bytes, BenchmarkMemoryPerKey) with keys of up
	// to about 50 bytes; not a sliding_log of more than about 25 entries
	// (4 more bytes each).
	MemoryPerKey = 256
	// MemoryHeadroom is what the limit allows beyond the keys, in bytes:
	// the runtime, the connections and what they buffer (an idle server
	// takes about 25 MB, one under TestHostileClients' attack 75 to 90
	// MB) and the collector's own slack.
	MemoryHeadroom = 128 << 20
	// RLQSMemoryPerBucket is the heap, in bytes, a bucket of the quota
	// service may take, with its fleet, its keys and its share of the
	// streams' bookkeeping: above the 1,496 bytes rlqs's
	// BenchmarkBucketMemory measures for bucket ids of 20 bytes, below
	// the 2,221 of ids of 276 bytes. Counted only with an rlqs section.
	RLQSMemoryPerBucket = 2 << 10
)

// MemoryLimit is the Go memory limit, in bytes, that sluice serve sets
// when the environment sets no GOMEMLIMIT: MaxKeys keys of MemoryPerKey
// (the in-memory store's bound; with another store, room for fail_local's
// keys during an outage), the envoyproxy/ratelimit local cache, with an
// rlqs section the quota service's bound on buckets
// (server.limits.rlqs.max_buckets) of RLQSMemoryPerBucket, and
// MemoryHeadroom: 372 MiB with the defaults and no rlqs section, 411 MiB
// with one. It saturates at math.MaxInt64 (no limit) where the sum would
// overflow.
func (c *Config) MemoryLimit() int64 {
	keys := int64(math.MaxInt64)
	if c.MaxKeys <= (math.MaxInt64-MemoryHeadroom)/MemoryPerKey {
		keys = c.MaxKeys * MemoryPerKey
	}
	var buckets int64
	if c.RLQS != nil {
		buckets = int64(c.RLQSLimits.MaxBuckets) * RLQSMemoryPerBucket // at most 2^31 × 2 KiB: no overflow
	}
	total := keys
	for _, n := range []int64{int64(c.RateLimit.LocalCacheSizeInBytes), buckets, MemoryHeadroom} {
		if total > math.MaxInt64-n {
			return math.MaxInt64
		}
		total += n
	}
	return total
}

//go:embed example.yaml
var exampleYAML []byte

// DefaultConfig is the config sluice serve runs without --config: the
// built-in example, or, when envoyproxy/ratelimit's environment variables
// name its config files (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, ...), those
// files alone on the in-memory store, as envoyproxy/ratelimit would serve
// them.
func DefaultConfig() (*Config, error) {
	s, err := envoyrls.SettingsFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if s.Files {
		return LoadConfig([]byte("store: " + DefaultStore + "\n"))
	}
	return LoadConfig(Example())
}

// Example returns the built-in example config that sluice serve runs
// without --config.
func Example() []byte { return exampleYAML }

// LoadConfig decodes and validates a server config file. Its errors are
// *config.Error values with the YAML path and line. A Symfony rate limiter
// file (framework: rate_limiter:) is read with config.LoadSymfony, its
// limiters served with every server setting at its default.
func LoadConfig(data []byte) (*Config, error) { return loadConfig(data, "") }

// LoadConfigFile reads the file at path and loads it with LoadConfig; its
// errors name the file. Only a regular file of at most conffile.MaxBytes,
// or a link to one, is read.
func LoadConfigFile(path string) (*Config, error) {
	data, err := conffile.Read(path)
	if err != nil {
		return nil, &config.Error{File: path, Msg: conffile.Reason(err), Err: err}
	}
	return loadConfig(data, path)
}

// loadConfig is LoadConfig of the contents of file ("" when there is no
// file), whose *config.Error values then name it.
func loadConfig(data []byte, file string) (*Config, error) {
	inFile := func(err error) error {
		var e *config.Error
		if file == "" || !errors.As(err, &e) {
			return err
		}
		withFile := *e
		withFile.File = file
		return &withFile
	}
	if isSymfony(data) {
		f, err := config.LoadSymfony(data)
		return symfonyConfig(f, inFile(err))
	}
	c := newConfig()
	var section bool
	f, err := config.LoadWith(data, c.sections(&section))
	if err != nil {
		return nil, inFile(err)
	}
	c.Limiters = f
	return c, c.rateLimitFromEnv(section)
}

// rateLimitFromEnv reads envoyproxy/ratelimit's settings from the
// environment when the file has no ratelimit section.
func (c *Config) rateLimitFromEnv(section bool) (err error) {
	if !section {
		c.RateLimit, err = envoyrls.SettingsFromEnv(os.LookupEnv)
	}
	return err
}

// fallbackKeys is the most keys each of limiters limiters, and the envoy
// section, keeps in this process's memory when the store fails under
// fail_local: MaxKeys among them all, so that a client sending new keys
// during an outage cannot grow the memory past what MaxKeys allows on
// mem://. It bounds nothing on mem://, which cannot fail.
func (c *Config) fallbackKeys(limiters int) int {
	return int(max(c.MaxKeys/int64(limiters+1), 1))
}

func newConfig() *Config {
	return &Config{
		Store:             DefaultStore,
		StartWithoutStore: true,
		DrainTimeout:      DefaultDrainTimeout,
		HealthWindow:      DefaultHealthWindow,
		HealthThreshold:   DefaultHealthThreshold,
		HealthMinRequests: DefaultHealthMinRequests,
		StoreTimeout:      sluice.DefaultStoreTimeout,
		Inheritance:       sluice.InheritProportionally,
		HTTPLimits:        DefaultHTTPLimits,
		GRPCLimits:        DefaultGRPCLimits,
		RLQSLimits:        rlqs.DefaultLimits,
		MaxKeys:           DefaultMaxKeys,
		Simulate:          DefaultSimulate,
		Plans:             PlansConfig{PollInterval: DefaultPlansPollInterval},
	}
}

// sections are the decoders of the file's sections; the ratelimit one
// sets *rateLimit.
func (c *Config) sections(rateLimit *bool) map[string]config.Section {
	return map[string]config.Section{
		"store": func(path string, n *yaml.Node, _ *config.File) error {
			if err := str(&c.Store)(path, n); err != nil {
				return err
			}
			// The rest of the URL is checked when the store is opened.
			if _, err := storeurl.Parse(c.Store); err != nil {
				return yamlnode.Errorf(path, n, "%v", err)
			}
			return nil
		},
		"server": func(path string, n *yaml.Node, _ *config.File) error {
			if err := decodeMapping(path, n, c.serverFields()); err != nil {
				return err
			}
			if (c.TLSCert == "") != (c.TLSKey == "") {
				return yamlnode.Errorf(path+".tls", nil, "cert and key go together, got only one")
			}
			if c.ClientCA != "" && c.TLSCert == "" {
				return yamlnode.Errorf(path+".tls", nil, "client_ca needs cert and key: client certificates are checked over TLS")
			}
			if l := c.HTTPLimits; l.ReservedForHealth >= l.MaxConnections {
				return yamlnode.Errorf(path+".limits.http", nil, "reserved_for_health (%d) must be below max_connections (%d)",
					l.ReservedForHealth, l.MaxConnections)
			}
			return c.connectionShares(path + ".limits")
		},
		"ratelimit": func(path string, n *yaml.Node, _ *config.File) (err error) {
			*rateLimit = true
			c.RateLimit, err = envoyrls.DecodeSettings(path, n, os.LookupEnv)
			return err
		},
		"envoy": func(path string, n *yaml.Node, f *config.File) error {
			d, err := envoyrls.DecodeWith(path, n, func(name string) (envoyrls.LimiterInfo, bool) {
				l, ok := f.Limiters[name]
				if !ok {
					return envoyrls.LimiterInfo{}, false
				}
				p, owes := l.Policy.(interface{ HoldsDebt() bool })
				return envoyrls.LimiterInfo{Owes: owes && p.HoldsDebt(), Slots: slotsOf(l)}, true
			})
			c.Envoy = d
			return err
		},
		"rlqs": func(path string, n *yaml.Node, f *config.File) (err error) {
			c.rlqsNode = n
			c.RLQS, err = rlqs.Decode(path, n, func(name string) (rlqs.LimiterInfo, bool) {
				l, ok := f.Limiters[name]
				if !ok {
					return rlqs.LimiterInfo{}, false
				}
				return rlqs.LimiterInfo{Window: l.Policy.Window(), Slots: slotsOf(l)}, true
			})
			return err
		},
	}
}

// slotsOf says what in l takes slots, which only the HTTP API's release
// gives back (a concurrency policy, or a penalty box of one), or "" when
// nothing does: its policy, else the first of its overrides that does.
func slotsOf(l config.Limiter) string {
	if takesSlots(l.Policy) {
		return "its policy is " + l.Policy.String()
	}
	for _, o := range l.Overrides {
		if !takesSlots(o.Policy) {
			continue
		}
		return fmt.Sprintf("its override for the %s %q, at line %d, is %v", keyOrPrefix(o.Prefix), o.Key, o.Line, o.Policy)
	}
	return ""
}

// keyOrPrefix names what an override or a plan is for.
func keyOrPrefix(prefix bool) string {
	if prefix {
		return "prefix"
	}
	return "key"
}

func takesSlots(p sluice.Policy) bool {
	s, ok := p.(interface{ TakesSlots() bool })
	return ok && s.TakesSlots()
}

// serverFields are the keys of the server section.
func (c *Config) serverFields() fields {
	return fields{
		"http":                str(&c.HTTP),
		"grpc":                str(&c.GRPC),
		"drain_timeout":       positiveDuration(&c.DrainTimeout),
		"start_without_store": boolean(&c.StartWithoutStore),
		"store_timeout":       positiveDuration(&c.StoreTimeout),
		"store_failure": enum(&c.StoreFailure, map[string]sluice.StoreFailure{
			"fail_closed": sluice.FailClosed, "fail_open": sluice.FailOpen, "fail_local": sluice.FailLocal,
			"fail_share": sluice.FailShare}),
		"inheritance": enum(&c.Inheritance, map[string]sluice.Inheritance{
			"proportionally": sluice.InheritProportionally, "as_is": sluice.InheritAsIs, "reset": sluice.InheritReset, "additive": sluice.InheritAdditive}),
		"auth": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{
				"tokens":                           tokenList(&c.Tokens),
				"token_file":                       str(&c.TokenFile),
				"admin_tokens":                     adminTokens(&c.AdminTokens),
				"metrics":                          boolean(&c.AuthMetrics),
				"open_metrics_with_request_values": boolean(&c.OpenMetricsWithRequestValues),
			})
		},
		"tls": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{"cert": str(&c.TLSCert), "key": str(&c.TLSKey), "client_ca": str(&c.ClientCA)})
		},
		"allowed_origins": origins(&c.AllowedOrigins),
		"limits": func(path string, n *yaml.Node) error {
			h, g := &c.HTTPLimits, &c.GRPCLimits
			return decodeMapping(path, n, fields{
				"max_keys": func(path string, n *yaml.Node) error {
					return positiveInt(&c.MaxKeys)(path, n)
				},
				"http": func(path string, n *yaml.Node) error {
					return decodeMapping(path, n, fields{
						"read_header_timeout": positiveDuration(&h.ReadHeaderTimeout),
						"read_timeout":        positiveDuration(&h.ReadTimeout),
						"write_timeout":       positiveDuration(&h.WriteTimeout),
						"idle_timeout":        positiveDuration(&h.IdleTimeout),
						"max_header_bytes":    positiveInt(&h.MaxHeaderBytes),
						"max_connections":     positiveInt(&h.MaxConnections),
						"reserved_for_health": positiveInt(&h.ReservedForHealth),
						"max_connections_per_client": func(path string, n *yaml.Node) error {
							c.httpPerClientNode = n
							return positiveInt(&h.MaxConnectionsPerClient)(path, n)
						},
					})
				},
				"rlqs": func(path string, n *yaml.Node) error {
					r := &c.RLQSLimits
					return decodeMapping(path, n, fields{
						"max_streams":                positiveCount(&r.MaxStreams),
						"max_streams_per_connection": positiveCount(&r.MaxStreamsPerConn),
						"max_streams_per_client":     positiveCount(&r.MaxStreamsPerClient),
						"max_buckets":                positiveCount(&r.MaxBuckets),
						"max_buckets_per_client":     positiveCount(&r.MaxBucketsPerClient),
						"max_buckets_per_stream":     positiveCount(&r.MaxBucketsPerStream),
						"max_report_buckets":         positiveCount(&r.MaxReportBuckets),
						"max_bucket_id_bytes":        positiveCount(&r.MaxIDBytes),
					})
				},
				"grpc": func(path string, n *yaml.Node) error {
					return decodeMapping(path, n, fields{
						"max_connections": positiveInt(&g.MaxConnections),
						"max_connections_per_client": func(path string, n *yaml.Node) error {
							c.grpcPerClientNode = n
							return positiveInt(&g.MaxConnectionsPerClient)(path, n)
						},
						"reserved_for_calls": func(path string, n *yaml.Node) error {
							c.grpcReservedNode = n
							return positiveInt(&g.ReservedForCalls)(path, n)
						},
						"max_concurrent_streams":   positiveInt(&g.MaxConcurrentStreams),
						"max_recv_msg_bytes":       positiveInt(&g.MaxRecvMsgBytes),
						"handshake_timeout":        positiveDuration(&g.HandshakeTimeout),
						"keepalive_time":           positiveDuration(&g.KeepaliveTime),
						"keepalive_timeout":        positiveDuration(&g.KeepaliveTimeout),
						"min_ping_interval":        positiveDuration(&g.MinPingInterval),
						"max_connection_idle":      positiveDuration(&g.MaxConnectionIdle),
						"max_connection_age":       positiveDuration(&g.MaxConnectionAge),
						"max_connection_age_grace": positiveDuration(&g.MaxConnectionAgeGrace),
					})
				},
			})
		},
		"plans": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{
				"enabled":       boolean(&c.Plans.Enabled),
				"poll_interval": positiveDuration(&c.Plans.PollInterval),
			})
		},
		"simulate": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{
				"enabled":        boolean(&c.Simulate.Enabled),
				"max_concurrent": positiveInt(&c.Simulate.MaxConcurrent),
				"max_requests":   positiveInt(&c.Simulate.MaxRequests),
			})
		},
		"health": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{
				"window":       positiveDuration(&c.HealthWindow),
				"threshold":    fraction(&c.HealthThreshold, false),
				"min_requests": positiveInt(&c.HealthMinRequests),
			})
		},
		"tracing": func(path string, n *yaml.Node) (err error) {
			c.Tracing, err = decodeTracing(path, n, os.LookupEnv)
			return err
		},
	}
}

// decodeTracing decodes the server.tracing section at path. Without an
// endpoint, one of the exporter's environment variables must name it
// (tracing.EndpointVariables), as lookup finds them.
func decodeTracing(path string, n *yaml.Node, lookup func(string) (string, bool)) (*tracing.Config, error) {
	t := &tracing.Config{SampleRatio: tracing.DefaultSampleRatio, ServiceName: tracing.DefaultServiceName}
	var endpoint *yaml.Node
	err := decodeMapping(path, n, fields{
		"endpoint": func(path string, n *yaml.Node) error {
			endpoint = n
			return str(&t.Endpoint)(path, n)
		},
		"insecure":     boolean(&t.Insecure),
		"ca_file":      str(&t.CAFile),
		"sample_ratio": fraction(&t.SampleRatio, true),
		"service_name": str(&t.ServiceName),
	})
	switch {
	case err != nil:
		return nil, err
	case endpoint != nil:
		// The exporter would take "http://host:4317" as a host named
		// "http" and fail at each export.
		if _, port, err := net.SplitHostPort(t.Endpoint); err != nil || port == "" {
			return nil, yamlnode.Errorf(path+".endpoint", endpoint, "must be the receiver's host:port, as in 127.0.0.1:4317, got %q", t.Endpoint)
		}
	case !slices.ContainsFunc(tracing.EndpointVariables, func(v string) bool { s, ok := lookup(v); return ok && s != "" }):
		return nil, yamlnode.Errorf(path, n, "needs an endpoint: the receiver's host:port, or the environment variable %s", tracing.EndpointVariables[1])
	}
	if t.Insecure && t.CAFile != "" {
		return nil, yamlnode.Errorf(path, n, "insecure and ca_file exclude each other: ca_file verifies the receiver over TLS")
	}
	if t.ServiceName == "" {
		return nil, yamlnode.Errorf(path+".service_name", n, "must not be empty")
	}
	return t, nil
}

// connectionShares checks the shares of max_connections of the limits
// section at path, and sets those not set from a max_connections set
// below their defaults: per client, the default or max_connections if
// lower; reserved for gRPC calls, the default or a quarter of
// max_connections if lower.
func (c *Config) connectionShares(path string) error {
	h, g := &c.HTTPLimits, &c.GRPCLimits
	switch n := c.httpPerClientNode; {
	case n == nil:
		h.MaxConnectionsPerClient = min(DefaultHTTPLimits.MaxConnectionsPerClient, h.MaxConnections)
	case h.MaxConnectionsPerClient > h.MaxConnections:
		return yamlnode.Errorf(path+".http.max_connections_per_client", n, "must be at most max_connections (%d), got %d",
			h.MaxConnections, h.MaxConnectionsPerClient)
	}
	switch n := c.grpcPerClientNode; {
	case n == nil:
		g.MaxConnectionsPerClient = min(DefaultGRPCLimits.MaxConnectionsPerClient, g.MaxConnections)
	case g.MaxConnectionsPerClient > g.MaxConnections:
		return yamlnode.Errorf(path+".grpc.max_connections_per_client", n, "must be at most max_connections (%d), got %d",
			g.MaxConnections, g.MaxConnectionsPerClient)
	}
	switch n := c.grpcReservedNode; {
	case n == nil:
		g.ReservedForCalls = min(DefaultGRPCLimits.ReservedForCalls, g.MaxConnections/4)
	case g.ReservedForCalls >= g.MaxConnections:
		// A new connection counts as one that made no call until it
		// makes one: some slots must be left to those.
		return yamlnode.Errorf(path+".grpc.reserved_for_calls", n, "must be below max_connections (%d), got %d",
			g.MaxConnections, g.ReservedForCalls)
	}
	return nil
}

// fields decodes the keys of a mapping, each by its function.
type fields map[string]func(path string, n *yaml.Node) error

// The server section is small and has no nested lists to expand, so each
// helper walks its node with a decoder of its own.

// decodeMapping decodes n, which must be a mapping, strictly: a key that
// fs does not have, or a duplicate key, is an error.
func decodeMapping(path string, n *yaml.Node, fs fields) error {
	var d yamlnode.Decoder
	m, err := d.Mapping(path, n)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(fs))
	if err := m.Check(keys, nil, yamlnode.PlainUnknown(keys)); err != nil {
		return err
	}
	for i, k := range m.Keys {
		if err := fs[k.Value](yamlnode.Join(path, k.Value), m.Vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func str(dst *string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) (err error) {
		var d yamlnode.Decoder
		*dst, err = d.String(path, n)
		return err
	}
}

func boolean(dst *bool) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) (err error) {
		var d yamlnode.Decoder
		*dst, err = d.Bool(path, n)
		return err
	}
}

// strList decodes a list of strings, each of which check accepts: check
// returns what is wrong with one, or "".
func strList(dst *[]string, check func(string) string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		items, err := d.List(path, n)
		if err != nil {
			return err
		}
		*dst = nil
		for i, item := range items {
			p := yamlnode.Index(path, i)
			s, err := d.String(p, item)
			if err != nil {
				return err
			}
			if msg := check(s); msg != "" {
				return yamlnode.Errorf(p, item, "%s", msg)
			}
			*dst = append(*dst, s)
		}
		return nil
	}
}

// tokenList decodes a list of bearer tokens: none empty, none with
// whitespace, which a header cannot carry inside a token. The message
// does not repeat a token, which is a secret.
func tokenList(dst *[]string) func(string, *yaml.Node) error {
	return strList(dst, func(t string) string {
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return "a token must not be empty nor hold whitespace"
		}
		return ""
	})
}

// adminTokens decodes a mapping of names to admin tokens, each token as
// tokenList checks them.
func adminTokens(dst *map[string]string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		m, err := d.Mapping(path, n)
		if err != nil {
			return err
		}
		*dst = make(map[string]string, len(m.Keys))
		for i, k := range m.Keys {
			p := yamlnode.Join(path, k.Value)
			t, err := d.String(p, m.Vals[i])
			if err != nil {
				return err
			}
			if t == "" || strings.ContainsAny(t, " \t\r\n") {
				return yamlnode.Errorf(p, m.Vals[i], "a token must not be empty nor hold whitespace")
			}
			(*dst)[k.Value] = t
		}
		return nil
	}
}

// origins decodes a list of origins for http.CrossOriginProtection,
// each scheme://host[:port].
func origins(dst *[]string) func(string, *yaml.Node) error {
	return strList(dst, func(o string) string {
		if err := http.NewCrossOriginProtection().AddTrustedOrigin(o); err != nil {
			return "must be an origin such as https://app.example.com, got " + strconv.Quote(o)
		}
		return ""
	})
}

func positiveDuration(dst *time.Duration) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		n, err := d.Scalar(path, n, "a duration")
		if err != nil {
			return err
		}
		if n.ShortTag() != "!!str" {
			return yamlnode.Errorf(path, n, "must be a duration with a unit, as in 10s or 1 minute, got %s", yamlnode.Describe(n))
		}
		v, err := config.ParseDuration(n.Value)
		if err != nil {
			return yamlnode.Errorf(path, n, "%v, got %q", err, n.Value)
		}
		if v <= 0 {
			return yamlnode.Errorf(path, n, "must be positive, got %s", n.Value)
		}
		*dst = v
		return nil
	}
}

func positiveInt(dst *int64) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		v, err := d.Int64(path, n)
		if err != nil {
			return err
		}
		if v <= 0 {
			return yamlnode.Errorf(path, n, "must be positive, got %d", v)
		}
		*dst = v
		return nil
	}
}

// positiveCount is positiveInt for an int, at most 1<<31-1.
func positiveCount(dst *int) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var v int64
		if err := positiveInt(&v)(path, n); err != nil {
			return err
		}
		if v > math.MaxInt32 {
			return yamlnode.Errorf(path, n, "must be at most %d, got %d", math.MaxInt32, v)
		}
		*dst = int(v)
		return nil
	}
}

// fraction decodes a number in (0, 1], or [0, 1] when zero is allowed.
func fraction(dst *float64, zero bool) func(string, *yaml.Node) error {
	what := "a number above 0 and at most 1"
	if zero {
		what = "a number from 0 to 1"
	}
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		n, err := d.Scalar(path, n, what)
		if err != nil {
			return err
		}
		v, err := strconv.ParseFloat(n.Value, 64)
		if tag := n.ShortTag(); (tag != "!!float" && tag != "!!int") || err != nil || math.IsNaN(v) || v < 0 || v == 0 && !zero || v > 1 {
			return yamlnode.Errorf(path, n, "must be %s, got %s", what, n.Value)
		}
		*dst = v
		return nil
	}
}

func enum[T any](dst *T, values map[string]T) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		name, err := d.String(path, n)
		v, ok := values[name]
		if err != nil || !ok {
			names := slices.Sorted(maps.Keys(values))
			return yamlnode.Errorf(path, n, "must be one of %s, got %q", strings.Join(names, ", "), n.Value)
		}
		*dst = v
		return nil
	}
}
