package pgstore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/sqlstore"
)

// casStore is the driver.CAS of SingleStatement: one statement per call,
// outside any explicit transaction.
type casStore struct{ s *Store }

// Get returns key's state, nil when it has none: no row, an expired row
// or an empty row. One round trip.
func (c casStore) Get(ctx context.Context, key string) ([]byte, error) {
	state, _, err := dialect.ReadState(ctx, c.s.db.QueryRow(ctx, c.s.q.get, []byte(key)))
	return state, err
}

// CompareAndSwap writes next if key's state is still old, in one
// statement and one round trip. A nil old matches what Get reads as no
// state (no row, an expired row or an empty row), so Get and
// CompareAndSwap agree on expiry: both compare with now() on the database
// clock. The row count says whether it wrote; PostgreSQL counts a row
// whose new values equal the old ones, so an identical next still swaps.
func (c casStore) CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error) {
	var args []any
	sql := c.s.q.casInsert
	if old == nil {
		args = []any{[]byte(key), sqlstore.NonNil(next), ttlArg(ttl)}
	} else {
		sql = c.s.q.casUpdate
		args = []any{[]byte(key), sqlstore.NonNil(next), ttlArg(ttl), old}
	}
	tag, err := c.s.db.Exec(ctx, sql, args...)
	if err != nil {
		return false, classify(ctx, err, true)
	}
	return tag.RowsAffected() == 1, nil
}

// Delete deletes key's row; the driver's store drops its cache entry.
func (c casStore) Delete(ctx context.Context, key string) error {
	return c.s.deleteKey(ctx, key)
}
