package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/pgstore"
)

// BenchmarkPostgres compares pgstore's strategies on one PostgreSQL server
// with the floor of any counter kept in a table:
//
//   - impl=bare: UPDATE bench_bare SET n = n + 1 WHERE k = $1 RETURNING n,
//     one prepared statement on a table whose rows exist;
//   - impl=single_statement, select_for_update, advisory_lock: a GCRA
//     Limiter (storeRate per second, burst storeRate) on a pgstore.Store of
//     that strategy, each with its own table.
//
// The keys are 1,000 keys spread over the goroutines (keys=spread);
// goroutines=Z runs exactly Z goroutines on one pgxpool of 64 connections.
// Besides the metrics of runWorkers it reports rtt/decision: the
// statements, batches, BEGINs and COMMITs sent through the pool, each one
// round trip once pgx has prepared the statement on the connection.
func BenchmarkPostgres(b *testing.B) {
	url := testserver.SharedPostgres(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 64
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	db := &countingPool{p: pool}
	keys := storeKeys(1000)

	bare := func() decide {
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS bench_bare;
			CREATE TABLE bench_bare (k text PRIMARY KEY, n bigint NOT NULL);
			INSERT INTO bench_bare SELECT 'k:' || i, 0 FROM generate_series(0, 999) i`); err != nil {
			b.Fatal(err)
		}
		return func(key string) (bool, error) {
			var n int64
			err := db.QueryRow(ctx, "UPDATE bench_bare SET n = n + 1 WHERE k = $1 RETURNING n", key).Scan(&n)
			return err == nil, err
		}
	}
	limiter := func(st pgstore.Strategy, table string) decide {
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			b.Fatal(err)
		}
		store, err := pgstore.New(db, pgstore.WithStrategy(st), pgstore.WithTable(table))
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		l, err := sluice.NewLimiter(sluice.GCRA(storeRate, storeRate, time.Second), sluice.WithStore(store))
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) (bool, error) {
			res, err := l.Allow(ctx, key)
			return res.Allowed, err
		}
	}
	impls := []struct {
		name string
		fn   decide
	}{
		{"bare", bare()},
		{"single_statement", limiter(pgstore.SingleStatement, "bench_single_statement")},
		{"select_for_update", limiter(pgstore.SelectForUpdate, "bench_select_for_update")},
		{"advisory_lock", limiter(pgstore.AdvisoryLock, "bench_advisory_lock")},
	}
	for _, impl := range impls {
		warmed := false
		for _, z := range []int{1, 16, 64} {
			b.Run("impl="+impl.name+"/keys=spread/goroutines="+strconv.Itoa(z), func(b *testing.B) {
				b.ReportAllocs()
				if !warmed {
					warm(b, keys, impl.fn)
					warmed = true
				}
				db.n.Store(0)
				runWorkers(b, z, keys, impl.fn)
				b.ReportMetric(float64(db.n.Load())/float64(b.N), "rtt/decision")
			})
		}
	}
}

// countingPool is a pgstore.DB on a pool that counts the calls that each
// cost one round trip once pgx has prepared the statement on the
// connection (pgx's default statement cache). Acquiring a connection
// costs none, except pgxpool's ping of a connection idle for over a
// second, which is not counted.
type countingPool struct {
	p *pgxpool.Pool
	n atomic.Int64
}

func (d *countingPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	d.n.Add(1)
	return d.p.Exec(ctx, sql, args...)
}

func (d *countingPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.n.Add(1)
	return d.p.QueryRow(ctx, sql, args...)
}

func (d *countingPool) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	d.n.Add(1)
	tx, err := d.p.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, d}, nil
}

func (d *countingPool) Ping(ctx context.Context) error {
	d.n.Add(1)
	return d.p.Ping(ctx)
}

// countingTx counts the calls of a transaction that pgstore makes, each
// one round trip. Other methods of pgx.Tx pass through uncounted; pgstore
// does not call them.
type countingTx struct {
	pgx.Tx
	d *countingPool
}

func (t countingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.d.n.Add(1)
	return t.Tx.Exec(ctx, sql, args...)
}

func (t countingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t.d.n.Add(1)
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t countingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.d.n.Add(1)
	return t.Tx.SendBatch(ctx, b)
}

func (t countingTx) Commit(ctx context.Context) error {
	t.d.n.Add(1)
	return t.Tx.Commit(ctx)
}

func (t countingTx) Rollback(ctx context.Context) error {
	t.d.n.Add(1)
	return t.Tx.Rollback(ctx)
}
