package resilience

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// events is an Observer that keeps what it is told.
type events struct {
	mu  sync.Mutex
	got []sluice.Event
}

func (e *events) Observe(ev sluice.Event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events) take() []sluice.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	got := e.got
	e.got = nil
	return got
}

func TestObserver(t *testing.T) {
	ctx := context.Background()
	obs := &events{}
	f := newFixture(t, Config{LimitForPeriod: 2, LimitRefreshPeriod: time.Second, Timeout: time.Second}, WithObserver(obs))
	steps := []struct {
		name string
		call func()
		want []sluice.Event
	}{
		{"AcquirePermission(2), there", func() { f.l.AcquirePermission(ctx, 2) },
			[]sluice.Event{{Kind: sluice.EventAllowed, Tokens: 2}}},
		{"AcquirePermission(1), a cycle away", func() { f.l.AcquirePermission(ctx, 1) },
			[]sluice.Event{{Kind: sluice.EventAllowed, Tokens: 1}, {Kind: sluice.EventWaiting, Tokens: 1, Duration: time.Second},
				{Kind: sluice.EventWaited, Duration: time.Second}}},
		{"ReservePermission(2), a cycle away", func() { f.l.ReservePermission(2) },
			[]sluice.Event{{Kind: sluice.EventAllowed, Tokens: 2}, {Kind: sluice.EventDelayed, Duration: time.Second}}},
		{"ReservePermission(5), past the timeout", func() { f.l.ReservePermission(5) },
			[]sluice.Event{{Kind: sluice.EventRejected, Tokens: 5}}},
		{"AcquirePermission(5), past the timeout", func() { f.l.AcquirePermission(ctx, 5) },
			[]sluice.Event{{Kind: sluice.EventRejected, Tokens: 5}}},
	}
	for _, s := range steps {
		s.call()
		if got := obs.take(); !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s: events %+v, want %+v", s.name, got, s.want)
		}
	}
}

func TestObserverCancelled(t *testing.T) {
	obs := &events{}
	sl := blockingSleeper{sluicetest.NewFakeClock(t0), make(chan struct{})}
	l, err := New(Config{LimitForPeriod: 1, LimitRefreshPeriod: time.Second, Timeout: time.Minute},
		WithClock(sl), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.AcquirePermission(ctx, 1)
	done := make(chan struct{})
	go func() {
		l.AcquirePermission(ctx, 1)
		close(done)
	}()
	<-sl.started
	cancel()
	<-done
	want := []sluice.Event{{Kind: sluice.EventAllowed, Tokens: 1}, {Kind: sluice.EventAllowed, Tokens: 1},
		{Kind: sluice.EventWaiting, Tokens: 1, Duration: time.Second}, {Kind: sluice.EventCancelled, Tokens: 1}}
	if got := obs.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
}
