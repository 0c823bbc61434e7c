//go:build linux

package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/timing"
)

// The bounds TestHostileClients holds sluice serve to, with its default
// limits, under a few seconds of hundreds of hostile connections. They
// are generous, for a loaded machine and the race detector, which slow
// the clients of the test down more than the server: the test logs what
// it measured (on a shared 2-core machine without the race detector,
// medians of 5-25ms and a peak RSS of 75-90 MB, where before the limits
// a request took seconds and the server 1.4 to 5 GB).
const (
	// hostileLatency bounds each answer of /healthz and of a consume, on
	// new connections, with SLUICE_TIMING_TESTS=1 only (package timing).
	// By default every probe must be answered before its client's
	// timeout, the 10s a slow body holds a connection (the read
	// timeout): a probe held behind the attack would not be.
	hostileLatency = 2 * time.Second
	// hostileRSS bounds the server's resident memory at its peak (VmHWM);
	// it idles at about 25 MB.
	hostileRSS = 256 << 20
)

// TestHostileClients runs sluice serve as a child process, with the
// built-in example's limiters and its default limits, and attacks it
// from loopback for a few seconds with, all at once: clients whose body
// stalls after its headers, idle keep-alive connections, connections whose
// headers never end, clients that open a connection per request as fast
// as they can, simulations at the size bound and gRPC calls of 3.9 MB.
// Meanwhile /healthz and a consume answer quickly on new connections, and
// the server's memory stays bounded. A second run with a low
// max_connections shows that the cap holds the server's connections
// while the clients hold several times as many.
func TestHostileClients(t *testing.T) {
	for _, tt := range []struct {
		name     string
		config   string
		maxConns int // the most connections the server should hold; 0: not checked
	}{
		{"defaults", "", 0},
		// The slow bodies then hold every connection not reserved for
		// health checks: a consume may be answered 503 busy.
		{"max_connections=150", "  limits:\n    http: {max_connections: 150, reserved_for_health: 16}\n", 150},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := strings.Replace(string(Example()), "\nserver:\n", "\nserver:\n"+tt.config, 1)
			p := startSluice(t, "--config", writeConfig(t, config))
			pid := p.cmd.Process.Pid
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			attack(ctx, t, &wg, p.http, p.grpc)

			// Probe while the attack runs, then check what the server held.
			var health, consume []time.Duration
			var maxFDs int
			probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			time.Sleep(500 * time.Millisecond) // let the attack set in
			for ctx.Err() == nil {
				health = append(health, timed(t, probe, "GET", "http://"+p.http+"/healthz", "", 200))
				consume = append(consume, timed(t, probe, "POST", "http://"+p.http+"/api/v1/consume", `{"limiter": "per_ip", "key": "probe"}`,
					200, 503*min(tt.maxConns, 1)))
				maxFDs = max(maxFDs, openFDs(t, pid))
				time.Sleep(100 * time.Millisecond)
			}
			wg.Wait()
			if t.Failed() {
				t.Log(p.stderr.String())
			}
			rss := procStatus(t, pid, "VmHWM")
			t.Logf("%s: /healthz %s; consume %s; peak RSS %d MB; at most %d open files",
				tt.name, summary(health), summary(consume), rss>>20, maxFDs)
			for name, d := range map[string][]time.Duration{"/healthz": health, "consume": consume} {
				timing.AtMost(t, name+" under attack, the slowest answer", slices.Max(d), hostileLatency)
			}
			if rss > hostileRSS {
				t.Errorf("peak RSS under attack %d MB, want at most %d MB", rss>>20, hostileRSS>>20)
			}
			// Beside the HTTP connections: the listeners, the gRPC
			// connections, stdio, the runtime's epoll and pipe.
			if tt.maxConns > 0 && maxFDs > tt.maxConns+80 {
				t.Errorf("the server held %d files with max_connections %d", maxFDs, tt.maxConns)
			}
		})
	}
}

// attack starts the hostile clients, which stop when ctx ends.
func attack(ctx context.Context, t *testing.T, wg *sync.WaitGroup, httpAddr, grpcAddr string) {
	hold := func(n int, start string) {
		wg.Go(func() {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range n {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", httpAddr)
				if err != nil {
					return
				}
				conns = append(conns, c)
				fmt.Fprint(c, start)
			}
			<-ctx.Done()
		})
	}
	hold(300, "POST /api/v1/consume HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"limiter\": ")
	hold(300, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") // answered, then idle
	hold(300, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	for range 4 { // floods: a connection per request
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
			for i := 0; ctx.Err() == nil; i++ {
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+httpAddr+"/api/v1/consume",
					strings.NewReader(fmt.Sprintf(`{"limiter": "api", "key": "flood%d"}`, i)))
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	for range 2 { // simulations at the bound, and over it
		for _, spec := range []string{"steady 1000000/10s", "steady 49000000/s"} {
			wg.Go(func() {
				for ctx.Err() == nil {
					q := url.Values{"limiter": {"api"}, "traffic": {spec}}
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+httpAddr+"/api/v1/simulate?"+q.Encode(), nil)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}
			})
		}
	}
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecureCreds()), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	big := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
		{Key: "remote_address", Value: strings.Repeat("v", 3900<<10)}}}}}
	var refused atomic.Int64
	for range 20 {
		wg.Go(func() {
			for ctx.Err() == nil {
				// The server may see the deadline pass first.
				switch _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, big); status.Code(err) {
				case codes.ResourceExhausted:
					refused.Add(1)
				case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable:
					// Unavailable: the server may close a connection that
					// sends more than it reads; either way it took nothing.
				default:
					t.Errorf("ShouldRateLimit of 3.9 MB = %v, want ResourceExhausted", err)
					return
				}
			}
		})
	}
	t.Cleanup(func() { cc.Close() })
}

// timed makes a request and returns how long it took to answer with one
// of the statuses want.
func timed(t *testing.T, c *http.Client, method, url, body string, want ...int) time.Duration {
	t.Helper()
	start := time.Now()
	do := func() (*http.Response, error) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		return c.Do(req)
	}
	resp, err := do()
	if err != nil {
		// A new connection that sends nothing for graceWaiting may be
		// closed for room, by design; a probe this busy machine starved
		// between its connect and its request is one. The client then
		// reports io.EOF or "server closed idle connection", depending
		// on when it sees the close, so any error counts. A health
		// checker tries again before it declares a failure (Kubernetes'
		// failureThreshold), and so does this one, once, the time of
		// both counting.
		t.Logf("%s %s under attack: %v; trying again", method, url, err)
		resp, err = do()
	}
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s %s under attack: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		t.Errorf("%s %s under attack = %d %s, want one of %v", method, url, resp.StatusCode, b, want)
	}
	return d
}

func summary(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("%d probes, median %v, 90th %v, slowest %v", len(s), s[len(s)/2].Round(time.Microsecond),
		s[len(s)*9/10].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}

// procStatus reads a size field of /proc/PID/status, in bytes.
func procStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// openFDs counts the files the process has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
