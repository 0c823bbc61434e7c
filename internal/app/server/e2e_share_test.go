package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestE2EFailShare runs two fleets of three sluice serve processes on one
// Redis, one with store_failure fail_share and one with fail_local, each
// with a limit of 30 an hour on one key that their clients have spent
// before the store stops. Then Redis is frozen (SIGSTOP) for 5 s while
// the clients go on: the fail_share fleet admits at most 1.2 × 30 over
// the outage (each process its third, 10), where the fail_local fleet
// admits 3 × 30 (each process the whole limit again).
func TestE2EFailShare(t *testing.T) {
	const limit = 30
	url, pause := testserver.PausableRedis(t)
	const config = `store: %s
server: {store_failure: %s, store_timeout: 100ms}
limiters:
  %s: {policy: fixed_window, limit: %d, interval: 1 hour}
`
	type fleet struct {
		name    string
		procs   []*proc
		before  atomic.Int64 // allowed before the store stopped
		outage  atomic.Int64 // allowed from then on
		failed  atomic.Int64 // answers other than 200
		lastErr atomic.Value
	}
	fleets := []*fleet{{name: "fail_share"}, {name: "fail_local"}}
	for _, f := range fleets {
		cfg := writeConfig(t, fmt.Sprintf(config, url, f.name, strings.ReplaceAll(f.name, "_", "-"), limit))
		for range 3 {
			f.procs = append(f.procs, startSluice(t, "--config", cfg))
		}
	}
	key := fmt.Sprintf("share-%d", time.Now().UnixNano())
	var stopped, done atomic.Bool
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for _, f := range fleets {
		body := fmt.Sprintf(`{"limiter": %q, "key": %q}`, strings.ReplaceAll(f.name, "_", "-"), key)
		for _, p := range f.procs {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !done.Load() {
						outage := stopped.Load()
						resp, err := client.Post("http://"+p.http+"/api/v1/consume", "application/json", strings.NewReader(body))
						if err != nil {
							f.failed.Add(1)
							f.lastErr.Store(err.Error())
							continue
						}
						var out struct{ Allowed bool }
						err = json.NewDecoder(resp.Body).Decode(&out)
						resp.Body.Close()
						switch {
						case resp.StatusCode != http.StatusOK || err != nil:
							f.failed.Add(1)
							f.lastErr.Store(fmt.Sprint(resp.StatusCode, err))
						case !out.Allowed:
						case outage || stopped.Load():
							f.outage.Add(1)
						default:
							f.before.Add(1)
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
		}
	}
	// 3 s before the outage: the key is spent, and each process of the
	// fail_share fleet has beaten twice, a second apart, and so seen
	// the other two.
	time.Sleep(3 * time.Second)
	stopped.Store(true)
	pause(true)
	time.Sleep(5 * time.Second)
	pause(false)
	time.Sleep(time.Second)
	done.Store(true)
	wg.Wait()

	for _, f := range fleets {
		t.Logf("%s: %d allowed before the outage, %d over it and the second after; %d failed (last: %v)",
			f.name, f.before.Load(), f.outage.Load(), f.failed.Load(), f.lastErr.Load())
		if got := f.before.Load(); got != limit {
			t.Errorf("%s: %d allowed before the outage, want the limit, %d", f.name, got, limit)
		}
	}
	if got, most := fleets[0].outage.Load(), int64(limit*12/10); got > most || got < limit*8/10 {
		t.Errorf("fail_share: three processes admitted %d over the outage, want at most 1.2 × %d = %d (and about %d)", got, limit, most, limit)
	}
	if got, want := fleets[1].outage.Load(), int64(3*limit); got != want {
		t.Errorf("fail_local: three processes admitted %d over the outage, want 3 × %d = %d", got, limit, want)
	}
	if got := fleets[0].failed.Load() + fleets[1].failed.Load(); got != 0 {
		t.Errorf("%d calls failed, want none: both fleets answer from memory while the store is down", got)
	}
}
