package sluice_test

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// mapStore is the smallest driver.Store: one mutex over a map, no expiry.
// The store packages are tested on real servers; this one lets the root
// package's tests run the store path alone, and inject failures.
type mapStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	updates int
	called  int   // every call of Update, failed ones included
	fail    error // returned by every call while set
}

func newMapStore() *mapStore { return &mapStore{m: make(map[string][]byte)} }

func (s *mapStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.called++
	if s.fail != nil {
		return s.fail
	}
	s.updates++
	next, _, changed := fn(s.m[key])
	if changed {
		s.m[key] = append([]byte(nil), next...)
	}
	return nil
}

func (s *mapStore) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *mapStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates
}

// calls is how many times Update was called, failed calls included.
func (s *mapStore) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.called
}

var _ driver.Store = (*mapStore)(nil)

var _ = time.Second

// newStoreBucket is the token bucket of cfg for key in s: a stored
// Limiter's bucket, the one way to it.
func newStoreBucket(s driver.Store, key string, cfg sluice.BucketConfig, opts ...sluice.Option) (*sluice.KeyBucket, error) {
	l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), append([]sluice.Option{sluice.WithStore(s)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return l.Bucket(key)
}
