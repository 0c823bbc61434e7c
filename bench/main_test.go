package bench

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestMain stops the Redis and PostgreSQL servers that the store
// benchmarks start through testserver.SharedRedis and SharedPostgres.
func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }
