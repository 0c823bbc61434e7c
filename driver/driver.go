// Package driver is the contract between sluice and a store that keeps
// rate-limit state shared by many processes.
//
// A store keeps opaque bytes per key and offers one operation: an atomic
// read-modify-write of a key's state ([Store]). Everything else (the
// policies, their arithmetic, the configuration fingerprint, the failure
// policy) lives above it, so a store written once runs every policy.
//
// Most stores are built from one of three building blocks, the ones the
// Bucket4j documentation describes for custom back ends:
//
//   - [CAS]: read, then compare-and-swap (Redis with a Lua compare, etcd,
//     NATS KV revisions); [NewCASStore] retries lost races until the
//     context ends.
//   - [Locker]: a pessimistic lock around read and write (advisory locks,
//     flock); [NewLockStore].
//   - [RowLocker]: SELECT … FOR UPDATE on a row that may not exist yet;
//     [NewRowLockStore] handles the first insert.
//
// Every policy runs on that one operation: a store implements no policy
// of its own, and the only optional interface is [Deleter], which
// Limiter.Reset uses when a store offers it. The conformance suite in package drivertest runs every
// policy's vectors against a store to prove it.
//
// # Keys
//
// A key is a key: a store accepts every key, any bytes of any length (NUL
// bytes, invalid UTF-8, a megabyte), never refuses one as an outage and
// never lets two keys share a state. It holds a key of fewer than
// [MaxKeyLen] bytes as it is, and a longer one either as it is too (Redis
// and memory, which have no bound) or under [ShortKey]'s digest form,
// which is MaxKeyLen bytes long and so never equals a key held as it is
// (an SQL key column of MaxKeyLen bytes). The rule applies to the key the
// store is given, which includes what the callers above it added (the
// server's "<limiter>:"), with the store's own prefix (redisstore's
// "sluice:") counted in when the store has a bound. The conformance suite
// checks it on every store.
//
// # Errors
//
// A store's errors must say whether anything may have been written,
// because a limiter must never retry a call whose tokens may already have
// been taken:
//
//   - [ErrConflict]: another writer won; nothing was written. Safe to
//     retry, and a limiter does, until its store timeout: contention on a
//     healthy store must end in an answer, not a failure, so a store
//     should resolve it itself (as NewCASStore does) rather than return
//     ErrConflict after a fixed count.
//   - [ErrUnavailable]: the store could not be reached, or refused the
//     call, before anything was written. Safe to fall back.
//   - [ErrIndeterminate]: the write was sent but its outcome is unknown (a
//     timeout after sending). Not safe to retry.
//
// Wrap the underlying error with %w and one of these, e.g.
// fmt.Errorf("redisstore: %w: %w", driver.ErrUnavailable, err). A context
// that ended is returned as ctx.Err(), wrapped with ErrIndeterminate when
// the write may have been sent; a bare ctx.Err() (or one wrapped with
// ErrUnavailable) means nothing was written, and a limiter reports it as
// ErrUnavailable.
package driver

import (
	"context"
	"errors"
	"time"
)

var (
	// ErrConflict means another writer changed the key first and nothing
	// was written. The caller may run the update again.
	ErrConflict = errors.New("driver: conflict")
	// ErrUnavailable means the store could not be reached or refused the
	// call before anything was written.
	ErrUnavailable = errors.New("driver: store unavailable")
	// ErrIndeterminate means the write may or may not have happened. The
	// caller must not run the update again.
	ErrIndeterminate = errors.New("driver: outcome unknown")
)

// UpdateFunc computes a key's next state from its current one, which is nil
// when the key has none. It returns the next state, how long the store
// should keep it (ttl > 0; the store may keep it longer, and 0 means no
// expiry), and whether it changed: an unchanged state is not written.
//
// A store may call it more than once (after a conflict), so it must have no
// side effects: only its last call counts. It must not change state, which
// may be the store's own memory, and must not keep state or next after it
// returns; the store may reuse their memory, so it copies next to keep it.
type UpdateFunc func(state []byte) (next []byte, ttl time.Duration, changed bool)

// Store is what a store implements: an atomic read-modify-write of one
// key's state. Update reads key's state, calls fn, and writes what fn
// returns when it changed, so that no other Update of the same key, from
// any process, happens between the read and the write.
//
// Update must be safe for concurrent use and honour ctx, and accept every
// key (see Keys in the package doc). Its errors follow the package's
// rules (ErrConflict, ErrUnavailable, ErrIndeterminate).
type Store interface {
	Update(ctx context.Context, key string, fn UpdateFunc) error
}

// Deleter is implemented by stores that can forget a key at once.
type Deleter interface {
	Delete(ctx context.Context, key string) error
}

// Partitioner is implemented by stores whose keys live on servers that
// fail on their own, as the masters of a Redis Cluster do. A limiter
// keeps a circuit breaker per partition: a server that fails opens the
// circuit of its own keys, and the other keys' calls still go to the
// store.
type Partitioner interface {
	// Partition names the partition that holds key now, for instance
	// the address of its master, or returns "" when it does not know.
	// It must not block: it is asked before every call. A key may move
	// to another partition, as when a replica takes over from a master.
	Partition(key string) string
}
