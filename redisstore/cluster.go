package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// clusterClient is what a Store uses of a *redis.ClusterClient beyond
// Client, found by a type assertion: the slot map's reload and the
// masters.
type clusterClient interface {
	// ReloadState reloads the slot map in the background; go-redis
	// runs one reload at a time and, while one runs, queues at most one
	// more, started 200ms after it ends.
	ReloadState(ctx context.Context)
	// ForEachMaster reloads the slot map, then calls fn on every master
	// of it, concurrently, and returns one of fn's errors.
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// movedOn reports whether err, the error of a command, may mean that
// the cluster moved the command's slot to another node: the node did not
// answer (refused or broken connections, timeouts, no connection to be
// had from the pool), or answered that it does not serve the slot now.
// go-redis reloads its slot map by itself after MOVED and READONLY
// replies only; after a master dies it keeps sending its slots' commands
// to the dead address until its periodic reload, a minute by default,
// long after a replica took over.
func movedOn(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, p := range []string{"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "LOADING"} {
			if redis.HasErrorPrefix(rerr, p) {
				return true
			}
		}
		return false // the node answered: NOSCRIPT, WRONGTYPE and the like
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// sawError asks a cluster client to reload its slot map when err, the
// error of a command, may mean that the command's slot moved. Reloads
// are asynchronous and go-redis coalesces them (see clusterClient), so
// a burst of failing commands costs a few CLUSTER SLOTS per second, and
// the first command after the reload goes to the slot's new master.
func (c *redisCAS) sawError(err error) {
	if c.cluster != nil && err != nil && movedOn(err) {
		c.cluster.ReloadState(context.Background())
	}
}

// pingCluster asks every master of the slot map, reloaded first, for
// CLUSTER INFO: the cluster serves every slot only if every master
// answers and reports cluster_state:ok. A master that died before its
// replica took over, or slots that no master serves, fail it.
func pingCluster(ctx context.Context, cc clusterClient) error {
	return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		info, err := m.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("master %s: %w", m.Options().Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("master %s: %w", m.Options().Addr, errNotAllSlots)
		}
		return nil
	})
}

// errNotAllSlots is the cause of a ping of a cluster whose nodes report
// that some slots have no master that answers.
var errNotAllSlots = errors.New("the cluster reports cluster_state other than ok: some slots are not served")
