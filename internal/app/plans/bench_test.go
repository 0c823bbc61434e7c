package plans

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// prefixed is a store's keys under a prefix: a benchmark's own plans.
type prefixed struct {
	driver.Store
	prefix string
}

func (p prefixed) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return p.Store.Update(ctx, p.prefix+key, fn)
}

// benchPlans is how many plans BenchmarkDecision stores, 1M unless
// SLUICE_BENCH_PLANS says otherwise.
func benchPlans(b *testing.B) int {
	if v := os.Getenv("SLUICE_BENCH_PLANS"); v != "" {
		var n int
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_PLANS=%q: want a positive count", v)
		}
		return n
	}
	return 1_000_000
}

// BenchmarkDecision is the cost of a decision of a limiter on a store
// with the store's plans (1M of them, loaded in this process's catalog)
// against one without: on a key with no plan, on a key with one, and the
// catalog's lookup alone; and on memory, where the CPU's cost shows
// without a network's noise. It reports the plans' bytes in the store and
// in this process's heap per plan, and how long loading them took.
//
//	go test ./internal/app/plans -run XXX -bench Decision -benchtime 20000x
func BenchmarkDecision(b *testing.B) {
	stores := map[string]func(testing.TB) string{"redis": testserver.SharedRedis, "postgres": testserver.SharedPostgres,
		"mem": func(testing.TB) string { return "mem://" }} // the CPU alone, without a network's noise
	for _, name := range []string{"mem", "redis", "postgres"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st, err := storeurl.Open(ctx, stores[name](b))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if err := st.Check(ctx); err != nil {
				b.Fatal(err)
			}
			var id [6]byte
			rand.Read(id[:])
			store := prefixed{st.Store, "bench-plans-" + hex.EncodeToString(id[:]) + "/"}
			n := benchPlans(b)
			ps := make([]Plan, n)
			for i := range ps {
				ps[i] = Plan{Limiter: "api", Key: fmt.Sprintf("tenant-%d", i), Spec: `{"policy":"fixed_window","limit":1000,"interval":"1m"}`}
			}
			if _, err := New(store, time.Now, nil).Import(ctx, ps, 8); err != nil {
				b.Fatal(err)
			}
			ps = nil
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			c := New(store, time.Now, nil)
			t0 := time.Now()
			if _, err := c.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			load := time.Since(t0)
			runtime.GC()
			runtime.ReadMemStats(&after)
			if got := c.Counts()["api"]; got != n {
				b.Fatalf("loaded %d plans, want %d", got, n)
			}
			stored := 0
			for i := range numShards {
				s, err := c.read(ctx, shardKey(i))
				if err != nil {
					b.Fatal(err)
				}
				stored += len(s)
			}
			report := func(b *testing.B) {
				b.ReportMetric(float64(stored)/float64(n), "store-B/plan")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/plan")
				b.ReportMetric(load.Seconds(), "load-s")
			}
			def := sluice.FixedWindow(100, time.Minute)
			resolve := func(_ context.Context, key string) (sluice.Policy, error) {
				if p, ok := c.Exact("api", key); ok {
					return p, nil
				}
				p, _, _ := c.Prefix("api", key)
				return p, nil
			}
			plain, err := sluice.NewLimiter(def, sluice.WithStore(store))
			if err != nil {
				b.Fatal(err)
			}
			planned, err := sluice.NewLimiter(def, sluice.WithStore(store), sluice.WithPolicyFor(resolve), sluice.WithPolicyCache(100_000, 500*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			const keys = 1000
			decide := func(b *testing.B, l *sluice.Limiter, key string) {
				b.ReportAllocs()
				for i := range keys { // the keys' first decisions, and the connections, out of the timing
					if _, err := l.Allow(ctx, key+fmt.Sprint(i)); err != nil {
						b.Fatal(err)
					}
				}
				i := 0
				for b.Loop() {
					if _, err := l.Allow(ctx, key+fmt.Sprint(i%keys)); err != nil {
						b.Fatal(err)
					}
					i++
				}
				report(b)
			}
			b.Run("no_plans", func(b *testing.B) { decide(b, plain, "other-") })
			b.Run("plans/key_without_plan", func(b *testing.B) { decide(b, planned, "other-") })
			b.Run("plans/key_with_plan", func(b *testing.B) { decide(b, planned, "tenant-") })
			b.Run("lookup", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := resolve(ctx, "other-1"); err != nil {
						b.Fatal(err)
					}
				}
				report(b)
			})
		})
	}
}
