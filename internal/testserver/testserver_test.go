package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// addrOf returns host:port of a server's URL or DSN.
func addrOf(t *testing.T, kind, s string) string {
	t.Helper()
	if kind == "mariadb" {
		// root@tcp(127.0.0.1:PORT)/sluice
		_, rest, _ := strings.Cut(s, "@tcp(")
		addr, _, ok := strings.Cut(rest, ")")
		if !ok {
			t.Fatalf("DSN %q: want root@tcp(HOST:PORT)/sluice", s)
		}
		return addr
	}
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// assertFree fails t unless addr can be listened on again, which shows
// that the server that had it is gone.
func assertFree(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("after stop, listen on %s: %v, want the port free", addr, err)
		return
	}
	l.Close()
}

// busAddr is the cluster bus address of a Redis Cluster node.
func busAddr(t *testing.T, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+10000))
}

// probes check a server at the protocol level: a session as the URL
// describes it, where the protocol allows.
var probes = map[string]func(ctx context.Context, addr string) error{
	"redis": plain.ping,
	"postgres": func(ctx context.Context, addr string) error {
		return startPostgresSession(ctx, addr)
	},
	"mariadb": func(ctx context.Context, addr string) error {
		return mysqlRoot(ctx, addr, func(c *mysqlConn) error {
			return c.command(comInitDB, "sluice")
		})
	},
	"dynamo": pingDynamo,
}

func TestSingle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind   string
		helper func(testing.TB) string
		prefix string
	}{
		{"redis", Redis, "redis://127.0.0.1:"},
		{"postgres", Postgres, "postgres://postgres@127.0.0.1:"},
		{"mariadb", MariaDB, "root@tcp(127.0.0.1:"},
		{"dynamo", Dynamo, "http://127.0.0.1:"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			var addr string
			// The server lives as long as the sub-test, whose cleanup
			// stops it.
			t.Run("up", func(t *testing.T) {
				t0 := time.Now()
				s := tt.helper(t)
				t.Logf("%s started in %v", tt.kind, time.Since(t0).Round(time.Millisecond))
				if !strings.HasPrefix(s, tt.prefix) {
					t.Errorf("%s = %q, want prefix %q", tt.kind, s, tt.prefix)
				}
				addr = addrOf(t, tt.kind, s)
				if err := probes[tt.kind](t.Context(), addr); err != nil {
					t.Fatalf("probe %s: %v", addr, err)
				}
			})
			if addr != "" {
				assertFree(t, addr)
			}
		})
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	var addrs []string
	t.Run("up", func(t *testing.T) {
		t0 := time.Now()
		addrs = RedisCluster(t)
		t.Logf("redis cluster started in %v", time.Since(t0).Round(time.Millisecond))
		if len(addrs) != 3 {
			t.Fatalf("RedisCluster = %v, want 3 nodes", addrs)
		}
		for _, a := range addrs {
			c, err := plain.dial(t.Context(), a)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			info, err := c.do("CLUSTER", "INFO")
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3", "cluster_size:3"} {
				if s, _ := info.(string); !strings.Contains(s, want) {
					t.Errorf("%s: CLUSTER INFO = %q, want %s", a, s, want)
				}
			}
			// A write lands on the node that owns the key's slot, or is
			// redirected there.
			if _, err := c.do("SET", "k", "v"); err != nil && !strings.HasPrefix(err.Error(), "SET k: MOVED ") {
				t.Errorf("%s: SET k v: %v, want OK or MOVED", a, err)
			}
		}
	})
	for _, a := range addrs {
		assertFree(t, a)
		assertFree(t, busAddr(t, a))
	}
}

// TestRedisClusterWithReplicas starts a cluster of three masters with a
// replica each, kills a master and waits for its replica to take over
// its slots with what was written to the master.
func TestRedisClusterWithReplicas(t *testing.T) {
	t.Parallel()
	var c *ReplicatedCluster
	t.Run("up", func(t *testing.T) {
		c = RedisClusterWithReplicas(t)
		if len(c.Masters) != 3 || len(c.Replicas) != 3 {
			t.Fatalf("RedisClusterWithReplicas = %v, want 3 masters and 3 replicas", c)
		}
		for _, a := range append(slices.Clone(c.Masters), c.Replicas...) {
			conn, err := plain.dial(t.Context(), a)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			info, err := conn.do("CLUSTER", "INFO")
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:6", "cluster_size:3"} {
				if s, _ := info.(string); !strings.Contains(s, want) {
					t.Errorf("%s: CLUSTER INFO = %q, want %s", a, s, want)
				}
			}
		}
		// Slot 0, of the first master: "{a}" hashes to 15495, "{06S}" to 0.
		const key = "{06S}k"
		if _, err := plain.commands(t.Context(), c.Masters[0], []string{"SET", key, "v"}, []string{"WAIT", "1", "5000"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Kill(c.Masters[0]); err != nil {
			t.Fatal(err)
		}
		role := func() string {
			conn, err := plain.dial(t.Context(), c.Replicas[0])
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			v, err := conn.do("ROLE")
			if err != nil {
				t.Fatal(err)
			}
			r, _ := v.([]any)
			if len(r) == 0 {
				t.Fatalf("ROLE = %v", v)
			}
			return fmt.Sprint(r[0])
		}
		t0 := time.Now()
		for deadline := t0.Add(30 * time.Second); role() != "master"; {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s not promoted 30s after its master was killed", c.Replicas[0])
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("replica promoted %v after the kill (cluster-node-timeout %v)", time.Since(t0).Round(time.Millisecond), c.NodeTimeout)
		conn, err := plain.dial(t.Context(), c.Replicas[0])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if v, err := conn.do("GET", key); err != nil || v != "v" {
			t.Errorf("GET %s on the promoted replica = %v, %v; want v", key, v, err)
		}
	})
	if c != nil {
		for _, a := range append(slices.Clone(c.Masters), c.Replicas...) {
			assertFree(t, a)
			assertFree(t, busAddr(t, a))
		}
	}
}

// TestRedisSentinel starts a master, a replica and a Sentinel, fails the
// master over and checks that the Sentinel names the replica as master
// and that the replica has what was written to the master.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	var sentinel string
	t.Run("up", func(t *testing.T) {
		url := RedisSentinel(t)
		const prefix = "redis+sentinel://"
		if !strings.HasPrefix(url, prefix) || !strings.HasSuffix(url, "/"+SentinelMaster) {
			t.Fatalf("RedisSentinel = %q, want %s127.0.0.1:PORT/%s", url, prefix, SentinelMaster)
		}
		sentinel = strings.TrimSuffix(strings.TrimPrefix(url, prefix), "/"+SentinelMaster)
		c, err := plain.dial(t.Context(), sentinel)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		masterAddr := func() string {
			v, err := c.do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
			if err != nil {
				t.Fatal(err)
			}
			hp, _ := v.([]any)
			if len(hp) != 2 {
				t.Fatalf("GET-MASTER-ADDR-BY-NAME = %v", v)
			}
			return net.JoinHostPort(hp[0].(string), hp[1].(string))
		}
		old := masterAddr()
		if _, err := plain.commands(t.Context(), old, []string{"SET", "k", "v"}, []string{"WAIT", "1", "5000"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.do("SENTINEL", "FAILOVER", SentinelMaster); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for masterAddr() == old {
			if time.Now().After(deadline) {
				t.Fatalf("master still %s 20s after SENTINEL FAILOVER", old)
			}
			time.Sleep(50 * time.Millisecond)
		}
		m, err := plain.dial(t.Context(), masterAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if v, err := m.do("GET", "k"); err != nil || v != "v" {
			t.Errorf("GET k on the new master = %v, %v; want v", v, err)
		}
	})
	if sentinel != "" {
		assertFree(t, sentinel)
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	a, b := SharedRedis(t), SharedRedis(t)
	if a != b {
		t.Errorf("SharedRedis = %q, then %q, want one server", a, b)
	}
	if err := plain.ping(t.Context(), addrOf(t, "redis", a)); err != nil {
		t.Error(err)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	bin, err := lookPath("redis-server", "redis-server")
	if err != nil {
		fail(t, err)
	}
	dir := t.TempDir()
	p, err := startRedis(bin, dir, 1, nil, "--no-such-directive", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = waitReady(ctx, p, func(ctx context.Context) error { return plain.ping(ctx, p.addr) })
	for _, want := range []string{"exited during start-up", "end of the log of redis-server", "no-such-directive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start with a bad directive: %v, want %q in it", err, want)
		}
	}
}

func TestStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := StartRedis(ctx); err == nil {
		t.Error("StartRedis(cancelled) succeeded, want an error")
	}
}

func TestMissing(t *testing.T) {
	// redis-server is in /usr/bin, not in sbinDirs.
	t.Setenv("PATH", t.TempDir())
	_, _, err := StartRedis(context.Background())
	me, ok := err.(*MissingError)
	if !ok || me.What != "redis-server" || me.Package != "redis-server" {
		t.Errorf("StartRedis without redis-server in PATH: %v, want a *MissingError for redis-server", err)
	}
}

// TestMissingDynalite: without node or dynalite, StartDynamo says what is
// missing and how to install it.
func TestMissingDynalite(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir()) // no checkout with a .bin/dynalite above it
	_, _, err := StartDynamo(context.Background())
	me, ok := err.(*MissingError)
	if !ok || (me.What != "node" && me.What != "dynalite") {
		t.Fatalf("StartDynamo without node or dynalite: %v, want a *MissingError for one of them", err)
	}
	if me.What == "dynalite" && !strings.Contains(me.Error(), "scripts/test.sh") {
		t.Errorf("StartDynamo without dynalite: %q, want it to say scripts/test.sh installs it", me)
	}
}

// recorder is a testing.TB that notes Skip and Fatal instead of acting.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()             {}
func (r *recorder) Skip(...any)         { r.skipped = true; runtime.Goexit() }
func (r *recorder) Fatal(...any)        { r.failed = true; runtime.Goexit() }
func (r *recorder) Logf(string, ...any) {}

func TestFail(t *testing.T) {
	missing := &MissingError{What: "redis-server", Where: "PATH", Package: "redis-server"}
	tests := []struct {
		name        string
		ci          string
		err         error
		wantSkipped bool
	}{
		{"missing locally", "", missing, true},
		{"missing in CI", "true", missing, false},
		{"wrapped missing locally", "", fmt.Errorf("x: %w", missing), true},
		{"broken locally", "", errors.New("broken"), false},
		{"broken in CI", "true", errors.New("broken"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				fail(r, tt.err)
			}()
			<-done
			if r.skipped != tt.wantSkipped || r.failed == tt.wantSkipped {
				t.Errorf("fail(%v) with CI=%q: skipped %v, failed %v, want skipped %v", tt.err, tt.ci, r.skipped, r.failed, tt.wantSkipped)
			}
		})
	}
}

// plain is how the tests reach servers started without Secure: in the
// clear, without logging in.
var plain *redisAccess

// TestSecureRedis starts each kind of Redis secured: it answers over TLS
// only, to a client with a certificate of the test's CA, the default user
// with its password, and its ACL users within their rights.
func TestSecureRedis(t *testing.T) {
	t.Parallel()
	certs, err := NewCerts(t.TempDir(), "sluice")
	if err != nil {
		t.Fatal(err)
	}
	sec := Secure{TLS: certs, Password: "admin", Users: []string{"limited on >pw ~allowed:* -@all +get"},
		SentinelUsers: []string{"watcher on >spw -@all +ping"}}
	admin, err := sec.access()
	if err != nil {
		t.Fatal(err)
	}
	noCert := &redisAccess{tls: admin.tls.Clone(), password: "admin"}
	noCert.tls.Certificates = nil
	anonymous := &redisAccess{tls: admin.tls}
	// refused checks that the server at addr refuses what it should.
	refused := func(t *testing.T, addr string) {
		t.Helper()
		for name, a := range map[string]*redisAccess{"in the clear": plain, "without a client certificate": noCert, "without a password": anonymous} {
			if err := a.ping(t.Context(), addr); err == nil {
				t.Errorf("PING %s %s = nil, want an error", addr, name)
			}
		}
		if err := admin.ping(t.Context(), addr); err != nil {
			t.Errorf("PING %s over TLS as admin: %v", addr, err)
		}
	}
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		url := SecureRedis(t, sec)
		if !strings.HasPrefix(url, "rediss://127.0.0.1:") {
			t.Fatalf("SecureRedis = %q, want rediss://127.0.0.1:PORT/0", url)
		}
		addr := addrOf(t, "redis", url)
		refused(t, addr)
		c, err := anonymous.dial(t.Context(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, tt := range []struct {
			cmd  []string
			want string // the error's start; "" for none
		}{
			{[]string{"AUTH", "limited", "pw"}, ""},
			{[]string{"GET", "allowed:k"}, ""},
			{[]string{"GET", "other"}, "GET other: NOPERM"},
			{[]string{"SET", "allowed:k", "v"}, "SET allowed:k: NOPERM"},
		} {
			_, err := c.do(tt.cmd...)
			if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && !strings.HasPrefix(got, tt.want)) {
				t.Errorf("%v as limited = %v, want %q", tt.cmd, err, tt.want)
			}
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		addrs := SecureRedisCluster(t, sec)
		for _, a := range addrs {
			refused(t, a)
			if err := admin.clusterReady(t.Context(), a, nil, nil); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		url := SecureRedisSentinel(t, sec)
		const prefix = "rediss+sentinel://"
		if !strings.HasPrefix(url, prefix) || !strings.HasSuffix(url, "/"+SentinelMaster) {
			t.Fatalf("SecureRedisSentinel = %q, want %s127.0.0.1:PORT/%s", url, prefix, SentinelMaster)
		}
		addr := strings.TrimSuffix(strings.TrimPrefix(url, prefix), "/"+SentinelMaster)
		refused(t, addr)
		c, err := anonymous.dial(t.Context(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.do("AUTH", "watcher", "spw"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.do("SENTINEL", "MASTERS"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("SENTINEL MASTERS as watcher = %v, want NOPERM", err)
		}
	})
}
