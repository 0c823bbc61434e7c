package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
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

// TestOutageLatency freezes a real Redis (SIGSTOP) under load: every call
// is answered within about one store timeout, most at once once the
// circuit opens, and the limiter finds the server again within a second
// of its thawing. The figures are in docs/benchmarks.md.
func TestOutageLatency(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		callers = 300 // concurrent calls per round: one hot key and 30 others
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
			store := newStore(t, client)
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
			round := func() []time.Duration {
				lat := make([]time.Duration, callers)
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						start := time.Now()
						_, _ = l.Allow(context.Background(), key(i))
						lat[i] = time.Since(start)
					})
				}
				wg.Wait()
				return lat
			}
			round() // connections and scripts in place

			freeze(true)
			frozen := true
			defer func() {
				if frozen {
					freeze(false)
				}
			}()
			var lat []time.Duration
			for range rounds {
				lat = append(lat, round()...)
			}
			slices.Sort(lat)
			p50, p99, slowest := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
			t.Logf("%v, Redis frozen, timeout %v, %d calls in %d rounds of %d: p50 %v, p99 %v, max %v", failure, timeout,
				len(lat), rounds, callers, p50.Round(time.Microsecond), p99.Round(100*time.Microsecond), slowest.Round(time.Millisecond))
			if p99 > timeout*3/2 {
				t.Errorf("p99 %v while the store hangs, want at most 1.5 × the store timeout %v", p99, timeout)
			}

			freeze(false)
			frozen = false
			thawed := time.Now()
			for observer.get().Before(thawed) && time.Since(thawed) < 5*time.Second {
				_, _ = l.Allow(context.Background(), key(1))
				time.Sleep(2 * time.Millisecond)
			}
			recovered := observer.get().Sub(thawed)
			t.Logf("%v: circuit closed %v after Redis thawed", failure, recovered.Round(time.Millisecond))
			if recovered < 0 || recovered > time.Second {
				t.Errorf("circuit closed %v after the store came back, want within a second", recovered)
			}
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
