package contention

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/testserver"
)

// The shape of the leasing run: leaseProcs processes of leaseGoroutines
// callers each hammer one key for leaseRun; the last process stops
// halfway, so that the load moves to the others. Demand is far above
// the limits, so that every window and every refill is contended.
const (
	leaseProcs      = 3
	leaseGoroutines = 8
	leaseRun        = 2 * time.Second
	// The lease: at most leaseMax tokens held per process.
	leaseMin = 5
	leaseMax = 50
	leaseTTL = 200 * time.Millisecond
	// The aligned fixed window: windowLimit per windowLen.
	windowLimit = 300
	windowLen   = 250 * time.Millisecond
	// The GCRA: a burst of gcraBurst, gcraRate a second.
	gcraBurst = 100
	gcraRate  = 1000
)

// Environment variables of a leasing worker.
const (
	leaseURL    = "SLUICE_LEASE_URL"
	leaseKey    = "SLUICE_LEASE_KEY"
	leasePolicy = "SLUICE_LEASE_POLICY" // "window" or "gcra"
	leaseStart  = "SLUICE_LEASE_START"  // Unix nanoseconds to start at
	leaseStop   = "SLUICE_LEASE_STOP"   // Unix nanoseconds to stop at
)

// leaseReport is what a leasing worker prints on its last line.
type leaseReport struct {
	Allowed, Refused, Errors int64
	FirstError               string
	// Updates is the store updates the worker's limiter made.
	Updates int64
	// Windows counts the admissions by aligned window (Unix nanoseconds
	// / windowLen) when the call began and ended in the same window;
	// Straddling those of calls that crossed a boundary, by the window
	// they began in.
	Windows, Straddling map[int64]int64
	// First and Last bound the worker's calls: Unix nanoseconds.
	First, Last int64
}

// counting is a store that counts its updates.
type counting struct {
	driver.Store
	n atomic.Int64
}

func (c *counting) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	c.n.Add(1)
	return c.Store.Update(ctx, key, fn)
}

// TestLeaseBound is the proof of quota leasing's bound: processes
// hammering one key of a real store through leases, one of them stopping
// halfway, admit
//
//   - for an aligned fixed window, in every window, at most the limit and
//     at least the limit less P×Max (the tokens the processes may hold
//     unspent when the window ends);
//   - for a GCRA, in all, at most its burst plus its rate over the run
//     (what the exact policy admits), and at least that less P×Max and
//     the refill of a scheduling slack.
//
// Run by a worker process, it is the worker.
func TestLeaseBound(t *testing.T) {
	if url := os.Getenv(leaseURL); url != "" {
		leaseWork(t, url)
		return
	}
	stores := []struct{ name, url string }{
		{"redis", testserver.SharedRedis(t)},
		{"postgres", testserver.SharedPostgres(t) + "&strategy=single_statement"},
	}
	for _, st := range stores {
		for _, policy := range []string{"window", "gcra"} {
			t.Run(st.name+"/"+policy, func(t *testing.T) {
				key := fmt.Sprintf("lease/%s/%s/%016x", st.name, policy, rand.Uint64())
				start := time.Now().Add(3 * time.Second) // after every worker has connected
				stop := start.Add(leaseRun)
				var wg sync.WaitGroup
				reports := make([]leaseReport, leaseProcs)
				for i := range leaseProcs {
					until := stop
					if i == leaseProcs-1 {
						until = start.Add(leaseRun / 2) // the load moves to the others
					}
					wg.Go(func() { reports[i] = runLeaseWorker(t, st.url, key, policy, start, until) })
				}
				wg.Wait()
				checkLeaseBound(t, policy, reports)
			})
		}
	}
}

// checkLeaseBound checks the reports of one run against the bound.
func checkLeaseBound(t *testing.T, policy string, reports []leaseReport) {
	t.Helper()
	var total leaseReport
	total.Windows, total.Straddling = map[int64]int64{}, map[int64]int64{}
	for _, r := range reports {
		total.Allowed += r.Allowed
		total.Refused += r.Refused
		total.Errors += r.Errors
		total.Updates += r.Updates
		if total.FirstError == "" {
			total.FirstError = r.FirstError
		}
		if total.First == 0 || r.First < total.First {
			total.First = r.First
		}
		total.Last = max(total.Last, r.Last)
		for w, n := range r.Windows {
			total.Windows[w] += n
		}
		for w, n := range r.Straddling {
			total.Straddling[w] += n
		}
	}
	decisions := total.Allowed + total.Refused
	t.Logf("%d processes × %d goroutines, lease [%d, %d] for %v: %d allowed, %d refused, %d errors, %d store updates (%.3f per decision)",
		leaseProcs, leaseGoroutines, leaseMin, leaseMax, leaseTTL, total.Allowed, total.Refused, total.Errors, total.Updates,
		float64(total.Updates)/float64(max(decisions, 1)))
	if total.Errors != 0 {
		t.Errorf("%d calls failed on a healthy store, want 0; first: %s", total.Errors, total.FirstError)
	}
	const slack = int64(leaseProcs * leaseMax)
	switch policy {
	case "window":
		first, last := total.First/int64(windowLen), total.Last/int64(windowLen)
		for w := first + 1; w < last; w++ { // the windows the run covers whole
			sure, maybe := total.Windows[w], total.Straddling[w-1]+total.Straddling[w]
			t.Logf("window %d: %d admitted (%d more straddling its edges)", w-first, sure, maybe)
			if sure > windowLimit {
				t.Errorf("window %d admitted %d, above its limit %d", w-first, sure, windowLimit)
			}
			if sure+maybe < windowLimit-slack {
				t.Errorf("window %d admitted %d (%d more straddling), below the limit %d less P×Max %d", w-first, sure, maybe, windowLimit, slack)
			}
		}
	case "gcra":
		// The exact policy admits at most the burst and the refill over
		// the span of the calls; under this demand, nearly that.
		span := time.Duration(total.Last - total.First)
		exact := gcraBurst + int64(span)*gcraRate/int64(time.Second)
		lag := int64(gcraRate / 10) // 100ms of refill: the last grant to the last call's end
		t.Logf("span %v: exact bound %d, admitted %d", span, exact, total.Allowed)
		if total.Allowed > exact {
			t.Errorf("admitted %d over %v, above the exact policy's %d", total.Allowed, span, exact)
		}
		if total.Allowed < exact-slack-lag {
			t.Errorf("admitted %d over %v, below the exact policy's %d less P×Max %d and %d of lag", total.Allowed, span, exact, slack, lag)
		}
	}
}

// runLeaseWorker runs this test binary as a leasing worker and returns
// its report.
func runLeaseWorker(t *testing.T, url, key, policy string, start, stop time.Time) leaseReport {
	return runAs[leaseReport](t, "TestLeaseBound", []string{leaseURL + "=" + url, leaseKey + "=" + key, leasePolicy + "=" + policy,
		leaseStart + "=" + strconv.FormatInt(start.UnixNano(), 10), leaseStop + "=" + strconv.FormatInt(stop.UnixNano(), 10)})
}

// leaseWork is a leasing worker: callers on one key from the start time
// to the stop time, then a report on stdout.
func leaseWork(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	opened, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	if err := opened.Check(ctx); err != nil { // creates the SQL table
		t.Fatal(err)
	}
	store := &counting{Store: opened}
	p := sluice.AlignedFixedWindow(windowLimit, windowLen)
	if os.Getenv(leasePolicy) == "gcra" {
		p = sluice.GCRA(gcraBurst, gcraRate, time.Second)
	}
	// The wall clock: every process's windows on one grid.
	l, err := sluice.NewLimiter(p, sluice.WithStore(store), sluice.WithClock(sluice.WallClock()),
		sluice.WithStoreTimeout(storeTimeout), sluice.WithLease(sluice.Lease{Min: leaseMin, Max: leaseMax, TTL: leaseTTL}))
	if err != nil {
		t.Fatal(err)
	}
	key := os.Getenv(leaseKey)
	// Connect before the start, on another key, so that the workers start
	// together on a fresh one.
	if _, err := l.PeekN(ctx, key+"/warm", 1); err != nil {
		t.Fatal(err)
	}
	start, err1 := strconv.ParseInt(os.Getenv(leaseStart), 10, 64)
	stop, err2 := strconv.ParseInt(os.Getenv(leaseStop), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	time.Sleep(time.Until(time.Unix(0, start)))
	store.n.Store(0)
	var (
		mu  sync.Mutex
		rep = leaseReport{Windows: map[int64]int64{}, Straddling: map[int64]int64{}}
		wg  sync.WaitGroup
	)
	for range leaseGoroutines {
		wg.Go(func() {
			var r leaseReport
			r.Windows, r.Straddling = map[int64]int64{}, map[int64]int64{}
			for {
				before := time.Now().UnixNano()
				if before >= stop {
					break
				}
				if r.First == 0 {
					r.First = before
				}
				res, err := l.Allow(ctx, key)
				after := time.Now().UnixNano()
				r.Last = after
				switch {
				case err != nil:
					r.Errors++
					if r.FirstError == "" {
						r.FirstError = err.Error()
					}
				case res.Allowed:
					r.Allowed++
					if w := before / int64(windowLen); w == after/int64(windowLen) {
						r.Windows[w]++
					} else {
						r.Straddling[w]++
					}
				default:
					r.Refused++
					// Refusals are answered in this process: pause, so
					// that the callers do not spin the machine's cores.
					// Demand stays far above the limits.
					time.Sleep(200 * time.Microsecond)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Allowed += r.Allowed
			rep.Refused += r.Refused
			rep.Errors += r.Errors
			if rep.FirstError == "" {
				rep.FirstError = r.FirstError
			}
			if rep.First == 0 || (r.First != 0 && r.First < rep.First) {
				rep.First = r.First
			}
			rep.Last = max(rep.Last, r.Last)
			for w, n := range r.Windows {
				rep.Windows[w] += n
			}
			for w, n := range r.Straddling {
				rep.Straddling[w] += n
			}
		})
	}
	wg.Wait()
	rep.Updates = store.n.Load()
	printReport(t, rep)
}
