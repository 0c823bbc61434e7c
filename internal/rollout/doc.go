// Package rollout holds the tests of what changes a key's configuration
// while processes share a store: rolling deploys (configuration
// versions), policies per key and lazily configured buckets, each run on
// memory, Redis, PostgreSQL and MariaDB, the stores started by
// internal/testserver.
package rollout
