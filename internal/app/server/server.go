// Package server is sluice serve: a rate-limit server over the limiters of
// a config file, with an HTTP JSON API, Envoy's rate limit service on
// gRPC, Prometheus metrics, health endpoints, reload without dropping
// requests and graceful shutdown. docs/deploy.md describes it for users.
package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/conffile"
	"github.com/sluicehq/sluice/internal/app/envoyrls"
	"github.com/sluicehq/sluice/internal/app/outage"
	"github.com/sluicehq/sluice/internal/app/plans"
	"github.com/sluicehq/sluice/internal/app/rlqs"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/app/tracing"
	"github.com/sluicehq/sluice/memstore"
)

// Server serves the limiters of a Config. Make one with New; it is safe
// for concurrent use. Serve runs it; Reload swaps its configuration.
type Server struct {
	log     *slog.Logger
	store   *storeurl.Store
	clock   sluice.Clock // consume waits for max_wait_ms on it (sleep.On)
	now     func() time.Time
	started time.Time
	metrics *metrics
	hot     *hotKeys
	outage  *outage.Log  // store failures, a few lines an outage
	base    driver.Store // the store under the limiters: store's, each answer told to outage
	envoy   *envoyrls.Service
	rlqs    *rlqs.Service
	// rlqsKeys holds the keys of the quota service's buckets on mem://;
	// nil on other stores.
	rlqsKeys *memstore.Store
	// plans is the store's plans as this process read them last
	// (planapi.go); it reads nothing while server.plans is off.
	plans       *plans.Catalog
	planMetrics planMetrics
	// planHead is the plans' change syncPlans read last, and slotPlans the
	// plan that takes slots it last logged for each limiter Envoy reaches;
	// only syncPlans touches them, from one goroutine at a time.
	planHead  uint64
	slotPlans map[string]plans.Plan
	// tracing exports the spans of tracer, both nil when server.tracing
	// is off: then nothing traces, and no wrapper of the store or
	// interceptor is there to cost a decision anything.
	tracing *tracing.Provider
	tracer  trace.Tracer
	handler http.Handler
	extra   []route     // from WithHandler
	tls     *tls.Config // nil without TLS

	// admission bounds the HTTP requests in progress other than health
	// checks, and simSlots the simulations of GET /api/v1/simulate.
	admission admission
	simSlots  chan struct{}
	simQueue  time.Duration // simQueue but in tests
	// httpCap and grpcCap hold Serve's listeners, for the tests.
	httpCap   atomic.Pointer[connCap]
	grpcCap   atomic.Pointer[grpcCap]
	grpcGrace time.Duration                   // grpcGrace but in tests
	wrapStore func(driver.Store) driver.Store // withStoreWrapper's, or nil

	// loopbackOnly is WithHTTPAddress's: /metrics is reached from this
	// machine only.
	loopbackOnly bool

	path   string           // the config file to reload from, or ""
	reload <-chan os.Signal // SIGHUP, or nil

	reloadMu   sync.Mutex // serialises Reload
	cur        atomic.Pointer[snapshot]
	failed     failedRead // the config file at the last failed reload, guarded by reloadMu
	badEnvoy   [32]byte   // the stamp of envoyproxy/ratelimit files that failed to load, guarded by reloadMu
	envoyWatch string     // the last error looking at those files, guarded by reloadMu

	// storeErr is the error of the store's last check while it has not
	// passed one since the start, nil once it has: until then /readyz
	// answers 503 and Serve checks again in the background.
	storeErr     atomic.Pointer[error]
	recheckEvery time.Duration // the first wait before checking again; it doubles up to maxRecheck

	closeOnce sync.Once
	closeErr  error
}

// checkTimeout bounds each check of the store: its connection, ping and,
// for SQL stores, the creation of its table.
const checkTimeout = 5 * time.Second

// The waits between checks of a store that was unreachable at start.
const (
	firstRecheck = time.Second
	maxRecheck   = 30 * time.Second
)

// snapshot is one configuration of the server, never changed once
// published: requests load it once and finish on it even if a reload
// publishes another meanwhile.
type snapshot struct {
	cfg      *Config
	limiters map[string]*limiter
	order    []string          // file order
	envoy    *envoyrls.Domains // the envoy section and envoyproxy/ratelimit's files
	envoyDir [32]byte          // the stamp of those files when they were read
	tokens   [][]byte          // bearer tokens; none: the API is open
	admins   []adminToken      // the tokens that may write plans too
	hash     [32]byte          // of the file it was loaded from, or zero
	fileStat fileStamp         // of the file when it was read
	// origins refuses the cross-origin browser requests that change
	// state, but from cfg.AllowedOrigins.
	origins *http.CrossOriginProtection
}

// limiter is a named limiter of a snapshot.
type limiter struct {
	name   string
	policy sluice.Policy
	l      *sluice.Limiter
	limit  int64
	stats  *stats // kept across reloads while the policy stays the same
	// circuit is whether l's circuit breaker keeps calls from the store,
	// as its listener last heard.
	circuit *atomic.Bool
	// version and plan are the config's version: and what limits the
	// keys (plans.go), which a reload compares.
	version uint64
	plan    string
	// overrides is the config's limiter when it has overrides (policies
	// per key), else nil.
	overrides *config.Limiter
	// resolve is the policy of a key with plans on (planFunc), else nil.
	resolve sluice.PolicyFunc
	leased  bool // a lease (lease:), which takes no plans
	// envoy names the Envoy service whose descriptors or buckets name
	// the limiter, which never releases a slot, or is "": its plans
	// must take no slots.
	envoy string
	// shadow is the config's shadow: key (sluice.WithShadow).
	shadow bool
}

// Option configures New.
type Option func(*Server)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithHTTPAddress tells the server the address its HTTP listener will
// have: one on a loopback address serves /metrics to this machine only,
// which may then carry series labelled by requests' values without
// tokens (see checkMetricsExposure).
func WithHTTPAddress(addr string) Option {
	return func(s *Server) { s.loopbackOnly = isLoopback(addr) }
}

// isLoopback reports whether addr, host:port, listens on a loopback
// address only: "localhost", 127.0.0.0/8 or ::1, never "" or a wildcard.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// WithConfigFile names the file cfg was loaded from: Serve reloads it when
// it changes (polled each second) and on each signal of reload.
func WithConfigFile(path string, reload <-chan os.Signal) Option {
	return func(s *Server) { s.path, s.reload = path, reload }
}

// WithHandler adds h at the http.ServeMux pattern, for endpoints the
// package does not have. A pattern whose path starts with /api/ is behind
// the API's bearer tokens.
func WithHandler(pattern string, h http.Handler) Option {
	return func(s *Server) { s.extra = append(s.extra, route{pattern, h}) }
}

type route struct {
	pattern string
	h       http.Handler
}

// withClock sets the clocks, for tests; a clock that sleeps (a fake
// clock) is what consume sleeps on too.
func withClock(c sluice.Clock, now func() time.Time) Option {
	return func(s *Server) { s.clock, s.now = c, now }
}

// withStoreWrapper wraps the store under the limiters in w, for tests
// that break it.
func withStoreWrapper(w func(driver.Store) driver.Store) Option {
	return func(s *Server) { s.wrapStore = w }
}

// withGRPCGrace sets how long the gRPC listener spares a connection after
// its accept and its calls (grpcGrace), for tests.
func withGRPCGrace(d time.Duration) Option { return func(s *Server) { s.grpcGrace = d } }

// New opens cfg's store and builds its limiters. The caller must call
// Serve or Close to close the store.
func New(ctx context.Context, cfg *Config, opts ...Option) (*Server, error) {
	s := &Server{
		log:          slog.New(slog.DiscardHandler),
		clock:        sluice.MonotonicClock(),
		now:          time.Now,
		metrics:      newMetrics(),
		hot:          newHotKeys(),
		recheckEvery: firstRecheck,
		simSlots:     make(chan struct{}, cfg.Simulate.MaxConcurrent),
		simQueue:     simQueue,
		grpcGrace:    grpcGrace,
	}
	for _, o := range opts {
		o(s)
	}
	s.started = s.now()
	if cfg.TLSCert != "" {
		var err error
		if s.tls, err = tlsConfig(cfg); err != nil {
			return nil, err
		}
	}
	st, err := storeurl.Open(ctx, cfg.Store, storeurl.WithMemMaxKeys(int(cfg.MaxKeys)), storeurl.WithSweep(s.swept))
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.store = st
	if cfg.Tracing != nil {
		if s.tracing, err = tracing.New(ctx, *cfg.Tracing, s.log); err != nil {
			st.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
		s.tracer = s.tracing.Tracer()
		endpoint := cfg.Tracing.Endpoint
		if endpoint == "" {
			endpoint = "from OTEL_EXPORTER_OTLP_* variables"
		}
		s.log.Info("exporting traces", "endpoint", endpoint, "sample_ratio", cfg.Tracing.SampleRatio)
	}
	if st.SweepInterval > 0 {
		s.log.Info("deleting the store's expired rows in the background", "sweep_interval", st.SweepInterval)
	}
	s.outage = outage.New(s.log, s.now)
	s.base = st.Store
	if s.wrapStore != nil {
		s.base = s.wrapStore(s.base)
	}
	s.base = watchAnswers(s.base, s.outage)
	planStore := s.storeFor(s.base, "sluice/plans") // "/" is in no limiter's name
	if st.Scheme == "mem" {
		// Plans in a store of their own, which max_keys never evicts.
		planStore = memstore.New()
	}
	s.plans = plans.New(planStore, s.now, func(d time.Duration) { s.planMetrics.lag.Observe(d.Seconds()) })
	s.planMetrics = newPlanMetrics(s.metrics.reg)
	if st.Scheme == "mem" {
		// The keys of the quota service's buckets in a store of their
		// own, bounded by its bound on buckets, so that Envoys' buckets
		// never evict other limiters' keys at max_keys.
		s.rlqsKeys = memstore.New(memstore.WithMaxKeys(rlqsKeysPerBucket * cfg.RLQSLimits.MaxBuckets))
	}
	if err := s.checkStore(ctx); err != nil {
		if !errors.Is(err, storeurl.ErrUnreachable) || !cfg.StartWithoutStore {
			s.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
		s.log.Error("the store is unreachable at start: serving without it, /readyz answers 503 and each limiter does what "+
			"server.store_failure says until the store answers; checking again in the background",
			"store", st.URL, "err", err, "store_failure", failureLabel(cfg.StoreFailure))
	}
	if cfg.Plans.Enabled && s.storeErr.Load() == nil {
		if err := s.syncPlans(ctx); err != nil {
			s.log.Error("reading the plans failed; starting without them, reading them again every poll_interval", "err", err)
		}
	}
	snap, err := s.build(cfg, nil)
	if err != nil {
		s.Close()
		return nil, err
	}
	if s.path != "" {
		snap.fileStat, snap.hash, _ = readStamp(s.path)
	}
	s.cur.Store(snap)
	s.metrics.declare(snap)
	if cfg.Plans.Enabled {
		s.logSlotPlans(snap)
	}
	if rl := cfg.RateLimit; rl.Files {
		s.log.Info("serving envoyproxy/ratelimit's config files", "runtime_root", rl.RuntimeRoot,
			"runtime_subdirectory", rl.RuntimeSubdirectory, "runtime_appdirectory", rl.RuntimeAppDirectory)
	}
	s.envoy = envoyrls.New(snap.envoy, snap.lookup,
		envoyrls.WithLogger(s.log), envoyrls.WithObserver(s.observe),
		// "/" is not allowed in limiter names: the prefix is no limiter's.
		envoyrls.WithStore(s.storeFor(s.base, "envoy/ratelimit")), envoyrls.WithOutageLog(s.outage), envoyrls.WithTracer(s.tracer),
		envoyrls.WithStoreTimeout(cfg.StoreTimeout), envoyrls.WithStoreFailure(cfg.StoreFailure),
		envoyrls.WithLocalMaxKeys(cfg.fallbackKeys(len(cfg.Limiters.Order))),
		envoyrls.WithClock(s.now), envoyrls.WithRegistry(s.metrics.reg))
	rlqsOpts := []rlqs.Option{rlqs.WithLogger(s.log), rlqs.WithClock(s.now), rlqs.WithRegistry(s.metrics.reg),
		rlqs.WithObserver(s.observeCharge), rlqs.WithShadow(s.shadow),
		rlqs.WithStoreTimeout(cfg.StoreTimeout), rlqs.WithLimits(cfg.RLQSLimits), rlqs.WithTracer(s.tracer)}
	if s.rlqsKeys == nil {
		// Fleets on the limiters' store: sluice processes on one store
		// share them. "/" is in no limiter's name. On mem:// they stay in
		// the service's memory, as long as their buckets.
		rlqsOpts = append(rlqsOpts, rlqs.WithFleetStore(s.storeFor(s.base, "rlqs/fleet")))
	}
	s.rlqs = rlqs.New(cfg.RLQS, snap.lookup, rlqsOpts...)
	s.handler = s.routes()
	return s, nil
}

// swept counts what a batch of the store's sweep of expired rows did, on
// the sweep's goroutine. A failed batch ends its sweep until the next
// interval, so this logs at most a line per interval.
func (s *Server) swept(n int64, err error) {
	s.metrics.swept.Add(float64(n))
	if err != nil {
		s.metrics.StoreErrors.WithLabelValues("sweep").Inc()
		s.log.Warn("deleting the store's expired rows failed; trying again at the next sweep", "err", err)
	}
}

// tlsCipherSuites are the TLS 1.2 suites the server offers: forward
// secret AEADs only, none of CBC with SHA-1. TLS 1.3's suites are all
// modern and not configurable.
var tlsCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// tlsConfig is the TLS configuration of cfg's files. With a client CA,
// a client certificate is verified when given and required by the APIs
// (see Server.clientCertOK), not by the handshake, so that health checks
// without one still work.
func tlsConfig(cfg *Config) (*tls.Config, error) {
	certPEM, err := conffile.Read(cfg.TLSCert)
	if err != nil {
		return nil, fmt.Errorf("server: tls cert: %w", err)
	}
	keyPEM, err := conffile.Read(cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("server: tls key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("server: tls %s, %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, CipherSuites: tlsCipherSuites}
	if cfg.ClientCA != "" {
		if c.ClientCAs, err = conffile.CertPool(cfg.ClientCA); err != nil {
			return nil, fmt.Errorf("server: tls client_ca: %w", err)
		}
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// clientCertOK reports whether a connection's TLS state satisfies the
// client CA: there is none, or the client gave a certificate it verifies.
func (s *Server) clientCertOK(st *tls.ConnectionState) bool {
	if s.tls == nil || s.tls.ClientCAs == nil {
		return true
	}
	return st != nil && len(st.VerifiedChains) > 0
}

// rlqsKeysPerBucket is how many keys of the quota service's own store
// (on mem://) each bucket of its bound may have: one, and as many again
// for the keys of buckets gone whose state has not yet expired.
const rlqsKeysPerBucket = 2

// limiterStore returns the store of the limiter called name.
func (s *Server) limiterStore(name string) driver.Store {
	st := s.storeFor(s.base, name)
	if s.rlqsKeys != nil {
		st = rlqs.SplitStore(st, s.storeFor(s.rlqsKeys, name))
	}
	return st
}

// storeFor returns the view of st of the limiter, or the service,
// called name: newLimiterStore's, with a span for each call when tracing
// is on.
func (s *Server) storeFor(st driver.Store, name string) driver.Store {
	ls := newLimiterStore(st, name, s.metrics)
	if s.tracer != nil {
		ls = tracing.Store(s.tracer, ls, name, s.store.Scheme)
	}
	return ls
}

func (snap *snapshot) lookup(name string) (*sluice.Limiter, bool) {
	l, ok := snap.limiters[name]
	if !ok {
		return nil, false
	}
	return l.l, true
}

// build makes the limiters of cfg over the server's store. old, when not
// nil, is the snapshot being replaced, whose statistics carry over to
// limiters with an unchanged policy.
func (s *Server) build(cfg *Config, old *snapshot) (*snapshot, error) {
	tokens, err := bearerTokens(cfg)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{cfg: cfg, limiters: make(map[string]*limiter), tokens: tokens, origins: http.NewCrossOriginProtection()}
	for name, t := range cfg.AdminTokens {
		snap.admins = append(snap.admins, adminToken{name, []byte(t)})
	}
	for _, o := range cfg.AllowedOrigins {
		if err := snap.origins.AddTrustedOrigin(o); err != nil { // checked by LoadConfig
			return nil, fmt.Errorf("server: allowed_origins: %w", err)
		}
	}
	fallbackKeys := cfg.fallbackKeys(len(cfg.Limiters.Order))
	add := func(name string, p sluice.Policy, line, col int, extra ...sluice.Option) error {
		lim := &limiter{name: name, policy: p, limit: limitOf(p), stats: new(stats), circuit: new(atomic.Bool)}
		if o, ok := old.limiter(name); ok && o.policy.String() == p.String() {
			lim.stats = o.stats
		}
		var err error
		lim.l, err = sluice.NewLimiter(p, append([]sluice.Option{
			sluice.WithStore(s.limiterStore(name)),
			sluice.WithClock(s.clock),
			sluice.WithStoreTimeout(cfg.StoreTimeout),
			sluice.WithStoreFailure(cfg.StoreFailure),
			sluice.WithInheritance(cfg.Inheritance),
			sluice.WithMaxKeys(fallbackKeys), // fail_local's keys in this process
			sluice.WithObserver(outageObserver{failureObserver{limiter: name, m: s.metrics, stats: lim.stats, circuit: lim.circuit,
				now: s.now, window: cfg.HealthWindow}, s.outage, s.log})}, extra...)...)
		if err != nil {
			return &config.Error{Path: "limiters." + name, Line: line, Column: col, Msg: err.Error(), Err: err}
		}
		snap.limiters[name] = lim
		snap.order = append(snap.order, name)
		return nil
	}
	envoy := envoyServices(cfg)
	for _, name := range cfg.Limiters.Order {
		l := cfg.Limiters.Limiters[name]
		if err := checkReload(old, l); err != nil {
			return nil, err
		}
		opts := planOptions(l)
		var resolve sluice.PolicyFunc
		if l.Lease != nil { // the limiter's lease key
			opts = append(opts, sluice.WithLease(*l.Lease))
		} else if cfg.Plans.Enabled {
			if old != nil { // a process starts whatever the store holds: logSlotPlans says
				if err := s.checkSlotPlans(l, envoy[name]); err != nil {
					return nil, err
				}
			}
			resolve = s.planFunc(l, envoy[name] != "")
			opts = append(opts, sluice.WithPolicyFor(resolve), sluice.WithPolicyCache(planCacheKeys, planCacheTTL))
		}
		if l.Shadow {
			opts = append(opts, sluice.WithShadow(true))
		}
		if err := add(name, l.Policy, l.Line, l.Column, opts...); err != nil {
			return nil, err
		}
		snap.limiters[name].shadow = l.Shadow
		snap.limiters[name].version, snap.limiters[name].plan = l.Version, planOf(l)
		snap.limiters[name].resolve, snap.limiters[name].leased = resolve, l.Lease != nil
		if len(l.Overrides) > 0 {
			snap.limiters[name].overrides = &l
		}
	}
	for name, service := range envoy {
		if l, ok := snap.limiters[name]; ok {
			l.envoy = service
		}
	}
	// The stamp comes first: files that change while they are read are
	// read again at the next look.
	if snap.envoyDir, err = cfg.RateLimit.Stamp(); err != nil {
		return nil, err
	}
	if snap.envoy, err = envoyrls.Load(cfg.Envoy, cfg.RateLimit); err != nil {
		return nil, err
	}
	if err := checkMetricsExposure(cfg, snap, s.loopbackOnly); err != nil {
		return nil, err
	}
	return snap, nil
}

// envoyServices names, for each limiter of cfg that Envoy reaches, the
// service that reaches it.
func envoyServices(cfg *Config) map[string]string {
	m := make(map[string]string)
	for _, name := range cfg.Envoy.Limiters() {
		m[name] = "Envoy's rate limit service"
	}
	for _, d := range cfg.RLQS.Domains() {
		for _, r := range cfg.RLQS.Domain(d).Rules {
			if r.Action == rlqs.Limit {
				m[r.Limiter] = "Envoy's rate limit quota service"
			}
		}
	}
	return m
}

// checkMetricsExposure refuses a config whose /metrics would show
// anyone who reaches it series labelled by requests' values (a user's
// name, a tenant, a token in a header): the envoy section's or files'
// stat keys that take request values (envoyrls.RequestValueStats), and
// RLQS bucket ids, which Envoy builds from requests. They need /metrics
// behind the tokens or the client CA, or the operator's explicit
// server.auth.open_metrics_with_request_values, unless the HTTP listener
// is on a loopback address (loopbackOnly), where only this machine's
// processes reach /metrics: so envoyproxy/ratelimit's environment alone
// (RUNTIME_ROOT, ..., no config file), which listens there, serves
// detailed_metric rules as the reference does.
func checkMetricsExposure(cfg *Config, snap *snapshot, loopbackOnly bool) error {
	if loopbackOnly || cfg.OpenMetricsWithRequestValues || cfg.AuthMetrics && (len(snap.tokens) > 0 || cfg.ClientCA != "") {
		return nil
	}
	e := snap.envoy.RequestValueStats()
	if e == nil && cfg.RLQS != nil {
		e = config.NodeError("rlqs", cfg.rlqsNode, "the RLQS service labels its series with bucket ids, which Envoy builds from requests")
	}
	if e == nil {
		return nil
	}
	open := "/metrics is open"
	if cfg.AuthMetrics {
		open = "/metrics is open (server.auth.metrics is set, but there is no token nor client_ca)"
	}
	e.Msg += "; " + open + ": set server.auth.metrics: true with tokens or a client_ca, or server.auth.open_metrics_with_request_values: true to publish them to whoever reaches /metrics"
	return e
}

func (snap *snapshot) limiter(name string) (*limiter, bool) {
	if snap == nil {
		return nil, false
	}
	l, ok := snap.limiters[name]
	return l, ok
}

// limitOf is the Limit a policy reports, asked of an in-memory limiter
// so as not to touch the store.
func limitOf(p sluice.Policy) int64 {
	l, err := sluice.NewLimiter(p)
	if err != nil {
		return 0
	}
	res, err := l.PeekN(context.Background(), "", 1)
	if err != nil {
		return 0
	}
	return res.Limit
}

// bearerTokens are cfg's tokens and those of its token file.
func bearerTokens(cfg *Config) ([][]byte, error) {
	var out [][]byte
	for _, t := range cfg.Tokens {
		out = append(out, []byte(t))
	}
	if cfg.TokenFile == "" {
		return out, nil
	}
	data, err := conffile.Read(cfg.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("server: auth token file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		switch {
		case t == "" || strings.HasPrefix(t, "#"):
		case strings.ContainsAny(t, " \t"):
			return nil, fmt.Errorf("server: auth token file %s: a token holds whitespace", cfg.TokenFile)
		default:
			out = append(out, []byte(t))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("server: auth token file %s: %w", cfg.TokenFile, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("server: auth token file %s holds no token", cfg.TokenFile)
	}
	return out, nil
}

// Reload replaces the configuration with cfg: new limiters over the same
// store, so that each key's state carries over (migrated by cfg's
// inheritance where its policy changed). Requests in flight finish on the
// old limiters. It refuses a cfg with another store URL, and changes of
// the listen addresses and TLS files wait for a restart.
func (s *Server) Reload(cfg *Config) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.cur.Load() // keep the file's stamp: the watcher reloads the file only when it changes
	return s.reloadLocked(cfg, old.fileStat, old.hash)
}

// reloadLocked requires that s.reloadMu is held.
func (s *Server) reloadLocked(cfg *Config, stamp fileStamp, hash [32]byte) error {
	old := s.cur.Load()
	if cfg.Store != old.cfg.Store {
		err := fmt.Errorf("server: reload: the store changed from %s to %s; restart to change stores",
			redact(old.cfg.Store), redact(cfg.Store))
		s.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	snap, err := s.build(cfg, old)
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	snap.fileStat, snap.hash = stamp, hash
	if cfg.HTTP != old.cfg.HTTP || cfg.GRPC != old.cfg.GRPC || cfg.TLSCert != old.cfg.TLSCert || cfg.TLSKey != old.cfg.TLSKey ||
		cfg.ClientCA != old.cfg.ClientCA {
		s.log.Warn("reload: listen addresses and TLS files change at the next restart")
	}
	if cfg.HTTPLimits != old.cfg.HTTPLimits || cfg.GRPCLimits != old.cfg.GRPCLimits || cfg.RLQSLimits != old.cfg.RLQSLimits || cfg.MaxKeys != old.cfg.MaxKeys ||
		cfg.Simulate.MaxConcurrent != old.cfg.Simulate.MaxConcurrent {
		s.log.Warn("reload: server.limits and server.simulate.max_concurrent change at the next restart")
	}
	if (cfg.Tracing == nil) != (old.cfg.Tracing == nil) || cfg.Tracing != nil && *cfg.Tracing != *old.cfg.Tracing {
		s.log.Warn("reload: server.tracing changes at the next restart")
	}
	s.cur.Store(snap)
	s.metrics.declare(snap)
	s.envoy.Swap(snap.envoy, snap.lookup)
	s.rlqs.Swap(cfg.RLQS, snap.lookup)
	for name := range old.limiters {
		if _, ok := snap.limiters[name]; !ok {
			s.metrics.Forget(name)
		}
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.log.Info("config reloaded", "limiters", len(snap.order))
	return nil
}

// fileStamp is what the watcher compares each second.
type fileStamp struct {
	mod  int64 // Unix nanoseconds
	size int64
}

func readStamp(path string) (fileStamp, [32]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, [32]byte{}, err
	}
	data, err := conffile.Read(path)
	if err != nil {
		return fileStamp{}, [32]byte{}, err
	}
	return fileStamp{fi.ModTime().UnixNano(), fi.Size()}, sha256.Sum256(data), nil
}

// reloadFile reloads the config file when force or when it changed since
// it was last read, whether that read loaded or failed: a bad file is
// reported once per change, not at every poll.
func (s *Server) reloadFile(force bool) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.cur.Load()
	fi, err := os.Stat(s.path)
	if err != nil {
		if force {
			s.log.Error("reload failed; the old config stays", "err", err)
		}
		return
	}
	stamp := fileStamp{fi.ModTime().UnixNano(), fi.Size()}
	if !force && (stamp == old.fileStat || stamp == s.failed.stamp) {
		return
	}
	data, err := conffile.Read(s.path)
	if err != nil {
		s.failed = failedRead{stamp: stamp}
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.log.Error("reload failed; the old config stays", "err", err)
		return
	}
	hash := sha256.Sum256(data)
	switch {
	case !force && hash == old.hash:
		// Touched, or back to what runs: remember the stamp without rebuilding.
		snap := *old
		snap.fileStat = stamp
		s.cur.Store(&snap)
		s.failed = failedRead{}
		return
	case !force && hash == s.failed.hash:
		s.failed.stamp = stamp // the same bad file, touched
		return
	}
	cfg, err := LoadConfig(data)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			ce.File = s.path
		}
		s.metrics.reloads.WithLabelValues("error").Inc()
	} else {
		err = s.reloadLocked(cfg, stamp, hash)
	}
	if err != nil {
		s.failed = failedRead{stamp, hash}
		s.log.Error("reload failed; the old config stays", "err", err)
		return
	}
	s.failed = failedRead{}
}

// failedRead is the config file as it was when a reload of it failed.
type failedRead struct {
	stamp fileStamp
	hash  [32]byte // zero when the file could not be read
}

// reloadEnvoyFiles reloads the configuration when envoyproxy/ratelimit's
// config files changed: a file written, added or removed, or a link on
// the way to them swapped, as envoyproxy/ratelimit's loader watches them.
// Files that fail to load are logged once, and the old ones stay.
func (s *Server) reloadEnvoyFiles() {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.cur.Load()
	if !old.cfg.RateLimit.Files {
		return
	}
	stamp, err := old.cfg.RateLimit.Stamp()
	if err != nil {
		if err.Error() != s.envoyWatch {
			s.envoyWatch = err.Error()
			s.log.Error("envoyproxy/ratelimit config files unreadable; the old config stays", "err", err)
		}
		return
	}
	s.envoyWatch = ""
	if stamp == old.envoyDir || stamp == s.badEnvoy {
		return
	}
	if err := s.reloadLocked(old.cfg, old.fileStat, old.hash); err != nil {
		s.badEnvoy = stamp
		s.log.Error("reload of envoyproxy/ratelimit config files failed; the old config stays", "err", err)
	}
}

// watch reloads the config file on each signal and when it changes.
func (s *Server) watch(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.reload:
			s.log.Info("reload signal")
			s.reloadFile(true)
		case <-tick.C:
			if s.path != "" {
				s.reloadFile(false)
			}
			s.reloadEnvoyFiles()
		}
	}
}

// checkStore checks the store once and records the outcome for /readyz.
func (s *Server) checkStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	err := s.store.Check(ctx)
	if err != nil {
		s.storeErr.Store(&err)
	} else {
		s.storeErr.Store(nil)
	}
	return err
}

// recheckStore checks the store that was unreachable at start until it
// passes or ctx ends, waiting longer after each failure.
func (s *Server) recheckStore(ctx context.Context) {
	wait := s.recheckEvery
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := s.checkStore(ctx)
		if err == nil {
			s.log.Info("the store answers; ready", "store", s.store.URL)
			return
		}
		if ctx.Err() != nil {
			return
		}
		wait = min(2*wait, maxRecheck)
		s.log.Error("the store is still unreachable; not ready", "store", s.store.URL, "err", err, "next_check", wait.String())
	}
}

// Serve serves HTTP on httpLn and gRPC on grpcLn (nil: no gRPC) until ctx
// ends, then shuts down: it stops accepting, waits for requests in flight
// at most the config's drain timeout, and closes the store.
func (s *Server) Serve(ctx context.Context, httpLn, grpcLn net.Listener) error {
	defer s.Close()
	cfg := s.cur.Load().cfg
	hl := cfg.HTTPLimits
	httpCap := newConnCap(httpLn, int(hl.MaxConnections), int(hl.MaxConnectionsPerClient), func() { s.metrics.refused.WithLabelValues("http").Inc() })
	s.httpCap.Store(httpCap)
	httpLn = httpCap
	if s.tls != nil {
		httpLn = tls.NewListener(httpLn, s.tls)
	}
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: hl.ReadHeaderTimeout,
		ReadTimeout:       hl.ReadTimeout,
		WriteTimeout:      hl.WriteTimeout,
		IdleTimeout:       hl.IdleTimeout,
		MaxHeaderBytes:    int(hl.MaxHeaderBytes),
		ConnState:         httpCap.track,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(httpLn) }()

	var gs *grpc.Server
	if grpcLn != nil {
		gl := cfg.GRPCLimits
		grpcCap := newGRPCCap(grpcLn, gl, s.grpcGrace, func() { s.metrics.refused.WithLabelValues("grpc").Inc() })
		s.grpcCap.Store(grpcCap)
		opts := []grpc.ServerOption{
			grpc.MaxRecvMsgSize(int(gl.MaxRecvMsgBytes)),
			// Fixed flow-control windows (no BDP estimation) bound what a
			// connection buffers of requests not yet read, even of one
			// refused for its size: rate-limit requests are small.
			grpc.InitialWindowSize(grpcStreamWindow), grpc.InitialConnWindowSize(grpcConnWindow),
			grpc.MaxConcurrentStreams(uint32(min(gl.MaxConcurrentStreams, math.MaxUint32))),
			// Calls run on workers that keep their grown stacks, where a
			// goroutine per call grew a new one each time: copystack was
			// 5-10% of the server's CPU under the load test, and the
			// workers save 4-8% of its CPU per decision
			// (docs/benchmarks.md). A call that finds every worker busy
			// gets a goroutine of its own, as without workers: at 16 per
			// CPU, half the calls of 64 callers on 2 CPUs did, and
			// copystack was still 6% of the CPU. An idle worker costs
			// only its stack.
			grpc.NumStreamWorkers(uint32(64 * runtime.GOMAXPROCS(0))),
			grpc.ConnectionTimeout(gl.HandshakeTimeout),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: gl.MinPingInterval, PermitWithoutStream: true}),
			grpc.KeepaliveParams(keepalive.ServerParameters{
				MaxConnectionIdle: gl.MaxConnectionIdle, MaxConnectionAge: gl.MaxConnectionAge,
				MaxConnectionAgeGrace: gl.MaxConnectionAgeGrace, Time: gl.KeepaliveTime, Timeout: gl.KeepaliveTimeout,
			}),
			// Each call tells the listener that its connection is in use
			// (grpcCap), once past the auth: a call refused for its
			// token does not make a connection one of Envoy's.
			grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				c, err := s.grpcAuth(ctx, info.FullMethod)
				if err != nil {
					return nil, err
				}
				if c != nil {
					c.begin(!isHealth(info.FullMethod))
					defer c.end()
				}
				return h(ctx, req)
			}),
			grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				c, err := s.grpcAuth(ss.Context(), info.FullMethod)
				if err != nil {
					return err
				}
				if c != nil {
					c.begin(!isHealth(info.FullMethod))
					defer c.end()
				}
				return h(srv, ss)
			}),
		}
		if s.tracer != nil {
			// After the auth: a call refused for its token is not traced.
			opts = append(opts, grpc.ChainUnaryInterceptor(tracing.UnaryInterceptor), grpc.ChainStreamInterceptor(tracing.StreamInterceptor))
		}
		creds := insecure.NewCredentials()
		if s.tls != nil {
			creds = credentials.NewTLS(s.tls)
		}
		opts = append(opts, grpc.Creds(connCreds{creds}))
		gs = grpc.NewServer(opts...)
		s.envoy.Register(gs)
		s.rlqs.Register(gs)
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go func() { errc <- gs.Serve(grpcCap) }()
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if s.path != "" || s.cur.Load().cfg.RateLimit.Files {
		go s.watch(watchCtx)
	}
	if s.storeErr.Load() != nil {
		go s.recheckStore(watchCtx)
	}
	go s.outage.Run(watchCtx)
	go s.pollPlans(watchCtx)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		serveErr = fmt.Errorf("server: %w", serveErr)
	}
	stopWatch()
	s.log.Info("shutting down", "drain_timeout", s.cur.Load().cfg.DrainTimeout.String())
	return errors.Join(serveErr, s.shutdown(hs, gs, cancelBase))
}

// The HTTP/2 flow-control windows of gRPC connections, in bytes: per call
// and per connection.
const (
	grpcStreamWindow = 64 << 10
	grpcConnWindow   = 1 << 20
)

// grpcAuth checks a gRPC call against the API's bearer tokens (metadata
// "authorization: Bearer TOKEN") and client CA, as the HTTP API does.
// gRPC health checks are open, as /healthz is. It returns the call's
// connection, nil when it is not a grpcCap's.
func (s *Server) grpcAuth(ctx context.Context, method string) (*grpcConn, error) {
	c, info := grpcConnOf(ctx)
	if isHealth(method) {
		return c, nil
	}
	if snap := s.cur.Load(); len(snap.tokens) > 0 {
		var header string
		if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
			header = v[0]
		}
		if !snap.validToken(header) {
			return nil, status.Error(codes.Unauthenticated, "missing or wrong bearer token in the authorization metadata")
		}
	}
	var st *tls.ConnectionState
	if ti, ok := info.(credentials.TLSInfo); ok {
		st = &ti.State
	}
	if !s.clientCertOK(st) {
		return nil, status.Error(codes.Unauthenticated, "a client certificate signed by the server's client CA is required")
	}
	return c, nil
}

// isHealth reports whether method is one of gRPC's health checks.
func isHealth(method string) bool { return strings.HasPrefix(method, healthPrefix) }

var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

// shutdown drains hs and gs within the drain timeout, then stops them
// hard, cancelling the requests still running; HTTP requests get a short
// grace to answer their cancellation.
func (s *Server) shutdown(hs *http.Server, gs *grpc.Server, cancelRequests context.CancelFunc) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cur.Load().cfg.DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var grpcErr error
	if gs != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { gs.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				gs.Stop()
				grpcErr = errors.New("server: gRPC requests still running at the drain timeout were cancelled")
			}
		})
	}
	httpErr := hs.Shutdown(ctx)
	if httpErr != nil {
		// Cancel what still runs: a consume waiting for its tokens gives
		// them back and answers 503 cancelled. Let those answers out
		// (giving tokens back to a store takes up to a store timeout)
		// before closing the connections left.
		cancelRequests()
		grace, stop := context.WithTimeout(context.Background(), s.cur.Load().cfg.StoreTimeout+time.Second)
		if hs.Shutdown(grace) != nil {
			hs.Close()
		}
		stop()
		httpErr = fmt.Errorf("server: HTTP requests still running at the drain timeout were cancelled: %w", httpErr)
	}
	wg.Wait()
	return errors.Join(httpErr, grpcErr, s.Close())
}

// Close closes the store and, with tracing, exports the spans still
// waiting, for at most traceFlush. Serve calls it when it returns;
// calling it again does nothing.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if err := s.store.Close(); err != nil {
			s.closeErr = fmt.Errorf("server: closing the store: %w", err)
		}
		if s.tracing != nil {
			ctx, cancel := context.WithTimeout(context.Background(), traceFlush)
			defer cancel()
			if err := s.tracing.Shutdown(ctx); err != nil {
				// Spans lost with a receiver away are no failure of
				// the server's: it stops as well without them.
				s.log.Warn("the last spans were not exported", "err", err)
			}
		}
	})
	return s.closeErr
}

// traceFlush bounds the export of the spans still waiting at Close: a
// receiver that does not answer must not hold a shutdown for long.
const traceFlush = 5 * time.Second

// redact is a store URL without its passwords.
func redact(raw string) string { return storeurl.Redact(raw) }

// Policy returns the policy of the limiter called name in the current
// configuration, for handlers added with WithHandler (such as a
// simulation of a policy).
func (s *Server) Policy(name string) (sluice.Policy, bool) {
	l, ok := s.cur.Load().limiters[name]
	if !ok {
		return nil, false
	}
	return l.policy, true
}
