package bench

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkRedis compares rate limiting on one Redis server, side by side:
//
//   - impl=sluice: a GCRA Limiter on redisstore.New(client) with its
//     defaults, pipelining and the state cache;
//   - impl=redis_rate: go-redis/redis_rate v10, GCRA in one Lua script;
//   - impl=cas: the same Limiter on redisstore.New(client,
//     WithPipelining(false), WithStateCache(0)), the Bucket4j way: GET the
//     state, decide in Go, write it with a compare-and-set script (EVALSHA).
//
// All three enforce storeRate per second with a burst of storeRate. keys=hot
// is one key for every call, keys=spread 10,000 keys, keys=idle 100,000
// keys, so many that each comes back after Redis has expired its state
// (a second after its last decision); goroutines=Z runs
// exactly Z goroutines on one client whose pool has 64 connections.
// Besides the metrics of runWorkers it reports rtt/decision, the commands
// and pipelines the client sent (each is one round trip), and
// cmds/decision, the top-level commands the server ran by INFO
// commandstats. cpu-ns/decision is the CPU time of this process (user and
// system, every thread: the callers, the client, the GC) over the timed
// decisions, not the server's: the client-side work of a decision.
func BenchmarkRedis(b *testing.B) {
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
	inner := scriptCallsCounted(b, client)

	policy := sluice.GCRA(storeRate, storeRate, time.Second)
	newSluice := func(opts ...redisstore.Option) decide {
		store, err := redisstore.New(client, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		l, err := sluice.NewLimiter(policy, sluice.WithStore(store))
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) (bool, error) {
			res, err := l.Allow(ctx, key)
			return res.Allowed, err
		}
	}
	rr := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.PerSecond(storeRate)
	impls := []struct {
		name string
		fn   decide
	}{
		{"sluice", newSluice(redisstore.WithPrefix("sluice:"))},
		{"redis_rate", func(key string) (bool, error) {
			res, err := rr.Allow(ctx, key, rrLimit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}},
		{"cas", newSluice(redisstore.WithPrefix("cas:"), redisstore.WithPipelining(false), redisstore.WithStateCache(0))},
	}
	keySets := []struct {
		name string
		keys []string
	}{
		{"hot", storeKeys(1)},
		{"spread", storeKeys(10_000)},
		{"idle", storeKeys(100_000)},
	}
	for _, impl := range impls {
		for _, ks := range keySets {
			warmed := false
			for _, z := range []int{1, 16, 64} {
				b.Run("impl="+impl.name+"/keys="+ks.name+"/goroutines="+strconv.Itoa(z), func(b *testing.B) {
					b.ReportAllocs()
					if !warmed {
						warm(b, ks.keys, impl.fn)
						warmed = true
					}
					before := commandStats(b, client)
					hook.n.Store(0)
					cpu0, cpuOK := processCPU()
					runWorkers(b, z, ks.keys, impl.fn)
					cpu1, _ := processCPU()
					rtt := hook.n.Load()
					if cpuOK {
						b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/decision")
					}
					after := commandStats(b, client)
					b.ReportMetric(float64(rtt)/float64(b.N), "rtt/decision")
					b.ReportMetric(float64(topLevel(before, after, inner))/float64(b.N), "cmds/decision")
				})
			}
		}
	}
}

// roundTrips is a go-redis hook that counts what the client sends: one
// command, or one pipeline of any length, is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// commandStats returns the calls of each command from INFO commandstats,
// by name ("get", "evalsha").
func commandStats(b *testing.B, client *redis.Client) map[string]int64 {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					b.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}

// scriptCallsCounted reports whether the server counts the commands a Lua
// script runs in INFO commandstats, as Redis 7 does: it runs a script of
// one GET and looks at the GET count.
func scriptCallsCounted(b *testing.B, client *redis.Client) bool {
	b.Helper()
	before := commandStats(b, client)
	if err := client.Eval(context.Background(), "return redis.call('GET', KEYS[1])", []string{"probe"}).Err(); err != nil && err != redis.Nil {
		b.Fatal(err)
	}
	after := commandStats(b, client)
	return after["get"]-before["get"] == 1
}

// topLevel returns how many commands clients sent between two
// commandStats: the scripts (EVAL, EVALSHA and their _ro forms) and the
// GETs, less the GETs run inside scripts when inner says the server counts
// them. Both scripts of this benchmark, redisstore's cas.lua and
// redis_rate's allowN, run exactly one GET (and at most one SET, which
// no client sends on its own, so SETs are not counted).
func topLevel(before, after map[string]int64, inner bool) int64 {
	d := func(name string) int64 { return after[name] - before[name] }
	scripts := d("evalsha") + d("evalsha_ro") + d("eval") + d("eval_ro")
	gets := d("get")
	if inner {
		gets -= scripts
	}
	return scripts + gets
}
