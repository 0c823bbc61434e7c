package testserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StartRedis starts a Redis server on a free 127.0.0.1 port, with no
// persistence and its directory under os.TempDir, and waits until it
// answers PING. It returns the server's URL, "redis://127.0.0.1:PORT/0",
// and stop, which kills the server, waits for it and removes its
// directory. Start-up is bounded by ctx and by one minute. If
// redis-server is not installed, the error is a *MissingError.
func StartRedis(ctx context.Context) (url string, stop func() error, err error) {
	url, _, stop, err = startRedisProcess(ctx, nil)
	return url, stop, err
}

// startRedisProcess is StartRedis, secured as sec says unless it is nil,
// returning the server's process too.
func startRedisProcess(ctx context.Context, sec *Secure) (url string, p *process, stop func() error, err error) {
	url, stop, err = startIn(ctx, "redis", func(ctx context.Context, dir string, own func(*process)) (string, error) {
		bin, a, err := sec.redis()
		if err != nil {
			return "", err
		}
		if p, _, err = startOnFreePort(ctx, func(port int) (*process, error) { return startRedis(bin, dir, port, sec) }, a.ping); err != nil {
			return "", err
		}
		own(p)
		return sec.scheme("redis") + p.addr + "/0", nil
	})
	return url, p, stop, err
}

// StartRedisCluster starts three Redis servers in cluster mode on free
// 127.0.0.1 ports, each with its port+10000 free for the cluster bus,
// gives each a third of the 16384 slots and no replica, and waits until
// every node reports cluster_state:ok and knows the others by their
// addresses. It returns the nodes' addresses, "127.0.0.1:PORT", and stop,
// which kills the nodes, waits for them and removes their directory.
// Start-up is bounded by ctx and by one minute. If redis-server is not
// installed, the error is a *MissingError.
func StartRedisCluster(ctx context.Context) (addrs []string, stop func() error, err error) {
	return startClusterMasters(ctx, nil)
}

// startClusterMasters is StartRedisCluster, secured as sec says unless it
// is nil.
func startClusterMasters(ctx context.Context, sec *Secure) (addrs []string, stop func() error, err error) {
	c, stop, err := startCluster(ctx, 0, sec)
	if err != nil {
		return nil, nil, err
	}
	return c.Masters, stop, nil
}

// ReplicatedCluster is a Redis Cluster of three masters with one replica
// each, as StartRedisClusterWithReplicas starts it. Kill is safe for
// simultaneous use by multiple goroutines.
type ReplicatedCluster struct {
	// Masters are the addresses of the nodes started as masters,
	// "127.0.0.1:PORT"; Replicas[i] is the address of Masters[i]'s
	// replica. A failover swaps their roles but not these lists.
	Masters, Replicas []string
	// NodeTimeout is the nodes' cluster-node-timeout: a master that
	// stops answering is taken for failed after it, and its replica is
	// promoted soon after.
	NodeTimeout time.Duration

	procs map[string]*process // by address
}

// String lists the nodes, for logs.
func (c *ReplicatedCluster) String() string {
	return fmt.Sprintf("masters %v, replicas %v", c.Masters, c.Replicas)
}

// Kill kills the node at addr with SIGKILL, as a crash would, and waits
// for it to exit. Stopping the cluster later reports nothing about it.
func (c *ReplicatedCluster) Kill(addr string) error {
	p, ok := c.procs[addr]
	if !ok {
		return fmt.Errorf("testserver: kill %s: no such node in %v and %v", addr, c.Masters, c.Replicas)
	}
	return p.stop() // SIGKILL, Redis's stop signal here
}

// clusterNodeTimeout is the cluster-node-timeout of the nodes of a
// ReplicatedCluster: short, so that a test sees a failover within a few
// seconds, as an operator who tunes for fast failover would set it.
const clusterNodeTimeout = time.Second

// StartRedisClusterWithReplicas starts a Redis Cluster of six nodes on
// free 127.0.0.1 ports, each with its port+10000 free for the cluster
// bus: three masters, each with a third of the 16384 slots, and one
// replica of each, all with cluster-node-timeout 1000 ms. It waits until
// every node reports cluster_state:ok and sees every replica in sync with
// its master, so that killing a master (ReplicatedCluster.Kill) gets its
// replica promoted. stop kills the nodes, waits for them and removes
// their directory. Start-up is bounded by ctx and by one minute. If
// redis-server is not installed, the error is a *MissingError.
func StartRedisClusterWithReplicas(ctx context.Context) (c *ReplicatedCluster, stop func() error, err error) {
	return startCluster(ctx, clusterNodeTimeout, nil)
}

// startCluster starts three masters and, when nodeTimeout is not 0, a
// replica of each with that cluster-node-timeout, secured as sec says
// unless it is nil.
func startCluster(ctx context.Context, nodeTimeout time.Duration, sec *Secure) (*ReplicatedCluster, func() error, error) {
	return startIn(ctx, "redis-cluster", func(ctx context.Context, dir string, own func(*process)) (*ReplicatedCluster, error) {
		bin, a, err := sec.redis()
		if err != nil {
			return nil, err
		}
		nodes := 3
		if nodeTimeout > 0 {
			nodes = 6
		}
		// The ports are found together so they differ; a node that loses
		// its port or bus port to another process fails the try.
		var procs []*process
		for try := 0; ; try++ {
			procs, err = startClusterNodes(ctx, bin, dir, nodes, nodeTimeout, sec, a)
			if err == nil || try == 2 || !addrInUse(err.Error()) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		c := &ReplicatedCluster{NodeTimeout: nodeTimeout, procs: make(map[string]*process, len(procs))}
		for i, p := range procs {
			own(p)
			if i < 3 {
				c.Masters = append(c.Masters, p.addr)
			} else {
				c.Replicas = append(c.Replicas, p.addr)
			}
			c.procs[p.addr] = p
		}
		return c, a.formCluster(ctx, procs[:3], procs[3:])
	})
}

// startRedis launches redis-server on port in dir, secured as sec says
// unless it is nil, with args added, with its log in dir. It does not wait
// for it.
func startRedis(bin, dir string, port int, sec *Secure, args ...string) (*process, error) {
	args = append(append(sec.args(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
	), args...)
	srv := server{name: "redis-server", ready: "Ready to accept connections", stopSig: syscall.SIGKILL, deathSig: syscall.SIGKILL}
	return srv.launch(exec.Command(bin, args...), dir, port)
}

// startClusterNodes launches n cluster nodes and waits until each answers
// PING. A nodeTimeout of 0 leaves Redis's default cluster-node-timeout.
// When one fails, it stops them all.
func startClusterNodes(ctx context.Context, bin, dir string, n int, nodeTimeout time.Duration, sec *Secure, a *redisAccess) (procs []*process, err error) {
	defer func() {
		if err != nil {
			for _, p := range procs {
				p.stop()
			}
		}
	}()
	ports, err := freePorts(n, true)
	if err != nil {
		return nil, err
	}
	for _, port := range ports {
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			// A replica syncs at once, not 5s after it asks.
			"--repl-diskless-sync-delay", "0",
		}
		if nodeTimeout > 0 {
			args = append(args, "--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10))
		}
		p, err := startRedis(bin, dir, port, sec, args...)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		addr := p.addr
		if err := waitReady(ctx, p, func(ctx context.Context) error { return a.ping(ctx, addr) }); err != nil {
			return procs, err
		}
	}
	return procs, nil
}

// formCluster makes one cluster of the started nodes, much as redis-cli
// --cluster create does: each master gets a contiguous third of the slots
// and its own config epoch, every node meets the others, and replicas[i]
// replicates masters[i]. It then waits until every node knows every slot,
// which takes about two seconds (a master reports cluster_state:ok no
// sooner than 2s after it started), and every replica is in sync.
func (a *redisAccess) formCluster(ctx context.Context, masters, replicas []*process) error {
	const slots = 16384
	for i, p := range masters {
		lo, hi := i*slots/len(masters), (i+1)*slots/len(masters)
		args := []string{"CLUSTER", "ADDSLOTS"} // not ADDSLOTSRANGE, which needs Redis 7
		for s := lo; s < hi; s++ {
			args = append(args, strconv.Itoa(s))
		}
		if _, err := a.commands(ctx, p.addr,
			args,
			[]string{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
		); err != nil {
			return fmt.Errorf("testserver: create cluster: %w%s", err, p.logTail())
		}
	}
	procs := append(slices.Clone(masters), replicas...)
	// Every pair meets, not just the first node and the others: gossip
	// would take a second or two to introduce the others to each other.
	for i, p := range procs {
		var meets [][]string
		for _, q := range procs[i+1:] {
			host, port, _ := net.SplitHostPort(q.addr)
			meets = append(meets, []string{"CLUSTER", "MEET", host, port})
		}
		if _, err := a.commands(ctx, p.addr, meets...); err != nil {
			return fmt.Errorf("testserver: create cluster: %w%s", err, p.logTail())
		}
	}
	// want[addr] is the ID of the master a replica at addr replicates.
	want := make(map[string]string, len(replicas))
	for i, r := range replicas {
		m := masters[i]
		err := waitReady(ctx, r, func(ctx context.Context) error {
			id, err := a.nodeID(ctx, m.addr)
			if err != nil {
				return err
			}
			// Fails until the replica has heard of the master by gossip.
			if _, err := a.commands(ctx, r.addr, []string{"CLUSTER", "REPLICATE", id}); err != nil {
				return err
			}
			want[r.addr] = id
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w%s", err, m.logTail())
		}
	}
	for _, p := range procs {
		err := waitReady(ctx, p, func(ctx context.Context) error {
			if err := a.clusterReady(ctx, p.addr, procs, want); err != nil {
				return err
			}
			if _, ok := want[p.addr]; ok {
				return a.replicaSynced(ctx, p.addr)
			}
			return nil
		})
		if err != nil {
			for _, q := range procs {
				if q != p {
					err = fmt.Errorf("%w%s", err, q.logTail())
				}
			}
			return err
		}
	}
	return nil
}

// nodeID returns the cluster node ID of the node at addr.
func (a *redisAccess) nodeID(ctx context.Context, addr string) (string, error) {
	v, err := a.command(ctx, addr, "CLUSTER", "MYID")
	if err != nil {
		return "", err
	}
	id, _ := v.(string)
	if id == "" {
		return "", fmt.Errorf("CLUSTER MYID = %v, want an ID", v)
	}
	return id, nil
}

// clusterReady reports an error unless the node at addr says
// cluster_state:ok and lists every node of procs at its address, each
// replica of replicas (address → its master's ID) as a replica of that
// master.
func (a *redisAccess) clusterReady(ctx context.Context, addr string, procs []*process, replicas map[string]string) error {
	replies, err := a.commands(ctx, addr, []string{"CLUSTER", "INFO"}, []string{"CLUSTER", "NODES"})
	if err != nil {
		return err
	}
	if s, _ := replies[0].(string); !strings.Contains(s, "cluster_state:ok") {
		return fmt.Errorf("CLUSTER INFO = %q, want cluster_state:ok", s)
	}
	s, _ := replies[1].(string)
	for _, p := range procs {
		// Lines read "<id> 127.0.0.1:PORT@BUS flags master-id …", the
		// flags "myself,slave" or "slave" for a replica.
		i := strings.Index(s, " "+p.addr+"@")
		if i < 0 {
			return fmt.Errorf("CLUSTER NODES = %q, want %s in it", s, p.addr)
		}
		master, ok := replicas[p.addr]
		if !ok {
			continue
		}
		line, _, _ := strings.Cut(s[i:], "\n")
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[1], "slave") || f[2] != master {
			return fmt.Errorf("CLUSTER NODES says %q, want %s a replica of %s", line, p.addr, master)
		}
	}
	return nil
}

// ping reports an error unless the server at addr answers PING with
// PONG.
func (a *redisAccess) ping(ctx context.Context, addr string) error {
	v, err := a.command(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING = %q, want PONG", v)
	}
	return nil
}

// commands sends each of cmds to the server at addr on one connection,
// stopping at the first error, and returns their replies.
func (a *redisAccess) commands(ctx context.Context, addr string, cmds ...[]string) ([]any, error) {
	c, err := a.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	replies := make([]any, len(cmds))
	for i, cmd := range cmds {
		if replies[i], err = c.do(cmd...); err != nil {
			return nil, err
		}
	}
	return replies, nil
}

// command sends cmd to the server at addr on a connection of its own and
// returns its reply.
func (a *redisAccess) command(ctx context.Context, addr string, cmd ...string) (any, error) {
	replies, err := a.commands(ctx, addr, cmd)
	if err != nil {
		return nil, err
	}
	return replies[0], nil
}

// respConn is a connection speaking RESP2, enough of it for the commands
// above.
type respConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// dial connects to the server at addr as a says: a nil a connects in
// the clear, without logging in.
func (a *redisAccess) dial(ctx context.Context, addr string) (*respConn, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return &respConn{conn: c, r: bufio.NewReader(c)}, nil
	}
	if a.tls != nil {
		cfg := a.tls.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		c = tc
	}
	rc := &respConn{conn: c, r: bufio.NewReader(c)}
	if a.password != "" {
		if _, err := rc.do("AUTH", a.password); err != nil {
			rc.Close()
			return nil, err
		}
	}
	return rc, nil
}

func (c *respConn) Close() error { return c.conn.Close() }

// do sends a command and returns its reply: a string for simple and bulk
// strings, an int64 for integers, []any for arrays and nil for a null.
// An error reply is an error that quotes the command.
func (c *respConn) do(args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.conn, b.String()); err != nil {
		return nil, err
	}
	v, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(args[:min(2, len(args))], " "), err)
	}
	return v, nil
}

// read reads one reply.
func (c *respConn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+':
		return rest, nil
	case '-':
		return nil, errors.New(rest)
	case ':':
		return strconv.ParseInt(rest, 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return nil, fmt.Errorf("bad RESP length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		if kind == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(c.r, buf); err != nil {
				return nil, err
			}
			return string(buf[:n]), nil
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("unknown RESP reply %q", line)
}

// SentinelMaster is the master name that StartRedisSentinel's Sentinel
// watches.
const SentinelMaster = "sluice"

// StartRedisSentinel starts a Redis master, one replica of it and one
// Sentinel that watches them with a quorum of 1, each on a free 127.0.0.1
// port, and waits until the replica is in sync and the Sentinel knows it,
// so that a failover (SENTINEL FAILOVER) can promote it. It returns
// "redis+sentinel://127.0.0.1:PORT/" + SentinelMaster, the Sentinel's
// address in sluice's store URL form, and stop, which kills all three and
// removes their directory. Start-up is bounded by ctx and by one minute.
// If redis-server is not installed, the error is a *MissingError.
func StartRedisSentinel(ctx context.Context) (url string, stop func() error, err error) {
	return startSentinels(ctx, nil)
}

// startSentinels is StartRedisSentinel, secured as sec says unless it is
// nil.
func startSentinels(ctx context.Context, sec *Secure) (url string, stop func() error, err error) {
	return startIn(ctx, "redis-sentinel", func(ctx context.Context, dir string, own func(*process)) (string, error) {
		bin, a, err := sec.redis()
		if err != nil {
			return "", err
		}
		master, mport, err := startOnFreePort(ctx,
			// Without the delay, a replica syncs at once rather than 5s later.
			func(port int) (*process, error) {
				return startRedis(bin, dir, port, sec, "--repl-diskless-sync-delay", "0")
			},
			a.ping)
		if err != nil {
			return "", err
		}
		own(master)
		replica, _, err := startOnFreePort(ctx,
			func(port int) (*process, error) {
				return startRedis(bin, dir, port, sec, "--replicaof", "127.0.0.1", strconv.Itoa(mport))
			},
			a.replicaSynced)
		if err != nil {
			return "", err
		}
		own(replica)
		sentinel, sport, err := startOnFreePort(ctx,
			func(port int) (*process, error) { return startSentinel(bin, dir, port, master.addr, sec) },
			func(ctx context.Context, addr string) error { return a.sentinelKnows(ctx, addr, replica.addr) })
		if err != nil {
			return "", err
		}
		own(sentinel)
		return fmt.Sprintf("%s127.0.0.1:%d/%s", sec.scheme("redis+sentinel"), sport, SentinelMaster), nil
	})
}

// replicaSynced reports an error unless the replica at addr is linked to
// its master and done with the first sync.
func (a *redisAccess) replicaSynced(ctx context.Context, addr string) error {
	v, err := a.command(ctx, addr, "INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
		return fmt.Errorf("INFO replication = %q, want master_link_status:up and no sync in progress", info)
	}
	return nil
}

// startSentinel launches a Sentinel on port that watches the master at
// masterAddr, secured as sec says unless it is nil. It does not wait for
// it.
func startSentinel(bin, dir string, port int, masterAddr string, sec *Secure) (*process, error) {
	host, mport, _ := net.SplitHostPort(masterAddr)
	// A Sentinel rewrites its config file, so each has its own.
	conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
	text := sec.sentinelConf(port) + fmt.Sprintf("bind 127.0.0.1\ndir %[1]s\n"+
		"sentinel monitor %[2]s %[3]s %[4]s 1\n"+
		"sentinel down-after-milliseconds %[2]s 1000\n"+
		"sentinel failover-timeout %[2]s 5000\n",
		dir, SentinelMaster, host, mport)
	if sec != nil && sec.Password != "" {
		text += fmt.Sprintf("sentinel auth-pass %s %s\n", SentinelMaster, sec.Password)
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	srv := server{name: "redis-sentinel", ready: "+monitor master", stopSig: syscall.SIGKILL, deathSig: syscall.SIGKILL}
	return srv.launch(exec.Command(bin, conf, "--sentinel", "--daemonize", "no", "--logfile", ""), dir, port)
}

// sentinelKnows reports an error unless the Sentinel at addr lists the
// replica at replicaAddr for SentinelMaster as one it could promote: up,
// linked to its master and recently heard from, since a Sentinel refuses
// a failover to a replica it has no fresh INFO of.
func (a *redisAccess) sentinelKnows(ctx context.Context, addr, replicaAddr string) error {
	v, err := a.command(ctx, addr, "SENTINEL", "REPLICAS", SentinelMaster)
	if err != nil {
		return err
	}
	replicas, _ := v.([]any)
	for _, r := range replicas {
		fields, _ := r.([]any)
		f := make(map[any]any, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			f[fields[i]] = fields[i+1]
		}
		if f["name"] != replicaAddr {
			continue
		}
		refresh, _ := strconv.Atoi(fmt.Sprint(f["info-refresh"]))
		if f["flags"] == "slave" && f["master-link-status"] == "ok" && refresh < 5000 {
			return nil
		}
		return fmt.Errorf("the Sentinel sees replica %s as %v, want it up and synced", replicaAddr, f)
	}
	return fmt.Errorf("SENTINEL REPLICAS %s = %v, want %s in it", SentinelMaster, replicas, replicaAddr)
}
