package pgstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/sqlstore"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Strategy is how a Store makes an update atomic. All processes that share
// a table must use the same strategy: AdvisoryLock does not exclude the
// other two.
type Strategy int

const (
	// SingleStatement reads the state, then writes it with one
	// compare-and-swap statement that succeeds only if the state is still
	// what was read, retrying a lost race (a driver.CAS). It takes no lock
	// and holds no transaction open. It is the default.
	SingleStatement Strategy = iota
	// SelectForUpdate locks the key's row with SELECT … FOR UPDATE in a
	// READ COMMITTED transaction, inserting an empty row first if the key
	// has none (a driver.RowLocker), as Bucket4j's SELECT_FOR_UPDATE lock
	// does.
	SelectForUpdate
	// AdvisoryLock takes a transaction-level advisory lock on a hash of the
	// key (pg_advisory_xact_lock) in a READ COMMITTED transaction, then
	// reads and upserts the row (a driver.Locker), as Bucket4j's
	// ADVISORY_LOCK does.
	AdvisoryLock
)

// String returns the constant's name, "SingleStatement" and so on.
func (s Strategy) String() string { return sqlstore.Name(sqlstore.Strategy(s), dialect.Strategies) }

// Defaults of the options.
const (
	DefaultTable         = sqlstore.DefaultTable         // "sluice_state"
	DefaultKeyColumn     = sqlstore.DefaultKeyColumn     // "key"
	DefaultStateColumn   = sqlstore.DefaultStateColumn   // "state"
	DefaultExpiresColumn = sqlstore.DefaultExpiresColumn // "expires_at"
)

// IdentifierError reports a table or column name that is not a plain SQL
// identifier: letters, digits and underscores, not starting with a digit,
// 1 to 63 bytes, and for a table optionally qualified by one schema
// ("schema.table"). Names are never interpolated unchecked, so a name
// cannot inject SQL.
type IdentifierError struct {
	// Option is the option that gave the name, e.g. "WithTable".
	Option string
	// Name is the rejected name.
	Name string
}

// Error says which option gave which name.
func (e *IdentifierError) Error() string {
	return fmt.Sprintf("pgstore: %s: %q is not an SQL identifier (letters, digits and _, not starting with a digit, 1 to 63 bytes)", e.Option, e.Name)
}

// dialect is PostgreSQL's: an unquoted identifier has at most
// NAMEDATALEN-1 bytes, beyond which PostgreSQL would truncate it, and
// quoted names keep their case.
var dialect = sqlstore.Dialect{
	Pkg:             "pgstore",
	MaxIdent:        63,
	Strategies:      int(AdvisoryLock) + 1,
	IdentifierError: func(option, name string) error { return &IdentifierError{Option: option, Name: name} },
	NoRows:          pgx.ErrNoRows,
	Classify:        classify,
}

// Option configures New.
type Option func(*options)

type options = sqlstore.Config

// WithTable sets the table, "name" or "schema.name"; the default is
// "sluice_state" in the connection's search_path. The name is quoted, so
// its case is kept.
func WithTable(name string) Option { return func(o *options) { o.SetTable(name) } }

// WithColumns sets the names of the key, state and expiry columns; the
// defaults are "key", "state" and "expires_at". The names are quoted, so
// their case is kept.
func WithColumns(key, state, expires string) Option {
	return func(o *options) { o.Key, o.State, o.Expires = key, state, expires }
}

// WithStrategy sets the strategy; the default is SingleStatement.
func WithStrategy(s Strategy) Option { return func(o *options) { o.Strategy = sqlstore.Strategy(s) } }

// DefaultStateCache is how many keys' states a SingleStatement store
// remembers by default (4096); see WithStateCache.
const DefaultStateCache = sqlstore.DefaultStateCache

// WithStateCache sets for how many keys a SingleStatement store remembers
// the state it last wrote or read (the default is DefaultStateCache; 0
// turns the cache off). With it, an update of a key whose state this
// process last wrote is one round trip, the compare-and-swap, instead of
// two; a stale entry (another process wrote, or the state expired) only
// costs a lost compare-and-swap and a read, never a wrong decision. See
// driver.WithStateCache. Other strategies ignore it.
func WithStateCache(entries int) Option { return func(o *options) { o.StateCache = entries } }

// WithMaxAttempts bounds the attempts of one update: with
// SingleStatement, the compare-and-swaps lost to other writers; with
// SelectForUpdate, the transactions that only inserted the key's empty
// row. Past it the update fails with driver.ErrConflict. The default, 0,
// is no bound: an update retries until its context ends, so that
// contention is never a failure (see driver.NewCASStore). AdvisoryLock
// waits for its lock and never retries.
func WithMaxAttempts(n int) Option { return func(o *options) { o.MaxAttempts = n } }

// WithSweep makes the Store delete expired rows by itself: New starts a
// goroutine that, every interval, calls DeleteExpired with batches of
// 1000 rows until a batch deletes fewer, and Close stops it. report, if
// not nil, is called on that goroutine after each batch with the rows it
// deleted or its error (a metric, a log line); it must not block. A
// batch is bounded to 30s. Expired rows then stay in the table at most
// about interval after they expire, and the table holds about the keys
// used within their ttl plus interval. interval must be positive; the
// default is no sweep.
//
// Each batch is one statement that locks the rows it picks (skipping
// those a limiter holds) and deletes only those still expired, so a key
// renewed meanwhile keeps its row. Several processes may sweep one table:
// they skip each other's rows.
func WithSweep(interval time.Duration, report func(deleted int64, err error)) Option {
	return func(o *options) { o.SweepEvery, o.SweepReport, o.SweepSet = interval, report, true }
}

// DB is the part of a pgx connection pool that a Store uses.
// *pgxpool.Pool (github.com/jackc/pgx/v5/pgxpool) satisfies it, and so
// does a single *pgx.Conn, which is not safe for concurrent use.
type DB interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
	Ping(ctx context.Context) error
}

// Store keeps sluice state in a PostgreSQL table. It is a driver.Store and
// a driver.Deleter, and is safe for concurrent use by multiple goroutines
// when its DB is. With WithSweep it runs a goroutine until Close.
type Store struct {
	db   DB
	q    queries
	core *sqlstore.Store
}

var (
	_ driver.Store   = (*Store)(nil)
	_ driver.Deleter = (*Store)(nil)
)

// New returns a Store on db, usually a *pgxpool.Pool. It does not touch
// the database: create the table with Migrate, or with DDL in your own
// migrations. With WithSweep it starts the sweep's goroutine, which
// Close stops.
// It fails with an *IdentifierError for a name that is not an SQL
// identifier, and with an error for another invalid option.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("pgstore: nil DB")
	}
	o, err := sqlstore.Configure(dialect, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, q: newQueries(o)}
	s.core = sqlstore.New(dialect, o, sqlstore.Blocks{CAS: casStore{s}, RowLocker: rowLocker{s}, Locker: advisoryLocker{s}},
		s.deleteKey, s.DeleteExpired)
	return s, nil
}

// Close stops the sweep of WithSweep, cancelling a batch in progress, and
// waits for its goroutine to end; after it returns, report is not called
// again. It does not close the DB, which the caller owns, and does
// nothing without WithSweep. It returns nil, and may be called more than
// once.
func (s *Store) Close() error { return s.core.Close() }

// Strategy returns the store's strategy.
func (s *Store) Strategy() Strategy { return Strategy(s.core.Strategy()) }

// Update atomically reads key's state, calls fn and writes its result
// when it changed, as driver.Store requires. Its errors wrap
// driver.ErrConflict, driver.ErrUnavailable or driver.ErrIndeterminate;
// a context that ended before anything was sent is returned as ctx.Err().
// Any key is accepted: one shorter than driver.MaxKeyLen bytes is stored
// as it is, a longer one under driver.ShortKey, which errors name.
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return s.core.Update(ctx, key, fn)
}

// Delete removes key's state at once. Deleting a key without state is not
// an error.
func (s *Store) Delete(ctx context.Context, key string) error { return s.core.Delete(ctx, key) }

// deleteKey deletes key's row: one round trip.
func (s *Store) deleteKey(ctx context.Context, key string) error {
	_, err := s.exec(ctx, s.q.delete, []byte(key))
	return err
}

// DeleteExpired deletes at most batch expired rows (expires_at <= now())
// in one statement and returns how many it deleted. Rows that other
// transactions have locked are skipped (FOR UPDATE SKIP LOCKED), so it
// never waits for a limiter, and it deletes a row only if it is still
// expired once locked, so a renewal is never lost. WithSweep runs it in
// the background; without it, run it periodically, from cron or a
// time.Ticker, calling it until it returns 0:
//
//	for {
//		n, err := s.DeleteExpired(ctx, 1000)
//		if err != nil || n == 0 {
//			break
//		}
//	}
//
// Small batches keep each statement short. Expired rows read as no state
// whether or not they are deleted, so cleanup only reclaims space.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (deleted int64, err error) {
	if batch < 1 {
		return 0, fmt.Errorf("pgstore: delete expired: batch must be at least 1, got %d", batch)
	}
	tag, err := s.exec(ctx, s.q.deleteExpired, batch)
	if err != nil {
		return 0, storeerr.Wrap("pgstore: delete expired", err)
	}
	return tag.RowsAffected(), nil
}

// Ping checks that the database answers. Its error wraps
// driver.ErrUnavailable, or is ctx.Err().
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.Ping(ctx); err != nil {
		return storeerr.Wrap("pgstore: ping", classify(ctx, err, false))
	}
	return nil
}

//go:embed schema.sql
var schemaSQL string

// DDL returns the statements that create the store's table and its index
// if they do not exist, for those who run migrations themselves. Names
// are validated and quoted.
func (s *Store) DDL() string { return s.q.ddl }

// Migrate creates the store's table and its index if they do not exist.
// It is safe to run at every start, from many processes at once: it holds
// a transaction-level advisory lock while it runs.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return storeerr.Wrap("pgstore: migrate", classify(ctx, err, false))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Concurrent CREATE TABLE IF NOT EXISTS can fail on the catalog's
	// unique indexes; the lock serializes migrations of this table.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.q.lockSeed); err != nil {
		return storeerr.Wrap("pgstore: migrate", classify(ctx, err, false))
	}
	// Without arguments, Exec uses the simple protocol, which runs several
	// statements.
	if _, err := tx.Exec(ctx, s.q.ddl); err != nil {
		return storeerr.Wrap("pgstore: migrate", classify(ctx, err, false))
	}
	if err := tx.Commit(ctx); err != nil {
		return storeerr.Wrap("pgstore: migrate", classify(ctx, err, false))
	}
	return nil
}

// exec runs one statement that writes.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := s.db.Exec(ctx, sql, args...)
	if err != nil {
		return tag, classify(ctx, err, true)
	}
	return tag, nil
}

// SQLSTATEs after which a retry is safe: the transaction was rolled back.
const (
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateLockNotAvailable     = "55P03" // lock_timeout
)

// classify maps err, returned by a statement or a COMMIT, to the driver's
// errors (see storeerr.Classify). write says whether the statement may
// have written state: the compare-and-swap of SingleStatement, a Delete,
// or the COMMIT of a transaction that wrote. An error the server reported
// rolled the statement or transaction back.
func classify(ctx context.Context, err error, write bool) error {
	out := storeerr.NoAnswer
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		out = storeerr.Refused
		switch pgErr.Code {
		case sqlstateSerializationFailure, sqlstateDeadlockDetected, sqlstateLockNotAvailable:
			out = storeerr.Conflict
		}
	case notSent(err):
		out = storeerr.NotSent
	}
	return storeerr.Classify(ctx, err, write, out)
}

// notSent reports whether err certainly happened before the statement
// reached the server: pgx says it is safe to retry, or a pool failed to
// connect (*pgconn.ConnectError), or a pool gave up waiting for a
// connection, which it reports as a bare context error (pgx wraps the
// context errors of a statement).
func notSent(err error) bool {
	var ce *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &ce) || storeerr.IsBareContext(err)
}

// lockID is the advisory lock of key: a 64-bit FNV-1a hash of the table's
// seed and the key's bytes, computed here because PostgreSQL has no
// extended hash of bytea.
func (q *queries) lockID(key []byte) int64 {
	h := fnv.New64a()
	var seed [8]byte
	binary.BigEndian.PutUint64(seed[:], uint64(q.lockSeed))
	h.Write(seed[:])
	h.Write(key)
	return int64(h.Sum64())
}

// queries are the statements of a Store, with its quoted names.
type queries struct {
	ddl string
	// lockSeed distinguishes the advisory locks of this table from those
	// of other tables: it seeds lockID, and is the lock that Migrate
	// holds.
	lockSeed int64

	get, casInsert, casUpdate       string
	lockRow, insertEmpty, updateRow string
	advisoryLock, getLive, upsert   string
	delete, deleteExpired           string
}

// placeholderGrace is how long the empty row that SelectForUpdate inserts
// for a key's first update is kept from DeleteExpired. An empty row reads
// as no state whatever its expiry; the grace only keeps DeleteExpired
// from deleting the row between its insert and the update that follows.
const placeholderGrace = "interval '1 minute'"

func newQueries(o options) queries {
	ident := func(s ...string) string { return pgx.Identifier(s).Sanitize() }
	table := ident(o.Table)
	if o.Qualified {
		table = ident(o.Schema, o.Table)
	}
	k, st, ex := ident(o.Key), ident(o.State), ident(o.Expires)
	h := fnv.New64a()
	h.Write([]byte(table))
	seed := int64(h.Sum64())
	r := strings.NewReplacer(
		"{{table}}", table, "{{key}}", k, "{{state}}", st, "{{expires}}", ex,
		"{{index}}", ident(indexName(o.Table, uint64(seed))),
	)
	// live is true for a row whose state has not expired. Expiry compares
	// with now(), the start of the statement's transaction by the
	// database clock.
	live := fmt.Sprintf("(%[1]s IS NULL OR %[1]s > now())", ex)
	// $3 is the ttl as an interval, NULL for no expiry. The expiry is
	// rounded up to the next whole second, so that the writes of a key
	// within one second leave its indexed column as it was: PostgreSQL
	// then makes them HOT updates, which touch no index (on a busy key,
	// about 94% of them instead of none). The contract allows keeping a
	// state longer than its ttl.
	expiry := "date_trunc('second', now() + $3::interval) + interval '1 second'"
	return queries{
		ddl:      r.Replace(schemaSQL),
		lockSeed: seed,

		get: fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1 AND %s", st, table, k, live),
		// An absent state is no row, an expired row or an empty row.
		casInsert: fmt.Sprintf("INSERT INTO %[1]s AS t (%[2]s, %[3]s, %[4]s) VALUES ($1, $2, %[5]s) "+
			"ON CONFLICT (%[2]s) DO UPDATE SET %[3]s = EXCLUDED.%[3]s, %[4]s = EXCLUDED.%[4]s "+
			"WHERE t.%[4]s <= now() OR octet_length(t.%[3]s) = 0", table, k, st, ex, expiry),
		casUpdate: fmt.Sprintf("UPDATE %s SET %s = $2, %s = %s WHERE %s = $1 AND %s = $4 AND %s",
			table, st, ex, expiry, k, st, live),

		lockRow: fmt.Sprintf("SELECT CASE WHEN %s THEN %s END FROM %s WHERE %s = $1 FOR UPDATE", live, st, table, k),
		insertEmpty: fmt.Sprintf("INSERT INTO %s (%s, %s, %s) VALUES ($1, '', now() + %s) ON CONFLICT (%s) DO NOTHING",
			table, k, st, ex, placeholderGrace, k),
		updateRow: fmt.Sprintf("UPDATE %s SET %s = $2, %s = %s WHERE %s = $1", table, st, ex, expiry, k),

		advisoryLock: "SELECT pg_advisory_xact_lock($1)",
		getLive:      fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1 AND %s", st, table, k, live),
		upsert: fmt.Sprintf("INSERT INTO %[1]s (%[2]s, %[3]s, %[4]s) VALUES ($1, $2, %[5]s) "+
			"ON CONFLICT (%[2]s) DO UPDATE SET %[3]s = EXCLUDED.%[3]s, %[4]s = EXCLUDED.%[4]s", table, k, st, ex, expiry),

		delete: fmt.Sprintf("DELETE FROM %s WHERE %s = $1", table, k),
		// The inner SELECT locks the rows it picks, so their ctid cannot
		// change before the DELETE; the outer test is belt and braces.
		deleteExpired: fmt.Sprintf("DELETE FROM %[1]s WHERE ctid = ANY(ARRAY("+
			"SELECT ctid FROM %[1]s WHERE %[2]s <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)) AND %[2]s <= now()", table, ex),
	}
}

// indexName is the name of the index on table's expiry column:
// table_expires_idx, shortened with a hash of table when that would be
// longer than 63 bytes, so that two long table names never share an
// index name.
func indexName(table string, hash uint64) string {
	const suffix = "_expires_idx"
	if len(table)+len(suffix) <= 63 {
		return table + suffix
	}
	h := fmt.Sprintf("_%08x", uint32(hash))
	return table[:63-len(suffix)-len(h)] + h + suffix
}

// ttlArg is ttl as an interval argument: NULL for no expiry, otherwise
// rounded up to whole microseconds, PostgreSQL's resolution, so that the
// state is kept at least ttl.
func ttlArg(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	if ttl > math.MaxInt64-time.Microsecond {
		return ttl.Truncate(time.Microsecond)
	}
	return (ttl + time.Microsecond - 1).Truncate(time.Microsecond)
}
