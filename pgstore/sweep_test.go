package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/pgstore"
)

// newPool opens a pool on the shared server, closed when t ends.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), testserver.SharedPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestSweep: with WithSweep, the table holds no row expired for longer
// than the sweep interval plus a minute (issue 27), on every strategy and
// while limiters write: 2,500 rows expired by explicit times, more than
// two batches, are deleted; keys expired again and again, each renewed
// through the store at once while the sweep runs, keep every renewal;
// keys updated throughout keep every update. Without a sweep nothing
// deleted expired rows, which stayed forever.
func TestSweep(t *testing.T) {
	const (
		interval = 5 * time.Millisecond
		old      = 2500 // rows expired an hour ago
		renewed  = 20   // keys expired, then renewed, rounds times
		rounds   = 5
		workers  = 4 // each updates a live key until the renewals end
	)
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			ctx := t.Context()
			pool := newPool(t)
			table := newTable(t)
			newStore(t, pool, table, st) // the table, before any sweep
			var swept, failed atomic.Int64
			s := newStore(t, pool, table, st, pgstore.WithSweep(interval, func(n int64, err error) {
				swept.Add(n)
				if err != nil {
					failed.Add(1)
					t.Logf("sweep: %v", err)
				}
			}))
			t.Cleanup(func() { s.Close() })

			mustExec(t, pool, fmt.Sprintf(`INSERT INTO %s (key, state, expires_at)
				SELECT convert_to('old' || g, 'UTF8'), '\x00'::bytea, now() - interval '1 hour' FROM generate_series(1, %d) g`, table, old))
			expired := time.Now() // every row to sweep has expired

			var done atomic.Bool
			counts := make([]uint64, workers)
			errs := make(chan error, workers)
			for w := range workers {
				go func() {
					for !done.Load() {
						if err := updateRetrying(ctx, s, fmt.Sprintf("live%d", w), incr); err != nil {
							errs <- err
							return
						}
						counts[w]++
					}
					errs <- nil
				}()
			}
			// Each renewal starts from no state, whether the sweep
			// deleted the expired row first or not, and must then stay.
			for r := range rounds {
				for i := range renewed {
					key := fmt.Sprintf("renew%02d", i)
					mustExec(t, pool, fmt.Sprintf(`UPDATE %s SET expires_at = now() - interval '1 second' WHERE key = '%s'`, table, key))
					if err := updateRetrying(ctx, s, key, incr); err != nil {
						t.Fatal(err)
					}
					if got := count(read(t, s, key)); got != 1 {
						t.Fatalf("round %d: %s counts %d just after it was renewed, want 1", r, key, got)
					}
				}
			}
			done.Store(true)
			for range workers {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}

			// Wait, for at most two minutes, for the sweep to leave no
			// expired row; the bound asserted is the issue's, with the
			// interval far below a minute.
			var left int64
			for {
				if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE expires_at <= now()`, table)).Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left == 0 || time.Since(expired) > 2*time.Minute {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			took := time.Since(expired)
			t.Logf("expired rows all deleted %v after they expired (interval %v), %d renewals meanwhile", took, interval, renewed*rounds)
			if left != 0 || took > interval+time.Minute {
				t.Fatalf("%d expired rows left %v after they expired, want none within the interval (%v) plus a minute", left, took, interval)
			}
			s.Close() // waits for the sweep's last report

			for w := range workers {
				if got := count(read(t, s, fmt.Sprintf("live%d", w))); got != counts[w] {
					t.Errorf("live%d counts %d, want %d: an update was lost", w, got, counts[w])
				}
			}
			for i := range renewed {
				if got := count(read(t, s, fmt.Sprintf("renew%02d", i))); got != 1 {
					t.Errorf("renew%02d counts %d, want 1", i, got)
				}
			}
			var rows int64
			if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, table)).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != workers+renewed {
				t.Errorf("%d rows left, want %d (the live and renewed keys)", rows, workers+renewed)
			}
			// A renewed key may have been swept before its renewal wrote
			// it again.
			if n := swept.Load(); n < old || n > old+renewed*rounds {
				t.Errorf("sweep reported %d rows deleted, want %d to %d", n, old, old+renewed*rounds)
			}
			if n := failed.Load(); n != 0 {
				t.Errorf("sweep reported %d failed batches, want none", n)
			}
		})
	}
}

// TestDeleteExpiredSkipsLockedRow: a row that a transaction holds to
// renew it (SELECT … FOR UPDATE, then UPDATE, as SelectForUpdate does) is
// skipped by DeleteExpired, which neither waits for it nor deletes it:
// the renewal commits and the row keeps it.
func TestDeleteExpiredSkipsLockedRow(t *testing.T) {
	c := connect(t)
	table := newTable(t)
	s := newStore(t, c, table, pgstore.SingleStatement)
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Update(ctx, k, incr); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, c, fmt.Sprintf(`UPDATE %s SET expires_at = now() - interval '10 seconds' WHERE key IN ('a', 'b')`, table))
	renewal := connect(t)
	tx, err := renewal.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SELECT state FROM %s WHERE key = 'b' FOR UPDATE`, table)); err != nil {
		t.Fatal(err)
	}
	// A DeleteExpired that waited for b would wait for this goroutine.
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if n, err := s.DeleteExpired(dctx, 10); err != nil || n != 1 {
		t.Errorf("DeleteExpired(10) while b is locked = %d, %v; want 1 (a), nil", n, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET state = 'renewed', expires_at = now() + interval '1 hour' WHERE key = 'b'`, table)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpired(ctx, 10); err != nil || n != 0 {
		t.Errorf("DeleteExpired(10) after the renewal = %d, %v; want 0, nil", n, err)
	}
	if got := rowsOf(t, c, table); got != "b=renewed c" {
		t.Errorf("rows = %q, want %q", got, "b=renewed c")
	}
}

// TestSweepCloses: the sweep runs from New and stops at Close, which
// waits for it: nothing is reported afterwards, and Close may be called
// again.
func TestSweepCloses(t *testing.T) {
	var reports, afterClose atomic.Int64
	var closed atomic.Bool
	s, err := pgstore.New(newPool(t), pgstore.WithTable(newTable(t)), pgstore.WithSweep(time.Millisecond, func(int64, error) {
		reports.Add(1)
		if closed.Load() {
			afterClose.Add(1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); reports.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no sweep reported within a minute")
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	closed.Store(true)
	time.Sleep(20 * time.Millisecond) // 20 intervals in which a sweep left running would report
	if n := afterClose.Load(); n != 0 {
		t.Errorf("%d reports after Close, want none", n)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// execer is a connection or a pool.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// mustExec runs sql.
func mustExec(t *testing.T, db execer, sql string) {
	t.Helper()
	if _, err := db.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// rowsOf lists table's keys in order, with the state of those whose state
// is not a counter's: "b=renewed c".
func rowsOf(t *testing.T, db execer, table string) string {
	t.Helper()
	rows, err := db.Query(t.Context(), fmt.Sprintf(`SELECT key, state FROM %s ORDER BY key`, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k, st []byte
		if err := rows.Scan(&k, &st); err != nil {
			t.Fatal(err)
		}
		if len(st) != 8 {
			k = fmt.Appendf(k, "=%s", st)
		}
		out = append(out, string(k))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}
