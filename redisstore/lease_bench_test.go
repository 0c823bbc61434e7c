package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/testredis"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkLeaseRoundTrips measures what quota leasing saves: decisions
// per store round trip (a pipeline or a command sent alone, counted at
// the client) on one GCRA key of 1,000 a second in bursts of 1,000, with
// and without a lease of 10 to 1,000 tokens for 1s, at three loads held
// for 3s: half the rate (tokens to spare, after the burst), the rate
// itself (the key held at its rate: each token taken as it comes), and
// four times the rate. It runs once whatever b.N is; the figures are in
// docs/stores.md, "When leasing pays". Run it with
//
//	CI=true go test -run '^$' -bench BenchmarkLeaseRoundTrips -benchtime 1x ./redisstore/
func BenchmarkLeaseRoundTrips(b *testing.B) {
	const (
		rate    = 1000 // per second, and the burst
		hold    = 3 * time.Second
		workers = 8
	)
	for _, load := range []struct {
		name  string
		times float64
	}{{"half_the_rate", 0.5}, {"at_the_rate", 1}, {"4x_the_rate", 4}} {
		for _, leased := range []bool{false, true} {
			mode := "exact"
			if leased {
				mode = "leased"
			}
			b.Run(fmt.Sprintf("load=%s/mode=%s", load.name, mode), func(b *testing.B) {
				c := &counting{UniversalClient: testredis.Client(b)}
				store, err := redisstore.New(c, redisstore.WithPrefix(fmt.Sprintf("bench:%d:", runs.Add(1))))
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
				opts := []sluice.Option{sluice.WithStore(store)}
				if leased {
					opts = append(opts, sluice.WithLease(sluice.Lease{Min: 10, Max: 1000, TTL: time.Second}))
				}
				l, err := sluice.NewLimiter(sluice.GCRA(rate, rate, time.Second), opts...)
				if err != nil {
					b.Fatal(err)
				}
				key := fmt.Sprintf("lease-bench/%d", time.Now().UnixNano())
				ctx := context.Background()
				// Spend the burst first, so that the load meets a key
				// whose tokens come at its rate.
				for range rate {
					if _, err := l.Allow(ctx, key); err != nil {
						b.Fatal(err)
					}
				}
				trips0 := c.pipelines.Load()
				offered := int(load.times * rate * hold.Seconds())
				gap := time.Duration(float64(time.Second) / (load.times * rate))
				var decisions, admitted, failed atomic.Int64
				jobs := make(chan struct{}, workers)
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for range jobs {
							res, err := l.Allow(ctx, key)
							decisions.Add(1)
							switch {
							case err != nil:
								failed.Add(1)
							case res.Allowed:
								admitted.Add(1)
							}
						}
					})
				}
				b.ResetTimer()
				start := time.Now()
				for i := range offered {
					if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
						time.Sleep(d)
					}
					jobs <- struct{}{}
				}
				close(jobs)
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				trips := c.pipelines.Load() - trips0
				if f := failed.Load(); f != 0 {
					b.Fatalf("%d decisions failed", f)
				}
				b.ReportMetric(float64(decisions.Load())/float64(trips), "decisions/roundtrip")
				b.ReportMetric(float64(admitted.Load())/elapsed.Seconds(), "admitted/s")
				b.ReportMetric(float64(trips)/elapsed.Seconds(), "roundtrips/s")
			})
		}
	}
}
