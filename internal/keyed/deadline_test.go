package keyed

import (
	"context"
	"fmt"
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

// heldStore holds every Update until release is closed, and sends the
// deadline of each Update's context on entered as the Update begins.
type heldStore struct {
	entered chan time.Time
	release chan struct{}
}

func (s *heldStore) Update(ctx context.Context, _ string, _ driver.UpdateFunc) error {
	d, _ := ctx.Deadline()
	s.entered <- d
	<-s.release
	return fmt.Errorf("test: %w", driver.ErrUnavailable)
}

// doneAsked is a context that closes asked when its Done is first asked
// for: by then a call has taken its deadline and waits for its answer.
type doneAsked struct {
	context.Context
	asked chan struct{}
	once  sync.Once
}

func (c *doneAsked) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// TestQueuedDeadline: a call queued behind its key's call in flight keeps
// the deadline it took when it was made, its start plus the store
// timeout, for its wait in the queue and for the store call that runs it;
// the batch it runs in gets no store timeout of its own when it starts.
// Before, 600 calls on one key of a hanging store waited up to 3 store
// timeouts, in batches of 256. Explicit times, not a latency: the store
// is held and released by the test, and the deadlines are compared with
// the clock read around the calls.
func TestQueuedDeadline(t *testing.T) {
	const timeout = time.Hour // never reached
	st := &heldStore{entered: make(chan time.Time, 2), release: make(chan struct{})}
	s := NewStore(st, fixed(t0), timeout, breaker.NewSet(0, nil, nil))
	window := record.NewMachine("w", policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 2, Interval: minute}), tokenbucket.Proportionally)
	errs := make(chan error, 2)
	consume := func(ctx context.Context) {
		_, err := s.Consume(ctx, "k", window, 1)
		errs <- err
	}

	before1 := time.Now()
	go consume(context.Background())
	d1 := <-st.entered
	after1 := time.Now()
	if d1.Before(before1.Add(timeout)) || d1.After(after1.Add(timeout)) {
		t.Errorf("the first call's store call has a deadline %v after the call, want the store timeout %v", d1.Sub(before1), timeout)
	}

	ctx2 := &doneAsked{Context: context.Background(), asked: make(chan struct{})}
	before2 := time.Now()
	go consume(ctx2)
	<-ctx2.asked // the second call took its deadline, and waits behind the first
	released := time.Now()
	close(st.release)
	d2 := <-st.entered
	if d2.Before(before2.Add(timeout)) || !d2.Before(released.Add(timeout)) {
		t.Errorf("the queued call's store call has a deadline %v after the call was made, want the store timeout %v from then, before the first call's release %v after it",
			d2.Sub(before2), timeout, released.Sub(before2))
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Error("Consume on a failing store = nil, want its error")
		}
	}
}
