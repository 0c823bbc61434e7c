// Package rollout holds the tests of what changes a key's configuration
// while processes share a store: rolling deploys (configuration
// versions) and policies per key, each run on memory, Redis, PostgreSQL
// and MariaDB, the stores started by internal/testserver.
package rollout
