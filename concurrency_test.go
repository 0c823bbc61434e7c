package sluice_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// concurrencyLimiters are a limit of 2 slots per key with a lease of 10s,
// in memory and on a store, on clock.
func concurrencyLimiters(t *testing.T, clock sluice.Clock) map[string]*sluice.Limiter {
	t.Helper()
	out := map[string]*sluice.Limiter{}
	for name, opts := range map[string][]sluice.Option{
		"memory": {sluice.WithClock(clock)},
		"store":  {sluice.WithClock(clock), sluice.WithStore(memstore.New())},
	} {
		l, err := sluice.NewLimiter(sluice.Concurrency(2, 10*time.Second), opts...)
		if err != nil {
			t.Fatalf("NewLimiter(Concurrency(2, 10s)): %v", err)
		}
		out[name] = l
	}
	return out
}

func TestConcurrencySlots(t *testing.T) {
	ctx := context.Background()
	for name, l := range concurrencyLimiters(t, sluicetest.NewFakeClock(1_700_000_000_000_000_000)) {
		t.Run(name, func(t *testing.T) {
			a, err := l.Acquire(ctx, "k", 0, 0)
			if err != nil || !a.Allowed || a.ID == 0 || a.Remaining != 1 {
				t.Fatalf("Acquire = %+v, %v; want a slot with 1 remaining", a, err)
			}
			b, _ := l.Acquire(ctx, "k", 5*time.Second, 0)
			if !b.Allowed || b.ID <= a.ID || b.TTL != 5*time.Second {
				t.Fatalf("second Acquire = %+v; want a slot of TTL 5s, ID above %d", b, a.ID)
			}
			if c, _ := l.Acquire(ctx, "k", 0, 0); c.Allowed || c.RetryAfter != 5*time.Second {
				t.Fatalf("third Acquire = %+v; want refused, RetryAfter 5s (b lapses first)", c)
			}
			if other, _ := l.Acquire(ctx, "other", 0, 0); !other.Allowed {
				t.Fatalf("Acquire on another key = %+v; want a slot", other)
			}
			if r, err := l.Release(ctx, a); err != nil || !r.Allowed {
				t.Fatalf("Release(a) = %+v, %v; want held", r, err)
			}
			if r, _ := l.Release(ctx, a); r.Allowed {
				t.Fatalf("second Release(a) = %+v; want not held", r)
			}
			c, _ := l.Acquire(ctx, "k", 0, 0)
			if !c.Allowed {
				t.Fatalf("Acquire after a release = %+v; want a slot", c)
			}
			if r, _ := l.Renew(ctx, b); !r.Allowed || !r.Expires.After(b.Expires) && !r.Expires.Equal(b.Expires) {
				t.Fatalf("Renew(b) = %+v; want held until at least %v", r, b.Expires)
			}
		})
	}
}

// TestConcurrencyLapse: a slot whose holder never comes back lapses at its
// TTL; its renewal then finds nothing, and the slot is another's.
func TestConcurrencyLapse(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	for name, l := range concurrencyLimiters(t, clock) {
		t.Run(name, func(t *testing.T) {
			a, _ := l.Acquire(ctx, "k", time.Second, 0)
			l.Acquire(ctx, "k", 0, 0)
			if c, _ := l.Acquire(ctx, "k", 0, 0); c.Allowed {
				t.Fatalf("Acquire on a full key = %+v", c)
			}
			clock.Advance(time.Second)
			if r, _ := l.Renew(ctx, a); r.Allowed {
				t.Fatalf("Renew of a lapsed slot = %+v; want not held", r)
			}
			if c, _ := l.Acquire(ctx, "k", 0, 0); !c.Allowed {
				t.Fatalf("Acquire after a slot lapsed = %+v; want a slot", c)
			}
		})
	}
}

// TestConcurrencyWait: Acquire waits, on the limiter's clock, for a slot
// to lapse; and for a release, on a real clock.
func TestConcurrencyWait(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	for name, l := range concurrencyLimiters(t, clock) {
		t.Run(name, func(t *testing.T) {
			l.Acquire(ctx, "k", 2*time.Second, 0)
			l.Acquire(ctx, "k", 3*time.Second, 0)
			if s, err := l.Acquire(ctx, "k", 0, time.Second); err != nil || s.Allowed {
				t.Fatalf("Acquire within 1s = %+v, %v; want refused (the first slot lapses in 2s)", s, err)
			}
			if s, err := l.Acquire(ctx, "k", 0, 5*time.Second); err != nil || !s.Allowed {
				t.Fatalf("Acquire within 5s = %+v, %v; want a slot", s, err)
			}
		})
	}
	l, _ := sluice.NewLimiter(sluice.Concurrency(1, time.Minute))
	held, _ := l.Acquire(ctx, "k", 0, 0)
	got := make(chan sluice.Slot)
	go func() {
		s, _ := l.Acquire(ctx, "k", 0, time.Minute)
		got <- s
	}()
	time.Sleep(10 * time.Millisecond) // let the waiter find the key full: either way it must get the slot
	l.Release(ctx, held)
	if s := <-got; !s.Allowed {
		t.Fatalf("a waiter's Acquire after the holder's release = %+v; want a slot", s)
	}
}

func TestConcurrencyErrors(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{sluice.Concurrency(0, time.Second), sluice.Concurrency(1001, time.Second), sluice.Concurrency(1, 0),
		sluice.Compound(sluice.FixedWindow(1, time.Second), sluice.Concurrency(1, time.Second))} {
		if _, err := sluice.NewLimiter(p); !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("NewLimiter(%v) = %v, want ErrInvalidConfig", p, err)
		}
	}
	l, _ := sluice.NewLimiter(sluice.Concurrency(2, time.Second))
	var ae *sluice.ArgumentError
	if _, err := l.Acquire(ctx, "k", 2*time.Second, 0); !errors.As(err, &ae) || ae.Arg != "ttl" {
		t.Errorf("Acquire with a TTL above the lease = %v, want an *ArgumentError on ttl", err)
	}
	if _, err := l.Acquire(ctx, "k", 0, -1); !errors.As(err, &ae) || ae.Arg != "maxWait" {
		t.Errorf("Acquire with maxWait -1 = %v, want an *ArgumentError on maxWait", err)
	}
	if _, err := l.Reserve(ctx, "k", 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve on a concurrency limit = %v, want ErrUnsupported", err)
	}
	fw, _ := sluice.NewLimiter(sluice.FixedWindow(1, time.Second))
	if _, err := fw.Acquire(ctx, "k", 0, 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Acquire on a fixed window = %v, want ErrUnsupported", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Acquire(done, "k", 0, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire on an ended context = %v, want context.Canceled", err)
	}
}

// TestTakesSlots: a policy takes slots when it holds them or wraps one
// that does, at any depth; sluice serve refuses such a limiter for Envoy,
// which never releases.
func TestTakesSlots(t *testing.T) {
	slots := sluice.Concurrency(2, time.Second)
	box := func(p sluice.Policy) sluice.Policy { return sluice.PenaltyBox(p, []time.Duration{time.Minute}, 0) }
	fw := sluice.FixedWindow(1, time.Second)
	for _, tt := range []struct {
		p    sluice.Policy
		want bool
	}{
		{slots, true},
		{box(slots), true},
		{box(box(slots)), true},
		{sluice.Compound(fw, box(slots)), true},
		{box(sluice.Compound(fw, box(slots))), true},
		{fw, false},
		{box(fw), false},
		{sluice.Compound(fw, sluice.TokenBucket(1, 1, time.Second)), false},
		{sluice.Concurrency(0, time.Second), false}, // invalid: no limiter to take anything
	} {
		p, ok := tt.p.(interface{ TakesSlots() bool })
		if got := ok && p.TakesSlots(); got != tt.want {
			t.Errorf("%v: TakesSlots() = %v, want %v", tt.p, got, tt.want)
		}
	}
}

// downStore is a store that cannot be reached.
type downStore struct{}

func (downStore) Update(context.Context, string, driver.UpdateFunc) error {
	return fmt.Errorf("down: %w", driver.ErrUnavailable)
}

// TestConcurrencyStoreFailure: under FailClosed a store failure is a
// *StoreError; under FailOpen an acquisition passes with a slot of ID 0,
// which nothing holds; under FailLocal the slots are held in this
// process's memory, the limit still holding there.
func TestConcurrencyStoreFailure(t *testing.T) {
	ctx := context.Background()
	p := sluice.Concurrency(1, time.Minute)
	closed, _ := sluice.NewLimiter(p, sluice.WithStore(downStore{}))
	var se *sluice.StoreError
	if _, err := closed.Acquire(ctx, "k", 0, 0); !errors.As(err, &se) {
		t.Errorf("FailClosed: Acquire = %v, want a *StoreError", err)
	}
	open, _ := sluice.NewLimiter(p, sluice.WithStore(downStore{}), sluice.WithStoreFailure(sluice.FailOpen))
	s, err := open.Acquire(ctx, "k", 0, 0)
	if err != nil || !s.Allowed || s.ID != 0 {
		t.Errorf("FailOpen: Acquire = %+v, %v; want allowed, ID 0", s, err)
	}
	local, _ := sluice.NewLimiter(p, sluice.WithStore(downStore{}), sluice.WithStoreFailure(sluice.FailLocal))
	a, err := local.Acquire(ctx, "k", 0, 0)
	if err != nil || !a.Allowed || a.ID == 0 {
		t.Fatalf("FailLocal: Acquire = %+v, %v; want a slot held locally", a, err)
	}
	if b, _ := local.Acquire(ctx, "k", 0, 0); b.Allowed {
		t.Errorf("FailLocal: a second Acquire of a limit of 1 = %+v, want refused", b)
	}
	if r, err := local.Release(ctx, a); err != nil || !r.Allowed {
		t.Errorf("FailLocal: Release = %+v, %v; want the local slot given back", r, err)
	}
}

// TestConcurrencyFailShare: under FailShare, a process of a fleet of
// three holds a third of the slots while its store fails.
func TestConcurrencyFailShare(t *testing.T) {
	ctx := context.Background()
	st := &switchedStore{Store: memstore.New()}
	var rec []byte // two other processes, beating for an hour
	for id := uint64(1); id <= 2; id++ {
		rec = binary.BigEndian.AppendUint64(rec, id)
		rec = binary.BigEndian.AppendUint64(rec, uint64(time.Now().Add(time.Hour).UnixNano()))
	}
	if err := st.Update(ctx, engine.FleetKey, func([]byte) ([]byte, time.Duration, bool) { return rec, time.Hour, true }); err != nil {
		t.Fatal(err)
	}
	l, err := sluice.NewLimiter(sluice.Concurrency(6, time.Hour), sluice.WithStore(st),
		sluice.WithStoreFailure(sluice.FailShare), sluice.WithCircuitBreaker(-1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "other", 0, 0); err != nil { // beats, in the background
		t.Fatal(err)
	}
	waitFleet(ctx, t, st, 3)
	st.down.Store(true)
	held := 0
	var se *sluice.StoreError
	for deadline := time.Now().Add(10 * time.Second); held == 0; time.Sleep(time.Millisecond) {
		s, err := l.Acquire(ctx, "k", 0, 0)
		switch {
		case err == nil && s.Allowed:
			held++
		case !errors.As(err, &se): // a *StoreError until the beat's count arrives
			t.Fatalf("Acquire = %+v, %v; want a slot, or a *StoreError while the beat ends", s, err)
		case time.Now().After(deadline):
			t.Fatal("no slot on the share 10s after the beat")
		}
	}
	for range 5 {
		if s, err := l.Acquire(ctx, "k", 0, 0); err != nil {
			t.Fatal(err)
		} else if s.Allowed {
			held++
		}
	}
	if held != 2 {
		t.Errorf("a process of three held %d of 6 slots while the store failed, want its share, 2", held)
	}
}
