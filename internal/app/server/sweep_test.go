package server

import (
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/testserver"
)

// TestStoreSweep: sluice serve deletes the expired rows of its SQL
// store's table by itself, at the store URL's sweep_interval, and counts
// them in sluice_store_swept_rows_total (issue 27: nothing deleted them,
// and a table kept a row per key ever seen). The rows are expired by
// explicit times; the table holds none expired for longer than the
// interval plus a minute, and keeps the live ones.
func TestStoreSweep(t *testing.T) {
	const (
		keys    = 30
		expired = 20 // of them
	)
	mariaDSN := testserver.SharedMariaDB(t) // root@tcp(127.0.0.1:PORT)/sluice
	tests := []struct {
		name       string
		url        string // but the table
		driver, db string // for database/sql
		key, now   string // the key column and the clock, in the database's dialect
	}{
		{"postgres", testserver.SharedPostgres(t) + "&sweep_interval=1s", "pgx", testserver.SharedPostgres(t), "key", "now()"},
		{"mariadb", "mysql://root@" + strings.TrimSuffix(strings.TrimPrefix(mariaDSN, "root@tcp("), ")/sluice") + "/sluice?sweep_interval=1s",
			"mysql", mariaDSN, "`key`", "UTC_TIMESTAMP(6)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := sql.Open(tt.driver, tt.db)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			count := func(q string) (n int64) {
				t.Helper()
				if err := db.QueryRowContext(t.Context(), q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			}
			table := fmt.Sprintf("sweep_%d", time.Now().UnixNano())
			cfg, err := LoadConfig([]byte("store: " + tt.url + "&table=" + table + "\nlimiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 hour}\n"))
			if err != nil {
				t.Fatal(err)
			}
			var log testserver.Buffer
			s, err := New(t.Context(), cfg, WithLogger(slog.New(slog.NewJSONHandler(&log, nil))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if s.store.SweepInterval != time.Second {
				t.Errorf("sweep interval = %v, want the URL's 1s", s.store.SweepInterval)
			}
			for i := range keys {
				if code, out := call(t, s, "POST", "/api/v1/consume", fmt.Sprintf(`{"limiter": "api", "key": "k%02d"}`, i)); code != 200 {
					t.Fatalf("consume = %d %v", code, out)
				}
			}
			q := fmt.Sprintf("UPDATE %s SET expires_at = %s - INTERVAL '1' SECOND WHERE %s < 'api:k%02d'", table, tt.now, tt.key, expired)
			if _, err := db.ExecContext(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			// Wait, for at most two minutes, for the sweep to leave no
			// expired row; the bound asserted is the issue's, a minute
			// past the sweep_interval of 1s: margin for a loaded machine.
			start := time.Now()
			var left int64
			for {
				left = count(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE expires_at <= %s", table, tt.now))
				if left == 0 || time.Since(start) > 2*time.Minute {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			took := time.Since(start)
			t.Logf("expired rows all deleted %v after they expired (sweep_interval 1s)", took)
			if left != 0 || took > time.Second+time.Minute {
				t.Fatalf("%d expired rows left %v after they expired, want none within sweep_interval plus a minute", left, took)
			}
			if n := count("SELECT COUNT(*) FROM " + table); n != keys-expired {
				t.Errorf("%d rows left, want the %d live ones", n, keys-expired)
			}
			// The count follows the DELETE's commit.
			for deadline := time.Now().Add(time.Minute); testutil.ToFloat64(s.metrics.swept) < expired && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := testutil.ToFloat64(s.metrics.swept); got != expired {
				t.Errorf("sluice_store_swept_rows_total = %v, want %d", got, expired)
			}
			if got := testutil.ToFloat64(s.metrics.StoreErrors.WithLabelValues("sweep")); got != 0 {
				t.Errorf(`sluice_store_errors_total{op="sweep"} = %v, want 0; log:\n%s`, got, log.String())
			}
			if !strings.Contains(log.String(), `"msg":"deleting the store's expired rows in the background","sweep_interval":1000000000`) {
				t.Errorf("log = %s, want a line saying the store is swept every second", log.String())
			}
		})
	}
}

// TestStoreSweepDefault: the sweep is on by default for the SQL stores,
// every storeurl.DefaultSweepInterval, and off with sweep_interval=off.
func TestStoreSweepDefault(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	for url, want := range map[string]time.Duration{
		pg:                         storeurl.DefaultSweepInterval,
		pg + "&sweep_interval=off": 0,
		pg + "&sweep_interval=90s": 90 * time.Second,
		"mem://":                   0,
		testserver.SharedRedis(t):  0,
	} {
		cfg, err := LoadConfig([]byte("store: " + url + "\nlimiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 hour}\n"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if s.store.SweepInterval != want {
			t.Errorf("store %s: sweep interval %v, want %v", url, s.store.SweepInterval, want)
		}
		s.Close()
	}
}
