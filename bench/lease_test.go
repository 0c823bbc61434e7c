package bench

import (
	"context"
	"strconv"
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
// what the machine sends, so every call is allowed. goroutines=Z runs
// exactly Z goroutines on one client, as BenchmarkRedis does. Besides the
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
	newLimiter := func(prefix string, opts ...sluice.LimiterOption) decide {
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
	modes := []struct {
		name string
		fn   decide
	}{
		{"exact", newLimiter("exact:")},
		{"leased", newLimiter("leased:", sluice.WithLease(benchLease))},
	}
	keys := storeKeys(1)
	for _, m := range modes {
		warmed := false
		for _, z := range []int{1, 4, 16} {
			b.Run("mode="+m.name+"/goroutines="+strconv.Itoa(z), func(b *testing.B) {
				b.ReportAllocs()
				if !warmed {
					warm(b, keys, m.fn)
					warmed = true
				}
				hook.n.Store(0)
				runWorkers(b, z, keys, m.fn)
				b.ReportMetric(float64(hook.n.Load())/float64(b.N), "rtt/decision")
			})
		}
	}
}
