package sluice_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/memstore"
)

// switchedStore is a store that fails with driver.ErrUnavailable while
// down is set.
type switchedStore struct {
	driver.Store
	down atomic.Bool
}

func (s *switchedStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if s.down.Load() {
		return driver.ErrUnavailable
	}
	return s.Store.Update(ctx, key, fn)
}

// TestFailShare is FailShare in a fleet of three: two other processes
// beat into the store's fleet record, this one beats after a call that
// succeeded, and once the store fails it admits a third of the limit,
// reporting a third as its Limit. A limiter that never reached the store
// fails closed.
func TestFailShare(t *testing.T) {
	ctx := context.Background()
	st := &switchedStore{Store: memstore.New()}
	// Two other processes, whose beats end in an hour.
	var rec []byte
	for id := uint64(1); id <= 2; id++ {
		rec = binary.BigEndian.AppendUint64(rec, id)
		rec = binary.BigEndian.AppendUint64(rec, uint64(time.Now().Add(time.Hour).UnixNano()))
	}
	if err := st.Update(ctx, engine.FleetKey, func([]byte) ([]byte, time.Duration, bool) { return rec, time.Hour, true }); err != nil {
		t.Fatal(err)
	}

	newLimiter := func() *sluice.Limiter {
		l, err := sluice.NewLimiter(sluice.FixedWindow(30, time.Hour), sluice.WithStore(st),
			sluice.WithStoreFailure(sluice.FailShare), sluice.WithCircuitBreaker(-1))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	st.down.Store(true)
	var se *sluice.StoreError
	if _, err := newLimiter().Allow(ctx, "k"); !errors.As(err, &se) || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Allow of a limiter that never reached its store = %v, want a *StoreError of driver.ErrUnavailable", err)
	}
	st.down.Store(false)

	l := newLimiter()
	if _, err := l.Allow(ctx, "other"); err != nil { // beats, in the background
		t.Fatal(err)
	}
	// The beat is in the background: wait until the store lists three.
	waitFleet(ctx, t, st, 3)
	// The beat's count reaches the limiter when the beat ends, just after
	// its write: a call before that still finds no fleet.
	st.down.Store(true)
	allowed := 0
	for deadline := time.Now().Add(10 * time.Second); allowed == 0; time.Sleep(time.Millisecond) {
		res, err := l.Allow(ctx, "k")
		switch {
		case err == nil && res.Allowed:
			allowed++
			if res.Limit != 10 || res.Remaining != 9 {
				t.Errorf("the first Allow on the share = %+v, want Limit 10 and Remaining 9", res)
			}
		case !errors.As(err, &se):
			t.Fatalf("Allow = %+v, %v, want allowed or a *StoreError while the beat ends", res, err)
		case time.Now().After(deadline):
			t.Fatal("no Allow on the share 10s after the beat")
		}
	}
	for range 20 {
		res, err := l.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Errorf("a process of three admitted %d of a limit of 30 while the store failed, want its share, 10", allowed)
	}
}

// TestFailShareBucket: a KeyBucket's calls have no share, and fail
// closed under FailShare, even in a process that knows its fleet.
func TestFailShareBucket(t *testing.T) {
	ctx := context.Background()
	st := &switchedStore{Store: memstore.New()}
	l, err := sluice.NewLimiter(sluice.TokenBucket(30, 30, time.Hour), sluice.WithStore(st),
		sluice.WithStoreFailure(sluice.FailShare), sluice.WithCircuitBreaker(-1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Bucket("k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	var se *sluice.StoreError
	if res, err := b.Allow(ctx); !errors.As(err, &se) {
		t.Errorf("KeyBucket.Allow on a failed store under FailShare = %+v, %v, want a *StoreError", res, err)
	}
}

// waitFleet waits until the fleet record in st lists n processes: a
// limiter beats in the background, after its call returns.
func waitFleet(ctx context.Context, t *testing.T, st driver.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var got int
		_ = st.Update(ctx, engine.FleetKey, func(s []byte) ([]byte, time.Duration, bool) { got = len(s) / 16; return nil, 0, false })
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet record lists %d processes 10s after this one's call, want %d", got, n)
		}
	}
}
