package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

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
	// MasterForKey returns the client of key's master in the slot map,
	// loading the map first if the client has none.
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
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

// While a cluster is in trouble the Store reloads the slot map every
// reloadEvery, until reloadFor after the last command that failed as when
// its slot moved: the commands of a dead master's slots may fail late
// (go-redis retries a pipeline's commands after failed dials, four times
// by default) or not at all (a circuit breaker keeps them from the
// store), so reloading only after failures would find a promoted replica
// seconds late.
const (
	reloadEvery = 250 * time.Millisecond
	reloadFor   = 5 * time.Second
)

// sawError asks a cluster client to reload its slot map when err, the
// error of a command, may mean that the command's slot moved, and keeps
// reloading it for reloadFor (see reloadEvery). Reloads are asynchronous
// and go-redis coalesces them (see clusterClient), so a burst of failing
// commands costs a few CLUSTER SLOTS per second, and the first command
// after the reload goes to the slot's new master.
func (c *redisCAS) sawError(err error) {
	if c.cluster == nil || err == nil || !movedOn(err) {
		return
	}
	c.cluster.ReloadState(context.Background())
	c.reloadUntil.Store(time.Now().Add(reloadFor).UnixNano())
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	if !c.reloading && !c.closed.Load() {
		c.reloading = true
		c.reloads.Add(1)
		go c.keepReloading()
	}
}

// keepReloading reloads the slot map every reloadEvery until reloadUntil
// or until the Store is closed.
func (c *redisCAS) keepReloading() {
	defer c.reloads.Done()
	t := time.NewTicker(reloadEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stopReloads:
			return
		case <-t.C:
		}
		c.reloadMu.Lock()
		done := time.Now().UnixNano() > c.reloadUntil.Load()
		if done {
			c.reloading = false
		}
		c.reloadMu.Unlock()
		if done {
			return
		}
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
