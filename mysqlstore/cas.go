package mysqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/driver"
)

// casStore is the driver.CAS of SingleStatement: one statement per call,
// each a transaction of its own (autocommit).
//
// # Why one statement is atomic, under READ COMMITTED and REPEATABLE READ
//
// An UPDATE's WHERE is not evaluated on a snapshot: InnoDB finds the row,
// takes its exclusive lock (waiting for any transaction that holds it,
// such as another Store's SELECT … FOR UPDATE), and evaluates the
// condition on the row's latest committed version, at both isolation
// levels (a "locking read"; READ COMMITTED's semi-consistent read only
// lets it skip rows that do not match, and re-reads a matching row after
// its lock wait). So "the state is still old" is checked and the new
// state written under one lock: no other write of the row can come
// between. An INSERT of a new key is atomic the same way: of concurrent
// INSERTs of one key, exactly one succeeds and the others fail with a
// duplicate key (1062).
//
// The isolation level matters only for locks on keys without a row:
// under REPEATABLE READ an UPDATE that finds no row takes a next-key
// lock, and a duplicate INSERT a shared lock on the row it found. As every
// statement is its own transaction, those locks end with the statement,
// which waits for at most the one lock of its own key: no statement holds
// a lock while it waits for another, so they cannot deadlock each other.
// Should InnoDB still report a deadlock (1213) or a lock wait timeout
// (1205), the statement was rolled back, and the error is
// driver.ErrConflict, safe to retry.
//
// The Get is a plain SELECT, a consistent read: in autocommit, its
// snapshot is taken as the statement starts, under either level, so it
// sees every write committed before.
//
// # Rows matched and rows changed
//
// MySQL and MariaDB report the rows an UPDATE changed, not those it
// matched, unless the connection sets CLIENT_FOUND_ROWS
// (clientFoundRows=true in go-sql-driver's DSN), and an
// INSERT … ON DUPLICATE KEY UPDATE counts 1 for an insert and, with
// CLIENT_FOUND_ROWS, 1 for a duplicate row it left unchanged too. So the
// statements here are a plain INSERT, whose duplicate is an error, and
// UPDATEs whose every match changes the row, or is checked: "changed"
// implies "matched" either way, and a match that changes nothing (the
// same bytes, and the same expiry) is possible only when both expiries
// are NULL, which CompareAndSwap then checks with a read.
type casStore struct{ s *Store }

// Get returns key's state, nil when it has none: no row, an expired row
// or an empty row. One round trip.
func (c casStore) Get(ctx context.Context, key string) ([]byte, error) {
	state, _, err := dialect.ReadState(ctx, c.s.db.QueryRowContext(ctx, c.s.q.get, key))
	return state, err
}

// CompareAndSwap writes next if key's state is still old, in one
// statement, one round trip, except in two cases: a key whose row
// exists without a state (expired or empty) takes a failed INSERT and an
// UPDATE, and an unchanged write without expiry takes a read. A nil old
// matches what Get reads as no state.
func (c casStore) CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error) {
	if len(next) > MaxStateLen {
		return false, fmt.Errorf("%w: state of %d bytes, more than %d", driver.ErrUnavailable, len(next), MaxStateLen)
	}
	if next == nil {
		next = []byte{} // the column is NOT NULL; empty reads as no state
	}
	if old == nil {
		if len(next) == 0 {
			return true, nil // no state over no state
		}
		n, err := c.exec(ctx, c.s.q.insert, key, next, ttlArg(ttl))
		if !isDupEntry(err) {
			return n > 0, err
		}
		n, err = c.exec(ctx, c.s.q.updateAbsent, next, ttlArg(ttl), key)
		// Matched means expired or empty before, and live and non-empty
		// after: changed, so counted with or without CLIENT_FOUND_ROWS.
		return n > 0, err
	}
	n, err := c.exec(ctx, c.s.q.updateIf, next, ttlArg(ttl), key, old)
	if err != nil || n > 0 {
		return n > 0, err
	}
	if ttl > 0 || !bytes.Equal(old, next) {
		// A match would have changed the state or the expiry (a new
		// microsecond, or NULL over a time): none matched.
		return false, nil
	}
	// The same bytes, forever, over the same bytes, forever: matched and
	// unchanged counts 0 rows without CLIENT_FOUND_ROWS. Without this
	// read, the update would lose to itself until its context ended.
	var one int
	err = c.s.db.QueryRowContext(ctx, c.s.q.sameForever, key, old).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, classify(ctx, err, false)
	}
	return true, nil
}

// exec runs a statement that writes and returns the rows it counted.
func (c casStore) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.s.db.ExecContext(ctx, query, args...)
	if err != nil {
		if isDupEntry(err) {
			return 0, err
		}
		return 0, classify(ctx, err, true)
	}
	return res.RowsAffected()
}

// isDupEntry reports whether err is a duplicate key: nothing was written.
func isDupEntry(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDupEntry
}

// Delete deletes key's row; the driver's store drops its cache entry.
func (c casStore) Delete(ctx context.Context, key string) error {
	return c.s.deleteKey(ctx, key)
}
