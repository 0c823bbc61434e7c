// Package pgstore keeps sluice's rate-limit state in a PostgreSQL table,
// through github.com/jackc/pgx/v5. A [Store] is a driver.Store and a
// driver.Deleter, so one table serves every policy and every process.
//
// # Construction
//
//	pool, err := pgxpool.New(ctx, "postgres://…")
//	…
//	store, err := pgstore.New(pool, pgstore.WithTable("limits.sluice_state"))
//	…
//	err = store.Migrate(ctx) // or run store.DDL() in your migrations
//
// New accepts a [DB], which *pgxpool.Pool satisfies. Table and column
// names are validated as plain SQL identifiers (an [IdentifierError]
// otherwise) and quoted, so they cannot inject SQL.
//
// # Strategies
//
// [WithStrategy] chooses how an update is made atomic. The round trips
// below are those of one decision on a key that has state, with pgx's
// statement cache warm; a pool with an idle connection adds none.
//
//   - [SingleStatement] (default): a read, then one compare-and-swap
//     statement (UPDATE … WHERE key = $1 AND state = $old, or for a key
//     without state INSERT … ON CONFLICT DO UPDATE … WHERE the row expired
//     or is empty), retried when another writer won. With the state cache
//     ([WithStateCache], on by default) an update of a key this process
//     wrote last skips the read: 1 round trip per decision, whether or not
//     the state changes; 2 without the cache, or after another process
//     wrote. No transaction stays open and no lock is held.
//   - [SelectForUpdate]: BEGIN, SELECT … FOR UPDATE, UPDATE, COMMIT: 4
//     round trips, 3 when the state does not change. A key's first update
//     also inserts an empty row (INSERT … ON CONFLICT DO NOTHING) in a
//     transaction of its own first: 4 more, once per key.
//   - [AdvisoryLock]: BEGIN, then pg_advisory_xact_lock on a hash of the
//     table and the key pipelined with the read, an upsert, COMMIT: 4 round trips, 3
//     when the state does not change. The lock ends with the transaction.
//
// Transactions run at READ COMMITTED whatever the database's default.
// Processes sharing a table must use the same strategy: an advisory lock
// does not exclude the other two.
//
// # Table
//
// One row per key (see schema.sql, returned by [Store.DDL]):
//
//	key        bytea PRIMARY KEY    -- any bytes; ≥ 255 bytes: driver.ShortKey
//	state      bytea NOT NULL       -- empty: a row only there to be locked
//	expires_at timestamptz NULL     -- NULL: never; indexed when not NULL
//
// Every key is accepted: one shorter than driver.MaxKeyLen (255) bytes is
// stored as it is, a longer one under driver.ShortKey's digest form (its
// first 191 bytes and the hex SHA-256 of the whole key), so no two keys
// share a row. A table made with the text key column of earlier versions
// converts with
//
//	ALTER TABLE sluice_state ALTER COLUMN key TYPE bytea USING convert_to(key, 'UTF8');
//
// A key has no state when it has no row, when its row has expired
// (expires_at <= now()) or when its state is empty; every strategy reads,
// and the compare-and-swap compares, by that same rule.
//
// # Cleanup
//
// Expired rows read as absent but stay in the table until
// [Store.DeleteExpired] removes them, at most a batch per statement,
// skipping rows that limiters hold locked and deleting only rows still
// expired once locked, so a renewal is never lost. [WithSweep] runs it in
// the background every interval until [Store.Close]: the table then holds
// the keys used within their ttl, and expired rows for at most about the
// interval after they expire (plus the time to delete a backlog, about a
// thousand rows per statement). Without it, nothing bounds the table:
// call DeleteExpired until it returns 0, from cron or a time.Ticker.
// Deleted rows leave dead tuples that autovacuum reclaims for new rows.
//
// # Clocks
//
// expires_at is computed by the database clock: now() of the writing
// transaction plus the ttl, rounded up to the next whole second (so that
// a busy key's updates within a second leave the indexed column alone
// and PostgreSQL can make them HOT updates); expiry is
// checked against the database's now() too. The policies' decisions use
// the client's clock, which is in the state they write; expiry only
// decides when state is forgotten, so a skew between the two clocks shifts
// that moment and nothing else.
//
// # Errors
//
// Errors follow the driver contract: [driver.ErrConflict] for a
// serialization failure, a deadlock or a lock timeout (nothing written;
// retry), [driver.ErrUnavailable] when the server could not be reached or
// refused the statement (nothing written), [driver.ErrIndeterminate] when
// a compare-and-swap or a COMMIT that wrote was sent and its answer was
// lost. pgx's default context handling closes the connection without
// cancelling the statement, so such a write may still complete on the
// server. A context that ended before anything was written is returned as
// ctx.Err().
package pgstore
