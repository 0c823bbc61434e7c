package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/sqlstore"
)

// txOptions start every transaction. READ COMMITTED is explicit because
// the database's default may be stricter: under REPEATABLE READ the read
// after a lock would see the snapshot taken before the wait.
var txOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// txConn is one transaction of SelectForUpdate or AdvisoryLock.
type txConn struct {
	s   *Store
	key []byte // the column's bytes
	tx  pgx.Tx
	// wrote is set once a statement that writes state has run; the empty
	// row alone does not count, since writing it twice is harmless.
	wrote bool
}

// beginTx starts a transaction: one round trip.
func (s *Store) beginTx(ctx context.Context, key string) (*txConn, error) {
	tx, err := s.db.BeginTx(ctx, txOptions)
	if err != nil {
		return nil, classify(ctx, err, false)
	}
	return &txConn{s: s, key: []byte(key), tx: tx}, nil
}

// write runs a statement that writes: one round trip. Nothing is
// committed before Commit, so its failure leaves nothing written.
func (t *txConn) write(ctx context.Context, sql string, args ...any) error {
	if _, err := t.tx.Exec(ctx, sql, args...); err != nil {
		return classify(ctx, err, false)
	}
	return nil
}

// Commit commits: one round trip. Its error wraps driver.ErrIndeterminate
// when state was written and COMMIT may have reached the server.
func (t *txConn) Commit(ctx context.Context) error {
	err := t.tx.Commit(ctx)
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return fmt.Errorf("%w: %w", driver.ErrConflict, err)
	}
	if err != nil {
		return classify(ctx, err, t.wrote)
	}
	return nil
}

// Rollback ends the transaction if it is still open. It returns nil when
// ROLLBACK fails too: pgx then closes the connection, which rolls the
// transaction back on the server.
func (t *txConn) Rollback(ctx context.Context) error {
	t.tx.Rollback(ctx)
	return nil
}

// Release does nothing: Commit or Rollback returned the connection.
func (t *txConn) Release() {}

// rowLocker is the driver.RowLocker of SelectForUpdate.
type rowLocker struct{ s *Store }

func (l rowLocker) Begin(ctx context.Context, key string) (driver.RowTx, error) {
	t, err := l.s.beginTx(ctx, key)
	if err != nil {
		return nil, err
	}
	return rowTx{t}, nil
}

// rowTx is a transaction of SelectForUpdate.
type rowTx struct{ *txConn }

// TryLockAndGet locks the key's row: one round trip. An expired or empty row reads as no state; no row, as not
// found. Under READ COMMITTED, a locking read of a missing row takes no
// lock, and a locked row is read as its last committed version once the
// lock is granted.
func (t rowTx) TryLockAndGet(ctx context.Context) (state []byte, found bool, err error) {
	return dialect.ReadState(ctx, t.tx.QueryRow(ctx, t.s.q.lockRow, t.key))
}

// TryInsertEmpty inserts an empty row: one round trip. Another
// transaction may insert it first; ON CONFLICT DO NOTHING then waits for
// that one to end and does nothing. The row is kept from DeleteExpired for
// a minute.
func (t rowTx) TryInsertEmpty(ctx context.Context) error {
	return t.write(ctx, t.s.q.insertEmpty, t.key)
}

// Update writes the locked row: one round trip.
func (t rowTx) Update(ctx context.Context, state []byte, ttl time.Duration) error {
	t.wrote = true
	return t.write(ctx, t.s.q.updateRow, t.key, sqlstore.NonNil(state), ttlArg(ttl))
}

// advisoryLocker is the driver.Locker of AdvisoryLock.
type advisoryLocker struct{ s *Store }

func (l advisoryLocker) Begin(ctx context.Context, key string) (driver.LockedTx, error) {
	t, err := l.s.beginTx(ctx, key)
	if err != nil {
		return nil, err
	}
	return advisoryTx{t}, nil
}

// advisoryTx is a transaction of AdvisoryLock.
type advisoryTx struct{ *txConn }

// LockAndGet waits for the key's advisory lock and reads its state, in one
// round trip (a pipelined batch). The lock is pg_advisory_xact_lock of a
// 64-bit FNV-1a hash of the table's name and the key (lockID), so tables
// do not share locks; two keys whose hashes collide only share a lock. Each statement of a READ COMMITTED
// transaction takes a new snapshot, so the read after the lock sees the
// last committed state.
func (t advisoryTx) LockAndGet(ctx context.Context) ([]byte, error) {
	var state []byte
	var b pgx.Batch
	b.Queue(t.s.q.advisoryLock, t.s.q.lockID(t.key))
	b.Queue(t.s.q.getLive, t.key).QueryRow(func(r pgx.Row) (err error) {
		state, _, err = sqlstore.ScanState(r, pgx.ErrNoRows)
		return err
	})
	if err := t.tx.SendBatch(ctx, &b).Close(); err != nil {
		return nil, classify(ctx, err, false)
	}
	return state, nil
}

// Create writes the state of a key that had none: one round trip. It
// upserts: the key may have an expired or empty row.
func (t advisoryTx) Create(ctx context.Context, state []byte, ttl time.Duration) error {
	return t.Update(ctx, state, ttl)
}

// Update upserts the key's row: one round trip. It upserts because a
// concurrent DeleteExpired may have deleted the row once it expired.
func (t advisoryTx) Update(ctx context.Context, state []byte, ttl time.Duration) error {
	t.wrote = true
	return t.write(ctx, t.s.q.upsert, t.key, sqlstore.NonNil(state), ttlArg(ttl))
}

// Unlock does nothing: the transaction-level lock ends with the
// transaction.
func (t advisoryTx) Unlock(ctx context.Context) error { return nil }
