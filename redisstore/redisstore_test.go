package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/internal/testserver/testredis"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// standalone returns a client of the shared Redis server.
func standalone(t *testing.T) *redis.Client {
	t.Helper()
	return testredis.Client(t)
}

// cluster returns a client of the shared Redis Cluster.
func cluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testserver.SharedRedisCluster(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// sentinel returns a client of the shared Redis behind Sentinel, which
// finds the master through the Sentinel.
func sentinel(t *testing.T) *redis.Client {
	t.Helper()
	return failoverClient(t, testserver.SharedRedisSentinel(t))
}

// failoverClient returns a Sentinel-aware client for a testserver URL,
// "redis+sentinel://HOST:PORT/MASTER".
func failoverClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	addr, master, _ := strings.Cut(strings.TrimPrefix(url, "redis+sentinel://"), "/")
	// No retries, as storeurl opens it: a compare-and-set re-sent after
	// a lost reply could count twice.
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: []string{addr}, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// clients are the kinds of client every store test runs with.
var clients = []struct {
	name string
	new  func(t *testing.T) redis.UniversalClient
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return standalone(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return cluster(t) }},
	{"sentinel", func(t *testing.T) redis.UniversalClient { return sentinel(t) }},
}

var (
	prefixes sync.Map // *testing.T → its prefix
	runs     atomic.Int64
)

// prefix is a key prefix of the test's own, different in every run of
// it (go test -count).
func prefix(t *testing.T) string {
	p, _ := prefixes.LoadOrStore(t, fmt.Sprintf("test:%s:%d:", t.Name(), runs.Add(1)))
	return p.(string)
}

// newStore returns a Store of c with the test's prefix, closed at the
// test's end.
func newStore(t *testing.T, c redisstore.Client, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// increment is an UpdateFunc that counts in decimal and keeps the count a
// minute.
func increment(state []byte) ([]byte, time.Duration, bool) {
	n, _ := strconv.Atoi(string(state))
	return []byte(strconv.Itoa(n + 1)), time.Minute, true
}

// keep is an UpdateFunc that changes nothing.
func keep([]byte) ([]byte, time.Duration, bool) { return nil, 0, false }

// stored returns the state of key, a key of the test's prefix, as the
// server has it, "" for none.
func stored(t *testing.T, c redis.UniversalClient, key string) string {
	t.Helper()
	return storedAt(t, c, prefix(t)+key)
}

// storedAt returns the string at the Redis key rkey, "" for none.
func storedAt(t *testing.T, c redis.UniversalClient, rkey string) string {
	t.Helper()
	v, err := c.Get(context.Background(), rkey).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("GET %s: %v", rkey, err)
	}
	return v
}

func mustUpdate(t *testing.T, s *redisstore.Store, key string, fn driver.UpdateFunc) {
	t.Helper()
	if err := s.Update(context.Background(), key, fn); err != nil {
		t.Fatalf("Update(%q) = %v", key, err)
	}
}

// TestConformance runs the drivertest suite on every kind of client, with
// pipelining and the state cache, and with neither.
func TestConformance(t *testing.T) {
	configs := []struct {
		pipelining bool
		cache      int
	}{{true, redisstore.DefaultStateCache}, {false, 0}}
	for _, cl := range clients {
		for _, cfg := range configs {
			t.Run(fmt.Sprintf("%s/pipelining=%v/cache=%d", cl.name, cfg.pipelining, cfg.cache), func(t *testing.T) {
				c := cl.new(t)
				drivertest.RunConformanceTests(t, drivertest.HarnessFunc(
					func(_ context.Context, t *testing.T) (driver.Store, error) {
						s, err := redisstore.New(c, redisstore.WithPipelining(cfg.pipelining), redisstore.WithStateCache(cfg.cache))
						if err == nil {
							t.Cleanup(func() { s.Close() })
						}
						return s, err
					}))
			})
		}
	}
}

// TestConcurrentIncrements: 16 goroutines of two Stores (two processes,
// each with its own state cache) increment one key, then 20 keys, and lose
// no update.
func TestConcurrentIncrements(t *testing.T) {
	for _, cl := range clients {
		for _, pipelining := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pipelining=%v", cl.name, pipelining), func(t *testing.T) {
				c := cl.new(t)
				pfx := prefix(t)
				stores := []*redisstore.Store{
					newStore(t, c, redisstore.WithPipelining(pipelining), redisstore.WithMaxAttempts(10_000)),
					newStore(t, c, redisstore.WithPipelining(pipelining), redisstore.WithMaxAttempts(10_000)),
				}
				tests := []struct {
					name string
					keys int
				}{{"one key", 1}, {"many keys", 20}}
				for _, tt := range tests {
					t.Run(tt.name, func(t *testing.T) {
						var wg sync.WaitGroup
						for g := range 16 {
							s := stores[g%2]
							wg.Go(func() {
								for i := range 40 {
									key := tt.name + strconv.Itoa((g+i)%tt.keys)
									if err := s.Update(context.Background(), key, increment); err != nil {
										t.Errorf("Update(%q) = %v", key, err)
										return
									}
								}
							})
						}
						wg.Wait()
						total := 0
						for k := range tt.keys {
							n, _ := strconv.Atoi(storedAt(t, c, pfx+tt.name+strconv.Itoa(k)))
							total += n
						}
						if total != 16*40 {
							t.Errorf("%d keys count %d after %d increments", tt.keys, total, 16*40)
						}
						if tt.keys == 1 {
							if got := storedAt(t, c, pfx+tt.name+"0"); got != "640" {
								t.Errorf("state = %q, want 640", got)
							}
						}
					})
				}
			})
		}
	}
}

func TestTTL(t *testing.T) {
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.new(t)
			s := newStore(t, c)
			ctx := context.Background()
			const ttl = 1500*time.Millisecond + 1 // rounds up to 1501ms
			mustUpdate(t, s, "ttl", func([]byte) ([]byte, time.Duration, bool) { return []byte("x"), ttl, true })
			pttl, err := c.PTTL(ctx, prefix(t)+"ttl").Result()
			if err != nil {
				t.Fatal(err)
			}
			if pttl <= 0 || pttl > 1501*time.Millisecond {
				t.Errorf("PTTL after a TTL of %v = %v, want in (0, 1.501s]", ttl, pttl)
			}
			mustUpdate(t, s, "forever", func([]byte) ([]byte, time.Duration, bool) { return []byte("x"), 0, true })
			if pttl, err := c.PTTL(ctx, prefix(t)+"forever").Result(); err != nil || pttl != -1 {
				t.Errorf("PTTL after a TTL of 0 = %v, %v, want -1 (no expiry)", pttl, err)
			}
			if err := s.Update(ctx, "neg", func([]byte) ([]byte, time.Duration, bool) { return []byte("x"), -1, true }); err == nil {
				t.Errorf("Update with a negative TTL = nil, want an error")
			}
		})
	}
}

// TestEmptyState: an empty state is a state, not the absence of one.
func TestEmptyState(t *testing.T) {
	c := standalone(t)
	s := newStore(t, c, redisstore.WithStateCache(0))
	mustUpdate(t, s, "e", func([]byte) ([]byte, time.Duration, bool) { return []byte{}, time.Minute, true })
	var seen []byte
	mustUpdate(t, s, "e", func(state []byte) ([]byte, time.Duration, bool) { seen = state; return nil, 0, false })
	if seen == nil || len(seen) != 0 {
		t.Errorf("state after writing an empty one = %#v, want an empty non-nil slice", seen)
	}
	mustUpdate(t, s, "e", increment)
	if got := stored(t, c, "e"); got != "1" {
		t.Errorf("state = %q, want 1", got)
	}
}

// TestNoScript: the Store reloads its script after SCRIPT FLUSH.
func TestNoScript(t *testing.T) {
	for _, cl := range clients {
		for _, pipelining := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pipelining=%v", cl.name, pipelining), func(t *testing.T) {
				c := cl.new(t)
				s := newStore(t, c, redisstore.WithPipelining(pipelining))
				mustUpdate(t, s, "k", increment)
				flushScripts(t, c)
				mustUpdate(t, s, "k", increment)
				flushScripts(t, c)
				mustUpdate(t, s, "other", increment)
				if got := stored(t, c, "k"); got != "2" {
					t.Errorf("state = %q, want 2", got)
				}
			})
		}
	}
}

// flushScripts empties the script cache of every server of c.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	default:
		err = c.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

func TestDelete(t *testing.T) {
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.new(t)
			s := newStore(t, c)
			mustUpdate(t, s, "k", increment)
			mustUpdate(t, s, "k", increment)
			if err := s.Delete(context.Background(), "k"); err != nil {
				t.Fatalf("Delete = %v", err)
			}
			if got := stored(t, c, "k"); got != "" {
				t.Errorf("state after Delete = %q, want none", got)
			}
			mustUpdate(t, s, "k", increment)
			if got := stored(t, c, "k"); got != "1" {
				t.Errorf("state after Delete and an increment = %q, want 1", got)
			}
			if err := s.Delete(context.Background(), "never"); err != nil {
				t.Errorf("Delete of a key without state = %v, want nil", err)
			}
		})
	}
}

func TestContextCancelled(t *testing.T) {
	c := standalone(t)
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelining=%v", pipelining), func(t *testing.T) {
			s := newStore(t, c, redisstore.WithPipelining(pipelining))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := s.Update(ctx, "k", increment); err != context.Canceled {
				t.Errorf("Update with a cancelled context = %v, want context.Canceled", err)
			}
			if err := s.Delete(ctx, "k"); err != context.Canceled {
				t.Errorf("Delete with a cancelled context = %v, want context.Canceled", err)
			}
			if err := s.Ping(ctx); err != context.Canceled {
				t.Errorf("Ping with a cancelled context = %v, want context.Canceled", err)
			}
			if got := stored(t, c, "k"); got != "" {
				t.Errorf("state = %q after a cancelled Update, want none", got)
			}
		})
	}
}

// gated is a Client whose pipelines and commands wait, while blocked,
// until released.
type gated struct {
	*redis.Client
	blocked atomic.Bool
	entered chan struct{} // gets a value when a pipeline starts to wait
	release chan struct{} // closed to let the waiting pipelines go
}

func (g *gated) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	if g.blocked.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Client.Pipelined(ctx, fn)
}

func (g *gated) Process(ctx context.Context, cmd redis.Cmder) error {
	if g.blocked.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Client.Process(ctx, cmd)
}

// TestContextEndsWhileWaiting: a caller whose context ends while its
// command waits in the queue gets ctx.Err(), and its command is never
// sent; one whose command is in flight gets ErrIndeterminate.
func TestContextEndsWhileWaiting(t *testing.T) {
	g := &gated{Client: standalone(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := newStore(t, g)
	mustUpdate(t, s, "a", increment) // caches a's state: the next update is one EVALSHA
	mustUpdate(t, s, "b", increment)
	g.blocked.Store(true)

	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() { errA <- s.Update(ctxA, "a", increment) }()
	<-g.entered // a's compare-and-swap is in flight

	ctxB, cancelB := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelB()
	if err := s.Update(ctxB, "b", increment); err != context.DeadlineExceeded {
		t.Errorf("Update whose context ended in the queue = %v, want context.DeadlineExceeded", err)
	}
	cancelA()
	if err := <-errA; !errors.Is(err, driver.ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Errorf("Update whose context ended in flight = %v, want ErrIndeterminate and context.Canceled", err)
	}
	g.blocked.Store(false)
	close(g.release)
	mustUpdate(t, s, "b", keep) // waits for the sender to get past the abandoned call
	if got := stored(t, g.Client, "a"); got != "2" {
		t.Errorf("a = %q, want 2: the command in flight went through", got)
	}
	if got := stored(t, g.Client, "b"); got != "1" {
		t.Errorf("b = %q, want 1: the abandoned command was never sent", got)
	}
}

// TestUnreachable: a server that refuses connections makes every call
// fail at once with ErrUnavailable and the refusal: each call dials once,
// adding no retry of its own to the client's (here none).
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx := context.Background()
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelining=%v", pipelining), func(t *testing.T) {
			var dials atomic.Int64
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}})
			t.Cleanup(func() { c.Close() })
			s := newStore(t, c, redisstore.WithPipelining(pipelining))
			calls := []struct {
				name string
				call func() error
			}{
				{"Update", func() error { return s.Update(ctx, "k", increment) }},
				{"Delete", func() error { return s.Delete(ctx, "k") }},
				{"Ping", func() error { return s.Ping(ctx) }},
				{"ServerClock", func() error { _, err := redisstore.ServerClock(ctx, c); return err }},
			}
			for _, call := range calls {
				before := dials.Load()
				err := call.call()
				if !errors.Is(err, driver.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s = %v, want ErrUnavailable and the refusal", call.name, err)
				}
				if n := dials.Load() - before; n != 1 {
					t.Errorf("%s dialled %d times, want once: no retry", call.name, n)
				}
			}
			if err := s.Update(ctx, "k", increment); err == nil || !strings.HasPrefix(err.Error(), `redisstore: update "k": `) {
				t.Errorf("Update = %v, want it to name the operation and key", err)
			}
		})
	}
}

// TestBadDatabase: a client whose connections cannot be set up (SELECT
// of a database index out of range) fails every call with the server's
// reply, not "script replied <nil>" as a pipeline without per-command
// errors once did.
func TestBadDatabase(t *testing.T) {
	opt := testredis.Options(t)
	opt.DB, opt.MaxRetries = 99, -1
	ctx := context.Background()
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelining=%v", pipelining), func(t *testing.T) {
			c := redis.NewClient(opt)
			t.Cleanup(func() { c.Close() })
			s := newStore(t, c, redisstore.WithPipelining(pipelining))
			for name, call := range map[string]func() error{
				"Update": func() error { return s.Update(ctx, "k", increment) },
				"Delete": func() error { return s.Delete(ctx, "k") },
				"Ping":   func() error { return s.Ping(ctx) },
			} {
				err := call()
				if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "DB index is out of range") {
					t.Errorf("%s = %v, want ErrUnavailable with the server's reply", name, err)
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	s := newStore(t, standalone(t))
	mustUpdate(t, s, "k", increment)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := s.Update(context.Background(), "k", increment); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Update after Close = %v, want ErrUnavailable", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	tests := []struct {
		name string
		c    redisstore.Client
		opts []redisstore.Option
	}{
		{"nil client", nil, nil},
		{"negative cache", c, []redisstore.Option{redisstore.WithStateCache(-1)}},
		{"negative attempts", c, []redisstore.Option{redisstore.WithMaxAttempts(-1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := redisstore.New(tt.c, tt.opts...); err == nil {
				s.Close()
				t.Errorf("New = nil error, want one")
			}
		})
	}
}

// commandCalls returns the calls of EVALSHA and of GET the server counted
// since the last CONFIG RESETSTAT. The GET calls include those the script
// makes, when the server counts them (Redis 7 does).
func commandCalls(t *testing.T, c *redis.Client) (evalsha, get int) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		for cmd, n := range map[string]*int{"cmdstat_evalsha:": &evalsha, "cmdstat_get:": &get} {
			if rest, ok := strings.CutPrefix(line, cmd+"calls="); ok {
				calls, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				if err != nil {
					t.Fatalf("INFO commandstats line %q: %v", line, err)
				}
				*n = calls
			}
		}
	}
	return evalsha, get
}

// clientCommands returns the EVALSHAs and GETs that clients sent since the
// last CONFIG RESETSTAT, scriptGets being how many GETs the server counts
// per EVALSHA.
func clientCommands(t *testing.T, c *redis.Client, scriptGets int) int {
	t.Helper()
	evalsha, get := commandCalls(t, c)
	return evalsha + get - evalsha*scriptGets
}

func resetStats(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrips counts the commands per decision with INFO commandstats:
// one with the state cache, two without.
func TestRoundTrips(t *testing.T) {
	tests := []struct {
		name            string
		cache           int
		perIncrement    int
		perUnchangedMax int
	}{
		{"cache", redisstore.DefaultStateCache, 1, 1},
		{"no cache", 0, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := standalone(t)
			s := newStore(t, c, redisstore.WithStateCache(tt.cache))
			mustUpdate(t, s, "k", increment) // loads the script, fills the cache
			// Does the server count the script's GET?
			resetStats(t, c)
			if err := c.EvalSha(context.Background(), scriptSHA(t, c), []string{prefix(t) + "probe"}, "0", "", "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			_, scriptGets := commandCalls(t, c)

			resetStats(t, c)
			const n = 100
			for range n {
				mustUpdate(t, s, "k", increment)
			}
			if got := clientCommands(t, c, scriptGets); got != n*tt.perIncrement {
				t.Errorf("%d increments took %d commands, want %d", n, got, n*tt.perIncrement)
			}
			resetStats(t, c)
			for range n {
				mustUpdate(t, s, "k", keep)
			}
			if got := clientCommands(t, c, scriptGets); got > n*tt.perUnchangedMax {
				t.Errorf("%d unchanged decisions took %d commands, want at most %d", n, got, n*tt.perUnchangedMax)
			}
		})
	}
}

// scriptSHA returns the SHA1 of the script the Store loaded, the only one
// in cas.lua.
func scriptSHA(t *testing.T, c *redis.Client) string {
	t.Helper()
	src, err := os.ReadFile("cas.lua")
	if err != nil {
		t.Fatal(err)
	}
	sha, err := c.ScriptLoad(context.Background(), string(src)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

// counting is a Client that counts round trips (pipelines, and commands
// sent alone, as the sender sends a batch of one) and their commands.
type counting struct {
	redis.UniversalClient
	pipelines, cmds atomic.Int64
}

func (c *counting) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	cmds, err := c.UniversalClient.Pipelined(ctx, fn)
	c.pipelines.Add(1)
	c.cmds.Add(int64(len(cmds)))
	return cmds, err
}

func (c *counting) Process(ctx context.Context, cmd redis.Cmder) error {
	err := c.UniversalClient.Process(ctx, cmd)
	c.pipelines.Add(1)
	c.cmds.Add(1)
	return err
}

// TestPipelining: concurrent calls share pipelines.
func TestPipelining(t *testing.T) {
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := &counting{UniversalClient: cl.new(t)}
			s := newStore(t, c)
			mustUpdate(t, s, "warm-up", increment) // loads the script where needed
			c.pipelines.Store(0)
			c.cmds.Store(0)
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					for i := range 20 {
						if err := s.Update(context.Background(), strconv.Itoa(g*100+i), increment); err != nil {
							t.Errorf("Update = %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			p, n := c.pipelines.Load(), c.cmds.Load()
			if n != 32*20*2 {
				t.Errorf("%d new keys took %d commands, want %d (GET and EVALSHA each)", 32*20, n, 32*20*2)
			}
			if p >= n {
				t.Errorf("%d commands went in %d round trips, want fewer", n, p)
			}
			t.Logf("%d commands in %d round trips", n, p)
		})
	}
}

func TestPing(t *testing.T) {
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			if err := newStore(t, cl.new(t)).Ping(context.Background()); err != nil {
				t.Errorf("Ping = %v", err)
			}
		})
	}
}

func TestServerClock(t *testing.T) {
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.new(t)
			for _, resync := range []time.Duration{0, time.Nanosecond, time.Hour} {
				clock, err := redisstore.ServerClock(context.Background(), c, redisstore.WithResyncInterval(resync))
				if err != nil {
					t.Fatalf("ServerClock = %v", err)
				}
				if !clock.IsWallClock() {
					t.Errorf("IsWallClock = false, want true")
				}
				prev := int64(0)
				for range 5 {
					now, local := clock.Now(), time.Now().UnixNano()
					if d := time.Duration(now - local).Abs(); d > time.Second {
						t.Errorf("WithResyncInterval(%v): Now = %d, %v from time.Now", resync, now, d)
					}
					if now < prev {
						t.Errorf("WithResyncInterval(%v): Now went back from %d to %d", resync, prev, now)
					}
					prev = now
				}
			}
		})
	}
}

// BenchmarkUpdate compares pipelining and the state cache on and off,
// with goroutines incrementing 1000 keys of a local server.
func BenchmarkUpdate(b *testing.B) {
	c := testredis.Client(b)
	for _, pipelining := range []bool{true, false} {
		for _, cache := range []int{redisstore.DefaultStateCache, 0} {
			b.Run(fmt.Sprintf("pipelining=%v/cache=%d", pipelining, cache), func(b *testing.B) {
				s, err := redisstore.New(c, redisstore.WithPrefix(fmt.Sprintf("bench:%d:", runs.Add(1))),
					redisstore.WithPipelining(pipelining), redisstore.WithStateCache(cache))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := strconv.FormatInt(next.Add(1)%1000, 10)
						if err := s.Update(context.Background(), key, increment); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// TestSentinelFailover fails the master over under a Store that keeps
// counting. Every failed update is typed, updates succeed again on the
// new master, and the count keeps what the replica had before the
// failover and every update acknowledged after the old master turned
// replica. Updates acknowledged by the old master in the moment between
// the two may be lost: Redis replicates asynchronously (docs/stores.md).
func TestSentinelFailover(t *testing.T) {
	url := testserver.RedisSentinel(t)
	c := failoverClient(t, url)
	s := newStore(t, c)
	ctx := context.Background()
	const before = 50
	for range before {
		mustUpdate(t, s, "k", increment)
	}
	if err := c.Do(ctx, "WAIT", 1, 5000).Err(); err != nil { // the replica has all 50
		t.Fatalf("WAIT: %v", err)
	}
	addr, master, _ := strings.Cut(strings.TrimPrefix(url, "redis+sentinel://"), "/")
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	old, err := sc.GetMasterAddrByName(ctx, master).Result()
	if err != nil {
		t.Fatal(err)
	}
	oldMaster := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(old[0], old[1])})
	defer oldMaster.Close()
	if err := sc.Failover(ctx, master).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}

	// demoted reports whether the old master is a replica now, so that
	// it refuses writes and every success from then on is the new
	// master's.
	demoted := func() bool {
		role, err := oldMaster.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "slave"
	}
	// The failover takes about 10s alone (Sentinel's own timers), and
	// three times as long with every store suite running at once under
	// -race; 90s is patience, not an expectation.
	var succeeded, indeterminate, after int
	for deadline := time.Now().Add(90 * time.Second); after < 20; {
		if time.Now().After(deadline) {
			t.Fatalf("90s after SENTINEL FAILOVER: %d updates succeeded, %d of them after the old master turned replica; want 20 of those", succeeded, after)
		}
		isDemoted := demoted()
		uctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.Update(uctx, "k", increment)
		cancel()
		switch {
		case err == nil:
			succeeded++
			if isDemoted {
				after++
			}
		case errors.Is(err, driver.ErrIndeterminate):
			indeterminate++
		case errors.Is(err, driver.ErrUnavailable), errors.Is(err, driver.ErrConflict):
		default:
			t.Fatalf("Update during failover = %v, want nil or a driver error", err)
		}
		if err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	now, err := sc.GetMasterAddrByName(ctx, master).Result()
	if err != nil || now[1] == old[1] {
		t.Fatalf("Sentinel's master after failover = %v, %v; want other than %v", now, err, old)
	}
	n, _ := strconv.Atoi(stored(t, c, "k"))
	if n < before+after || n > before+succeeded+indeterminate {
		t.Errorf("count after failover = %d, want from %d (the replica's %d plus %d acknowledged by the new master) to %d (plus all %d successes and %d indeterminate)",
			n, before+after, before, after, before+succeeded+indeterminate, succeeded, indeterminate)
	}
	t.Logf("failover: %d updates succeeded (%d after the old master turned replica), %d indeterminate; count %d, so %d acknowledged updates were lost",
		succeeded, after, indeterminate, n, before+succeeded-n)
}

// TestExpiredKeyOneRoundTrip: a key whose cached state Redis has expired
// costs one command, a compare-and-swap against no state, not a lost race
// against the cached bytes and a second one.
func TestExpiredKeyOneRoundTrip(t *testing.T) {
	const ttl = 20 * time.Millisecond
	shortLived := func(state []byte) ([]byte, time.Duration, bool) {
		next, _, changed := increment(state)
		return next, ttl, changed
	}
	c := &counting{UniversalClient: standalone(t)}
	s := newStore(t, c)
	mustUpdate(t, s, "k", shortLived) // loads the script, caches "1"
	for stored(t, c.UniversalClient, "k") != "" {
		time.Sleep(ttl) // until Redis has expired it
	}
	c.cmds.Store(0)
	mustUpdate(t, s, "k", shortLived)
	if n := c.cmds.Load(); n != 1 {
		t.Errorf("update of an expired key took %d commands, want 1", n)
	}
	if got := stored(t, c.UniversalClient, "k"); got != "1" {
		t.Errorf("k = %q, want 1: the expired state counts as none", got)
	}
}
