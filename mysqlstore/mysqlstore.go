package mysqlstore

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/sqlstore"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Strategy is how a Store makes an update atomic. Processes that share a
// table may use different strategies, as during a rolling deploy that
// changes it: both write a row only under InnoDB's lock on it, and
// SingleStatement compares with the row's latest committed version.
type Strategy int

const (
	// SingleStatement reads the state, then writes it with one
	// conditional statement that succeeds only if the state is still what
	// was read, retrying a lost race (a driver.CAS with a state cache).
	// Each statement is a transaction of its own (autocommit): no lock is
	// held between statements. It is the default.
	SingleStatement Strategy = iota
	// SelectForUpdate locks the key's row with SELECT … FOR UPDATE in a
	// READ COMMITTED transaction, inserting an empty row first if the key
	// has none (a driver.RowLocker), as Bucket4j's SELECT_FOR_UPDATE lock
	// does.
	SelectForUpdate
)

// String returns the constant's name, "SingleStatement" or
// "SelectForUpdate".
func (s Strategy) String() string { return sqlstore.Name(sqlstore.Strategy(s), dialect.Strategies) }

// DefaultStateCache is how many keys' states a SingleStatement store
// remembers by default (4096); see WithStateCache.
const DefaultStateCache = sqlstore.DefaultStateCache

// Defaults of the options.
const (
	DefaultTable         = sqlstore.DefaultTable         // "sluice_state"
	DefaultKeyColumn     = sqlstore.DefaultKeyColumn     // "key"
	DefaultStateColumn   = sqlstore.DefaultStateColumn   // "state"
	DefaultExpiresColumn = sqlstore.DefaultExpiresColumn // "expires_at"
)

// Limits of the table's columns.
const (
	// MaxKeyLen is the longest key column value in bytes (VARBINARY(255)).
	// A key shorter than that is stored as it is, a longer one under its
	// driver.ShortKey digest form, so every key is accepted and no two
	// share a row.
	MaxKeyLen = driver.MaxKeyLen
	// MaxStateLen is the largest state in bytes (MEDIUMBLOB).
	MaxStateLen = 1<<24 - 1
)

// IdentifierError reports a table or column name that is not a plain SQL
// identifier: letters, digits and underscores, not starting with a digit,
// 1 to 64 bytes, and for a table optionally qualified by one database
// ("db.table"). Names are never interpolated unchecked, so a name cannot
// inject SQL.
type IdentifierError struct {
	// Option is the option that gave the name, e.g. "WithTable".
	Option string
	// Name is the rejected name.
	Name string
}

// Error says which option gave which name.
func (e *IdentifierError) Error() string {
	return fmt.Sprintf("mysqlstore: %s: %q is not an SQL identifier (letters, digits and _, not starting with a digit, 1 to 64 bytes)", e.Option, e.Name)
}

// dialect is MySQL's: identifiers of at most 64 bytes, and column names
// that are case-insensitive.
var dialect = sqlstore.Dialect{
	Pkg:             "mysqlstore",
	MaxIdent:        64,
	FoldCase:        true,
	Strategies:      int(SelectForUpdate) + 1,
	IdentifierError: func(option, name string) error { return &IdentifierError{Option: option, Name: name} },
	NoRows:          sql.ErrNoRows,
	Classify:        classify,
}

// Option configures New.
type Option func(*options)

type options = sqlstore.Config

// WithTable sets the table, "name" or "db.name"; the default is
// "sluice_state" in the connection's database.
func WithTable(name string) Option { return func(o *options) { o.SetTable(name) } }

// WithColumns sets the names of the key, state and expiry columns; the
// defaults are "key", "state" and "expires_at".
func WithColumns(key, state, expires string) Option {
	return func(o *options) { o.Key, o.State, o.Expires = key, state, expires }
}

// WithStrategy sets the strategy; the default is SingleStatement.
func WithStrategy(s Strategy) Option { return func(o *options) { o.Strategy = sqlstore.Strategy(s) } }

// WithStateCache sets for how many keys a SingleStatement store remembers
// the state it last wrote or read (the default is DefaultStateCache; 0
// turns the cache off). With it, an update of a key whose state this
// process last wrote is one statement, the conditional UPDATE, instead of
// two; a stale entry (another process wrote, or the state expired) only
// costs a lost compare and a read, never a wrong decision. See
// driver.WithStateCache. SelectForUpdate ignores it.
func WithStateCache(entries int) Option { return func(o *options) { o.StateCache = entries } }

// WithMaxAttempts bounds the attempts of one update: with
// SingleStatement, the conditional writes lost to other writers; with
// SelectForUpdate, the transactions that only inserted the key's empty
// row. Past it the update fails with driver.ErrConflict. The default, 0,
// is no bound: the update retries until its context ends, so that
// contention is never a failure (see driver.NewCASStore).
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
// Each batch deletes only rows still expired once locked, so a key
// renewed meanwhile keeps its row (see DeleteExpired). Several processes
// may sweep one table; they may pick the same rows, which only one
// deletes.
func WithSweep(interval time.Duration, report func(deleted int64, err error)) Option {
	return func(o *options) { o.SweepEvery, o.SweepReport, o.SweepSet = interval, report, true }
}

// DB is the part of *sql.DB that a Store uses; *sql.Conn satisfies it too.
// Its driver must be github.com/go-sql-driver/mysql, whose errors the
// Store interprets, and its sessions must be in autocommit mode (the
// server's default), so that each statement of SingleStatement is a
// transaction of its own.
type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PingContext(ctx context.Context) error
}

// Store keeps sluice state in a MySQL or MariaDB (InnoDB) table. It is a
// driver.Store and a driver.Deleter, and is safe for concurrent use by
// multiple goroutines when its DB is (a *sql.DB is). With WithSweep it
// runs a goroutine until Close.
type Store struct {
	db   DB
	q    queries
	core *sqlstore.Store
}

var (
	_ driver.Store   = (*Store)(nil)
	_ driver.Deleter = (*Store)(nil)
)

// New returns a Store on db, usually a *sql.DB opened with the "mysql"
// driver. It does not touch the database: create the table with Migrate,
// or with DDL in your own migrations. With WithSweep it starts the
// sweep's goroutine, which Close stops. It fails with an *IdentifierError
// for a name that is not an SQL identifier, and with an error for another
// invalid option.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysqlstore: nil DB")
	}
	o, err := sqlstore.Configure(dialect, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, q: newQueries(o)}
	s.core = sqlstore.New(dialect, o, sqlstore.Blocks{CAS: casStore{s}, RowLocker: rowLocker{s}}, s.deleteKey, s.DeleteExpired)
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
// a context that ended before anything was committed is returned as
// ctx.Err(). Any key is accepted: one shorter than MaxKeyLen bytes is
// stored as it is, a longer one under driver.ShortKey, which errors name.
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return s.core.Update(ctx, key, fn)
}

// Delete removes key's state at once. Deleting a key without state is not
// an error.
func (s *Store) Delete(ctx context.Context, key string) error { return s.core.Delete(ctx, key) }

// deleteKey deletes key's row: one round trip.
func (s *Store) deleteKey(ctx context.Context, key string) error {
	if _, err := s.db.ExecContext(ctx, s.q.delete, key); err != nil {
		return classify(ctx, err, true)
	}
	return nil
}

// maxDeleteBatch is the largest batch of DeleteExpired: its DELETE names
// each key, and ten thousand keys of up to 255 bytes, escaped, keep the
// statement under about 5 MB, within the default max_allowed_packet of
// MariaDB (16 MB) and MySQL 8 (64 MB).
const maxDeleteBatch = 10_000

// DeleteExpired deletes at most batch expired rows
// (expires_at <= UTC_TIMESTAMP(6)), oldest first, in one READ COMMITTED
// transaction, so that it takes no gap locks, and returns how many it
// deleted. WithSweep runs it in the background; without it, run it
// periodically, from cron or a time.Ticker, calling it until it returns 0:
//
//	for {
//		n, err := s.DeleteExpired(ctx, 1000)
//		if err != nil || n == 0 {
//			break
//		}
//	}
//
// It reads the keys of expired rows through the expiry index without
// locking them, then deletes those rows by key, each only if it is still
// expired once locked: a row that a limiter renewed meanwhile is kept. By
// key, it locks rows in the order of the primary key and locks no entry
// of the expiry index before its row, as a limiter's update does, so the
// two wait for each other but do not deadlock (finding the rows through
// the expiry index, a DELETE would hold the index entry that a
// SelectForUpdate renewal of the row must change). It waits for a row
// that a limiter holds, for as long as the limiter's statement or
// transaction lasts. batch is 1 to 10,000; small batches keep
// each transaction and its row locks short. Expired rows read as no state whether or not they are
// deleted, so cleanup only reclaims space. An error wrapping
// driver.ErrConflict is safe to retry.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (deleted int64, err error) {
	if batch < 1 || batch > maxDeleteBatch {
		return 0, fmt.Errorf("mysqlstore: delete expired: batch must be 1 to %d, got %d", maxDeleteBatch, batch)
	}
	tx, err := s.db.BeginTx(ctx, &txOptions)
	if err != nil {
		return 0, storeerr.Wrap("mysqlstore: delete expired", classify(ctx, err, false))
	}
	defer tx.Rollback()
	keys, err := expiredKeys(ctx, tx, s.q.expiredKeys, batch)
	if err != nil {
		return 0, storeerr.Wrap("mysqlstore: delete expired", classify(ctx, err, false))
	}
	if len(keys) == 0 {
		return 0, nil
	}
	// The IN list has one placeholder per key: at most batch.
	del := s.q.deleteExpired + strings.Repeat(", ?", len(keys)-1) + ")"
	res, err := tx.ExecContext(ctx, del, keys...)
	if err != nil {
		return 0, storeerr.Wrap("mysqlstore: delete expired", classify(ctx, err, false))
	}
	if err := tx.Commit(); err != nil {
		return 0, storeerr.Wrap("mysqlstore: delete expired", classify(ctx, err, true))
	}
	return res.RowsAffected()
}

// expiredKeys returns the keys of at most batch expired rows, as
// arguments of the DELETE.
func expiredKeys(ctx context.Context, tx *sql.Tx, query string, batch int) ([]any, error) {
	rows, err := tx.QueryContext(ctx, query, batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []any
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// Ping checks that the database answers. Its error wraps
// driver.ErrUnavailable, or is ctx.Err().
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return storeerr.Wrap("mysqlstore: ping", classify(ctx, err, false))
	}
	return nil
}

//go:embed schema.sql
var schemaSQL string

// DDL returns the statement that creates the store's table, with its
// index, if it does not exist, for those who run migrations themselves.
// Names are validated and quoted.
func (s *Store) DDL() string { return s.q.ddl }

// Migrate creates the store's table and its index if they do not exist.
// It is safe to run at every start.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.q.ddl); err != nil {
		return storeerr.Wrap("mysqlstore: migrate", classify(ctx, err, false))
	}
	return nil
}

// MySQL error numbers after which a retry is safe once the transaction is
// rolled back.
const (
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	errLockDeadlock    = 1213 // ER_LOCK_DEADLOCK
	// errCheckRead is MariaDB's "record has changed since last read",
	// with innodb_snapshot_isolation (on by default from 11.6) under
	// REPEATABLE READ.
	errCheckRead = 1020 // ER_CHECKREAD
)

// errDupEntry is a duplicate key: the INSERT of a key that has a row.
const errDupEntry = 1062 // ER_DUP_ENTRY

// classify maps err, returned by a statement or a COMMIT, to the driver's
// errors (see storeerr.Classify). write says whether the statement may
// have written state: a Delete, or the COMMIT of a transaction that
// wrote. An error the server reported rolled the statement back.
func classify(ctx context.Context, err error, write bool) error {
	out := storeerr.NoAnswer
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me):
		out = storeerr.Refused
		switch me.Number {
		case errLockWaitTimeout, errLockDeadlock, errCheckRead:
			out = storeerr.Conflict
		}
	case notSent(err):
		out = storeerr.NotSent
	}
	return storeerr.Classify(ctx, err, write, out)
}

// notSent reports whether err certainly happened before the statement
// was sent: the driver returns driver.ErrBadConn only then, and a failed
// dial had no connection to send on.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.Is(err, sqldriver.ErrBadConn) || errors.As(err, &oe) && oe.Op == "dial"
}

// queries are the statements of a Store, with its quoted names.
type queries struct {
	ddl                                 string
	get, insert, updateAbsent, updateIf string
	sameForever                         string
	lockRow, insertEmpty, updateRow     string
	delete, expiredKeys, deleteExpired  string
}

func newQueries(o options) queries {
	ident := func(s string) string { return "`" + s + "`" } // s is an identifier (sqlstore.Configure)
	table := ident(o.Table)
	if o.Qualified {
		table = ident(o.Schema) + "." + table
	}
	k, st, ex := ident(o.Key), ident(o.State), ident(o.Expires)
	r := strings.NewReplacer(
		"{{table}}", table, "{{key}}", k, "{{state}}", st, "{{expires}}", ex,
	)
	// live is true for a row whose state has not expired, by the
	// database clock in UTC.
	live := fmt.Sprintf("(%[1]s IS NULL OR %[1]s > UTC_TIMESTAMP(6))", ex)
	// expiry is the second argument, the ttl in microseconds, added to
	// the statement's UTC_TIMESTAMP(6); a NULL ttl gives NULL, never.
	expiry := "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
	return queries{
		ddl: r.Replace(schemaSQL),

		// SingleStatement (see cas.go): each statement alone, in
		// autocommit. A state is live under the same test in every one,
		// by the one database clock, so that a read and a write agree.
		get:    fmt.Sprintf("SELECT %s FROM %s WHERE %s = ? AND %s", st, table, k, live),
		insert: fmt.Sprintf("INSERT INTO %s (%s, %s, %s) VALUES (?, ?, %s)", table, k, st, ex, expiry),
		// The assignments read no column, so MySQL's left-to-right
		// assignment and MariaDB's SIMULTANEOUS_ASSIGNMENT agree; the
		// WHERE is evaluated on the row before them.
		updateAbsent: fmt.Sprintf("UPDATE %s SET %s = ?, %s = %s WHERE %s = ? AND (%s <= UTC_TIMESTAMP(6) OR LENGTH(%s) = 0)",
			table, st, ex, expiry, k, ex, st),
		updateIf:    fmt.Sprintf("UPDATE %s SET %s = ?, %s = %s WHERE %s = ? AND %s = ? AND %s", table, st, ex, expiry, k, st, live),
		sameForever: fmt.Sprintf("SELECT 1 FROM %s WHERE %s = ? AND %s = ? AND %s IS NULL", table, k, st, ex),

		lockRow: fmt.Sprintf("SELECT IF(%s, %s, NULL) FROM %s WHERE %s = ? FOR UPDATE", live, st, table, k),
		// The grace keeps DeleteExpired from deleting the empty row
		// before the update that follows its insert; an empty row reads
		// as no state whatever its expiry.
		insertEmpty: fmt.Sprintf("INSERT IGNORE INTO %s (%s, %s, %s) VALUES (?, '', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE)", table, k, st, ex),
		// The second argument is the ttl in microseconds, NULL for no
		// expiry (adding a NULL interval gives NULL).
		updateRow: fmt.Sprintf("UPDATE %s SET %s = ?, %s = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE %s = ?", table, st, ex, k),
		delete:    fmt.Sprintf("DELETE FROM %s WHERE %s = ?", table, k),
		// DeleteExpired: a consistent read of expired keys through the
		// expiry index, then a DELETE by key, to which it appends the
		// placeholders of the keys but the first and ")". The DELETE
		// checks expiry again on each row once locked; COALESCE hides the
		// expiry column from the optimizer, which must not find the rows
		// through the expiry index (see DeleteExpired), and keeps a row
		// that never expires.
		expiredKeys: fmt.Sprintf("SELECT %s FROM %s WHERE %s <= UTC_TIMESTAMP(6) ORDER BY %s LIMIT ?", k, table, ex, ex),
		deleteExpired: fmt.Sprintf("DELETE FROM %s WHERE COALESCE(%s, CAST('9999-12-31' AS DATETIME(6))) <= UTC_TIMESTAMP(6) AND %s IN (?",
			table, ex, k),
	}
}

// ttlArg is ttl in microseconds, rounded up so that the state is kept at
// least ttl, or nil (NULL) for no expiry.
func ttlArg(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	us := int64(ttl / time.Microsecond)
	if ttl%time.Microsecond != 0 && us < math.MaxInt64 {
		us++
	}
	return us
}
