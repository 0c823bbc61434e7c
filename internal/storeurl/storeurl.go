// Package storeurl opens the store a URL names, for the sluice command:
//
//	mem://                                  the in-process memstore
//	redis://[user:pass@]host:port/db        a Redis server (rediss:// for TLS)
//	redis+cluster://host:port,host:port     a Redis Cluster, from any of its nodes
//	redis+sentinel://host:port,.../master   Redis behind Sentinel
//	postgres://user@host:port/db?strategy=select_for_update&table=name
//	mysql://user:pass@host:port/db?strategy=...&table=name
//
// The SQL stores create their table if it is missing. strategy is one of
// single_statement (the default on PostgreSQL), select_for_update (the
// only one, and default, on MySQL) and advisory_lock (PostgreSQL).
//
// Stores are chosen by scheme in one switch, not registered by init, so
// what the command can open is written here.
package storeurl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/mysqlstore"
	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Store is an opened store and what it holds open.
type Store struct {
	driver.Store
	// Scheme is the URL's scheme, e.g. "redis+cluster".
	Scheme  string
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

// Pinger is implemented by stores that can check they are reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Error reports a URL that cannot be opened.
type Error struct {
	URL string // with any password removed
	Msg string
	Err error // the underlying error, if any
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("store %s: %s: %v", e.URL, e.Msg, e.Err)
	}
	return fmt.Sprintf("store %s: %s", e.URL, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// noRetries turns off go-redis's own retries: a compare-and-set it re-sent
// after a lost reply may have been applied twice (redisstore's doc), and
// the limiter's store timeout and failure policy already bound a failing
// call. A redis:// URL may still set max_retries.
const noRetries = -1

// Open opens the store rawURL names. The caller must Close it.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &Error{URL: "(unparsable)", Msg: "not a URL", Err: err}
	}
	shown := u.Redacted()
	bad := func(msg string, err error) error { return &Error{URL: shown, Msg: msg, Err: err} }
	s := &Store{Scheme: u.Scheme}
	switch u.Scheme {
	case "mem", "":
		s.Store = memstore.New()
		return s, nil
	case "redis", "rediss":
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, bad("bad Redis URL", err)
		}
		if !u.Query().Has("max_retries") {
			opt.MaxRetries = noRetries
		}
		return s.redis(redis.NewClient(opt), bad)
	case "redis+cluster":
		addrs := strings.Split(u.Host, ",")
		opt := &redis.ClusterOptions{Addrs: addrs, Username: u.User.Username(), MaxRetries: noRetries}
		opt.Password, _ = u.User.Password() // both read "" from a nil u.User
		return s.redis(redis.NewClusterClient(opt), bad)
	case "redis+sentinel":
		master := strings.Trim(u.Path, "/")
		if master == "" {
			return nil, bad("the path must name the master, e.g. redis+sentinel://host:26379/mymaster", nil)
		}
		opt := &redis.FailoverOptions{MasterName: master, SentinelAddrs: strings.Split(u.Host, ","), Username: u.User.Username(),
			MaxRetries: noRetries}
		opt.Password, _ = u.User.Password()
		return s.redis(redis.NewFailoverClient(opt), bad)
	case "postgres", "postgresql":
		q := u.Query()
		var opts []pgstore.Option
		switch strategy := q.Get("strategy"); strategy {
		case "", "single_statement":
		case "select_for_update":
			opts = append(opts, pgstore.WithStrategy(pgstore.SelectForUpdate))
		case "advisory_lock":
			opts = append(opts, pgstore.WithStrategy(pgstore.AdvisoryLock))
		default:
			return nil, bad(fmt.Sprintf("unknown strategy %q: want single_statement, select_for_update or advisory_lock", strategy), nil)
		}
		if t := q.Get("table"); t != "" {
			opts = append(opts, pgstore.WithTable(t))
		}
		q.Del("strategy")
		q.Del("table")
		u.RawQuery = q.Encode()
		pool, err := pgxpool.New(ctx, u.String())
		if err != nil {
			return nil, bad("cannot configure the PostgreSQL pool", err)
		}
		s.closers = append(s.closers, func() error { pool.Close(); return nil })
		st, err := pgstore.New(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, bad("bad store options", err)
		}
		if err := st.Migrate(ctx); err != nil {
			pool.Close()
			return nil, bad("cannot create the table", err)
		}
		s.Store = st
		return s, nil
	case "mysql":
		q := u.Query()
		var opts []mysqlstore.Option
		switch strategy := q.Get("strategy"); strategy {
		case "", "select_for_update":
		default:
			return nil, bad(fmt.Sprintf("unknown strategy %q: MySQL has select_for_update", strategy), nil)
		}
		if t := q.Get("table"); t != "" {
			opts = append(opts, mysqlstore.WithTable(t))
		}
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "tcp", u.Host, strings.Trim(u.Path, "/"), true
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, bad("cannot configure the MySQL client", err)
		}
		s.closers = append(s.closers, db.Close)
		st, err := mysqlstore.New(db, opts...)
		if err != nil {
			db.Close()
			return nil, bad("bad store options", err)
		}
		if err := st.Migrate(ctx); err != nil {
			db.Close()
			return nil, bad("cannot create the table", err)
		}
		s.Store = st
		return s, nil
	}
	return nil, bad(fmt.Sprintf("unknown scheme %q: want mem, redis, rediss, redis+cluster, redis+sentinel, postgres or mysql", u.Scheme), nil)
}

func (s *Store) redis(c redis.UniversalClient, bad func(string, error) error) (*Store, error) {
	st, err := redisstore.New(c)
	if err != nil {
		c.Close()
		return nil, bad("bad store options", err)
	}
	s.Store = st
	s.closers = append(s.closers, c.Close, st.Close)
	return s, nil
}
