//go:build linux

package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// BenchmarkServeMemory runs sluice serve as a child process on mem://
// with the server's default settings (max_keys 1,000,000), fills a
// million keys through Envoy's API (64 descriptors a call, the most a
// call may have; keys of 23 bytes), and reports the process's resident
// memory at the end (RSS) and at its peak (VmHWM), and the Go heap in
// use: the figures docs/deploy.md gives for sizing. Its cases are the
// environment as it is (sluice serve's own GOGC and GOMEMLIMIT), and
// GOGC=100 for comparison. Run it once:
//
//	go test -run '^$' -bench ServeMemory -benchtime 1x ./internal/app/server
func BenchmarkServeMemory(b *testing.B) {
	const keys = 1_000_000
	for _, policy := range []struct{ name, yaml string }{
		{"fixed_window", "{policy: fixed_window, limit: 100, interval: 1 hour}"},
		{"token_bucket", "{policy: token_bucket, limit: 50, rate: {interval: 1 hour, amount: 10}}"},
	} {
		for _, env := range []struct{ name, env string }{{"defaults", ""}, {"GOGC=100", "GOGC=100"}} {
			b.Run(policy.name+"/"+env.name, func(b *testing.B) {
				var environ []string
				if env.env != "" {
					environ = []string{env.env}
				}
				for b.Loop() {
					p := startSluiceEnv(b, environ, "--config", writeConfig(b, "limiters:\n  l: "+policy.yaml+
						"\nenvoy:\n  - domain: d\n    descriptors:\n      - {key: k, limiter: l}\n"))
					fill(b, p.grpc, keys)
					pid := p.cmd.Process.Pid
					heap := metricValue(b, p.http, "go_memstats_heap_inuse_bytes")
					b.ReportMetric(float64(procStatus(b, pid, "VmRSS"))/(1<<20), "MiB-RSS")
					b.ReportMetric(float64(procStatus(b, pid, "VmHWM"))/(1<<20), "MiB-peak-RSS")
					b.ReportMetric(heap/(1<<20), "MiB-heap-inuse")
					b.Logf("%s", strings.Join(strings.Fields(grepLines(p.stderr.String(), "GOMEMLIMIT")), " "))
				}
			})
		}
	}
}

// fill decides n distinct keys through Envoy's API at addr, from 8
// callers.
func fill(b *testing.B, addr string, n int) {
	b.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	const perCall, callers = 64, 8
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for first := c * perCall; first < n; first += callers * perCall {
				req := &rlsv3.RateLimitRequest{Domain: "d"}
				for i := first; i < min(first+perCall, n); i++ {
					req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{
						{Key: "k", Value: "user:" + strconv.Itoa(10_000_000_000+i)}}})
				}
				if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// metricValue reads the value of an unlabelled series of /metrics.
func metricValue(b *testing.B, addr, name string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("no %s in /metrics", name)
	return 0
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(out)
}
