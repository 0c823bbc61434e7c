// Package storeurl opens the store a URL names, for the sluice command:
//
//	mem://                                  the in-process memstore
//	redis://[user:pass@]host:port/db        a Redis server (rediss:// for TLS)
//	redis+cluster://host:port,host:port     a Redis Cluster, from any of its nodes (rediss+cluster:// for TLS)
//	redis+sentinel://host:port,.../master   Redis behind Sentinel (rediss+sentinel:// for TLS)
//	postgres://user@host:port/db?strategy=select_for_update&table=name&sweep_interval=1m
//	mysql://user:pass@host:port/db?strategy=...&table=name&sweep_interval=1m
//	dynamodb://?region=eu-west-1&table=name&endpoint=http://host:port
//
// strategy is one of single_statement (the default), select_for_update
// and advisory_lock (PostgreSQL only). sweep_interval is how often a
// store opened WithSweep deletes expired rows (DefaultSweepInterval), at
// least a second, or off. A postgres:// URL also takes pgx's connection
// parameters (sslmode, connect_timeout, pool_max_conns, ...) and the
// libpq ones that pgx sends to the server (application_name,
// client_encoding, options); other server settings go in options
// (options=-c%20search_path%3Dlimits), and any other parameter is an
// error, as libpq would make it.
//
// Every URL but mem:// and dynamodb:// may name its password rather than
// hold it: password_file=PATH (a mounted Kubernetes Secret) or
// password_env=NAME; a Sentinel URL names the Sentinel's apart, with
// sentinel_username, sentinel_password_file or sentinel_password_env. The
// TLS schemes of Redis and mysql:// take tls_ca_file, tls_cert_file,
// tls_key_file and tls_server_name (mysql:// also tls=true, for the
// system's roots); PostgreSQL takes libpq's sslmode, sslrootcert,
// sslcert and sslkey. See secrets.go for when they are read.
//
// dynamodb:// has no host or path: region (else the SDK's, e.g.
// AWS_REGION), table (default sluice_state) and endpoint (default: the
// region's; set it for a local server) are its only parameters. The
// credentials are found as the AWS SDK finds them: environment variables,
// shared config and credentials files, a role.
//
// Open only builds the clients; Check connects. A URL whose scheme is
// missing or unknown, or that has parameters its store does not take, is
// an error: nothing is silently read as something else.
//
// Stores are chosen by scheme in one table (as gocloud's URLMux does, but
// fixed here rather than registered by init), so what the command can
// open is written in this file.
package storeurl

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/dynamostore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/mysqlstore"
	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Store is an opened store and what it holds open.
type Store struct {
	driver.Store
	// Scheme is the URL's scheme, e.g. "redis+cluster".
	Scheme string
	// URL is the URL without its password, for messages.
	URL string
	// Local reports that the store is this process's memory (mem://):
	// no other process sees what it holds, so processes cannot share
	// limits through it.
	Local bool
	// SweepInterval is how often the store deletes its expired rows, or
	// 0 when it does not: only SQL stores opened WithSweep do.
	SweepInterval time.Duration

	check   func(ctx context.Context) error // nil: nothing to check
	closers []func() error
}

// Close releases the store's clients and connections.
func (s *Store) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

// Check connects to the store once: it pings it and, for the SQL stores,
// creates the table if it is missing. It may be called again after it
// failed. Its error is an *Error that matches ErrUnreachable when the
// store did not answer (refused or timed out connections, a server still
// starting), which a later Check may get past; any other error is one the
// store answered with (an unknown database, a wrong password, a database
// index out of range, no right to create the table, a client certificate
// refused), or a certificate or secret that sluice could not use, which
// waiting will not cure.
func (s *Store) Check(ctx context.Context) error {
	if s.check == nil {
		return nil
	}
	if err := s.check(ctx); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return &Error{URL: s.URL, Msg: "no answer", Err: err, unreachable: true}
		}
		if unreachable(err) {
			return &Error{URL: s.URL, Msg: "unreachable", Err: err, unreachable: true}
		}
		return &Error{URL: s.URL, Msg: "the store refused the connection or the table (check the URL's database, user and password)", Err: err}
	}
	return nil
}

// Pinger is implemented by stores that can check they are reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ErrUnreachable is matched (errors.Is) by the errors of Check for a
// store that did not answer.
var ErrUnreachable = errors.New("store unreachable")

// Error reports a URL that cannot be opened, or a store that failed its
// Check.
type Error struct {
	URL string // with any password removed
	Msg string // "" when Err says it all, as a *SecretError does
	Err error  // the underlying error, if any

	unreachable bool
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("store %s: %v", e.URL, e.Err)
	}
	if e.Err != nil {
		return fmt.Sprintf("store %s: %s: %v", e.URL, e.Msg, e.Err)
	}
	return fmt.Sprintf("store %s: %s", e.URL, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnreachable and e is about a store that
// did not answer.
func (e *Error) Is(target error) bool { return target == ErrUnreachable && e.unreachable }

// An opener opens the store of a URL with its scheme. It builds clients
// but does not connect; Store.check does.
type opener func(ctx context.Context, src source) (*Store, error)

// openers are the stores by scheme.
var openers = map[string]opener{
	"mem":             openMem,
	"redis":           openRedis,
	"rediss":          openRedis,
	"redis+cluster":   openRedisCluster,
	"rediss+cluster":  openRedisCluster,
	"redis+sentinel":  openRedisSentinel,
	"rediss+sentinel": openRedisSentinel,
	"postgres":        openPostgres,
	"postgresql":      openPostgres,
	"mysql":           openMySQL,
	"dynamodb":        openDynamo,
}

// Schemes returns the schemes Open accepts, sorted.
func Schemes() []string { return slices.Sorted(maps.Keys(openers)) }

// Parse checks that rawURL is a URL whose scheme Open knows, and that the
// secrets and TLS files it names can be read, without opening anything;
// it returns the parsed URL. A secret or TLS file that cannot be used is
// an *Error wrapping a *SecretError.
func Parse(rawURL string) (*url.URL, error) {
	src, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	return src.u, nil
}

// parse reads rawURL as Parse does, and takes the parameters that name
// secrets and TLS files out of its query.
func parse(rawURL string) (source, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		shown := rawURL
		if strings.Contains(rawURL, "@") || strings.Contains(rawURL, "password") { // one we cannot tell apart from the rest
			shown = "(unparsable)"
		}
		if !strings.Contains(rawURL, "://") {
			return source{}, &Error{URL: shown, Msg: "no scheme; want " + want()}
		}
		return source{}, &Error{URL: shown, Msg: "not a URL; want " + want(), Err: errors.Unwrap(err)}
	}
	src := source{u: u, raw: rawURL, shown: redact(u, rawURL)}
	switch _, ok := openers[u.Scheme]; {
	case u.Scheme == "":
		return source{}, src.bad("no scheme; want "+want(), nil)
	case !ok:
		return source{}, src.bad(fmt.Sprintf("unknown scheme %q; want %s", u.Scheme, want()), nil)
	}
	if src.q, err = query(src); err != nil {
		return source{}, err
	}
	if err := src.takeSecrets(); err != nil {
		var se *SecretError
		if errors.As(err, &se) {
			return source{}, &Error{URL: src.shown, Err: err}
		}
		return source{}, err
	}
	return src, nil
}

// takeSecrets takes the parameters that name src's secrets and TLS files
// out of src.q, into src.
func (src *source) takeSecrets() error {
	scheme, q := src.u.Scheme, src.q
	if scheme == "mem" || scheme == "dynamodb" {
		return nil // they take none: their openers refuse the parameters
	}
	_, inline := src.u.User.Password()
	if scheme == "postgres" || scheme == "postgresql" {
		inline = inline || q.Has("password") || q.Has("passfile")
	}
	var err error
	if src.secret, err = takeSecret(q, "", inline); err != nil {
		return err
	}
	if strings.HasSuffix(scheme, "+sentinel") {
		if src.sentinelSecret, err = takeSecret(q, "sentinel_", false); err != nil {
			return err
		}
		if q.Has("sentinel_username") && src.sentinelSecret == nil {
			return src.bad("parameter sentinel_username needs sentinel_password_file or sentinel_password_env", nil)
		}
	}
	switch {
	case strings.HasPrefix(scheme, "rediss") || scheme == "mysql":
		src.tls, err = takeTLS(q)
		return err
	case strings.HasPrefix(scheme, "redis"):
		for _, p := range tlsParams {
			if q.Has(p) {
				return src.bad(fmt.Sprintf("parameter %s needs TLS: start the URL with %s://", p, strings.Replace(scheme, "redis", "rediss", 1)), nil)
			}
		}
	case scheme == "postgres" || scheme == "postgresql":
		for _, p := range tlsParams {
			if q.Has(p) {
				return src.bad(fmt.Sprintf("unknown parameter %q: PostgreSQL takes libpq's sslmode=verify-full, sslrootcert, sslcert and sslkey", p), nil)
			}
		}
	}
	return nil
}

// want lists the schemes for an error message.
func want() string {
	s := Schemes()
	for i := range s {
		s[i] += "://"
	}
	return "a URL starting with " + strings.Join(s, ", ")
}

// passwordParams are the query parameters that hold a password: pgx's,
// and the one a URL refused for it might hold by mistake.
var passwordParams = []string{"password", "sslpassword", "sentinel_password"}

// Redact returns rawURL for messages: as written when it holds no
// password, else with each password (its user's, and those of password
// parameters such as PostgreSQL's password=) shown as xxxxx. A URL that
// does not parse is "(unparsable URL)".
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return redact(u, rawURL)
}

// redact is Redact of raw, parsed as u.
func redact(u *url.URL, raw string) string {
	_, inUser := u.User.Password()
	parts := strings.Split(u.RawQuery, "&")
	inQuery := false
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if k, err := url.QueryUnescape(k); err == nil && slices.Contains(passwordParams, k) {
			parts[i], inQuery = k+"=xxxxx", true
		}
	}
	if !inUser && !inQuery {
		return raw
	}
	r := *u
	r.RawQuery = strings.Join(parts, "&")
	return r.Redacted()
}

// Open opens the store rawURL names, without connecting to it: call Check
// for that. The caller must Close it.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	src, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	for _, opt := range opts {
		opt(&src.options)
	}
	return openers[src.u.Scheme](ctx, src)
}

// Option configures Open.
type Option func(*options)

type options struct {
	memMaxKeys  int
	sweepReport func(deleted int64, err error) // nil: no sweep
}

// WithMemMaxKeys bounds the keys of an in-memory store (memstore's
// WithMaxKeys); the stores of other schemes ignore it.
func WithMemMaxKeys(n int) Option { return func(o *options) { o.memMaxKeys = n } }

// WithSweep makes the SQL stores (postgres://, mysql://) delete their
// expired rows in the background every sweep_interval of the URL
// (DefaultSweepInterval unless it says otherwise or off), until Close,
// calling report after each batch with the rows it deleted or its error
// (pgstore.WithSweep, mysqlstore.WithSweep). report must not be nil nor
// block. Other stores ignore it: Redis and memory expire keys by
// themselves, DynamoDB by its time to live.
func WithSweep(report func(deleted int64, err error)) Option {
	return func(o *options) { o.sweepReport = report }
}

// DefaultSweepInterval is how often a store opened WithSweep deletes its
// expired rows when its URL has no sweep_interval: a row stays at most
// about this long after it expired.
const DefaultSweepInterval = time.Minute

// minSweepInterval is the shortest sweep_interval: a sweep is a
// statement on the table, which should not run back to back.
const minSweepInterval = time.Second

// sqlParams are what a postgres:// or mysql:// URL says of its store,
// rather than of the connection.
type sqlParams struct {
	strategy int           // the store's Strategy constant: they are numbered as the URL names them
	table    string        // "" for the store's default
	sweep    time.Duration // 0: no sweep, for sweep_interval=off or without a sweep report
}

// readSQLParams reads q's strategy, one of strategies (the names of the
// store's Strategy constants, in their order) or none for the first, its
// table and its sweep_interval.
func readSQLParams(src source, q url.Values, strategies ...string) (sqlParams, error) {
	var p sqlParams
	if s := q.Get("strategy"); s != "" {
		if p.strategy = slices.Index(strategies, s); p.strategy < 0 {
			last := len(strategies) - 1
			return p, src.bad(fmt.Sprintf("unknown strategy %q: want %s or %s", s, strings.Join(strategies[:last], ", "), strategies[last]), nil)
		}
	}
	p.table = q.Get("table")
	sweep, err := sweepInterval(src, q)
	if err != nil {
		return p, err
	}
	if src.sweepReport != nil {
		p.sweep = sweep
	}
	return p, nil
}

// sweepInterval reads q's sweep_interval: DefaultSweepInterval when
// absent, 0 for off.
func sweepInterval(src source, q url.Values) (time.Duration, error) {
	v := q.Get("sweep_interval")
	switch v {
	case "":
		return DefaultSweepInterval, nil
	case "off":
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minSweepInterval {
		return 0, src.bad(fmt.Sprintf("parameter sweep_interval: want a duration of at least %v, such as 1m, or off; got %q", minSweepInterval, v), nil)
	}
	return d, nil
}

// source is a URL being opened.
type source struct {
	u     *url.URL
	raw   string     // as written
	shown string     // for messages, without its password
	q     url.Values // u's query, less what takeSecrets took

	secret         *secret   // password_file or password_env; nil: none
	sentinelSecret *secret   // sentinel_password_file or _env; nil: none
	tls            *tlsFiles // the TLS parameters; nil: none
	options
}

// credentials returns the user and password of src's data nodes or
// database: the URL's own, or the secret it names.
func (src source) credentials() *credentials {
	c := &credentials{user: src.u.User.Username(), secret: src.secret}
	c.password, _ = src.u.User.Password() // both read "" from a nil u.User
	return c
}

// withQuery is src's URL with src.q as its query: without the parameters
// that takeSecrets took.
func (src source) withQuery() string {
	u := *src.u
	u.RawQuery = src.q.Encode()
	return u.String()
}

// bad returns an *Error about src.
func (src source) bad(msg string, err error) error {
	return &Error{URL: src.shown, Msg: msg, Err: err}
}

// query returns u's query parameters, and an error for a query that does
// not parse (u.Query drops what it cannot read, ";" among them) or a
// parameter given but empty.
func query(src source) (url.Values, error) {
	u := src.u
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, src.bad("bad query", err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if slices.Contains(q[k], "") {
			return nil, src.bad(fmt.Sprintf("parameter %q is empty", k), nil)
		}
	}
	return q, nil
}

// params returns src.q and an error for any parameter not in known.
func params(src source, known ...string) (url.Values, error) {
	u, q := src.u, src.q
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return nil, src.bad(fmt.Sprintf("unknown parameter %q: %s:// URLs take none", k, u.Scheme), nil)
			}
			return nil, src.bad(fmt.Sprintf("unknown parameter %q: %s:// URLs take %s", k, u.Scheme, strings.Join(known, ", ")), nil)
		}
	}
	return q, nil
}

func openMem(_ context.Context, src source) (*Store, error) {
	u := src.u
	if u.Host != "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil || u.Opaque != "" {
		return nil, src.bad("mem:// takes no host, path or parameters", nil)
	}
	return &Store{Store: memstore.New(memstore.WithMaxKeys(src.memMaxKeys)), Scheme: u.Scheme, URL: src.shown, Local: true}, nil
}

// noRetries turns off go-redis's own retries of the commands beside the
// store's updates (PING, TIME), as redisstore turns them off for its
// updates: the limiter's store timeout and failure policy already bound a
// failing call, and a retry would only hide its cause behind that
// timeout. A redis:// URL may still set max_retries.
const noRetries = -1

func openRedis(_ context.Context, src source) (*Store, error) {
	if src.tls != nil && src.q.Has("skip_verify") {
		return nil, src.bad("parameter skip_verify contradicts the tls_ parameters: give a tls_ca_file that signed the server's certificate, or tls_server_name", nil)
	}
	opt, err := redis.ParseURL(src.withQuery())
	if err != nil {
		return nil, src.bad("bad Redis URL", err)
	}
	if !src.q.Has("max_retries") {
		opt.MaxRetries = noRetries
	}
	if src.secret != nil {
		opt.CredentialsProviderContext = src.credentials().redis
	}
	if src.tls != nil {
		opt.TLSConfig, opt.Dialer = nil, src.tls.dialer(opt.DialTimeout)
	}
	return newRedis(src, redis.NewClient(opt))
}

// redisParams are the parameters of src's scheme beside the secret and
// TLS ones, which takeSecrets took: for messages.
func (src source) redisParams(own ...string) []string {
	known := append(own, "password_file", "password_env")
	if strings.HasPrefix(src.u.Scheme, "rediss") {
		known = append(known, tlsParams...)
	}
	return known
}

func openRedisCluster(_ context.Context, src source) (*Store, error) {
	u := src.u
	if _, err := params(src, src.redisParams()...); err != nil {
		return nil, err
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, src.bad(fmt.Sprintf("a Redis Cluster has database 0 only, got path %q", u.Path), nil)
	}
	opt := &redis.ClusterOptions{Addrs: strings.Split(u.Host, ","), MaxRetries: noRetries, CredentialsProviderContext: src.credentials().redis}
	opt.TLSConfig, opt.Dialer = src.redisTLS()
	return newRedis(src, redis.NewClusterClient(opt))
}

func openRedisSentinel(_ context.Context, src source) (*Store, error) {
	u := src.u
	q, err := params(src, src.redisParams("sentinel_username", "sentinel_password_file", "sentinel_password_env")...)
	if err != nil {
		return nil, err
	}
	master := strings.Trim(u.Path, "/")
	if master == "" {
		return nil, src.bad(fmt.Sprintf("the path must name the master, e.g. %s://host:26379/mymaster", u.Scheme), nil)
	}
	opt := &redis.FailoverOptions{MasterName: master, SentinelAddrs: strings.Split(u.Host, ","), MaxRetries: noRetries,
		CredentialsProviderContext: src.credentials().redis, SentinelUsername: q.Get("sentinel_username")}
	if src.sentinelSecret != nil {
		// go-redis takes the Sentinel's password once: a new one takes
		// a restart.
		if opt.SentinelPassword, err = src.sentinelSecret.read(); err != nil {
			return nil, &Error{URL: src.shown, Err: err}
		}
	}
	opt.TLSConfig, opt.Dialer = src.redisTLS()
	s, err := newRedis(src, redis.NewFailoverClient(opt))
	if err != nil {
		return nil, err
	}
	ping := s.check
	s.check = func(ctx context.Context) error {
		err := ping(ctx)
		if errors.Is(err, redis.Nil) { // a Sentinel's nil reply to GET-MASTER-ADDR-BY-NAME
			return fmt.Errorf("no Sentinel knows a master called %q: %w", master, err)
		}
		return err
	}
	return s, nil
}

// redisTLS returns the TLS options of a go-redis client of a Redis
// Cluster or Sentinel URL: a dialer that reads src's TLS files for each
// connection, or, when there are none, a configuration with the system's
// roots; neither for a URL without TLS.
func (src source) redisTLS() (*tls.Config, func(ctx context.Context, network, addr string) (net.Conn, error)) {
	switch {
	case src.tls != nil:
		return nil, src.tls.dialer(0)
	case strings.HasPrefix(src.u.Scheme, "rediss"):
		// The dialer verifies the name of the host it dials.
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	return nil, nil
}

func newRedis(src source, c redis.UniversalClient) (*Store, error) {
	st, err := redisstore.New(c)
	if err != nil {
		c.Close()
		return nil, src.bad("bad store options", err)
	}
	return &Store{Store: st, Scheme: src.u.Scheme, URL: src.shown, check: st.Ping, closers: []func() error{c.Close, st.Close}}, nil
}

// pgServerParams are the libpq parameters that pgx passes on to the
// server as they are: PostgreSQL settings that libpq takes in a URL.
var pgServerParams = []string{"application_name", "client_encoding", "options"}

func openPostgres(ctx context.Context, src source) (*Store, error) {
	u, q := src.u, src.q // all but sluice's are pgx's connection parameters
	p, err := readSQLParams(src, q, "single_statement", "select_for_update", "advisory_lock")
	if err != nil {
		return nil, err
	}
	opts := []pgstore.Option{pgstore.WithStrategy(pgstore.Strategy(p.strategy))}
	if p.table != "" {
		opts = append(opts, pgstore.WithTable(p.table))
	}
	if p.sweep > 0 {
		opts = append(opts, pgstore.WithSweep(p.sweep, src.sweepReport))
	}
	for _, k := range []string{"strategy", "table", "sweep_interval"} {
		q.Del(k)
	}
	pgURL := *u
	pgURL.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(pgURL.String())
	if err != nil {
		return nil, src.bad("bad PostgreSQL URL", err)
	}
	// pgx sends every parameter it does not know to the server as a
	// setting, where a typo fails only once connected, and then as a
	// refused connection: refuse it here, naming it.
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if _, sent := cfg.ConnConfig.RuntimeParams[k]; sent && !slices.Contains(pgServerParams, k) {
			return nil, src.bad(fmt.Sprintf("unknown parameter %q: postgres:// URLs take strategy, table, sweep_interval, "+
				"pgx's connection parameters (sslmode, connect_timeout, pool_max_conns, ...) and %s; "+
				"give other PostgreSQL settings in options, e.g. options=-c%%20search_path%%3Dlimits",
				k, strings.Join(pgServerParams, ", ")), nil)
		}
	}
	if err := pgFiles(q); err != nil {
		return nil, &Error{URL: src.shown, Err: err}
	}
	if src.secret != nil || slices.ContainsFunc(pgFileParams, q.Has) {
		cfg.BeforeConnect = src.pgConnect(pgURL.String())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
	if err != nil {
		return nil, src.bad("cannot configure the PostgreSQL pool", err)
	}
	st, err := pgstore.New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, src.bad("bad store options", err)
	}
	return &Store{Store: st, Scheme: u.Scheme, URL: src.shown, SweepInterval: p.sweep, check: pingAndMigrate(st),
		closers: []func() error{func() error { pool.Close(); return nil }, st.Close}}, nil
}

func openMySQL(_ context.Context, src source) (*Store, error) {
	u := src.u
	q, err := params(src, append([]string{"strategy", "table", "sweep_interval", "tls", "password_file", "password_env"}, tlsParams...)...)
	if err != nil {
		return nil, err
	}
	files := src.tls
	switch v := q.Get("tls"); v {
	case "":
	case "true":
		if files == nil {
			files = &tlsFiles{} // the system's roots
		}
	default:
		return nil, src.bad(fmt.Sprintf("parameter tls: want true (the server's certificate verified against the system's roots, "+
			"or tls_ca_file's), got %q", v), nil)
	}
	p, err := readSQLParams(src, q, "single_statement", "select_for_update")
	if err != nil {
		return nil, err
	}
	opts := []mysqlstore.Option{mysqlstore.WithStrategy(mysqlstore.Strategy(p.strategy))}
	if p.table != "" {
		opts = append(opts, mysqlstore.WithTable(p.table))
	}
	if p.sweep > 0 {
		opts = append(opts, mysqlstore.WithSweep(p.sweep, src.sweepReport))
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "tcp", u.Host, strings.Trim(u.Path, "/"), true
	cfg.InterpolateParams = true // one round trip per statement, not a prepare and an execute
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	if src.secret != nil || files != nil {
		// A connection of its own configuration (rather than one
		// registered by name, for every client in the process), with the
		// secret and the TLS files read as it starts.
		creds, host := src.credentials(), u.Hostname()
		err := cfg.Apply(mysql.BeforeConnect(func(_ context.Context, c *mysql.Config) (err error) {
			if _, c.Passwd, err = creds.get(); err != nil {
				return err
			}
			if files != nil {
				c.TLS, err = files.config(host)
			}
			return err
		}))
		if err != nil {
			return nil, src.bad("cannot configure the MySQL client", err)
		}
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, src.bad("cannot configure the MySQL client", err)
	}
	db := sql.OpenDB(connector) // connects lazily
	st, err := mysqlstore.New(db, opts...)
	if err != nil {
		db.Close()
		return nil, src.bad("bad store options", err)
	}
	return &Store{Store: st, Scheme: u.Scheme, URL: src.shown, SweepInterval: p.sweep, check: pingAndMigrate(st),
		closers: []func() error{db.Close, st.Close}}, nil
}

func openDynamo(ctx context.Context, src source) (*Store, error) {
	u := src.u
	q, err := params(src, "endpoint", "region", "table")
	if err != nil {
		return nil, err
	}
	if u.Host != "" || strings.Trim(u.Path, "/") != "" || u.User != nil || u.Opaque != "" {
		return nil, src.bad("dynamodb:// takes no host or path: name the table with ?table= and a server with ?endpoint=", nil)
	}
	var load []func(*config.LoadOptions) error
	if r := q.Get("region"); r != "" {
		load = append(load, config.WithRegion(r))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...) // reads files and the environment, connects to nothing
	if err != nil {
		return nil, src.bad("cannot load the AWS configuration", err)
	}
	if cfg.Region == "" {
		return nil, src.bad("no region: give ?region= or set AWS_REGION", nil)
	}
	var clientOpts []func(*dynamodb.Options)
	if e := q.Get("endpoint"); e != "" {
		if eu, err := url.Parse(e); err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return nil, src.bad(fmt.Sprintf("endpoint %q is not an http:// or https:// URL", e), nil)
		}
		clientOpts = append(clientOpts, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(e) })
	}
	var opts []dynamostore.Option
	if t := q.Get("table"); t != "" {
		opts = append(opts, dynamostore.WithTable(t))
	}
	st, err := dynamostore.New(dynamodb.NewFromConfig(cfg, clientOpts...), opts...)
	if err != nil {
		return nil, src.bad("bad store options", err)
	}
	return &Store{Store: st, Scheme: u.Scheme, URL: src.shown, check: st.Migrate}, nil
}

// pingAndMigrate is the check of a SQL store: a ping, then its table.
func pingAndMigrate(st interface {
	Pinger
	Migrate(ctx context.Context) error
}) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := st.Ping(ctx); err != nil {
			return err
		}
		if err := st.Migrate(ctx); err != nil {
			return fmt.Errorf("creating the table: %w", err)
		}
		return nil
	}
}

// unreachable reports whether err, from a store's check, means that the
// store did not answer, or answered that it cannot serve yet: anything but
// a reply that refuses the configuration.
func unreachable(err error) bool {
	// A secret or TLS file that cannot be read, a certificate refused
	// either way: the configuration is wrong.
	var secretErr *SecretError
	var verifyErr *tls.CertificateVerificationError
	var opErr *net.OpError
	if errors.As(err, &secretErr) || errors.As(err, &verifyErr) || (errors.As(err, &opErr) && opErr.Op == "remote error") {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// Replies of a server that is starting, busy or failing over.
		for _, transient := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"} {
			if redis.HasErrorPrefix(rerr, transient) {
				return true
			}
		}
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 53: insufficient resources (too
		// many connections); 57: operator intervention (shutting down,
		// starting up).
		c := pgErr.Code[:min(2, len(pgErr.Code))]
		return c == "08" || c == "53" || c == "57"
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		// DynamoDB answered: throttling and its own faults pass; anything
		// else (credentials, permissions, a bad table) does not.
		return apiErr.ErrorFault() == smithy.FaultServer || strings.Contains(apiErr.ErrorCode(), "Throttl") ||
			apiErr.ErrorCode() == "ProvisionedThroughputExceededException" || apiErr.ErrorCode() == "RequestLimitExceeded"
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		switch myErr.Number {
		case 1040, 1053, 1203: // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_TOO_MANY_USER_CONNECTIONS
			return true
		}
		return false
	}
	return true
}
