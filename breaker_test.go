package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/timing"
)

// circuitLog is an Observer that records the circuit's states.
type circuitLog struct {
	mu     sync.Mutex
	states []sluice.CircuitState
}

func (l *circuitLog) Observe(e sluice.Event) {
	if e.Kind != sluice.EventCircuit {
		return
	}
	l.mu.Lock()
	l.states = append(l.states, e.Circuit)
	l.mu.Unlock()
}

func (l *circuitLog) get() []sluice.CircuitState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states)
}

// TestCircuitBreaker: after defaultCircuitFailures failed calls the store
// is not asked, and the fallback answers; a probe after the open interval
// finds the store back and closes the circuit, well within a second.
func TestCircuitBreaker(t *testing.T) {
	ctx := context.Background()
	store, log := newMapStore(), new(circuitLog)
	l, err := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithStore(store), sluice.WithObserver(log),
		sluice.WithStoreFailure(sluice.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	store.setFail(fmt.Errorf("test: %w: connection refused", driver.ErrUnavailable))
	before := store.calls()
	for range defaultCircuitFailures + 20 {
		if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
			t.Fatalf("Allow failing open = %+v, %v", r, err)
		}
	}
	checkOpened(t, "the store", int64(store.calls()-before), log.get())
	// Closed: the error says so, and matches ErrUnavailable.
	closed, _ := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithStore(store))
	for range defaultCircuitFailures {
		_, _ = closed.Allow(ctx, "k")
	}
	if _, err := closed.Allow(ctx, "k"); !errors.Is(err, sluice.ErrCircuitOpen) || !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Allow with the circuit open = %v, want ErrCircuitOpen matching ErrUnavailable", err)
	}

	// How soon an open circuit probes is the breaker's (internal/breaker,
	// on a fake clock: a probe after MinOpen, never later than MaxOpen);
	// here the probe must come, find the store back and close the circuit.
	store.setFail(nil)
	back, asked := time.Now(), store.calls()
	for deadline := back.Add(30 * time.Second); store.calls() == asked; {
		if time.Now().After(deadline) {
			t.Fatal("the store was not asked again within 30s of coming back")
		}
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	timing.AtMost(t, "recovery after the store came back", time.Since(back), time.Second)
	// The probe that found the store back closed the circuit.
	if got := log.get(); len(got) < 3 || !slices.Equal(got[len(got)-2:], []sluice.CircuitState{sluice.CircuitHalfOpen, sluice.CircuitClosed}) {
		t.Errorf("circuit states %v, want them to end half-open, closed", got)
	}
	if r, err := l.Allow(ctx, "k"); err != nil || r.Remaining != 97 {
		t.Errorf("Allow with the circuit closed = %+v, %v, want the store's window (97 left: the first call and the probe took one each)", r, err)
	}
}

// TestCircuitProbeFails: a failed probe opens the circuit again.
func TestCircuitProbeFails(t *testing.T) {
	ctx := context.Background()
	store, log := newMapStore(), new(circuitLog)
	l, _ := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithStore(store), sluice.WithObserver(log),
		sluice.WithStoreFailure(sluice.FailOpen), sluice.WithCircuitBreaker(2))
	store.setFail(fmt.Errorf("test: %w", driver.ErrUnavailable))
	deadline := time.Now().Add(5 * time.Second)
	for len(log.get()) < 3 && time.Now().Before(deadline) {
		_, _ = l.Allow(ctx, "k")
		time.Sleep(5 * time.Millisecond)
	}
	want := []sluice.CircuitState{sluice.CircuitOpen, sluice.CircuitHalfOpen, sluice.CircuitOpen}
	if got := log.get(); !slices.Equal(got, want) {
		t.Errorf("circuit states %v, want %v", got, want)
	}
	if got := store.calls(); got != 3 {
		t.Errorf("the store was asked %d times, want 3 (2 failures, 1 probe)", got)
	}
}

// blockingStore holds every Update until its context ends, like a store
// that hangs, and counts the Updates.
type blockingStore struct{ n atomic.Int64 }

func (s *blockingStore) Update(ctx context.Context, _ string, _ driver.UpdateFunc) error {
	s.n.Add(1)
	<-ctx.Done()
	return fmt.Errorf("%w: %w", driver.ErrIndeterminate, ctx.Err())
}

// latencies runs callers goroutines, each making one call on one of keys
// keys at once, and returns the calls' latencies, sorted.
func latencies(t *testing.T, l *sluice.Limiter, callers, keys int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			start := time.Now()
			_, _ = l.Allow(context.Background(), fmt.Sprint("k", i%keys))
			out[i] = time.Since(start)
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func quantile(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }

// TestStoreTimeoutEndToEnd: while the store hangs, calls end at the store
// timeout however many queue on one key, and with the breaker
// the calls after it opens are answered without asking the store. That no
// queued call waits longer than one store timeout is the deadline each call
// takes at its start (internal/keyed's TestQueuedDeadline pins it with
// explicit times); the latencies here are logged, and bounded only where
// package timing says tests may time things.
func TestStoreTimeoutEndToEnd(t *testing.T) {
	const timeout, callers = 400 * time.Millisecond, 600
	for _, tt := range []struct {
		name    string
		breaker int
		keys    int
	}{
		{"one key, no breaker", -1, 1},
		{"one key", 0, 1},
		{"many keys", 0, 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, failure := range []sluice.StoreFailure{sluice.FailClosed, sluice.FailOpen, sluice.FailLocal} {
				store, log := new(blockingStore), new(circuitLog)
				l, _ := sluice.NewLimiter(sluice.FixedWindow(10, time.Hour), sluice.WithStore(store), sluice.WithObserver(log),
					sluice.WithStoreTimeout(timeout), sluice.WithStoreFailure(failure), sluice.WithCircuitBreaker(tt.breaker))
				lat := latencies(t, l, callers, tt.keys)
				p50, p99, maxLat := quantile(lat, .5), quantile(lat, .99), lat[len(lat)-1]
				t.Logf("%v: %d calls on %d keys of a hanging store, timeout %v: p50 %v, p99 %v, max %v, %d store calls",
					failure, callers, tt.keys, timeout, p50.Round(time.Millisecond), p99.Round(time.Millisecond), maxLat.Round(time.Millisecond), store.n.Load())
				timing.AtMost(t, fmt.Sprintf("%v: p99", failure), p99, timeout*3/2)
				timing.AtMost(t, fmt.Sprintf("%v: slowest call", failure), maxLat, 3*timeout)
				// With the breaker, the calls are answered at once once the
				// circuit is open. It opens after defaultCircuitFailures
				// failed store calls; on one key, the round's calls went to
				// the store in as few batches, so more rounds may be needed.
				if tt.breaker == 0 {
					for i := 0; len(log.get()) == 0 && i < defaultCircuitFailures; i++ {
						latencies(t, l, callers, tt.keys)
					}
					if len(log.get()) == 0 {
						t.Fatalf("%v: the circuit did not open after %d rounds of failed calls", failure, defaultCircuitFailures+1)
					}
					asked := store.n.Load()
					lat = latencies(t, l, callers, tt.keys)
					t.Logf("%v, circuit open: p50 %v", failure, quantile(lat, .5))
					timing.AtMost(t, fmt.Sprintf("%v: with the circuit open, p99", failure), quantile(lat, .99), timeout/2)
					// The circuit lets a probe through now and then, each
					// held for a timeout by the hanging store.
					if got := store.n.Load() - asked; got >= callers/10 {
						t.Errorf("%v: with the circuit open, the store was asked %d times for %d calls, want only the circuit's probes", failure, got, callers)
					}
				}
			}
		})
	}
}

// bareTimeoutStore answers every Update with a bare
// context.DeadlineExceeded once its context ends, as the driver contract
// allows when nothing was written (MySQL's driver does).
type bareTimeoutStore struct{}

func (bareTimeoutStore) Update(ctx context.Context, _ string, _ driver.UpdateFunc) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestStoreBareTimeout: a store timeout that the store returns as a bare
// context error is a *StoreError matching ErrUnavailable (nothing was
// taken) and context.DeadlineExceeded.
func TestStoreBareTimeout(t *testing.T) {
	l, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Second), sluice.WithStore(bareTimeoutStore{}),
		sluice.WithStoreTimeout(20*time.Millisecond))
	_, err := l.Allow(context.Background(), "k")
	var se *sluice.StoreError
	if !errors.As(err, &se) || !errors.Is(err, driver.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow on a store that timed out = %v, want a *StoreError matching ErrUnavailable and DeadlineExceeded", err)
	}
}

// conflictStore is a mapStore whose Updates lose the first races they
// run, as against other processes' writers, without calling fn.
type conflictStore struct {
	*mapStore
	losses atomic.Int64 // Updates still to lose
	held   chan struct{}
	once   sync.Once
}

func (s *conflictStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if s.losses.Add(-1) >= 0 {
		fn(nil) // lets queued calls join, as a CAS store's read does
		s.once.Do(func() { close(s.held) })
		return fmt.Errorf("test: %w: lost a race", driver.ErrConflict)
	}
	return s.mapStore.Update(ctx, key, fn)
}

// TestStoreConflictRetried: a store that answers driver.ErrConflict wrote
// nothing, so the limiter runs the batch again until its deadline, with
// the calls queued meanwhile: contention is never an error.
func TestStoreConflictRetried(t *testing.T) {
	store := &conflictStore{mapStore: newMapStore(), held: make(chan struct{})}
	store.losses.Store(40)
	l, _ := sluice.NewLimiter(sluice.FixedWindow(100, time.Hour), sluice.WithStore(store))
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 50 {
		wg.Go(func() {
			r, err := l.Allow(context.Background(), "hot")
			if err != nil {
				t.Errorf("Allow under contention = %v, want a result", err)
				return
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 50 {
		t.Errorf("allowed %d of 50, want 50", got)
	}
	if n := store.count(); n > 10 {
		t.Errorf("%d successful updates for 50 calls: the retries did not take in the queued calls", n)
	}
	t.Logf("50 calls, 40 lost races, %d successful updates", store.count())
}

// partitionedStore is a mapStore of two partitions, a key's being its
// first byte, of which one fails while down is set.
type partitionedStore struct {
	*mapStore
	down  atomic.Bool // partition "a" fails
	calls [2]atomic.Int64
}

func (s *partitionedStore) Partition(key string) string { return key[:1] }

func (s *partitionedStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if key[0] == 'a' {
		s.calls[0].Add(1)
		if s.down.Load() {
			return fmt.Errorf("test: %w: master of a refuses connections", driver.ErrUnavailable)
		}
	} else {
		s.calls[1].Add(1)
	}
	return s.mapStore.Update(ctx, key, fn)
}

// TestCircuitPerPartition: on a store of partitions (driver.Partitioner:
// a Redis Cluster's masters), a partition that fails opens the circuit
// of its own keys only: their calls are answered at once, while the
// other partition's still go to the store and are decided exactly. The
// listener learns that a circuit is open. With one circuit for the
// store, the failing keys' calls and the others' took turns to open and
// close it, and while it was open every key got the failure policy's
// answer.
func TestCircuitPerPartition(t *testing.T) {
	ctx := context.Background()
	store, log := &partitionedStore{mapStore: newMapStore()}, new(circuitLog)
	l, err := sluice.NewLimiter(sluice.FixedWindow(1000, time.Hour), sluice.WithStore(store), sluice.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	store.down.Store(true)
	const rounds = 100
	var failedB int
	for range rounds {
		_, _ = l.Allow(ctx, "a-key")
		if _, err := l.Allow(ctx, "b-key"); err != nil {
			failedB++
		}
	}
	if failedB != 0 {
		t.Errorf("%d of %d calls of a healthy partition's key failed, want none", failedB, rounds)
	}
	checkOpened(t, "the failing partition", store.calls[0].Load(), log.get())
	if got := store.calls[1].Load(); got != rounds {
		t.Errorf("the healthy partition was asked %d times, want all %d", got, rounds)
	}
	if r, err := l.Allow(ctx, "b-key"); err != nil || r.Remaining != 1000-rounds-1 {
		t.Errorf("Allow(b-key) = %+v, %v; want %d remaining: every call counted", r, err, 1000-rounds-1)
	}
}

// checkOpened checks that a failing store was asked defaultCircuitFailures
// times before its circuit opened, and afterwards only by the circuit's
// probes: states is open, then half-open and open again for each probe
// (the circuit stays open 50 ms of real time, which a loaded machine may
// let pass during a test's calls).
func checkOpened(t *testing.T, what string, calls int64, states []sluice.CircuitState) {
	t.Helper()
	probes := int64(0)
	for i, s := range states {
		want := sluice.CircuitOpen
		if i%2 == 1 {
			want, probes = sluice.CircuitHalfOpen, probes+1
		}
		if s != want {
			t.Errorf("circuit states %v, want open, then half-open and open for each probe", states)
			return
		}
	}
	if len(states)%2 == 0 {
		t.Errorf("circuit states %v, want them to end open", states)
	}
	if calls != defaultCircuitFailures+probes {
		t.Errorf("%s was asked %d times, want %d: the circuit should open after %d failures and then only probe (%d probes)",
			what, calls, defaultCircuitFailures+probes, defaultCircuitFailures, probes)
	}
}

// defaultCircuitFailures is WithCircuitBreaker's documented default.
const defaultCircuitFailures = 5
