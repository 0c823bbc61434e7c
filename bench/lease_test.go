package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/redisstore"
)

// benchLease is the lease of BenchmarkLease's leased mode.
var benchLease = sluice.Lease{Min: 100, Max: 10_000, TTL: time.Second}

// leaseRate is BenchmarkLease's limit per second, and its burst: far
// above what the leased mode decides, let alone the exact one, so that
// the limit never paces either (storeRate would pace the leased mode).
const leaseRate = 1_000_000_000

// BenchmarkLease compares quota leasing (sluice.WithLease) with the exact
// mode on one hot key of one Redis server, side by side:
//
//   - mode=exact: a GCRA Limiter on redisstore.New(client) with its
//     defaults, which coalesces the overlapping calls of the key into one
//     update (one round trip per batch);
//   - mode=leased: the same Limiter with WithLease(benchLease): a round
//     trip per lease.
//
// Both enforce leaseRate per second with a burst of leaseRate, far above
// what the machine sends, so every call is allowed. Besides the
// metrics of runWorkers it reports rtt/decision, the commands and
// pipelines the client sent.
func BenchmarkLease(b *testing.B) {
	url := testserver.SharedRedis(b)
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	client := redis.NewClient(opt)
	b.Cleanup(func() { client.Close() })
	hook := &roundTrips{}
	client.AddHook(hook)
	ctx := context.Background()
	policy := sluice.GCRA(leaseRate, leaseRate, time.Second)
	newLimiter := func(prefix string, opts ...sluice.Option) decide {
		store, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		l, err := sluice.NewLimiter(policy, append(opts, sluice.WithStore(store))...)
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) (bool, error) {
			res, err := l.Allow(ctx, key)
			return res.Allowed, err
		}
	}
	// processes stands for z processes: z limiters, each with its own
	// store engine and leases, the calls dealt to them in turn.
	processes := func(z int, prefix string, opts ...sluice.Option) decide {
		ls := make([]decide, z)
		for i := range ls {
			ls[i] = newLimiter(prefix, opts...)
		}
		var next atomic.Uint64
		return func(key string) (bool, error) { return ls[next.Add(1)%uint64(z)](key) }
	}
	keys := storeKeys(1)
	for _, mode := range []string{"exact", "leased"} {
		var opts []sluice.Option
		if mode == "leased" {
			opts = append(opts, sluice.WithLease(benchLease))
		}
		one := newLimiter(mode+":", opts...)
		warm(b, keys, one)
		for _, z := range []int{1, 4, 16} {
			// z goroutines in one process, then z processes of one
			// goroutine each.
			for _, shape := range []struct {
				name string
				fn   decide
			}{
				{"goroutines=" + strconv.Itoa(z), one},
				{"processes=" + strconv.Itoa(z), processes(z, mode+":", opts...)},
			} {
				if z == 1 && shape.name == "processes=1" {
					continue // the same as goroutines=1
				}
				b.Run("mode="+mode+"/"+shape.name, func(b *testing.B) {
					b.ReportAllocs()
					hook.n.Store(0)
					runWorkers(b, z, keys, shape.fn)
					b.ReportMetric(float64(hook.n.Load())/float64(b.N), "rtt/decision")
				})
			}
		}
	}
}
