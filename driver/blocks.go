package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/sleep"
)

// CAS is the building block of optimistic stores: a read, and a write that
// succeeds only if the state is still what was read.
type CAS interface {
	// Get returns key's state, or nil when it has none.
	Get(ctx context.Context, key string) ([]byte, error)
	// CompareAndSwap writes next, to be kept at least ttl (0: no expiry),
	// if key's state still equals old, where a nil old means the key must
	// have no state. It reports whether it wrote.
	CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error)
}

// SwapReader is a CAS whose compare-and-swap also returns the state it
// found when it did not write, in the same round trip, so that a lost
// race costs no extra read. NewCASStore uses it when c implements it.
type SwapReader interface {
	CAS
	// CompareAndSwapRead is CompareAndSwap that, when it does not write,
	// returns key's current state (nil when it has none) as cur.
	CompareAndSwapRead(ctx context.Context, key string, old, next []byte, ttl time.Duration) (cur []byte, swapped bool, err error)
}

// StoreOption configures the stores built from the building blocks.
type StoreOption func(*storeOptions)

type storeOptions struct {
	maxAttempts int  // 0: until the context ends
	cacheSize   int  // 0: no state cache
	expires     bool // the CAS deletes a state once its ttl has passed
}

// WithMaxAttempts bounds the attempts of one update to n, after which it
// fails with ErrConflict. The default, and any n < 1, is no bound: an
// update retries until its context ends, since a store that is reachable
// must not turn contention into a failure (see the package doc). Give
// the context a deadline.
func WithMaxAttempts(n int) StoreOption {
	return func(o *storeOptions) { o.maxAttempts = max(n, 0) }
}

// WithStateCache makes NewCASStore remember, for at most entries keys, the
// state it last wrote or read, so that an update can compare-and-swap
// without reading first. Entries ≤ 0 turns the cache off, which is the
// default. Other stores ignore it.
func WithStateCache(entries int) StoreOption {
	return func(o *storeOptions) {
		o.cacheSize = max(entries, 0)
	}
}

// WithPromptExpiry tells NewCASStore that its CAS deletes a state as
// soon as its ttl has passed, as Redis does, rather than some time after.
// With a state cache, a key whose cached state has outlived the ttl it
// was written with is then taken to have no state, and its update
// compares against none: one round trip, where comparing against the
// cached bytes would lose a race with the expiry and cost a second. A
// wrong guess is never wrong in effect (the compare-and-swap checks it);
// it only costs that second round trip. Other stores ignore it.
func WithPromptExpiry() StoreOption {
	return func(o *storeOptions) { o.expires = true }
}

func newStoreOptions(opts []StoreOption) storeOptions {
	var o storeOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// NewCASStore makes a Store of c: each update reads, computes and
// compares-and-swaps, and after a lost race computes again on the state
// that won, until it wins or its context ends (or, with WithMaxAttempts,
// after that many attempts it returns ErrConflict). The store is safe for
// concurrent use if c is.
//
// # Contention
//
// A lost race means another writer's update went in, so the writers of a
// key as a whole always progress. An update tries again at once after
// each of its first few losses, since a sleep, however short, leaves the
// key idle while the fresh writers of other processes go ahead of the
// sleeper; one that keeps losing backs off
// for a random time (full jitter) that grows with its losses and with how
// long its lost attempt took, up to 16 such attempts, which spreads the writers out
// so that each soon finds a window to win in: a success costs a few
// attempts, not one per writer. The chance of losing k races in a row falls
// geometrically with k, so on a healthy store an update ends long before
// any store timeout: contention costs latency, never an error. When c is
// a SwapReader, a lost race returns the state that won, and the next
// attempt needs no read.
//
// # State cache
//
// Without WithStateCache every update costs at least two round trips to
// the store: a Get and, when the state changed, a CompareAndSwap. With
// it, the store remembers per key the bytes it last wrote or read (a copy;
// at most the given number of keys, an arbitrary one of a full shard
// making room) and an update
//
//   - starts from the cached state if there is one, else from a Get;
//   - when fn changes the state, compares-and-swaps against the state it
//     started from, caching the new state when that wins; a lost race
//     drops the entry, reads the current state and tries again;
//   - when fn leaves a cached state unchanged, Gets the current state
//     once, since another process may have changed it (added tokens, say)
//     and fn decided on stale bytes: if it still equals the cached bytes,
//     the update is done, else fn runs again on the current state.
//
// So an uncontended key whose state this process last wrote costs one
// round trip per update: the CompareAndSwap, or the Get when nothing
// changes. A stale cache entry never makes an update wrong, since every
// decision is checked against the store; it only costs the round trips
// of a lost race. A key whose state expired in the store is such a stale
// entry, unless the store was made WithPromptExpiry.
//
// # Deleting
//
// If c implements Deleter, so does the returned Store: its Delete drops
// the key's cache entry and calls c's Delete. Otherwise the Store does
// not implement Deleter.
func NewCASStore(c CAS, opts ...StoreOption) Store {
	o := newStoreOptions(opts)
	s := &casStore{c: c, o: o, cache: newStateCache(o.cacheSize)}
	s.sr, _ = c.(SwapReader)
	if d, ok := c.(Deleter); ok {
		return &casDeleteStore{casStore: s, d: d}
	}
	return s
}

type casStore struct {
	c     CAS
	sr    SwapReader // c, when it is one; else nil
	o     storeOptions
	cache *stateCache // nil: no cache
}

// Backoff after lost races: none after the first casFreeLosses-1, then
// a random time below base·2^(losses-casFreeLosses), at most 16·base,
// where base is casBackoffBase or the duration of the lost attempt,
// whichever is longer. Scaling with the attempt's duration keeps the
// writers spread over a window that many attempts fit in, whatever the
// store's speed: with a fixed 5ms, 16 writers on a store of 2ms a call
// made 12 attempts per success. Backing off only after a few losses is
// what a fast store needs: from the second loss on, as before, four
// processes on one hot Redis key made 2,900 decisions/s with a p99 of
// 7-8ms, the key idle while the losers slept; from the eighth, 19,700
// with a p99 of 0.6ms (docs/benchmarks.md). casAttemptMax bounds the
// duration taken into account.
const (
	casBackoffBase = 50 * time.Microsecond
	casAttemptMax  = time.Second
	casFreeLosses  = 8
)

func (s *casStore) Update(ctx context.Context, key string, fn UpdateFunc) error {
	old, expiry, cached := s.cache.get(key)
	if cached && s.o.expires && !expiry.IsZero() && time.Now().After(expiry) {
		old = nil // expired in the store by now
	}
	if !cached {
		var err error
		if old, err = s.get(ctx, key); err != nil {
			return err
		}
	}
	for losses := 0; ; {
		next, ttl, changed := fn(old)
		if !changed {
			if !cached {
				return nil
			}
			// fn decided on cached bytes: check them once.
			cur, err := s.get(ctx, key)
			if err != nil {
				return err
			}
			if sameState(cur, old) {
				return nil
			}
			old, cached = cur, false
			continue
		}
		t0 := time.Now()
		cur, ok, read, err := s.swap(ctx, key, old, next, ttl)
		t1 := time.Now()
		rtt := t1.Sub(t0)
		if err != nil {
			s.cache.drop(key)
			return err
		}
		if ok {
			// The store set the expiry before it answered, so by t1+ttl
			// it has passed.
			var expiry time.Time
			if ttl > 0 {
				expiry = t1.Add(ttl)
			}
			s.cache.put(key, next, expiry)
			return nil
		}
		s.cache.drop(key)
		losses++
		if s.o.maxAttempts > 0 && losses >= s.o.maxAttempts {
			return fmt.Errorf("%w: key %s still contended after %d attempts", ErrConflict, QuoteKey(key), s.o.maxAttempts)
		}
		if err := backoff(ctx, losses, rtt); err != nil {
			return err
		}
		if !read {
			if cur, err = s.get(ctx, key); err != nil {
				return err
			}
		} else {
			s.cache.put(key, cur, time.Time{})
		}
		old, cached = cur, false
	}
}

// swap compares-and-swaps, returning the current state when it did not
// write and c could tell it (read).
func (s *casStore) swap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (cur []byte, ok, read bool, err error) {
	if s.sr != nil {
		cur, ok, err = s.sr.CompareAndSwapRead(ctx, key, old, next, ttl)
		return cur, ok, true, err
	}
	ok, err = s.c.CompareAndSwap(ctx, key, old, next, ttl)
	return nil, ok, false, err
}

// backoff waits before the attempt that follows the given number of lost
// races, the last of which took rtt, or returns ctx's error when it ends
// first.
func backoff(ctx context.Context, losses int, rtt time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if losses < casFreeLosses {
		return nil
	}
	base := max(casBackoffBase, min(rtt, casAttemptMax))
	return sleep.Backoff(ctx, base, losses-casFreeLosses, 16*base)
}

// get reads key's state from the store and caches it.
func (s *casStore) get(ctx context.Context, key string) ([]byte, error) {
	state, err := s.c.Get(ctx, key)
	if err != nil {
		s.cache.drop(key)
		return nil, err
	}
	s.cache.put(key, state, time.Time{})
	return state, nil
}

// sameState reports whether a and b are the same state, telling no state
// (nil) from an empty one.
func sameState(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// casDeleteStore is a casStore over a CAS that is also a Deleter.
type casDeleteStore struct {
	*casStore
	d Deleter
}

// Delete drops key's cache entry and deletes its state. The entry is
// dropped again afterwards, in case an update cached it meanwhile.
func (s *casDeleteStore) Delete(ctx context.Context, key string) error {
	s.cache.drop(key)
	err := s.d.Delete(ctx, key)
	s.cache.drop(key)
	return err
}

// maxCacheShards is how many shards a state cache has at most; a small
// cache has one shard per entry.
const maxCacheShards = 64

// stateCache maps keys to copies of their last known state. It is safe for
// concurrent use; a nil *stateCache caches nothing.
type stateCache struct {
	seed   maphash.Seed
	shards []cacheShard
}

type cacheShard struct {
	mu  sync.Mutex
	m   map[string]cacheEntry
	cap int      // at least 1
	_   [40]byte // keeps shards on separate cache lines
}

// cacheEntry is a key's last known state, never nil, and when the store
// will have deleted it by (zero: not known).
type cacheEntry struct {
	state  []byte
	expiry time.Time
}

// newStateCache returns a cache of at most entries keys, or nil when
// entries ≤ 0. The shards' capacities add up to entries.
func newStateCache(entries int) *stateCache {
	if entries <= 0 {
		return nil
	}
	n := min(entries, maxCacheShards)
	c := &stateCache{seed: maphash.MakeSeed(), shards: make([]cacheShard, n)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cacheEntry)
		c.shards[i].cap = entries / n
		if i < entries%n {
			c.shards[i].cap++
		}
	}
	return c
}

func (c *stateCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// get returns a copy of key's cached state and its expiry, and whether
// there was one.
func (c *stateCache) get(key string) ([]byte, time.Time, bool) {
	if c == nil {
		return nil, time.Time{}, false
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if !ok {
		return nil, time.Time{}, false
	}
	return bytes.Clone(e.state), e.expiry, true
}

// put caches a copy of state as key's, with the time by which the store
// will have deleted it (zero: not known), or drops key's entry when state is
// nil: a key without state is not cached. A full shard first evicts an
// arbitrary entry.
func (c *stateCache) put(key string, state []byte, expiry time.Time) {
	if c == nil {
		return
	}
	if state == nil {
		c.drop(key)
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[key]; ok {
		sh.m[key] = cacheEntry{append(old.state[:0], state...), expiry} // no one else holds old
		return
	}
	if len(sh.m) >= sh.cap {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
	sh.m[key] = cacheEntry{bytes.Clone(state), expiry}
}

// drop forgets key's cached state.
func (c *stateCache) drop(key string) {
	if c == nil {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// Locker is the building block of pessimistic stores: a transaction that
// locks a key, reads it, writes it and unlocks it.
type Locker interface {
	// Begin starts a transaction on key.
	Begin(ctx context.Context, key string) (LockedTx, error)
}

// LockedTx is one transaction of a Locker. NewLockStore calls LockAndGet,
// then Create or Update when the state changed, then Unlock and Commit; on
// an error it calls Rollback instead; Release always comes last.
type LockedTx interface {
	// LockAndGet takes key's lock and returns its state, nil when none.
	LockAndGet(ctx context.Context) ([]byte, error)
	// Create writes the state of a key that had none.
	Create(ctx context.Context, state []byte, ttl time.Duration) error
	// Update replaces the key's state.
	Update(ctx context.Context, state []byte, ttl time.Duration) error
	Unlock(ctx context.Context) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Release frees what the transaction holds.
	Release()
}

// NewLockStore makes a Store of l.
func NewLockStore(l Locker) Store { return lockStore{l} }

type lockStore struct{ l Locker }

func (s lockStore) Update(ctx context.Context, key string, fn UpdateFunc) (err error) {
	tx, err := s.l.Begin(ctx, key)
	if err != nil {
		return err
	}
	defer tx.Release()
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}()
	old, err := tx.LockAndGet(ctx)
	if err != nil {
		return err
	}
	if next, ttl, changed := fn(old); changed {
		if old == nil {
			err = tx.Create(ctx, next, ttl)
		} else {
			err = tx.Update(ctx, next, ttl)
		}
		if err != nil {
			return err
		}
	}
	if err := tx.Unlock(ctx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// RowLocker is the building block of SQL stores that lock a row with
// SELECT … FOR UPDATE. A key without a row cannot be locked, so the first
// update inserts an empty row (which a concurrent first update may do
// too) and starts again.
type RowLocker interface {
	// Begin starts a transaction on key.
	Begin(ctx context.Context, key string) (RowTx, error)
}

// RowTx is one transaction of a RowLocker. NewRowLockStore calls
// TryLockAndGet; with no row, TryInsertEmpty and Commit, then a new
// transaction; with a row, Update when the state changed, then Commit. On
// an error it calls Rollback instead; Release always comes last.
type RowTx interface {
	// TryLockAndGet locks key's row and returns its state (nil for an
	// empty row); found is false when there is no row.
	TryLockAndGet(ctx context.Context) (state []byte, found bool, err error)
	// TryInsertEmpty inserts an empty row for key unless one exists.
	TryInsertEmpty(ctx context.Context) error
	// Update replaces the row's state.
	Update(ctx context.Context, state []byte, ttl time.Duration) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Release frees what the transaction holds.
	Release()
}

// NewRowLockStore makes a Store of r.
func NewRowLockStore(r RowLocker, opts ...StoreOption) Store {
	return &rowLockStore{r: r, o: newStoreOptions(opts)}
}

type rowLockStore struct {
	r RowLocker
	o storeOptions
}

// Update runs attempts until one finds the key's row, which is at the
// second unless the row is deleted meanwhile, or until ctx ends (or
// WithMaxAttempts).
func (s *rowLockStore) Update(ctx context.Context, key string, fn UpdateFunc) error {
	for attempt := 1; ; attempt++ {
		done, err := s.attempt(ctx, key, fn)
		if err != nil || done {
			return err
		}
		if s.o.maxAttempts > 0 && attempt >= s.o.maxAttempts {
			return fmt.Errorf("%w: no row for key %s after %d attempts", ErrConflict, QuoteKey(key), s.o.maxAttempts)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// attempt runs one transaction; done is false when it only inserted the
// empty row.
func (s *rowLockStore) attempt(ctx context.Context, key string, fn UpdateFunc) (done bool, err error) {
	tx, err := s.r.Begin(ctx, key)
	if err != nil {
		return false, err
	}
	defer tx.Release()
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}()
	old, found, err := tx.TryLockAndGet(ctx)
	if err != nil {
		return false, err
	}
	if !found {
		if err := tx.TryInsertEmpty(ctx); err != nil {
			return false, err
		}
		return false, tx.Commit(ctx)
	}
	if next, ttl, changed := fn(old); changed {
		if err := tx.Update(ctx, next, ttl); err != nil {
			return false, err
		}
	}
	return true, tx.Commit(ctx)
}
