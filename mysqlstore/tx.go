package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// txOptions start every transaction. Under READ COMMITTED, InnoDB takes
// no gap locks: a locking read of a missing row locks nothing, and INSERT
// IGNORE of a row that another transaction inserted only waits for that
// transaction's record lock and then, finding the row, does nothing. So
// concurrent first updates of a key never deadlock, whereas under
// REPEATABLE READ (InnoDB's default) two SELECT … FOR UPDATE of the same
// missing key would both take the gap lock and then deadlock on their
// inserts.
var txOptions = sql.TxOptions{Isolation: sql.LevelReadCommitted}

// rowLocker is the driver.RowLocker of a Store.
type rowLocker struct{ s *Store }

// Begin starts a READ COMMITTED transaction: two round trips with
// go-sql-driver/mysql (SET TRANSACTION ISOLATION LEVEL, then START
// TRANSACTION).
func (l rowLocker) Begin(ctx context.Context, key string) (driver.RowTx, error) {
	tx, err := l.s.db.BeginTx(ctx, &txOptions)
	if err != nil {
		return nil, classify(ctx, err, false)
	}
	return &rowTx{s: l.s, key: key, tx: tx}, nil
}

// rowTx is one transaction. Nothing it writes counts before Commit, so
// only Commit's failure may be indeterminate.
type rowTx struct {
	s   *Store
	key string
	tx  *sql.Tx
	// wrote is set once the row's state was written; the empty row alone
	// does not count, since writing it twice is harmless.
	wrote bool
}

// TryLockAndGet locks the key's row: one round trip (two without
// interpolateParams=true in the DSN, which prepares the statement). An
// expired or empty row reads as no state; no row, as not found.
func (t *rowTx) TryLockAndGet(ctx context.Context) (state []byte, found bool, err error) {
	return dialect.ReadState(ctx, t.tx.QueryRowContext(ctx, t.s.q.lockRow, t.key))
}

// TryInsertEmpty inserts an empty row unless the key has one: one round
// trip. It is outside the locking read, which found no row and so locked
// nothing; see txOptions.
func (t *rowTx) TryInsertEmpty(ctx context.Context) error {
	if _, err := t.tx.ExecContext(ctx, t.s.q.insertEmpty, t.key); err != nil {
		return classify(ctx, err, false)
	}
	return nil
}

// Update writes the locked row: one round trip.
func (t *rowTx) Update(ctx context.Context, state []byte, ttl time.Duration) error {
	if len(state) > MaxStateLen {
		return fmt.Errorf("%w: state of %d bytes, more than %d", driver.ErrUnavailable, len(state), MaxStateLen)
	}
	if state == nil {
		state = []byte{} // the column is NOT NULL
	}
	t.wrote = true
	if _, err := t.tx.ExecContext(ctx, t.s.q.updateRow, state, ttlArg(ttl), t.key); err != nil {
		return classify(ctx, err, false)
	}
	return nil
}

// Commit commits: one round trip. A context that ended before COMMIT is
// sent rolls back instead and returns ctx.Err(); once COMMIT is sent, a
// lost answer after a write is driver.ErrIndeterminate.
func (t *rowTx) Commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		t.tx.Rollback()
		return err
	}
	if err := t.tx.Commit(); err != nil {
		return classify(ctx, err, t.wrote)
	}
	return nil
}

// Rollback rolls back unless the transaction has ended. It returns nil
// when ROLLBACK fails: database/sql then drops the connection, which rolls
// the transaction back on the server.
func (t *rowTx) Rollback(ctx context.Context) error {
	t.tx.Rollback()
	return nil
}

// Release does nothing: Commit or Rollback returned the connection.
func (t *rowTx) Release() {}
