package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/internal/timing"
)

// slotLease is the lease of the fleet test's concurrency limit.
const slotLease = 2 * time.Second

// slotClient posts to a sluice serve from goroutines, which must not
// call t.Fatal: it returns errors instead.
var slotClient = &http.Client{Timeout: 10 * time.Second}

func postSlot(addr, path string, body any) (map[string]any, error) {
	b, _ := json.Marshal(body)
	resp, err := slotClient.Post("http://"+addr+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("POST %s: %d %v", path, resp.StatusCode, out)
	}
	return out, nil
}

// TestE2EConcurrencyFleet is issue 31's test of a fleet's concurrency
// limit: three sluice serve processes share a store, with a limit of 5
// slots on one key. 30 clients, 10 on each process, acquire at once,
// hold their slot 100 ms and release it: the clients that believe they
// hold a slot are never more than 5 (a client holds from the answer to
// its acquire to the sending of its release, within the slot's life in
// the store, so this bounds the store's count from below), the store is
// found full at the samples, and released slots go to waiting clients.
// Then 5 clients hold every slot through one process, renewing them,
// and that process is killed with SIGKILL: nobody gets a slot while the
// dead holders' leases last, and their slots are taken by clients of the
// other processes within about one lease.
func TestE2EConcurrencyFleet(t *testing.T) {
	stores := map[string]func(t testing.TB) string{
		"redis":    testserver.SharedRedis,
		"postgres": testserver.SharedPostgres,
		"mariadb": func(t testing.TB) string {
			dsn := testserver.SharedMariaDB(t) // root@tcp(127.0.0.1:PORT)/sluice
			return "mysql://root@" + strings.TrimSuffix(strings.TrimPrefix(dsn, "root@tcp("), ")/sluice") + "/sluice"
		},
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			cfg := writeConfig(t, fmt.Sprintf("store: %s\nlimiters:\n  calls: {policy: concurrency, limit: 5, ttl: %v}\n", url(t), slotLease))
			var procs []*proc
			for range 3 {
				procs = append(procs, startSluice(t, "--config", cfg))
			}
			key := fmt.Sprintf("fleet-%s-%d", name, time.Now().UnixNano())
			fleetContention(t, procs, key)
			fleetKill(t, procs, key+"-kill")
		})
	}
}

func fleetContention(t *testing.T, procs []*proc, key string) {
	var holding, most, acquired atomic.Int64
	var errs sync.Map
	stop := time.Now().Add(slotLease * 3 / 4) // shorter than a lease: no slot lapses
	var wg sync.WaitGroup
	for c := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := procs[c%3].http
			for time.Now().Before(stop) {
				out, err := postSlot(addr, "/api/v1/acquire", map[string]any{"limiter": "calls", "key": key, "max_wait_ms": 1000})
				if err != nil {
					errs.Store(c, err)
					return
				}
				if out["allowed"] != true {
					continue
				}
				h := holding.Add(1)
				for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
				}
				acquired.Add(1)
				time.Sleep(100 * time.Millisecond)
				holding.Add(-1)
				if _, err := postSlot(addr, "/api/v1/release", map[string]any{"limiter": "calls", "slot": out["slot"]}); err != nil {
					errs.Store(c, err)
					return
				}
			}
		}()
	}
	// Sample the store's count through the first process, from the
	// answer to a peek of one slot.
	var samples, full int
	for time.Now().Before(stop) {
		out, err := postSlot(procs[0].http, "/api/v1/inspect", map[string]any{"limiter": "calls", "key": key})
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		res := out["result"].(map[string]any)
		held := 5 - int(res["remaining"].(float64))
		if res["allowed"] == true {
			held--
		}
		if held > 5 || held < 0 {
			t.Errorf("sample %d: the store holds %d slots of a limit of 5", samples, held)
		}
		samples++
		if held == 5 {
			full++
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	errs.Range(func(c, err any) bool { t.Errorf("client %d: %v", c, err); return true })
	if m := most.Load(); m != 5 {
		t.Errorf("at most %d clients held a slot at once, want exactly 5", m)
	}
	// Every slot is released after 100 ms and none lapses within the
	// run: an acquisition beyond the first 5 took a released slot, and
	// its client was waiting, as 25 always are.
	if acquired.Load() <= 5 {
		t.Errorf("%d acquisitions: no waiting client took a released slot", acquired.Load())
	}
	if full == 0 {
		t.Errorf("the store was never found full in %d samples", samples)
	}
	t.Logf("%d acquisitions, %d of released slots; the store held all 5 slots at %d of %d samples (%.0f%%)",
		acquired.Load(), acquired.Load()-5, full, samples, 100*float64(full)/float64(samples))
}

func fleetKill(t *testing.T, procs []*proc, key string) {
	// 5 holders through the first process, each renewing its slot every
	// quarter lease and noting when it sent its last renewal that held.
	lastRenew := make([]atomic.Int64, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		out, err := postSlot(procs[0].http, "/api/v1/acquire", map[string]any{"limiter": "calls", "key": key})
		if err != nil || out["allowed"] != true {
			t.Fatalf("holder %d: acquire = %v, %v", i, out, err)
		}
		lastRenew[i].Store(time.Now().UnixNano())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				time.Sleep(slotLease / 4)
				sent := time.Now().UnixNano()
				out, err := postSlot(procs[0].http, "/api/v1/renew", map[string]any{"limiter": "calls", "slot": out["slot"]})
				if err != nil || out["allowed"] != true {
					return // the process is gone, or the slot lapsed
				}
				lastRenew[i].Store(sent)
			}
		}()
	}
	// 10 clients of the other processes wait for slots, and keep those
	// they get.
	var taken sync.Map // client → the time its acquire answered
	var got atomic.Int64
	done := make(chan struct{})
	var waiters sync.WaitGroup
	for c := range 10 {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			for got.Load() < 5 {
				select {
				case <-done:
					return
				default:
				}
				out, err := postSlot(procs[1+c%2].http, "/api/v1/acquire", map[string]any{"limiter": "calls", "key": key, "max_wait_ms": 500})
				if err != nil {
					t.Errorf("waiter %d: %v", c, err)
					return
				}
				if out["allowed"] == true {
					taken.Store(c, time.Now().UnixNano())
					got.Add(1)
					return
				}
			}
		}()
	}
	time.Sleep(slotLease) // the holders renew: nobody else gets in
	if n := got.Load(); n != 0 {
		t.Fatalf("%d waiters got a slot while its 5 holders renewed them", n)
	}
	if err := procs[0].stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("sluice serve exited 0 after SIGKILL")
	}
	killed := time.Now()
	wg.Wait()
	deadline := killed.Add(3 * slotLease)
	for got.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	waiters.Wait()
	if n := got.Load(); n != 5 {
		t.Fatalf("%d of the killed process's 5 slots were taken within 3 leases of the kill, want 5", n)
	}
	// A dead holder's slot lapses a lease after its last renewal was
	// stored, which is after it was sent: no waiter may have it before.
	// (50 ms: the servers' clocks, each the system time at its start.)
	first, last, oldest, newest := int64(1<<62), int64(0), int64(1<<62), int64(0)
	taken.Range(func(_, at any) bool { first, last = min(first, at.(int64)), max(last, at.(int64)); return true })
	for i := range lastRenew {
		oldest, newest = min(oldest, lastRenew[i].Load()), max(newest, lastRenew[i].Load())
	}
	if early := oldest + int64(slotLease) - 50*int64(time.Millisecond); first < early {
		t.Errorf("a waiter got a slot %v after the oldest last renewal, before its lease of %v ended", time.Duration(first-oldest), slotLease)
	}
	timing.AtMost(t, "from the last renewal of a killed process's slots to their all being taken", time.Duration(last-newest), slotLease+500*time.Millisecond)
}
