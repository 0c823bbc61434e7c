package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/mysqlstore"
)

// mysqlSent counts the packets sent by MySQL clients dialed through
// "countingtcp". With interpolateParams=true every command is one packet
// and one round trip (a COM_QUERY and its answer).
var mysqlSent atomic.Int64

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
	mysqlSent.Add(1)
	return c.Conn.Write(b)
}

// BenchmarkMySQL compares mysqlstore's strategies on one MariaDB server
// with the floor of any counter kept in a table, as BenchmarkPostgres
// does for pgstore:
//
//   - impl=bare: UPDATE bench_bare SET n = n + 1 WHERE k = ?, on a table
//     whose rows exist;
//   - impl=single_statement, select_for_update: a GCRA Limiter
//     (storeRate per second, burst storeRate) on a mysqlstore.Store of
//     that strategy, each with its own table.
//
// The keys are 1,000 keys spread over the goroutines (keys=spread);
// goroutines=Z runs exactly Z goroutines on one database/sql pool of 64
// connections, with interpolateParams=true as mysqlstore's doc advises.
// Besides the metrics of runWorkers it reports rtt/decision: the packets
// the clients sent, each one round trip.
func BenchmarkMySQL(b *testing.B) {
	dsn := strings.Replace(testserver.SharedMariaDB(b), "@tcp(", "@countingtcp(", 1) + "?interpolateParams=true"
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	ctx := context.Background()
	keys := storeKeys(1000)

	bare := func() decide {
		for _, q := range []string{
			"DROP TABLE IF EXISTS bench_bare",
			"CREATE TABLE bench_bare (k VARBINARY(255) PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		var values []string
		for _, k := range keys {
			values = append(values, fmt.Sprintf("('%s', 0)", k))
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO bench_bare VALUES "+strings.Join(values, ",")); err != nil {
			b.Fatal(err)
		}
		return func(key string) (bool, error) {
			_, err := db.ExecContext(ctx, "UPDATE bench_bare SET n = n + 1 WHERE k = ?", key)
			return err == nil, err
		}
	}
	limiter := func(st mysqlstore.Strategy, table string) decide {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			b.Fatal(err)
		}
		store, err := mysqlstore.New(db, mysqlstore.WithStrategy(st), mysqlstore.WithTable(table))
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
		{"single_statement", limiter(mysqlstore.SingleStatement, "bench_single_statement")},
		{"select_for_update", limiter(mysqlstore.SelectForUpdate, "bench_select_for_update")},
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
				mysqlSent.Store(0)
				runWorkers(b, z, keys, impl.fn)
				b.ReportMetric(float64(mysqlSent.Load())/float64(b.N), "rtt/decision")
			})
		}
	}
}
