package server

import (
	"testing"

	"github.com/sluicehq/sluice/driver"
)

// partitioned is a driver.Store of partitions, a key's being its first
// byte.
type partitioned struct{ driver.Store }

func (partitioned) Partition(key string) string { return key[:1] }

// TestLimiterStorePartition: a limiter's view of the server's store
// passes the store's partitions on, for the limiter's key as the store
// has it (with the limiter's prefix), so that a Redis Cluster's master
// that fails opens the circuit of its own keys only; a store without
// partitions has one, "".
func TestLimiterStorePartition(t *testing.T) {
	m := newMetrics()
	ls, ok := newLimiterStore(partitioned{}, "api", m).(driver.Partitioner)
	if !ok {
		t.Fatal("the limiter's store hides the store's partitions")
	}
	if got := ls.Partition("k"); got != "a" { // "api:k"
		t.Errorf("Partition(k) = %q, want %q, the partition of api:k", got, "a")
	}
	plain := newLimiterStore(struct{ driver.Store }{}, "api", m).(driver.Partitioner)
	if got := plain.Partition("k"); got != "" {
		t.Errorf("Partition(k) on a store without partitions = %q, want \"\"", got)
	}
}
