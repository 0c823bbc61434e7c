package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/internal/timing"
	"github.com/sluicehq/sluice/redisstore"
)

// closedAt is an Observer that notes when the circuit last closed.
type closedAt struct {
	mu     sync.Mutex
	closed time.Time
}

func (l *closedAt) Observe(e sluice.Event) {
	if e.Kind == sluice.EventCircuit && e.Circuit == sluice.CircuitClosed {
		l.mu.Lock()
		l.closed = time.Now()
		l.mu.Unlock()
	}
}

func (l *closedAt) get() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// deadlines is a driver.Store in front of another that checks the
// mechanism that bounds a call while the server hangs: each Update's
// context carries a deadline at most timeout after the Update began (the
// caller's start plus the store timeout, the time it waited in the queue
// included), and while frozen, the Update ends because that deadline
// passed.
type deadlines struct {
	driver.Store
	timeout time.Duration
	frozen  atomic.Bool

	mu      sync.Mutex
	updates int      // guarded by mu
	wrong   []string // guarded by mu; what was wrong with the Updates
}

func (s *deadlines) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	began := time.Now()
	deadline, ok := ctx.Deadline()
	frozen := s.frozen.Load()
	err := s.Store.Update(ctx, key, fn)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates++
	switch {
	case !ok:
		s.wrong = append(s.wrong, "an Update without a deadline")
	case deadline.After(began.Add(s.timeout)):
		s.wrong = append(s.wrong, fmt.Sprintf("an Update with a deadline %v after it began, past the store timeout %v", deadline.Sub(began), s.timeout))
	case frozen && !errors.Is(err, context.DeadlineExceeded):
		s.wrong = append(s.wrong, fmt.Sprintf("an Update on the frozen server = %v, want its deadline passed", err))
	}
	return err
}

func (s *deadlines) get() (updates int, wrong []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates, slices.Clone(s.wrong)
}

// TestOutageLatency freezes a real Redis (SIGSTOP) under load: every call
// gets the failure policy's answer, the store is asked with the store
// timeout as its deadline and gives up at it, the circuit opens so that
// most calls are answered without the store, and it closes again once
// Redis thaws. The latencies this makes (p99 within about one store
// timeout, most calls at once, the circuit closed within a second of the
// thaw: the figures in docs/benchmarks.md) are logged, and asserted only
// with SLUICE_TIMING_TESTS=1: a loaded machine under -race stretches them.
func TestOutageLatency(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		callers = 300 // concurrent calls per round: one hot key and 31 others
		keys    = 32
		rounds  = 8
	)
	url, freeze := testserver.PausableRedis(t)
	for _, failure := range []sluice.StoreFailure{sluice.FailClosed, sluice.FailOpen, sluice.FailLocal} {
		t.Run(failure.String(), func(t *testing.T) {
			opt, err := redis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			opt.MaxRetries = -1
			client := redis.NewClient(opt)
			t.Cleanup(func() { client.Close() })
			store := &deadlines{Store: newStore(t, client), timeout: timeout}
			observer := new(closedAt)
			l, err := sluice.NewLimiter(sluice.TokenBucket(1_000_000, 1, time.Hour), sluice.WithStore(store),
				sluice.WithStoreTimeout(timeout), sluice.WithStoreFailure(failure), sluice.WithObserver(observer))
			if err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("outage/%s/%d/", failure, time.Now().UnixNano())
			key := func(i int) string {
				if i%2 == 0 {
					return prefix + "hot"
				}
				return fmt.Sprint(prefix, i%31)
			}
			// round makes callers calls at once and returns their
			// latencies and the first answer that is not the failure
			// policy's, if any.
			round := func() ([]time.Duration, error) {
				lat := make([]time.Duration, callers)
				errs := make([]error, callers)
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						start := time.Now()
						r, err := l.Allow(context.Background(), key(i))
						lat[i] = time.Since(start)
						switch {
						case failure == sluice.FailClosed && !errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, driver.ErrIndeterminate):
							errs[i] = fmt.Errorf("failing closed: Allow = %+v, %v; want a store failure", r, err)
						case failure != sluice.FailClosed && (err != nil || !r.Allowed):
							errs[i] = fmt.Errorf("%v: Allow = %+v, %v; want allowed", failure, r, err)
						}
					})
				}
				wg.Wait()
				return lat, errors.Join(errs...)
			}
			if _, err := round(); err != nil && failure != sluice.FailClosed {
				t.Fatalf("with Redis up: %v", err) // connections and scripts in place
			}
			before, _ := store.get()

			store.frozen.Store(true)
			freeze(true)
			frozen := true
			defer func() {
				if frozen {
					freeze(false)
				}
			}()
			froze := time.Now()
			var lat []time.Duration
			for range rounds {
				got, err := round()
				if err != nil {
					t.Fatalf("Redis frozen: %v", err)
				}
				lat = append(lat, got...)
			}
			frozenFor := time.Since(froze)
			freeze(false)
			frozen = false
			store.frozen.Store(false)
			thawed := time.Now()

			slices.Sort(lat)
			p50, p99, slowest := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
			t.Logf("%v, Redis frozen, timeout %v, %d calls in %d rounds of %d: p50 %v, p99 %v, max %v", failure, timeout,
				len(lat), rounds, callers, p50.Round(time.Microsecond), p99.Round(100*time.Microsecond), slowest.Round(time.Millisecond))
			timing.AtMost(t, "p99 while the store hangs (1.5 × the store timeout)", p99, timeout*3/2)
			updates, wrong := store.get()
			for _, w := range wrong {
				t.Error(w)
			}
			// The circuit opened: before it did, calls reached the store
			// in one Update per key at a time (a second for the keys whose
			// first failed before the failures that opened it); after, one
			// probe at a time, which the frozen server holds for a store
			// timeout. More time frozen only allows more probes. Without
			// the breaker, each round sends an Update per key: 256.
			updates -= before
			most := 2*keys + int(frozenFor/timeout) + 1
			t.Logf("%d store updates for %d calls in %v frozen", updates, len(lat), frozenFor.Round(time.Millisecond))
			if updates > most {
				t.Errorf("%d store updates for %d calls while Redis was frozen for %v, want at most %d: the circuit did not open",
					updates, len(lat), frozenFor.Round(time.Millisecond), most)
			}

			// Real time must pass for the breaker's probe: a generous
			// deadline, not a bound.
			for deadline := thawed.Add(30 * time.Second); observer.get().Before(thawed); time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the circuit did not close within 30s of Redis thawing")
				}
				_, _ = l.Allow(context.Background(), key(1))
			}
			timing.AtMost(t, "circuit closed after Redis thawed", observer.get().Sub(thawed), time.Second)
		})
	}
}

// TestRefusedThroughLimiter: a limiter whose Redis refuses connections
// reports that, as `sluice serve` does, and not a store timeout: with a
// client made with go-redis's defaults (three retries of each command,
// each after five dial attempts, longer in all than the store timeout),
// the store's commands are sent at most once, so the refusal comes back
// within the timeout. Before, every call timed out after 1s.
func TestRefusedThroughLimiter(t *testing.T) {
	l0, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l0.Addr().String()
	l0.Close() // nothing listens there now: connections are refused
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelining=%v", pipelining), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { c.Close() })
			l, err := sluice.NewLimiter(sluice.TokenBucket(10, 10, time.Second),
				sluice.WithStore(newStore(t, c, redisstore.WithPipelining(pipelining))))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				_, err := l.Allow(context.Background(), "k")
				if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, driver.ErrUnavailable) {
					t.Fatalf("call %d: Allow = %v, want an error matching syscall.ECONNREFUSED and driver.ErrUnavailable", i, err)
				}
				if !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("call %d: Allow = %v, want it to say connection refused", i, err)
				}
			}
		})
	}
}
