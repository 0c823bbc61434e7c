package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/observertest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// recorder is an Observer that keeps the events it is told, with the
// store calls' wall-clock latency zeroed so that they compare exactly.
type recorder struct {
	mu     sync.Mutex
	events []sluice.Event
}

func (r *recorder) Observe(e sluice.Event) {
	if e.Kind == sluice.EventStoreCall {
		if e.Duration < 0 {
			panic("negative store latency")
		}
		e.Duration = 0
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) take() []sluice.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

func checkEvents(t *testing.T, call string, got, want []sluice.Event) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: events\n got %+v\nwant %+v", call, got, want)
	}
}

var (
	allowed1  = sluice.Event{Kind: sluice.EventAllowed, Tokens: 1}
	rejected1 = sluice.Event{Kind: sluice.EventRejected, Tokens: 1}
	update    = sluice.Event{Kind: sluice.EventStoreCall, Op: sluice.StoreOpUpdate}
)

func TestObserverLimiter(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(t0)
	rec := &recorder{}
	l, err := sluice.NewLimiter(sluice.TokenBucket(2, 1, time.Second),
		sluice.WithClock(clock), sluice.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	checkEvents(t, "3×Allow", rec.take(), []sluice.Event{allowed1, allowed1, rejected1})

	r, err := l.ReserveN(ctx, "k", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "ReserveN(2, 1m)", rec.take(), []sluice.Event{
		{Kind: sluice.EventAllowed, Tokens: 2}, {Kind: sluice.EventDelayed, Duration: 2 * time.Second}})
	r.Cancel()
	rec.take()

	if err := l.WaitN(ctx, "k", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "WaitN(1, 1m)", rec.take(), []sluice.Event{allowed1,
		{Kind: sluice.EventWaiting, Tokens: 1, Duration: time.Second}, {Kind: sluice.EventWaited, Duration: time.Second}})

	if _, err := l.AllowN(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "AllowN(j, 2)", rec.take(), []sluice.Event{{Kind: sluice.EventAllowed, Tokens: 2}})

	b, err := l.Bucket("other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AllowN(ctx, 3); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "Bucket(other).AllowN(3)", rec.take(), []sluice.Event{{Kind: sluice.EventRejected, Tokens: 3}})
}

func TestObserverBucket(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	rec := &recorder{}
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Capacity(1, sluice.Greedy(1, time.Second))}, sluice.WithObserver(rec))
	b.TryConsume(1)
	b.TryConsume(1)
	checkEvents(t, "2×TryConsume(1)", rec.take(), []sluice.Event{allowed1, rejected1})
}

func TestObserverStore(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Minute), sluice.WithStore(memstore.New()), sluice.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	l.Allow(ctx, "k")
	l.Allow(ctx, "k")
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, "2×Allow, Reset", rec.take(), []sluice.Event{
		update, allowed1, update, rejected1, {Kind: sluice.EventStoreCall, Op: sluice.StoreOpDelete}})
}

func TestObserverStoreFailure(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s := newMapStore()
	down := errors.New("down")
	s.setFail(down)
	l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Minute), sluice.WithStore(s), sluice.WithObserver(rec),
		sluice.WithStoreFailure(sluice.FailOpen), sluice.WithCircuitBreaker(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	// The store's error comes wrapped by the engine: compare it apart.
	if len(got) != 4 || !errors.Is(got[0].Err, down) || !errors.Is(got[2].Err, down) {
		t.Fatalf("events = %+v, want a failed store call, the circuit opening, a store failure and the open decision", got)
	}
	got[0].Err, got[2].Err = nil, nil
	checkEvents(t, "Allow on a failing store", got, []sluice.Event{
		update,
		{Kind: sluice.EventCircuit, Circuit: sluice.CircuitOpen},
		{Kind: sluice.EventStoreFailure, Failure: sluice.FailOpen},
		allowed1,
	})
}

// nopObserver is the cheapest observer, for the cost of the hook itself.
type nopObserver struct{}

func (nopObserver) Observe(sluice.Event) {}

// BenchmarkObserver is the cost of the hook on an in-memory Limiter's
// AllowN: none, an observer that does nothing, and sluicetest's Counter.
//
//	go test -run '^$' -bench Observer -count 10 .
func BenchmarkObserver(b *testing.B) {
	cases := []struct {
		name string
		opts []sluice.Option
	}{
		{"observer=none", nil},
		{"observer=nop", []sluice.Option{sluice.WithObserver(nopObserver{})}},
		{"observer=counter", []sluice.Option{sluice.WithObserver(&sluicetest.Counter{})}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { observertest.BenchAllow(b, c.opts...) })
	}
}

var _ driver.Store = memstore.New()

func TestObserverStoreBucket(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	b, err := newStoreBucket(memstore.New(), "k", sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Capacity(1, sluice.Greedy(1, time.Minute)),
	}}, sluice.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	b.Allow(ctx)
	b.Allow(ctx)
	checkEvents(t, "2×Allow", rec.take(), []sluice.Event{update, allowed1, update, rejected1})
}

// TestObserverPolicyFor: a limiter with a policy per key reports each
// key's decisions, in memory and on a store.
func TestObserverPolicyFor(t *testing.T) {
	ctx := context.Background()
	plan := func(_ context.Context, key string) (sluice.Policy, error) {
		if key == "paid" {
			return sluice.FixedWindow(2, time.Minute), nil
		}
		return sluice.FixedWindow(1, time.Minute), nil
	}
	for _, stored := range []bool{false, true} {
		rec := &recorder{}
		opts := []sluice.Option{sluice.WithPolicyFor(plan), sluice.WithObserver(rec)}
		if stored {
			opts = append(opts, sluice.WithStore(memstore.New()))
		}
		l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Minute), opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"free", "free", "paid", "paid"} {
			if _, err := l.Allow(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		var got []sluice.Event
		calls := 0
		for _, e := range rec.take() {
			if e.Kind == sluice.EventStoreCall {
				calls++
				continue
			}
			got = append(got, e)
		}
		// In memory the keys are records of an in-process map, not store
		// calls.
		if (calls > 0) != stored {
			t.Errorf("stored=%v: %d store calls", stored, calls)
		}
		checkEvents(t, fmt.Sprintf("stored=%v: Allow free, free, paid, paid", stored), got,
			[]sluice.Event{allowed1, rejected1, allowed1, allowed1})
	}
}
