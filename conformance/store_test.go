package conformance_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/driver"
)

// mapStore is a minimal driver.Store, so that the runner's store path is
// tested here; the real stores run the same vectors in their own tests.
type mapStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if next, _, changed := fn(s.m[key]); changed {
		s.m[key] = append([]byte(nil), next...)
	}
	return nil
}

func TestStoreTargetPassesVectors(t *testing.T) {
	target := conformance.Store{TargetName: "map", Store: &mapStore{m: make(map[string][]byte)}}
	conformance.RunT(t, target, "vectors")
	if _, err := os.Stat(sharedExamples); err == nil {
		conformance.RunT(t, target, sharedExamples)
	}
}
