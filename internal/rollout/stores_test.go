package rollout_test

import (
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/internal/testserver/testredis"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/mysqlstore"
	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

var seq atomic.Int64

// namespace is a name of its own for a table or a key prefix.
func namespace() string { return fmt.Sprintf("rollout%d", seq.Add(1)) }

// store is one kind of store; open returns an empty one, which two
// limiters of a test share as two processes would.
type store struct {
	name string
	open func(t *testing.T) driver.Store
}

// stores are the stores every test here runs on. Under CI=true a server
// that cannot start fails the test; otherwise it skips it.
var stores = []store{
	{"memory", func(*testing.T) driver.Store { return memstore.New() }},
	{"redis", func(t *testing.T) driver.Store {
		s, err := redisstore.New(testredis.Client(t), redisstore.WithPrefix(namespace()+":"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"postgres", func(t *testing.T) driver.Store {
		pool, err := pgxpool.New(t.Context(), testserver.SharedPostgres(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := pgstore.New(pool, pgstore.WithTable(namespace()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"mariadb", func(t *testing.T) driver.Store {
		db, err := sql.Open("mysql", testserver.SharedMariaDB(t)+"?interpolateParams=true")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := mysqlstore.New(db, mysqlstore.WithTable(namespace()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
}
