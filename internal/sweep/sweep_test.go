package sweep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// table is a fake store's expired rows: each batch deletes up to n of
// them, or fails with the next error queued.
type table struct {
	mu      sync.Mutex
	expired int64
	errs    []error
	batches []int // the n of each call
}

func (tb *table) del(ctx context.Context, n int) (int64, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.batches = append(tb.batches, n)
	if len(tb.errs) > 0 {
		err := tb.errs[0]
		tb.errs = tb.errs[1:]
		return 0, err
	}
	d := min(tb.expired, int64(n))
	tb.expired -= d
	return d, nil
}

// reports records what a Sweeper reported.
type reports struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{} // one value per report
}

func newReports() *reports { return &reports{ch: make(chan struct{}, 100)} }

func (r *reports) report(n int64, err error) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%d %v", n, err))
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// wait waits for n more reports, for at most a minute.
func (r *reports) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.ch:
		case <-time.After(time.Minute):
			t.Fatal("no report within a minute")
		}
	}
}

func (r *reports) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestSweepRunsBatchesUntilShort: each tick runs batches of BatchSize
// until one deletes fewer, and reports each; no tick, no statement.
func TestSweepRunsBatchesUntilShort(t *testing.T) {
	tb := &table{expired: 2*BatchSize + 10}
	r := newReports()
	tick := make(chan time.Time)
	stopped := make(chan struct{})
	s := start(tick, func() { close(stopped) }, tb.del, r.report)

	tick <- time.Time{}
	r.wait(t, 3)
	want := []string{"1000 <nil>", "1000 <nil>", "10 <nil>"}
	if got := r.list(); !slices.Equal(got, want) {
		t.Errorf("reports after a tick = %q, want %q", got, want)
	}
	tick <- time.Time{} // nothing left: one empty batch
	r.wait(t, 1)
	s.Close()
	<-stopped
	if got, want := r.list(), append(want, "0 <nil>"); !slices.Equal(got, want) {
		t.Errorf("reports after two ticks = %q, want %q", got, want)
	}
	if want := []int{BatchSize, BatchSize, BatchSize, BatchSize}; !slices.Equal(tb.batches, want) {
		t.Errorf("batch sizes = %v, want %v", tb.batches, want)
	}
}

// TestSweepErrorEndsRound: a failed batch is reported and ends its
// sweep; the next tick tries again.
func TestSweepErrorEndsRound(t *testing.T) {
	boom := errors.New("boom")
	tb := &table{expired: 3 * BatchSize, errs: []error{boom}}
	r := newReports()
	tick := make(chan time.Time)
	s := start(tick, func() {}, tb.del, r.report)
	defer s.Close()

	tick <- time.Time{}
	r.wait(t, 1)
	tick <- time.Time{}
	r.wait(t, 4)
	s.Close()
	want := []string{"0 boom", "1000 <nil>", "1000 <nil>", "1000 <nil>", "0 <nil>"}
	if got := r.list(); !slices.Equal(got, want) {
		t.Errorf("reports = %q, want %q", got, want)
	}
}

// TestCloseCancelsBatch: Close cancels a batch in progress, waits for the
// goroutine, and the cancelled batch is not reported as a failure.
func TestCloseCancelsBatch(t *testing.T) {
	started := make(chan struct{})
	var cancelled error
	del := func(ctx context.Context, n int) (int64, error) {
		close(started)
		<-ctx.Done()
		cancelled = ctx.Err()
		return 0, ctx.Err()
	}
	r := newReports()
	tick := make(chan time.Time, 1)
	s := start(tick, func() {}, del, r.report)
	tick <- time.Time{}
	<-started
	s.Close()
	s.Close() // twice is fine
	if !errors.Is(cancelled, context.Canceled) {
		t.Errorf("batch ended with %v, want context.Canceled", cancelled)
	}
	if got := r.list(); len(got) != 0 {
		t.Errorf("reports = %q, want none", got)
	}
}

// TestCloseBeforeTick: a Sweeper closed before its first tick ran no
// batch.
func TestCloseBeforeTick(t *testing.T) {
	tb := &table{expired: 5}
	s := Start(time.Hour, tb.del, nil)
	s.Close()
	if len(tb.batches) != 0 {
		t.Errorf("%d batches ran, want none", len(tb.batches))
	}
}
