// Package mysqlstore keeps sluice's rate-limit state in a MySQL or
// MariaDB (InnoDB) table, through database/sql and
// github.com/go-sql-driver/mysql. A [Store] is a driver.Store and a
// driver.Deleter, so one table serves every policy and every process.
//
// # Construction
//
//	db, err := sql.Open("mysql", "user:pass@tcp(host:3306)/app?interpolateParams=true")
//	…
//	store, err := mysqlstore.New(db, mysqlstore.WithTable("sluice_state")) // SingleStatement
//	// or mysqlstore.New(db, mysqlstore.WithStrategy(mysqlstore.SelectForUpdate))
//	…
//	err = store.Migrate(ctx) // or run store.DDL() in your migrations
//
// New accepts a [DB], which *sql.DB satisfies. Table and column names are
// validated as plain SQL identifiers (an [IdentifierError] otherwise) and
// quoted with backticks, so they cannot inject SQL. interpolateParams=true
// in the DSN saves a round trip per statement (the driver otherwise
// prepares each statement with arguments, then executes it).
//
// # Strategy and round trips
//
// [SingleStatement], the default, is a compare-and-swap
// (driver.NewCASStore with a state cache): a SELECT of the state, then
// one conditional statement that writes only if the state is still the
// one read (UPDATE … WHERE key = ? AND state = ? AND not expired; a plain
// INSERT for a key without a row), retrying a lost race on the state that
// won. Each statement is its own transaction, in autocommit, and holds no
// lock past its end. It is exact under READ COMMITTED and REPEATABLE
// READ, and on MySQL and MariaDB with or without CLIENT_FOUND_ROWS: cas.go
// argues why. The Store remembers the state it last wrote or read for
// each of up to [DefaultStateCache] keys ([WithStateCache]), so a decision
// on a key whose state this process last wrote is one round trip: the
// UPDATE when the state changes, the SELECT when it does not (2 on a cache
// miss). A key whose row has expired takes a failed INSERT and an UPDATE.
//
// [SelectForUpdate] locks the key's row with SELECT … FOR UPDATE in a
// READ COMMITTED transaction (a driver.RowLocker). A key's first update
// inserts an empty row with INSERT IGNORE in a transaction of its own and
// starts again. READ COMMITTED takes no gap locks, and the insert happens
// after a locking read that found nothing and so locked nothing:
// concurrent first updates of a key wait for each other but never
// deadlock. One decision on a key that has state: SET TRANSACTION
// ISOLATION LEVEL, START TRANSACTION, SELECT … FOR UPDATE, UPDATE, COMMIT:
// 5 round trips, 4 when the state does not change. The first update of a
// key costs 4 more.
//
// The counts assume interpolateParams=true in the DSN; without it every
// statement with arguments costs two (a prepare and an execute). Processes
// that share a table may use different strategies, so a rolling deploy
// can change it: both write a row only under InnoDB's lock on it.
//
// # Table
//
// One row per key (see schema.sql, returned by [Store.DDL]):
//
//	key        VARBINARY(255) PRIMARY KEY  -- bytes, no collation
//	state      MEDIUMBLOB NOT NULL         -- empty: a row only there to be locked
//	expires_at DATETIME(6) NULL            -- UTC; NULL: never; indexed
//
// A key has no state when it has no row, when its row has expired
// (expires_at <= UTC_TIMESTAMP(6)) or when its state is empty. Every key
// is accepted, any bytes: a key shorter than [MaxKeyLen] bytes is stored
// as it is, a longer one under driver.ShortKey's digest form (its first
// 191 bytes and the hex SHA-256 of the whole key), so no two keys share a
// row.
//
// # Cleanup
//
// Expired rows read as absent but stay in the table until
// [Store.DeleteExpired] removes them, at most a batch per transaction at
// READ COMMITTED: the oldest expired keys, read without locks, then
// deleted by key, each only if still expired once locked, so a renewal
// is never lost. [WithSweep] runs it in the background every interval
// until [Store.Close]: the table then holds the keys used within their
// ttl, and expired rows for at most about the interval after they expire
// (plus the time to delete a backlog, about a thousand rows per
// transaction). Without it, nothing bounds the table: call DeleteExpired
// until it returns 0, from cron or a time.Ticker.
//
// # Clocks
//
// expires_at is computed by the database clock, in UTC whatever the
// session's time_zone: UTC_TIMESTAMP(6) of the writing statement plus the
// ttl, rounded up to whole microseconds; expiry is checked against it too.
// The policies' decisions use the client's clock, which is in the state
// they write; expiry only decides when state is forgotten.
//
// # Errors
//
// Errors follow the driver contract: [driver.ErrConflict] for a deadlock
// (1213), a lock wait timeout (1205) or MariaDB's "record has changed
// since last read" (1020), after the statement or transaction is rolled
// back; [driver.ErrUnavailable] when the server could not be reached or
// refused a statement; [driver.ErrIndeterminate] when a write was sent
// and its answer was lost: SingleStatement's INSERT or UPDATE, or
// SelectForUpdate's COMMIT. A context that ends while SingleStatement's
// UPDATE waits for a row lock is indeterminate too: the server runs the
// statement once the lock is free, whether or not the client still
// waits. With SelectForUpdate, a context that ended before COMMIT was
// sent is returned as ctx.Err(), and the transaction rolls back.
package mysqlstore
