package keyed

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

var minute = int64(time.Minute)

// ttlStore is a map store that records the TTL of each write.
type ttlStore struct {
	mu  sync.Mutex
	m   map[string][]byte
	ttl map[string]time.Duration
}

func (s *ttlStore) Update(_ context.Context, key string, fn driver.UpdateFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, ttl, changed := fn(s.m[key])
	if changed {
		s.m[key], s.ttl[key] = append([]byte(nil), next...), ttl
	}
	return nil
}

type fixed int64

func (f fixed) Now() int64 { return int64(f) }

// TestStoreCodecPerCall: one Store serves any codec, and a record's TTL
// is that of the codec that wrote it.
func TestStoreCodecPerCall(t *testing.T) {
	ctx := context.Background()
	st := &ttlStore{m: map[string][]byte{}, ttl: map[string]time.Duration{}}
	s := NewStore(st, fixed(t0), time.Second, breaker.NewSet(0, nil, nil))
	window := record.NewMachine("w", policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 2, Interval: minute}), tokenbucket.Proportionally)
	cfg := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: 10, RefillTokens: 10, Period: int64(time.Hour)})
	bucket := record.NewBucket(cfg, record.BucketOptions{Inherit: tokenbucket.Proportionally})
	if res, err := s.Consume(ctx, "w", window, 1); err != nil || !res.Allowed {
		t.Fatalf("Consume on the window = %+v, %v", res, err)
	}
	if res, err := s.Consume(ctx, "b", bucket, 5); err != nil || !res.Allowed {
		t.Fatalf("Consume on the bucket = %+v, %v", res, err)
	}
	// The window ends a minute after its first hit; the bucket refills 5
	// tokens in half an hour; both plus the 1s margin.
	if got, want := st.ttl["w"], time.Minute+time.Second; got != want {
		t.Errorf("window TTL = %v, want %v", got, want)
	}
	if got, want := st.ttl["b"], 30*time.Minute+time.Second; got != want {
		t.Errorf("bucket TTL = %v, want %v", got, want)
	}
	if _, err := s.Configuration(ctx, "none", record.NewBucket(nil, record.BucketOptions{})); err != ErrNoConfig {
		t.Errorf("Configuration of a key without state nor configuration = %v, want ErrNoConfig", err)
	}
}
