package mysqlstore_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDeleteExpiredKeepsRenewedRow: a row that a transaction renews
// while DeleteExpired waits for its lock is kept, and neither side fails.
// The renewal holds the row's lock as SelectForUpdate does (SELECT … FOR
// UPDATE, then UPDATE). DeleteExpired used to find its rows through the
// expiry index, locking the index entry that the renewal's UPDATE then
// needed while it waited for the row the renewal held: a deadlock, in
// which InnoDB rolled the renewal back (1213).
func TestDeleteExpiredKeepsRenewedRow(t *testing.T) {
	db := open(t, "")
	table := newTable(t)
	s := newStore(t, db, table)
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Update(ctx, k, incr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 10 SECOND WHERE `key` IN ('a', 'b')", table)); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var state []byte
	if err := tx.QueryRowContext(ctx, fmt.Sprintf("SELECT state FROM %s WHERE `key` = 'b' FOR UPDATE", table)).Scan(&state); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := s.DeleteExpired(ctx, 10)
		done <- result{n, err}
	}()
	waitForLockWait(t, db, table)
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET state = 'renewed', expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE `key` = 'b'", table)); err != nil {
		t.Fatalf("renewing b while DeleteExpired waits: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("committing the renewal: %v", err)
	}
	if r := <-done; r.err != nil || r.n != 1 {
		t.Errorf("DeleteExpired(10) = %d, %v; want 1 (a), nil", r.n, r.err)
	}
	if got := rowsOf(t, db, table); got != "b=renewed c" {
		t.Errorf("rows = %q, want %q", got, "b=renewed c")
	}
}

// waitForLockWait waits until a statement on table waits for a row lock,
// for at most a minute.
func waitForLockWait(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?",
			"%"+table+"%").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement waited for a lock within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rowsOf lists table's keys in order, with the state of those whose state
// is not a counter's: "b=renewed c".
func rowsOf(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), fmt.Sprintf("SELECT `key`, state FROM %s ORDER BY `key`", table))
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

// mustExec runs query.
func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%.200s: %v", query, err)
	}
}
