package mysqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/internal/timing"
	"github.com/sluicehq/sluice/mysqlstore"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// Both *sql.DB and *sql.Conn are a DB.
var (
	_ mysqlstore.DB = (*sql.DB)(nil)
	_ mysqlstore.DB = (*sql.Conn)(nil)
)

var tableSeq atomic.Int64

// newTable returns a table name of its own for t.
func newTable(t *testing.T) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(t.Name()))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("t%d_%s", tableSeq.Add(1), name)
}

// open opens a pool on the shared server with extra DSN parameters,
// closed when t ends.
func open(t testing.TB, params string) *sql.DB {
	t.Helper()
	dsn := testserver.SharedMariaDB(t) + "?interpolateParams=true"
	if params != "" {
		dsn += "&" + params
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	t.Cleanup(func() { db.Close() })
	return db
}

// newStore makes a Store on db for table and migrates it.
func newStore(t testing.TB, db mysqlstore.DB, table string, opts ...mysqlstore.Option) *mysqlstore.Store {
	t.Helper()
	s, err := mysqlstore.New(db, append([]mysqlstore.Option{mysqlstore.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// incr is an UpdateFunc that counts in an 8-byte big-endian state.
func incr(state []byte) ([]byte, time.Duration, bool) {
	return binary.BigEndian.AppendUint64(nil, count(state)+1), time.Hour, true
}

func count(state []byte) uint64 {
	if len(state) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(state)
}

// read returns key's state through an update that changes nothing.
func read(t testing.TB, s *mysqlstore.Store, key string) []byte {
	t.Helper()
	var got []byte
	err := s.Update(t.Context(), key, func(state []byte) ([]byte, time.Duration, bool) {
		got = bytes.Clone(state) // only the last call counts
		return nil, 0, false
	})
	if err != nil {
		t.Fatalf("Update(%q) = %v", key, err)
	}
	return got
}

// strategies are the strategies every test of a Store runs on.
var strategies = []mysqlstore.Strategy{mysqlstore.SingleStatement, mysqlstore.SelectForUpdate}

// forEachStrategy runs f as a subtest of t for each strategy, with the
// option that selects it.
func forEachStrategy(t *testing.T, f func(t *testing.T, st mysqlstore.Strategy, opt mysqlstore.Option)) {
	t.Helper()
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) { f(t, st, mysqlstore.WithStrategy(st)) })
	}
}

// run calls do from workers goroutines and reports their errors.
func run(t *testing.T, workers int, do func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := do(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConcurrentUpdatesOneKey: no update is lost, and none fails: the
// first use of the key is concurrent too.
func TestConcurrentUpdatesOneKey(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		const workers, each = 32, 10
		s := newStore(t, open(t, ""), newTable(t), opt)
		run(t, workers, func(int) error {
			for range each {
				if err := s.Update(t.Context(), "hot", incr); err != nil {
					return err
				}
			}
			return nil
		})
		if got := count(read(t, s, "hot")); got != workers*each {
			t.Errorf("count = %d, want %d", got, workers*each)
		}
	})
}

// TestConcurrentFirstUse: many workers use many new keys at once, each in
// its own order, so first updates race on every key; none deadlocks.
func TestConcurrentFirstUse(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		const workers, keys = 32, 16
		s := newStore(t, open(t, ""), newTable(t), opt)
		run(t, workers, func(w int) error {
			for i := range keys {
				if err := s.Update(t.Context(), fmt.Sprintf("k%d", (i+w)%keys), incr); err != nil {
					return err
				}
			}
			return nil
		})
		for i := range keys {
			key := fmt.Sprintf("k%d", i)
			if got := count(read(t, s, key)); got != workers {
				t.Errorf("count(%s) = %d, want %d", key, got, workers)
			}
		}
	})
}

// expiresIn returns the row's expiry in microseconds from now by the
// database clock, nil for NULL; ok is false without a row.
func expiresIn(t *testing.T, db *sql.DB, table, key string) (us *int64, raw string, ok bool) {
	t.Helper()
	var r sql.NullString
	err := db.QueryRowContext(t.Context(),
		fmt.Sprintf("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), CAST(expires_at AS CHAR) FROM %s WHERE `key` = ?", table), key).
		Scan(&us, &r)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return us, r.String, true
}

func TestUnchangedStateIsNotWritten(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		db := open(t, "")
		table := newTable(t)
		s := newStore(t, db, table, opt)
		if err := s.Update(t.Context(), "k", incr); err != nil {
			t.Fatal(err)
		}
		_, before, _ := expiresIn(t, db, table, "k")
		if got := count(read(t, s, "k")); got != 1 {
			t.Fatalf("count = %d, want 1", got)
		}
		if _, after, _ := expiresIn(t, db, table, "k"); after != before {
			t.Errorf("expires_at after an unchanged update = %s, want %s (not written)", after, before)
		}
		if got := read(t, s, "new"); got != nil {
			t.Errorf("state of a new key = %x, want nil", got)
		}
	})
}

func TestTTL(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		db := open(t, "")
		table := newTable(t)
		s := newStore(t, db, table, opt)
		ctx := t.Context()
		if err := s.Update(ctx, "hour", incr); err != nil {
			t.Fatal(err)
		}
		if us, _, _ := expiresIn(t, db, table, "hour"); us == nil || *us < 3590e6 || *us > 3600e6 {
			t.Errorf("expires in %v µs, want about 3600e6", fmtPtr(us))
		}
		never := func([]byte) ([]byte, time.Duration, bool) { return []byte("x"), 0, true }
		if err := s.Update(ctx, "never", never); err != nil {
			t.Fatal(err)
		}
		if us, _, ok := expiresIn(t, db, table, "never"); !ok || us != nil {
			t.Errorf("expires in %v µs (row %v), want NULL", fmtPtr(us), ok)
		}
		// Expire "hour" by the database clock: it reads as absent, and the
		// next update starts from nothing.
		if _, err := db.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE `key` = 'hour'", table)); err != nil {
			t.Fatal(err)
		}
		if got := read(t, s, "hour"); got != nil {
			t.Errorf("expired state = %x, want nil", got)
		}
		if err := s.Update(ctx, "hour", incr); err != nil {
			t.Fatal(err)
		}
		if got := count(read(t, s, "hour")); got != 1 {
			t.Errorf("count after expiry = %d, want 1", got)
		}
	})
}

func fmtPtr(p *int64) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

func TestDeleteExpired(t *testing.T) {
	db := open(t, "")
	table := newTable(t)
	s := newStore(t, db, table)
	ctx := t.Context()
	for i := range 25 {
		if err := s.Update(ctx, fmt.Sprintf("k%02d", i), incr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE `key` < 'k20'", table)); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		n, err := s.DeleteExpired(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n == 0 || len(got) > 10 {
			break
		}
	}
	if want := []int64{7, 7, 6, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DeleteExpired(7) in a loop = %v, want %v", got, want)
	}
	var left, all int
	if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE `key` >= 'k20'", table)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s", table)).Scan(&all); err != nil {
		t.Fatal(err)
	}
	if left != 5 || all != 5 {
		t.Errorf("rows left = %d (%d live), want 5 live", all, left)
	}
	for _, batch := range []int{0, 10_001} {
		if _, err := s.DeleteExpired(ctx, batch); err == nil {
			t.Errorf("DeleteExpired(%d) = nil error, want an error", batch)
		}
	}
}

func TestDelete(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		s := newStore(t, open(t, ""), newTable(t), opt)
		ctx := t.Context()
		if err := s.Update(ctx, "k", incr); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if got := read(t, s, "k"); got != nil {
			t.Errorf("state after Delete = %x, want nil", got)
		}
		if err := s.Delete(ctx, "none"); err != nil {
			t.Errorf("Delete of a missing key = %v, want nil", err)
		}
	})
}

// TestLongKey: a key too long for the key column is stored under its
// driver.ShortKey digest form, never refused, and never shares a row with
// another key.
func TestLongKey(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		db := open(t, "")
		table := newTable(t)
		s := newStore(t, db, table, opt)
		long := strings.Repeat("k", mysqlstore.MaxKeyLen+1)
		exact := long[2:]
		other := long[:len(long)-1] + "x"
		for i, k := range []string{long, long, exact, other} {
			if err := s.Update(t.Context(), k, incr); err != nil {
				t.Fatalf("Update %d of a %d-byte key = %v", i, len(k), err)
			}
		}
		for k, want := range map[string]uint64{long: 2, exact: 1, other: 1} {
			if got := count(read(t, s, k)); got != want {
				t.Errorf("count of the %d-byte key = %d, want %d", len(k), got, want)
			}
		}
		var n int
		q := fmt.Sprintf("SELECT COUNT(*) FROM `%s` WHERE `key` = ?", table)
		if err := db.QueryRowContext(t.Context(), q, driver.ShortKey(long)).Scan(&n); err != nil || n != 1 {
			t.Errorf("rows under ShortKey(long) = %d, %v, want 1", n, err)
		}
	})
}

func TestMigrate(t *testing.T) {
	db := open(t, "")
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS limits"); err != nil {
		t.Fatal(err)
	}
	name := newTable(t)
	s, err := mysqlstore.New(db, mysqlstore.WithTable("limits."+name), mysqlstore.WithColumns("k", "s", "e"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate #%d = %v", i+1, err)
		}
	}
	if err := s.Update(ctx, "k", incr); err != nil {
		t.Fatal(err)
	}
	var indexes int
	err = db.QueryRowContext(ctx, "SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = 'limits' AND table_name = ?", name).Scan(&indexes)
	if err != nil {
		t.Fatal(err)
	}
	if indexes != 2 {
		t.Errorf("%d indexes after three migrations, want 2 (key and expiry)", indexes)
	}
	if want := "CREATE TABLE IF NOT EXISTS `limits`.`" + name + "`"; !strings.Contains(s.DDL(), want) {
		t.Errorf("DDL() lacks %q:\n%s", want, s.DDL())
	}
}

func TestInvalidOptions(t *testing.T) {
	db := open(t, "")
	long := strings.Repeat("a", 65)
	tests := []struct {
		name       string
		opt        mysqlstore.Option
		wantOption string
		wantName   string
	}{
		{"injection", mysqlstore.WithTable("x; DROP TABLE y"), "WithTable", "x; DROP TABLE y"},
		{"backtick", mysqlstore.WithTable("a`b"), "WithTable", "a`b"},
		{"empty", mysqlstore.WithTable(""), "WithTable", ""},
		{"digit first", mysqlstore.WithTable("1abc"), "WithTable", "1abc"},
		{"two qualifiers", mysqlstore.WithTable("a.b.c"), "WithTable", "a.b.c"},
		{"empty database", mysqlstore.WithTable(".b"), "WithTable", ".b"},
		{"too long", mysqlstore.WithTable(long), "WithTable", long},
		{"key column", mysqlstore.WithColumns("k--", "s", "e"), "WithColumns", "k--"},
		{"state column", mysqlstore.WithColumns("k", "s s", "e"), "WithColumns", "s s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mysqlstore.New(db, tt.opt)
			var ie *mysqlstore.IdentifierError
			if !errors.As(err, &ie) {
				t.Fatalf("New = %v; want an *IdentifierError", err)
			}
			if ie.Option != tt.wantOption || ie.Name != tt.wantName {
				t.Errorf("IdentifierError{%q, %q}, want {%q, %q}", ie.Option, ie.Name, tt.wantOption, tt.wantName)
			}
		})
	}
	for _, opt := range []mysqlstore.Option{
		mysqlstore.WithMaxAttempts(-1),
		mysqlstore.WithStateCache(-1),
		// The number of pgstore's AdvisoryLock, which MySQL has not.
		mysqlstore.WithStrategy(mysqlstore.SelectForUpdate + 1),
		mysqlstore.WithColumns("a", "A", "b"),
		mysqlstore.WithSweep(0, nil),
		mysqlstore.WithSweep(-time.Second, nil),
	} {
		if _, err := mysqlstore.New(db, opt); err == nil {
			t.Errorf("New with an invalid option = nil error")
		}
	}
	if _, err := mysqlstore.New(nil); err == nil {
		t.Errorf("New(nil) = nil error")
	}
}

func TestContextCancelled(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		s := newStore(t, open(t, ""), newTable(t), opt)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := s.Update(ctx, "k", incr)
		if !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrIndeterminate) {
			t.Errorf("Update with a cancelled context = %v, want context.Canceled, not indeterminate", err)
		}
	})
}

// lockRow holds key's row lock in another transaction until t ends or
// release is called.
func lockRow(t *testing.T, db *sql.DB, table, key string) (release func()) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(t.Context(), fmt.Sprintf("SELECT 1 FROM %s WHERE `key` = ? FOR UPDATE", table), key); err != nil {
		t.Fatal(err)
	}
	return func() { tx.Rollback() }
}

// waitForLock waits until the server runs a statement on table other
// than the lock holder's: with the row locked, it waits for the lock. (It
// reads the process list: reading INNODB_TRX takes InnoDB's lock latches,
// and asked often, kept the update it waited for from queueing for the
// lock for seconds.)
func waitForLock(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND LOCATE(?, INFO) > 0`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement on %s waits for a lock after 30s", table)
		}
	}
}

// TestDeadlineWhileBlocked: a deadline that passes while an update waits
// for a row lock. With SelectForUpdate the transaction never committed,
// so nothing was written and the error is not indeterminate. With
// SingleStatement the UPDATE was sent and runs by itself once the lock is
// released (the server does not notice the client left), so the error
// must be driver.ErrIndeterminate. The deadline passes once the server
// shows the update waiting for the lock, not after a time in which a slow
// machine may not have sent it.
func TestDeadlineWhileBlocked(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, st mysqlstore.Strategy, opt mysqlstore.Option) {
		db := open(t, "")
		table := newTable(t)
		s := newStore(t, db, table, opt)
		if err := s.Update(t.Context(), "k", incr); err != nil {
			t.Fatal(err)
		}
		release := lockRow(t, db, table, "k")
		ctx, expire := timing.Expiring(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- s.Update(ctx, "k", incr) }()
		waitForLock(t, db, table)
		expire()
		err := <-errc
		release()
		switch st {
		case mysqlstore.SelectForUpdate:
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrIndeterminate) {
				t.Errorf("Update = %v; want context.DeadlineExceeded, not indeterminate", err)
			}
			if got := count(read(t, s, "k")); got != 1 {
				t.Errorf("count = %d, want 1", got)
			}
		default:
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, driver.ErrIndeterminate) {
				t.Errorf("Update = %v; want driver.ErrIndeterminate wrapping context.DeadlineExceeded", err)
			}
			t.Logf("count after the lock's release: %d", count(read(t, s, "k")))
		}
	})
}

// TestLockWaitTimeout: InnoDB's lock wait timeout (error 1205) is a
// conflict, safe to retry.
func TestLockWaitTimeout(t *testing.T) {
	forEachStrategy(t, func(t *testing.T, _ mysqlstore.Strategy, opt mysqlstore.Option) {
		db := open(t, "innodb_lock_wait_timeout=1")
		table := newTable(t)
		s := newStore(t, db, table, opt)
		if err := s.Update(t.Context(), "k", incr); err != nil {
			t.Fatal(err)
		}
		release := lockRow(t, db, table, "k")
		if err := s.Update(t.Context(), "k", incr); !errors.Is(err, driver.ErrConflict) {
			t.Errorf("Update = %v; want driver.ErrConflict", err)
		}
		release()
		if err := s.Update(t.Context(), "k", incr); err != nil {
			t.Fatal(err)
		}
		if got := count(read(t, s, "k")); got != 2 {
			t.Errorf("count = %d, want 2", got)
		}
	})
}

// closedPort returns the address of a port that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnavailable(t *testing.T) {
	db, err := sql.Open("mysql", "root@tcp("+closedPort(t)+")/sluice?timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := mysqlstore.New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, delErr := s.DeleteExpired(ctx, 10)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"Update", s.Update(ctx, "k", incr)},
		{"Ping", s.Ping(ctx)},
		{"Migrate", s.Migrate(ctx)},
		{"DeleteExpired", delErr},
	} {
		if !errors.Is(c.err, driver.ErrUnavailable) {
			t.Errorf("%s = %v, want driver.ErrUnavailable", c.name, c.err)
		}
	}
	// Delete is a write: a connection that fails before sending is
	// unavailable too.
	if err := s.Delete(ctx, "k"); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Delete = %v, want driver.ErrUnavailable", err)
	}
}

// TestConformance runs the shared store suite on each strategy, and on
// SingleStatement again with CLIENT_FOUND_ROWS, which changes the row
// counts the conditional statements return.
func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name   string
		params string
		st     mysqlstore.Strategy
	}{
		{"SingleStatement", "", mysqlstore.SingleStatement},
		{"SingleStatement clientFoundRows", "clientFoundRows=true", mysqlstore.SingleStatement},
		{"SelectForUpdate", "", mysqlstore.SelectForUpdate},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t, open(t, tt.params), newTable(t), mysqlstore.WithStrategy(tt.st))
			drivertest.RunConformanceTests(t, drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
				return store, nil
			}))
		})
	}
}

// sent counts the packets that clients dialed through "countingtcp" have
// sent: with interpolateParams=true, one per command, each a round trip
// (COM_QUERY and its answer).
var sent atomic.Int64

func init() {
	mysql.RegisterDialContext("countingtcp", func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c}, nil
	})
}

type countingConn struct{ net.Conn }

func (c countingConn) Write(b []byte) (int, error) {
	sent.Add(1)
	return c.Conn.Write(b)
}

// TestRoundTrips counts the round trips of an uncontended decision on a
// key that has state, on the wire.
func TestRoundTrips(t *testing.T) {
	tests := []struct {
		name               string
		opts               []mysqlstore.Option
		changed, unchanged int64
	}{
		{"SingleStatement", nil, 1, 1},
		{"SingleStatement without cache", []mysqlstore.Option{mysqlstore.WithStateCache(0)}, 2, 1},
		{"SelectForUpdate", []mysqlstore.Option{mysqlstore.WithStrategy(mysqlstore.SelectForUpdate)}, 5, 4},
	}
	dsn := strings.Replace(testserver.SharedMariaDB(t), "@tcp(", "@countingtcp(", 1) + "?interpolateParams=true"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1) // no dial while counting
			s := newStore(t, db, newTable(t), tt.opts...)
			for range 3 {
				if err := s.Update(t.Context(), "k", incr); err != nil {
					t.Fatal(err)
				}
			}
			sent.Store(0)
			if err := s.Update(t.Context(), "k", incr); err != nil {
				t.Fatal(err)
			}
			if got := sent.Swap(0); got != tt.changed {
				t.Errorf("round trips of a changing update = %d, want %d", got, tt.changed)
			}
			if got := count(read(t, s, "k")); got != 4 {
				t.Errorf("count = %d, want 4", got)
			}
			if got := sent.Load(); got != tt.unchanged {
				t.Errorf("round trips of an unchanged update = %d, want %d", got, tt.unchanged)
			}
		})
	}
}

// TestMixedStrategies: processes that share a table may use different
// strategies, as during a rolling deploy from SelectForUpdate (the
// default before SingleStatement) to SingleStatement: none loses an
// update of the other, on a key they both start.
func TestMixedStrategies(t *testing.T) {
	const workers, each = 16, 20
	db := open(t, "")
	table := newTable(t)
	stores := []*mysqlstore.Store{
		newStore(t, db, table, mysqlstore.WithStrategy(mysqlstore.SingleStatement)),
		newStore(t, db, table, mysqlstore.WithStrategy(mysqlstore.SelectForUpdate)),
	}
	run(t, workers, func(w int) error {
		for range each {
			if err := stores[w%2].Update(t.Context(), "hot", incr); err != nil {
				return err
			}
		}
		return nil
	})
	for _, s := range stores {
		if got := count(read(t, s, "hot")); got != workers*each {
			t.Errorf("count read by %v = %d, want %d", s.Strategy(), got, workers*each)
		}
	}
}

// TestSameStateForever: an update that writes the bytes a key already
// holds, without expiry over no expiry, changes nothing in the row, which
// MySQL counts as 0 rows without CLIENT_FOUND_ROWS: it must still
// succeed, not lose to itself until its context ends.
func TestSameStateForever(t *testing.T) {
	for _, params := range []string{"", "clientFoundRows=true"} {
		t.Run("params="+params, func(t *testing.T) {
			s := newStore(t, open(t, params), newTable(t))
			same := func([]byte) ([]byte, time.Duration, bool) { return []byte("same"), 0, true }
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for i := range 3 {
				if err := s.Update(ctx, "k", same); err != nil {
					t.Fatalf("write %d of the same state without expiry = %v", i, err)
				}
			}
			if got := read(t, s, "k"); string(got) != "same" {
				t.Errorf("state = %q, want %q", got, "same")
			}
		})
	}
}

// TestIsolationLevels: SingleStatement is exact under READ COMMITTED and
// REPEATABLE READ (InnoDB's default), on one hot key and on many keys
// first used concurrently, where REPEATABLE READ takes gap locks.
func TestIsolationLevels(t *testing.T) {
	for _, level := range []string{"READ-COMMITTED", "REPEATABLE-READ"} {
		t.Run(level, func(t *testing.T) {
			db := open(t, "tx_isolation=%27"+level+"%27")
			var got string
			if err := db.QueryRowContext(t.Context(), "SELECT @@tx_isolation").Scan(&got); err != nil || got != level {
				t.Fatalf("session isolation = %q, %v, want %s", got, err, level)
			}
			s := newStore(t, db, newTable(t))
			const workers, keys = 32, 8
			run(t, workers, func(w int) error {
				for i := range keys {
					if err := s.Update(t.Context(), fmt.Sprintf("k%d", (i+w)%keys), incr); err != nil {
						return err
					}
					if err := s.Update(t.Context(), "hot", incr); err != nil {
						return err
					}
				}
				return nil
			})
			for i := range keys {
				if got := count(read(t, s, fmt.Sprintf("k%d", i))); got != workers {
					t.Errorf("count(k%d) = %d, want %d", i, got, workers)
				}
			}
			if got := count(read(t, s, "hot")); got != workers*keys {
				t.Errorf("count(hot) = %d, want %d", got, workers*keys)
			}
		})
	}
}

// TestStrategyString pins the names, which come from the numbers the
// strategies share with pgstore's (internal/sqlstore).
func TestStrategyString(t *testing.T) {
	for st, want := range map[mysqlstore.Strategy]string{
		mysqlstore.SingleStatement: "SingleStatement",
		mysqlstore.SelectForUpdate: "SelectForUpdate",
		mysqlstore.Strategy(2):     "Strategy(2)", // pgstore's AdvisoryLock
	} {
		if got := st.String(); got != want {
			t.Errorf("Strategy(%d).String() = %q, want %q", int(st), got, want)
		}
	}
}
