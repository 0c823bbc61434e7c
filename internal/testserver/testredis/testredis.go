// Package testredis gives tests go-redis clients of testserver's shared
// Redis. It is apart from testserver, which speaks the servers' protocols
// itself, so that the tests that need no Redis client do not build one.
package testredis

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testserver"
)

// Options returns the options of a client of the shared Redis
// (testserver.SharedRedis), for a test that changes them.
func Options(tb testing.TB) *redis.Options {
	tb.Helper()
	opt, err := redis.ParseURL(testserver.SharedRedis(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return opt
}

// Client returns a client of the shared Redis, closed when tb ends.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(Options(tb))
	tb.Cleanup(func() { c.Close() })
	return c
}
