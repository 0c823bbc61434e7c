// Package redisstore is a [driver.Store] that keeps rate-limit state in
// Redis: a standalone server, one watched by Sentinel, or a Redis Cluster.
//
// # Clients
//
// [New] takes a go-redis v9 client, anything that satisfies [Client]:
//
//	// A standalone server.
//	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
//
//	// Sentinel: the client follows the master through failovers.
//	store, err := redisstore.New(redis.NewFailoverClient(&redis.FailoverOptions{
//		MasterName:    "mymaster",
//		SentinelAddrs: []string{"sentinel-1:26379", "sentinel-2:26379"},
//	}))
//
//	// A cluster.
//	store, err := redisstore.New(redis.NewClusterClient(&redis.ClusterOptions{
//		Addrs: []string{"node-1:6379", "node-2:6379", "node-3:6379"},
//	}))
//
// A redis.UniversalClient works as well. The Store does not own the
// client: close the Store, then the client.
//
// # Cluster failover
//
// go-redis's cluster client reloads its map of slots to masters after a
// MOVED or READONLY reply, or once a minute (ClusterStateReloadInterval);
// a master that dies answers neither, so on its own the client would keep
// sending the dead master's slots to its address for up to a minute after
// a replica took over. With a *redis.ClusterClient (found by its
// ReloadState, MasterForKey and ForEachMaster methods, so a wrapper that
// hides them hides this too), the Store asks for a reload after every
// command that failed as when its slot moved: no connection, a broken
// one, a timeout, a CLUSTERDOWN, TRYAGAIN, MASTERDOWN, READONLY, LOADING,
// MOVED or ASK reply; and from then on every 250ms until 5s after the
// last such failure, since the failures of a dead master's commands may
// come late or not at all while a circuit breaker keeps them from the
// store. go-redis runs one reload at a time, in the background. Each
// master has its own pipeline (see Pipelining), so a master that does not
// answer holds up the commands of its own slots only, and the Store is a
// driver.Partitioner whose partitions are the masters ([Store.Partition]):
// a limiter keeps a circuit breaker per master, so a master that fails
// opens the circuit of its own slots, and the keys of the other masters
// are still decided by the store.
//
// Decisions on a dead master's slots recover within about a second of
// its replica's promotion (TestClusterFailover: 3 masters with a replica
// each, cluster-node-timeout 1000, a master killed under load).
//
// [Store.Ping] of a cluster asks every master of a freshly reloaded map
// for CLUSTER INFO and fails unless each answers cluster_state:ok, so a
// readiness check fails while some slots have no master that answers.
//
// # What is stored
//
// Each key's state is one Redis string at the key's name with a prefix,
// "sluice:" unless [WithPrefix] says otherwise; the bytes are the policy's
// encoding, opaque to this package. Updates read with GET and write with a
// compare-and-swap Lua script (cas.lua, loaded with SCRIPT LOAD and run
// with EVALSHA, reloaded when a server answers NOSCRIPT). Every command
// touches one key, so keys spread over a cluster's slots freely.
//
// The Store remembers the state it last wrote or read for each of up to
// 100,000 keys ([WithStateCache]), so an update of a key that only this
// process writes costs one round trip, the compare-and-swap; a stale entry
// only costs a lost race. Since Redis deletes a state once its TTL has
// passed, an entry older than its TTL is taken for no state
// ([driver.WithPromptExpiry]): a key that comes back after being idle
// costs one round trip too, not a lost race against the expiry. See
// [driver.NewCASStore].
//
// # TTL
//
// A state is written with the TTL its policy asks for, rounded up to whole
// milliseconds (SET … PX), or without expiry when the TTL is 0. Redis
// expires it by the server's clock.
//
// # Pipelining
//
// By default one goroutine, started by New and stopped by [Store.Close],
// sends the commands of all callers: whatever is queued while a pipeline
// is in flight goes out together in the next (at most 256 commands), and
// a command queued while nothing is in flight goes out at once, on its own
// (go-redis's Process, so a client's hooks see it as a command, not a
// pipeline), with no timer. With a cluster client, each master has such a
// goroutine of its own, started at the first command of its slots (a
// master is found in the client's slot map, so that its pipelines go to
// one node). Under concurrency that is far fewer round trips and system
// calls than one per command; [WithPipelining](false) sends each command
// on its own instead. Either way a caller's context is honoured: a call
// whose context ends before its command was sent returns ctx.Err(); after
// it was sent, an update returns driver.ErrIndeterminate wrapping
// ctx.Err().
//
// # Errors
//
// Errors follow the driver contract: driver.ErrUnavailable when the server
// could not be reached or refused the command (connection refused, pool
// timeout, an error reply, a closed Store), driver.ErrIndeterminate when a
// write was sent and its outcome is unknown (a timeout or a broken
// connection after sending). A lost race is not an error: the update runs
// again, on the state the script returned with its refusal, until it wins
// or its context ends (driver.ErrConflict only past [WithMaxAttempts], if
// set).
//
// go-redis would re-send a command after a network error or a timeout
// (redis.Options.MaxRetries, 3 by default), which could apply a
// compare-and-swap twice, and whose retries, each after five dial
// attempts, outlast the store timeout when the server refuses
// connections, so that a refusal looked like a server that does not
// answer. The Store's commands tell go-redis not to (their NoRetry is
// true), whatever the client's MaxRetries: a command is sent at most
// once, and its error, "connection refused" for instance, is the one
// returned, wrapped with %w so that errors.Is finds syscall.ECONNREFUSED.
// A MOVED, ASK or READONLY reply, which says that the command did not
// run, is still followed to the right node. A store timeout shorter than
// the client's dial attempts (DialerRetries × DialerRetryTimeout, 400ms
// by default) still ends first and is reported as a timeout.
//
// # Clock
//
// Processes whose clocks disagree make inconsistent decisions on shared
// state. [ServerClock] returns a sluice.Clock that follows the server's
// TIME, as an option against client clock skew: it reads TIME once, adds
// local monotonic time, and re-reads TIME at most every
// [DefaultResyncInterval] ([WithResyncInterval]).
package redisstore
