package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is a handler that records each batch's items and can hold a
// batch until released.
type recorder struct {
	mu      sync.Mutex
	entered bool
	batches [][]int
	hold    chan struct{} // when not nil, the first batch waits on it
	started chan struct{} // closed when the first batch starts
	err     error
}

func newRecorder(hold bool) *recorder {
	r := &recorder{started: make(chan struct{})}
	if hold {
		r.hold = make(chan struct{})
	}
	return r
}

// handle joins the queue, as a store's handler does when it reads the
// key, then holds the first batch, as a slow round trip would.
func (r *recorder) handle(_ context.Context, _ string, b *Batch[int]) error {
	items := slices.Clone(b.Join())
	r.mu.Lock()
	first := !r.entered
	r.entered = true
	r.mu.Unlock()
	if first {
		close(r.started)
		if r.hold != nil {
			<-r.hold
		}
	}
	r.mu.Lock()
	r.batches = append(r.batches, items)
	r.mu.Unlock()
	return r.err
}

func (r *recorder) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// queued waits until key has n operations queued behind its batch.
func queued(t *testing.T, b *Batcher[int], key string, n int) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		for i := range b.shards {
			sh := &b.shards[i]
			sh.mu.Lock()
			q := sh.inflight[key]
			k := 0
			if q != nil {
				for _, c := range *q {
					if c.state.Load() == waiting {
						k++
					}
				}
			}
			sh.mu.Unlock()
			if k >= n {
				return
			}
		}
	}
	t.Fatalf("%d operations never queued on %q", n, key)
}

func later() time.Time { return time.Now().Add(time.Minute) }

func TestAlone(t *testing.T) {
	r := newRecorder(false)
	r.err = errors.New("the batch's error")
	b := New(r.handle, Options{})
	if err := b.Add(context.Background(), "k", 7, later()); err != r.err {
		t.Errorf("Add = %v, want the handler's error", err)
	}
	if got := r.got(); fmt.Sprint(got) != "[[7]]" {
		t.Errorf("batches = %v, want [[7]]", got)
	}
}

// addQueued starts Add(k, items[i]) for every item behind a held first
// batch of item 0, releases it, and returns the errors in item order.
func addQueued(t *testing.T, b *Batcher[int], r *recorder, ctx context.Context, items []int) []error {
	t.Helper()
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = b.Add(context.Background(), "k", items[0], later()) }()
	<-r.started
	for i := 1; i < len(items); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = b.Add(ctx, "k", items[i], later()) }()
		queued(t, b, "k", i) // keep the queue in item order
	}
	close(r.hold)
	wg.Wait()
	return errs
}

func TestQueuedRunTogether(t *testing.T) {
	r := newRecorder(true)
	b := New(r.handle, Options{})
	errs := addQueued(t, b, r, context.Background(), []int{0, 1, 2, 3, 4})
	for i, err := range errs {
		if err != nil {
			t.Errorf("Add(%d) = %v", i, err)
		}
	}
	if got := r.got(); fmt.Sprint(got) != "[[0] [1 2 3 4]]" {
		t.Errorf("batches = %v, want the first alone, then the queue in order", got)
	}
}

func TestMaxBatch(t *testing.T) {
	r := newRecorder(true)
	b := New(r.handle, Options{MaxBatch: 2})
	addQueued(t, b, r, context.Background(), []int{0, 1, 2, 3, 4})
	if got := r.got(); fmt.Sprint(got) != "[[0] [1 2] [3 4]]" {
		t.Errorf("batches = %v, want batches of at most 2", got)
	}
}

// TestJoin: operations queued while a batch runs join it at its next
// Join, as a handler retrying after a lost race does.
func TestJoin(t *testing.T) {
	var b *Batcher[int]
	release := make(chan struct{})
	started := make(chan struct{})
	var attempts [][]int
	b = New(func(_ context.Context, _ string, bt *Batch[int]) error {
		attempts = append(attempts, slices.Clone(bt.Join()))
		close(started)
		<-release
		attempts = append(attempts, slices.Clone(bt.Join()))
		return nil
	}, Options{})
	done := make(chan error)
	go func() { done <- b.Add(context.Background(), "k", 1, later()) }()
	<-started
	go func() { done <- b.Add(context.Background(), "k", 2, later()) }()
	queued(t, b, "k", 1)
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if fmt.Sprint(attempts) != "[[1] [1 2]]" {
		t.Errorf("attempts = %v, want the second to have joined the batch", attempts)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	r := newRecorder(true)
	b := New(r.handle, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error)
	go func() { first <- b.Add(context.Background(), "k", 0, later()) }()
	<-r.started
	second := make(chan error)
	go func() { second <- b.Add(ctx, "k", 1, later()) }()
	queued(t, b, "k", 1)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Errorf("Add with its context cancelled in the queue = %v, want context.Canceled", err)
	}
	close(r.hold)
	if err := <-first; err != nil {
		t.Error(err)
	}
	if got := r.got(); fmt.Sprint(got) != "[[0]]" {
		t.Errorf("batches = %v, want the cancelled operation never run", got)
	}
}

func TestExpiredWhileQueued(t *testing.T) {
	r := newRecorder(true)
	b := New(r.handle, Options{})
	first := make(chan error)
	go func() { first <- b.Add(context.Background(), "k", 0, later()) }()
	<-r.started
	if err := b.Add(context.Background(), "k", 1, time.Now().Add(10*time.Millisecond)); !errors.Is(err, ErrExpired) {
		t.Errorf("Add whose deadline passed in the queue = %v, want ErrExpired", err)
	}
	close(r.hold)
	if err := <-first; err != nil {
		t.Error(err)
	}
	if got := r.got(); fmt.Sprint(got) != "[[0]]" {
		t.Errorf("batches = %v, want the expired operation never run", got)
	}
}

// TestRefuse: once Refuse says no, the operations queued behind the batch
// get its error at once and none is run.
func TestRefuse(t *testing.T) {
	r := newRecorder(true)
	refused := errors.New("circuit open")
	b := New(r.handle, Options{Refuse: func(string) error { return refused }})
	errs := addQueued(t, b, r, context.Background(), []int{0, 1, 2})
	if errs[0] != nil || errs[1] != refused || errs[2] != refused {
		t.Errorf("errors = %v, want nil for the batch run, then the refusal", errs)
	}
	if got := r.got(); fmt.Sprint(got) != "[[0]]" {
		t.Errorf("batches = %v, want only the first run", got)
	}
}

// TestKeysIndependent: a batch in flight on one key does not hold
// another key's operations.
func TestKeysIndependent(t *testing.T) {
	r := newRecorder(true)
	b := New(r.handle, Options{})
	first := make(chan error)
	go func() { first <- b.Add(context.Background(), "a", 0, later()) }()
	<-r.started
	if err := b.Add(context.Background(), "b", 1, later()); err != nil {
		t.Errorf("Add on another key = %v", err)
	}
	close(r.hold)
	if err := <-first; err != nil {
		t.Error(err)
	}
	if got := r.got(); fmt.Sprint(got) != "[[1] [0]]" {
		t.Errorf("batches = %v, want key b's run while a's was held", got)
	}
}
