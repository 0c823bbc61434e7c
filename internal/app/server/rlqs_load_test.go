package server

import (
	"bytes"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/app/rlqs/envoysim"
	"github.com/sluicehq/sluice/internal/testserver"
)

// busyYAML is one bucket of a limit large enough that every Envoy's
// assignment is paid (100,000 a second among the Envoys), and an
// unrelated limiter that an HTTP client calls meanwhile. The Envoys all
// run on this host: one peer, allowed all their streams.
const busyYAML = `
server:
  auth: {open_metrics_with_request_values: true} # bucket ids in /metrics
  limits:
    rlqs: {max_streams_per_client: 1024}
limiters:
  shared: {policy: bucket, limits: [{capacity: 200000, refill: {greedy: 100000, per: 1s}}]}
  other: {policy: fixed_window, limit: 1000000, interval: 1s}
rlqs:
  - domain: quota
    assignment_ttl: 1s
    buckets:
      - {bucket: {name: api}, limiter: shared}
`

// busyResult is what a run of runBusyBucket measured.
type busyResult struct {
	// reports were sent, responses answered, kept of them with the
	// bucket in force kept.
	reports, responses, kept int64
	// p99 is the 99th percentile of the unrelated limiter's HTTP
	// consumes while the Envoys report, over calls samples, and idleP99
	// the same before they start, for comparison on the same machine.
	p99, idleP99 time.Duration
	calls        int
}

// consumeLatencies calls the unrelated limiter's consume every 5 ms until
// stop is closed, and returns the latencies, sorted.
func consumeLatencies(tb testing.TB, addr string, stop <-chan struct{}) []time.Duration {
	client := &http.Client{Timeout: 30 * time.Second}
	body := []byte(`{"limiter":"other","key":"k","tokens":1}`)
	var lat []time.Duration
	for {
		select {
		case <-stop:
			slices.Sort(lat)
			return lat
		case <-time.After(5 * time.Millisecond):
		}
		start := time.Now()
		resp, err := client.Post("http://"+addr+"/api/v1/consume", "application/json", bytes.NewReader(body))
		if err != nil {
			tb.Errorf("consume: %v", err)
			return nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			tb.Errorf("consume = %d, want 200", resp.StatusCode)
			return nil
		}
		lat = append(lat, time.Since(start))
	}
}

// p99 returns the 99th percentile of sorted latencies.
func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[len(lat)*99/100]
}

// runBusyBucket runs streams simulated Envoys, on connections of four
// streams each, that all report the same bucket every interval for run,
// each deciding requests at about 20 a second, while an HTTP client
// consumes from an unrelated limiter every 5 ms. The Envoys then stop
// reporting, and the reports they sent are counted once the service has
// decided them.
func runBusyBucket(tb testing.TB, yaml string, streams int, interval, run time.Duration) busyResult {
	tb.Helper()
	var s *serving
	var gaddr string
	if t, ok := tb.(*testing.T); ok {
		s, gaddr = serve(t, yaml, true)
	} else {
		s, gaddr = serveB(tb.(*testing.B), yaml)
	}
	httpAddr := s.addr
	ctx := tb.Context()
	var res busyResult
	idle := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(idle) })
	res.idleP99 = p99(consumeLatencies(tb, httpAddr, idle))
	const perConn = 4
	var conns []*grpc.ClientConn
	envoys := make([]*envoysim.Envoy, 0, streams)
	id := map[string]string{"name": "api"}
	// The Envoys start over one interval, as a fleet's do, not all at
	// once; each with a request, so that its first report has the bucket.
	start := time.Now()
	for i := range streams {
		time.Sleep(time.Until(start.Add(interval * time.Duration(i) / time.Duration(streams))))
		if i%perConn == 0 {
			cc, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { cc.Close() })
			conns = append(conns, cc)
		}
		e, err := envoysim.Dial(ctx, conns[len(conns)-1], "quota", interval, nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(e.Close)
		e.Request(id)
		envoys = append(envoys, e)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The Envoys' requests: one per Envoy every 50 ms.
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for _, e := range envoys {
				e.Request(id)
			}
		}
	})
	// The unrelated limiter's client.
	var lat []time.Duration
	wg.Go(func() { lat = consumeLatencies(tb, httpAddr, stop) })
	time.Sleep(run)
	close(stop)
	wg.Wait()

	for _, e := range envoys {
		e.StopReports()
	}
	for _, e := range envoys {
		_, _, reports, _ := e.Counts()
		res.reports += reports
	}
	// Each report has the one bucket: the service has decided it when it
	// has counted an action of it. Wait for that (a loaded machine may be
	// slow; 60 s at most, which a backlog that keeps growing runs out).
	actions := func() map[string]float64 {
		byAction := map[string]float64{}
		mfs, err := s.metrics.reg.Gather()
		if err != nil {
			tb.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "sluice_rlqs_assignments_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "action" {
						byAction[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		return byAction
	}
	var decided map[string]float64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		decided = actions()
		if int64(decided["token_bucket"]+decided["deny_all"]+decided["kept"]+decided["none"]) >= res.reports {
			break
		}
	}
	// Answered: an assignment sent, or the bucket in force kept because
	// the limiter had not the tokens to renew it; not a store call that
	// failed, nor a report never read.
	res.responses = int64(decided["token_bucket"] + decided["deny_all"] + decided["kept"])
	res.kept = int64(decided["kept"])
	res.calls, res.p99 = len(lat), p99(lat)
	return res
}

// TestRLQSBusyBucket: 1,000 Envoys report one bucket every 0.5 s; the
// cost of a report must not grow with the fleet, so that at least 95% of
// the reports are answered. The count does not depend on the machine's
// speed (the Envoys wait for their answers before counting), as long as
// the machine can serve the load at all: under the race detector, which
// makes each report cost about ten times as much (and the simulated
// Envoys share the machine), they report every 2 s, and a report whose
// store call timed out is not answered: on a 2-CPU machine busy with
// other tests, 81-92% of them were answered on Redis, so under the race
// detector the bound is 75%, which still fails the code before the fix
// (27.5% answered in memory, 0.7% on Redis). The HTTP p99 of an
// unrelated limiter is logged, not asserted (BenchmarkRLQSBusyBucket
// reports it).
func TestRLQSBusyBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of 1,000 streams")
	}
	every, bound := 500*time.Millisecond, int64(95)
	if raceEnabled() {
		every, bound = 2*time.Second, 75
	}
	for _, st := range []struct{ name, store string }{
		{"memory", "store: mem://\n"},
		{"redis", "store: " + testserver.SharedRedis(t) + "\n"},
	} {
		t.Run(st.name, func(t *testing.T) {
			res := runBusyBucket(t, st.store+busyYAML, 1000, every, 6*every)
			t.Logf("%d of %d reports answered (%.1f%%, %d of them keeping the bucket in force); unrelated HTTP p99 %v over %d calls (%v before the Envoys started)",
				res.responses, res.reports, 100*float64(res.responses)/float64(max(res.reports, 1)), res.kept, res.p99, res.calls, res.idleP99)
			if res.reports < 1000 {
				t.Fatalf("the Envoys sent %d reports, want at least one each", res.reports)
			}
			if res.responses*100 < res.reports*bound {
				t.Errorf("%d of %d reports answered, want at least %d%%", res.responses, res.reports, bound)
			}
		})
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// BenchmarkRLQSBusyBucket reports, for 1,000 Envoys on one bucket
// reporting every 0.5 s for 10 s, the share of reports answered and the
// HTTP p99 of an unrelated limiter meanwhile. Run it with -benchtime 1x.
func BenchmarkRLQSBusyBucket(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			for range b.N {
				res := runBusyBucket(b, st.store+busyYAML, 1000, 500*time.Millisecond, 10*time.Second)
				b.ReportMetric(100*float64(res.responses)/float64(max(res.reports, 1)), "%answered")
				b.ReportMetric(float64(res.reports), "reports")
				b.ReportMetric(float64(res.kept), "kept")
				b.ReportMetric(float64(res.p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(res.idleP99.Microseconds())/1000, "idle-p99-ms")
			}
		})
	}
}
