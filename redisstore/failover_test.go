package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/testserver"
)

// failureClock is an Observer that notes the store failures the limiter
// met and when the last one was.
type failureClock struct {
	mu       sync.Mutex
	failures int
	last     time.Time
	lastErr  error
}

func (l *failureClock) Observe(e sluice.Event) {
	if e.Kind != sluice.EventStoreFailure {
		return
	}
	l.mu.Lock()
	l.failures++
	l.last, l.lastErr = time.Now(), e.Err
	l.mu.Unlock()
}

func (l *failureClock) get() (n int, last time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures, l.last, l.lastErr
}

// TestClusterFailover kills a master of a Redis Cluster with a replica of
// each master (cluster-node-timeout 1s) while a limiter decides on keys
// of every master, and measures how long after the replica's promotion
// (its ROLE turning master) the limiter still meets store failures: the
// issue asks for decisions to recover within 5s of the promotion, where
// go-redis on its own found the new master only at its next periodic
// reload of the slot map, about a minute later. It does so with a
// cluster client as a library user makes it, under FailClosed, and as
// `sluice serve` opens a redis+cluster:// URL, under FailLocal; in both,
// no key may be admitted above what its policy allows (under FailLocal,
// the store's share plus the local fallback's, as documented).
//
// The failover is a real-world event: the test waits for it with a
// generous deadline and measures it; only the recovery bound the issue
// demands is asserted. Run it alone with
//
//	CI=true go test -race -count=1 -run TestClusterFailover -v ./redisstore/
func TestClusterFailover(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failure sluice.StoreFailure
		// open returns the store and its readiness check, as /readyz
		// calls it.
		open func(t *testing.T, addrs []string) (driver.Store, storeurl.Pinger)
	}{
		{"library/fail_closed", sluice.FailClosed, func(t *testing.T, addrs []string) (driver.Store, storeurl.Pinger) {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { c.Close() })
			s := newStore(t, c)
			return s, s
		}},
		{"serve/fail_local", sluice.FailLocal, func(t *testing.T, addrs []string) (driver.Store, storeurl.Pinger) {
			s, err := storeurl.Open(t.Context(), "redis+cluster://"+strings.Join(addrs, ","))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s.Store, s.Store.(storeurl.Pinger)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := testserver.RedisClusterWithReplicas(t)
			store, pinger := tc.open(t, cluster.Masters)
			runFailover(t, cluster, store, pinger, tc.failure)
		})
	}
}

// runFailover is TestClusterFailover on one store and failure policy.
func runFailover(t *testing.T, cluster *testserver.ReplicatedCluster, store driver.Store, pinger storeurl.Pinger, failure sluice.StoreFailure) {
	const (
		keys    = 24 // about 8 on each master
		workers = 8
		// A burst of 5 and 50 per second per key: under this load each
		// key is refused most of the time and admitted 50 times a
		// second, so a write lost in the failover would show as an
		// admission above the bound.
		burst, rate = 5, 50
		quiet       = 3 * time.Second  // without a store failure after the promotion: recovered
		patience    = 60 * time.Second // after the kill, for the promotion and then for the recovery
		bound       = 5 * time.Second  // the issue's
	)
	observer := new(failureClock)
	l, err := sluice.NewLimiter(sluice.GCRA(burst, rate, time.Second), sluice.WithStore(store),
		sluice.WithStoreFailure(failure), sluice.WithObserver(observer))
	if err != nil {
		t.Fatal(err)
	}
	var (
		admitted [keys]atomic.Int64
		calls    atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	prefix := fmt.Sprintf("failover/%d/", time.Now().UnixNano())
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; !stop.Load(); i++ {
				k := i % keys
				res, err := l.Allow(context.Background(), fmt.Sprint(prefix, k))
				calls.Add(1)
				if err == nil && res.Allowed {
					admitted[k].Add(1)
				}
				// Paced, so that calls answered at once (an open circuit,
				// the local fallback) leave the CPUs to the servers.
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	time.Sleep(time.Second) // every key in the store, the script loaded

	if n, _, err := observer.get(); n != 0 {
		t.Fatalf("%d store failures before the kill, the last %v", n, err)
	}
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the server's store timeout
		defer cancel()
		return pinger.Ping(ctx)
	}
	if err := ping(); err != nil {
		t.Fatalf("Ping before the kill = %v", err)
	}
	victim, heir := cluster.Masters[0], cluster.Replicas[0]
	role := redis.NewClient(&redis.Options{Addr: heir})
	defer role.Close()
	killed := time.Now()
	if err := cluster.Kill(victim); err != nil {
		t.Fatal(err)
	}
	// Between the kill and the promotion the dead master's slots cannot
	// be served, and readiness must say so.
	pingErr := ping()
	var promoted time.Time
	for deadline := killed.Add(patience); promoted.IsZero(); {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not promoted %v after its master %s was killed", heir, patience, victim)
		}
		if r, err := role.Do(context.Background(), "ROLE").Slice(); err == nil && len(r) > 0 && r[0] == "master" {
			promoted = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pingErr == nil {
		t.Errorf("Ping right after the master was killed = nil, want an error: its slots have no master until %v later", promoted.Sub(killed).Round(time.Millisecond))
	} else {
		t.Logf("Ping right after the kill: %v", pingErr)
	}
	t.Logf("killed master %s; replica %s promoted %v later", victim, heir, promoted.Sub(killed).Round(time.Millisecond))
	for deadline := promoted.Add(patience); ; time.Sleep(50 * time.Millisecond) {
		n, last, lastErr := observer.get()
		if last.Before(promoted) {
			last = promoted
		}
		if !time.Now().Before(last.Add(quiet)) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("store failures still %v after the promotion (%d failures, the last: %v)", patience, n, lastErr)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)

	n, last, lastErr := observer.get()
	recovery := max(last.Sub(promoted), 0)
	t.Logf("%v: %d calls, %d store failures, the last %v after the promotion: %v", failure, calls.Load(), n, recovery.Round(time.Millisecond), lastErr)
	if n == 0 {
		t.Errorf("no store failure at all: the kill did not reach the limiter's keys")
	}
	// The one bound on real time here, the issue's, kept because the
	// issue asks for it: recovery took 0.18-0.64 s in 8 runs
	// (docs/stores.md) and 0.51-0.82 s under -race on a loaded 2-CPU
	// machine, since the store reloads the slot map every 250 ms while
	// the cluster is in trouble and the breaker probes at least every
	// 500 ms; the 5 s leave a margin of 6 or more.
	if recovery > bound {
		t.Errorf("decisions failed until %v after the promotion, want at most %v", recovery.Round(time.Millisecond), bound)
	}
	if err := ping(); err != nil {
		t.Errorf("Ping after the recovery = %v, want nil", err)
	}

	// GCRA lets through at most burst + rate × elapsed in any stretch of
	// time; the local fallback of FailLocal as much again.
	most := burst + rate*int64(elapsed)/int64(time.Second)
	if failure == sluice.FailLocal {
		most *= 2
	}
	for k := range keys {
		if got := admitted[k].Load(); got > most {
			t.Errorf("key %d: %d admitted in %v, want at most %d", k, got, elapsed.Round(time.Millisecond), most)
		}
	}
}
