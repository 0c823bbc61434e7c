package server

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// partitioned is a driver.Store of partitions, a key's being its first
// byte.
type partitioned struct{ driver.Store }

func (partitioned) Partition(key string) string { return key[:1] }

// partitionedDeleter is partitioned, and deletes.
type partitionedDeleter struct{ partitioned }

func (partitionedDeleter) Delete(context.Context, string) error { return nil }

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
	// Under the limiters' views, the server's store tells the outage
	// log of its answers (watchAnswers): that wrapper passes them on too,
	// whether the store deletes or not, and has none when the store has
	// none.
	for _, st := range []driver.Store{partitioned{}, partitionedDeleter{}} {
		if got := newLimiterStore(watchAnswers(st, nil), "api", m).(driver.Partitioner).Partition("k"); got != "a" {
			t.Errorf("Partition(k) through the outage log's wrapper of a %T = %q, want %q", st, got, "a")
		}
	}
	if _, ok := watchAnswers(partitionedDeleter{}, nil).(driver.Deleter); !ok {
		t.Error("the outage log's wrapper of a store that deletes does not")
	}
	if _, ok := watchAnswers(memstore.New(), nil).(driver.Partitioner); ok {
		t.Error("the outage log's wrapper of a store without partitions has some")
	}
	plain := newLimiterStore(struct{ driver.Store }{}, "api", m).(driver.Partitioner)
	if got := plain.Partition("k"); got != "" {
		t.Errorf("Partition(k) on a store without partitions = %q, want \"\"", got)
	}
}
