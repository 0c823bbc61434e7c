package rlqs

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/driver"
)

// keyPrefix begins every limiter key of a bucket (see bucketKey), and no
// key of the envoy section's descriptors.
const keyPrefix = "rlqs|"

// SplitStore returns a limiter's store that keeps the keys of the
// service's buckets (the limiter keys that begin "rlqs|", see
// docs/envoy.md) in own, and every other key in shared: given a bounded
// store of their own, the buckets Envoys make cannot evict the state of
// other limiters or keys from a bounded shared store. It is a
// driver.Deleter when both stores are.
func SplitStore(shared, own driver.Store) driver.Store {
	s := splitStore{shared: shared, own: own}
	_, d1 := shared.(driver.Deleter)
	_, d2 := own.(driver.Deleter)
	if d1 && d2 {
		return splitDeleter{s}
	}
	return s
}

type splitStore struct{ shared, own driver.Store }

func (s splitStore) of(key string) driver.Store {
	if strings.HasPrefix(key, keyPrefix) {
		return s.own
	}
	return s.shared
}

func (s splitStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return s.of(key).Update(ctx, key, fn)
}

type splitDeleter struct{ splitStore }

func (s splitDeleter) Delete(ctx context.Context, key string) error {
	return s.of(key).(driver.Deleter).Delete(ctx, key)
}
