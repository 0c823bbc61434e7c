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
