// Package memstore keeps rate-limit state in the memory of one process: a
// [driver.Store] for a single server, for tests and for examples.
//
// A [Store] holds each key's state as bytes in a map split into shards,
// each behind its own mutex, so that updates of different keys rarely wait
// for each other. A state written with a TTL expires: it reads as absent
// from then on and is dropped when an update comes across it, so keys
// nobody asks for again do not pile up. [WithMaxKeys] bounds how many keys
// the store holds.
//
// State kept here is lost when the process exits and is not shared with
// other processes; use a networked store for limits that several servers
// enforce together.
package memstore

import (
	"bytes"
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
)

const (
	// maxShards is the number of shards of an unbounded store, and the most
	// a bounded one has.
	maxShards = 64
	// minKeysPerShard is the fewest keys a shard of a bounded store may
	// hold: the bound is split evenly among shards, and with at least this
	// many keys each, the shards fill within a few per cent of each other,
	// so the store evicts only when it is nearly full.
	minKeysPerShard = 1024
	// sweepPerInsert is how many entries an insert looks at to drop the
	// expired ones among them.
	sweepPerInsert = 2
	// evictScan is how many entries an insert into a full shard looks at
	// for expired ones before it evicts a live one.
	evictScan = 16
	// shrinkMin is the fewest keys a shard must once have held before it
	// rebuilds its map to give back memory.
	shrinkMin = 1024
	// never is the expiry of a state written without a TTL.
	never = math.MaxInt64
)

// Option configures a Store made by New.
type Option func(*options)

type options struct {
	maxKeys int
	now     func() time.Time
}

// WithMaxKeys bounds the number of keys the store holds to n. Values below
// 1 keep the default, 0: no bound.
//
// The bound is split evenly among the store's shards. An insert into a
// full shard first drops the expired states among the few it looks at and,
// when none was expired, evicts an arbitrary live key of that shard. An
// evicted key starts afresh on its next update, as a key never seen: for
// a limiter, a full bucket. A shard may fill while others have room, so a
// store may evict a little before it holds n keys; it never holds more.
func WithMaxKeys(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.maxKeys = n
		}
	}
}

// WithClock sets the clock that TTLs are measured on; nil keeps the
// default, time.Now. Only differences between its readings matter, and it
// must be safe for concurrent use. Tests pass a fake clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// Store is an in-memory driver.Store, which also implements
// driver.Deleter. It must be made with New.
//
// Store is safe for concurrent use by multiple goroutines. It starts no
// goroutines: expired states are dropped during updates.
//
// A key with a 16-byte name and a 24-byte state takes about 128 bytes of
// heap, the name and state included (BenchmarkMemoryPerKey).
type Store struct {
	now    func() time.Time
	base   time.Time // the clock's first reading; expiries count from it
	seed   maphash.Seed
	shards []shard
}

var (
	_ driver.Store   = (*Store)(nil)
	_ driver.Deleter = (*Store)(nil)
)

// shard is one part of a store's keys.
type shard struct {
	mu sync.Mutex
	m  map[string]*entry // guarded by mu
	// max bounds len(m); 0: no bound. It is set by New and read-only.
	max int
	// peak is the most keys m has held since it was made; guarded by mu.
	peak int
	// The padding keeps the next shard's hot fields off this shard's
	// cache line.
	_ [64]byte
}

// entry is one key's state. The map holds pointers, which makes its slots
// half the size (Go's map tables are often only half full) and lets an
// update change a state without writing the map.
type entry struct {
	state   []byte // never nil
	expires int64  // nanoseconds after Store.base; never: no expiry
}

// New returns an empty store. With no options it holds any number of keys
// and measures TTLs on time.Now.
func New(opts ...Option) *Store {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	n := maxShards
	if o.maxKeys > 0 {
		n = min(max(o.maxKeys/minKeysPerShard, 1), maxShards)
	}
	s := &Store{
		now:    o.now,
		base:   o.now(),
		seed:   maphash.MakeSeed(),
		shards: make([]shard, n),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[string]*entry)
		if o.maxKeys > 0 {
			// The first maxKeys%n shards take one key more, so that the
			// bounds add up to maxKeys.
			sh.max = o.maxKeys / n
			if i < o.maxKeys%n {
				sh.max++
			}
		}
	}
	return s
}

// Update runs fn on key's state and stores what fn returns when it
// changed, with the shard of key locked throughout, so no other update of
// key comes between. fn must not call the store.
//
// fn receives the stored bytes themselves, not a copy: it must not modify
// them (nor keep them, as the driver contract says). Update copies next,
// so the caller may reuse it. A nil next with changed true removes the
// key; a ttl of 0 or less keeps the state until it is replaced or evicted.
//
// Update returns ctx.Err() when ctx has ended before fn runs, and
// otherwise nil.
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The wait for the lock may have outlasted ctx.
	if err := ctx.Err(); err != nil {
		return err
	}
	now := reading{s: s}
	e, found := sh.m[key]
	if found && now.expired(e) {
		delete(sh.m, key)
		found = false
	}
	var state []byte
	if found {
		state = e.state[:len(e.state):len(e.state)]
	}
	next, ttl, changed := fn(state)
	switch {
	case !changed:
		if !found {
			sh.shrink()
		}
		return nil
	case next == nil:
		if found {
			delete(sh.m, key)
			sh.shrink()
		}
		return nil
	}
	expires := int64(never)
	if ttl > 0 {
		expires = addSat(now.get(), int64(ttl))
	}
	if !found {
		sh.insert(key, &entry{state: bytes.Clone(next), expires: expires}, &now)
		return nil
	}
	if len(next) == len(e.state) {
		copy(e.state, next) // next may be e.state itself; copy allows that
	} else {
		e.state = bytes.Clone(next)
	}
	e.expires = expires
	return nil
}

// Delete removes key's state. It returns ctx.Err() when ctx has ended, and
// otherwise nil, whether or not the key had a state.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.m, key)
	sh.shrink()
	return nil
}

// Len returns the number of keys the store holds, counting expired states
// not yet dropped. The shards are counted one after another, so under
// concurrent updates the sum is not a snapshot; it never exceeds the bound
// of WithMaxKeys.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// shard returns the shard that holds key.
func (s *Store) shard(key string) *shard {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	// Lemire's reduction: the high word of h·n is uniform in [0, n).
	hi, _ := bits.Mul64(maphash.String(s.seed, key), uint64(len(s.shards)))
	return &s.shards[hi]
}

// insert adds key, which sh does not hold, first dropping the expired
// entries among a few it looks at and, when sh is full, evicting a live
// one. insert requires that sh.mu is held.
func (sh *shard) insert(key string, e *entry, now *reading) {
	full := sh.max > 0 && len(sh.m) >= sh.max
	n := sweepPerInsert
	if full {
		n = evictScan
	}
	victim, live := sh.sweep(n, now)
	if sh.max > 0 && len(sh.m) >= sh.max && live {
		delete(sh.m, victim)
	}
	sh.m[key] = e
	sh.peak = max(sh.peak, len(sh.m))
}

// sweep looks at up to n entries of sh, from where map iteration happens
// to start, drops the expired ones and returns the key of a live one it
// saw, if any. sweep requires that sh.mu is held.
func (sh *shard) sweep(n int, now *reading) (live string, found bool) {
	for k, e := range sh.m {
		if n == 0 {
			break
		}
		n--
		if now.expired(e) {
			delete(sh.m, k)
			continue
		}
		if !found {
			live, found = k, true
		}
	}
	return live, found
}

// shrink rebuilds sh's map once it holds a quarter of its peak or less: a
// Go map never gives back the memory of deleted entries. The copy costs
// the keys held, paid for by the three times as many deletions since the
// peak. shrink requires that sh.mu is held.
func (sh *shard) shrink() {
	if sh.peak < shrinkMin || len(sh.m) > sh.peak/4 {
		return
	}
	m := make(map[string]*entry, len(sh.m))
	for k, e := range sh.m {
		m[k] = e
	}
	sh.m = m
	sh.peak = len(m)
}

// reading reads the store's clock at most once, when first needed: an
// update of a state without a TTL never reads it.
type reading struct {
	s    *Store
	t    int64
	done bool
}

// get returns the time in nanoseconds after s.base.
func (r *reading) get() int64 {
	if !r.done {
		r.t, r.done = int64(r.s.now().Sub(r.s.base)), true
	}
	return r.t
}

// expired reports whether e's state has expired: it is kept exactly its
// TTL.
func (r *reading) expired(e *entry) bool {
	return e.expires != never && r.get() >= e.expires
}

// addSat returns a+b for b > 0, saturating at never (a state that would
// expire 292 years on does not expire).
func addSat(a, b int64) int64 {
	if a > never-b {
		return never
	}
	return a + b
}
