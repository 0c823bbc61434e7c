package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/redisstore"
)

// replyError is an error reply of a Redis server, as go-redis reports it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// faultyCluster is a cluster client that fails every command with err
// and counts the reloads of its slot map that it is asked for. Its
// ForEachMaster fails with masterErr.
type faultyCluster struct {
	err, masterErr error
	reloads        atomic.Int64
}

func (c *faultyCluster) Process(_ context.Context, cmd redis.Cmder) error {
	cmd.SetErr(c.err)
	return c.err
}

func (c *faultyCluster) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return nil, errors.New("faultyCluster: no pipelines") // the tests turn pipelining off
}

func (c *faultyCluster) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "script", "load", script)
	cmd.SetErr(c.err)
	return cmd
}

func (c *faultyCluster) ReloadState(context.Context) { c.reloads.Add(1) }

func (c *faultyCluster) MasterForKey(context.Context, string) (*redis.Client, error) {
	return nil, c.err
}

func (c *faultyCluster) ForEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	return c.masterErr
}

// TestClusterReloadsOnError: a command that fails as when its slot's
// master died or moved (no connection, a broken one, a timeout, a
// CLUSTERDOWN or MOVED reply) makes the Store ask the cluster client to
// reload its slot map, which go-redis does by itself only after MOVED
// and READONLY, or once a minute; an error reply that says nothing of
// the topology does not.
func TestClusterReloadsOnError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name   string
		err    error
		reload bool
	}{
		{"connection refused", refused, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"connection closed", io.EOF, true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"timeout", fmt.Errorf("i/o: %w", context.DeadlineExceeded), true},
		{"CLUSTERDOWN", replyError("CLUSTERDOWN The cluster is down"), true},
		{"MOVED", replyError("MOVED 3999 127.0.0.1:6381"), true},
		{"TRYAGAIN", replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"WRONGTYPE", replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"ERR", replyError("ERR unknown command"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &faultyCluster{err: tt.err}
			s := newStore(t, c, redisstore.WithPipelining(false))
			err := s.Update(context.Background(), "k", increment)
			if !errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, driver.ErrIndeterminate) {
				t.Errorf("Update = %v, want a driver error", err)
			}
			if got := c.reloads.Load() > 0; got != tt.reload {
				t.Errorf("after Update failed with %v: slot map reloaded = %v, want %v", tt.err, got, tt.reload)
			}
		})
	}
}

// TestClusterPing: Ping of a cluster asks every master (through
// ForEachMaster, which reloads the slot map first), so a master that
// cannot be reached fails it even though another node answers.
func TestClusterPing(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	s := newStore(t, &faultyCluster{masterErr: refused}, redisstore.WithPipelining(false))
	if err := s.Ping(context.Background()); !errors.Is(err, driver.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Ping = %v, want ErrUnavailable wrapping ECONNREFUSED", err)
	}
	if err := newStore(t, cluster(t)).Ping(context.Background()); err != nil {
		t.Errorf("Ping of a healthy cluster = %v", err)
	}
}

// stuckMaster is a cluster client whose commands to one master, while
// it is set, wait until released: a master that does not answer.
type stuckMaster struct {
	*redis.ClusterClient
	stuck   atomic.Pointer[string] // the master's address
	entered chan struct{}          // gets a value when a command starts to wait
	release chan struct{}          // closed to let the waiting commands go
}

// wait waits while cmds has a command on the stuck master.
func (c *stuckMaster) wait(ctx context.Context, cmds ...redis.Cmder) {
	addr := c.stuck.Load()
	if addr == nil {
		return
	}
	for _, cmd := range cmds {
		key := fmt.Sprint(cmd.Args()[1]) // GET, DEL: the key; EVALSHA: the SHA, then…
		if cmd.Name() == "evalsha" {
			key = fmt.Sprint(cmd.Args()[3])
		}
		if m, err := c.MasterForKey(ctx, key); err == nil && m.Options().Addr == *addr {
			c.entered <- struct{}{}
			<-c.release
			return
		}
	}
}

func (c *stuckMaster) Process(ctx context.Context, cmd redis.Cmder) error {
	c.wait(ctx, cmd)
	return c.ClusterClient.Process(ctx, cmd)
}

func (c *stuckMaster) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	rec := &recorder{Pipeliner: c.ClusterClient.Pipeline()}
	_ = fn(rec) // redisstore's fn only queues commands
	c.wait(ctx, rec.cmds...)
	return c.ClusterClient.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range rec.cmds {
			_ = p.Process(ctx, cmd)
		}
		return nil
	})
}

// recorder is a Pipeliner that notes the commands queued on it.
type recorder struct {
	redis.Pipeliner
	cmds []redis.Cmder
}

func (r *recorder) Process(_ context.Context, cmd redis.Cmder) error {
	r.cmds = append(r.cmds, cmd)
	return nil
}

// TestClusterMasterHoldsUpItsOwn: while one master does not answer, the
// commands of another master's keys go out and get their replies: each
// master has its own pipeline. With one pipeline for the whole cluster,
// a command of a healthy master queued behind a pipeline that waited for
// a dead one, and the store timed out on every key.
func TestClusterMasterHoldsUpItsOwn(t *testing.T) {
	c := &stuckMaster{ClusterClient: cluster(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := newStore(t, c)
	ctx := context.Background()
	// A key on each of two masters; every master's pipeline in use.
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < 3; i++ {
		k := fmt.Sprint("k", i)
		m, err := c.MasterForKey(ctx, prefix(t)+k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byMaster[m.Options().Addr]; !ok {
			byMaster[m.Options().Addr] = k
			mustUpdate(t, s, k, increment)
		}
	}
	var stuck, healthy string
	for addr, k := range byMaster {
		if stuck == "" {
			stuck = addr
			c.stuck.Store(&addr)
			continue
		}
		healthy = k
	}
	waiting := make(chan error, 1)
	go func() { waiting <- s.Update(ctx, byMaster[stuck], increment) }()
	<-c.entered // the stuck master's command waits in go-redis

	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.Update(uctx, healthy, increment)
	close(c.release)
	if err != nil {
		t.Errorf("Update of %q on a healthy master while master %s hangs = %v, want nil", healthy, stuck, err)
	}
	if err := <-waiting; err != nil {
		t.Errorf("Update on the released master = %v", err)
	}
}

// TestClusterKeepsReloading: after a command failed as when its slot
// moved, the Store keeps reloading the slot map for a while with no
// further command (calls may be kept from the store by a circuit
// breaker, or wait behind go-redis's retries), and stops when closed.
func TestClusterKeepsReloading(t *testing.T) {
	c := &faultyCluster{err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	s, err := redisstore.New(c, redisstore.WithPipelining(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(context.Background(), "k", increment); err == nil {
		t.Fatal("Update = nil, want the client's error")
	}
	after := c.reloads.Load()
	// Real time must pass: a generous deadline, not a bound.
	for deadline := time.Now().Add(30 * time.Second); c.reloads.Load() < after+3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d reloads of the slot map in 30s after the failed command, want 3", c.reloads.Load()-after)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()
	closed := c.reloads.Load()
	time.Sleep(time.Second)
	if n := c.reloads.Load() - closed; n != 0 {
		t.Errorf("%d reloads of the slot map after Close, want none", n)
	}
}

// TestPartition: with a cluster client, a key's partition is its master's
// address, once the client has a slot map; a standalone server is one
// partition, "".
func TestPartition(t *testing.T) {
	c := cluster(t)
	s := newStore(t, c)
	if p := s.Partition("k"); p != "" {
		t.Errorf("Partition before any command = %q, want \"\": the client may have no slot map yet", p)
	}
	mustUpdate(t, s, "k", increment)
	m, err := c.MasterForKey(context.Background(), prefix(t)+"k")
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Partition("k"); p != m.Options().Addr {
		t.Errorf("Partition(k) = %q, want its master %s", p, m.Options().Addr)
	}
	if p := newStore(t, standalone(t)).Partition("k"); p != "" {
		t.Errorf("Partition on a standalone server = %q, want \"\"", p)
	}
}
