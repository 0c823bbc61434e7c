package keyed

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// MapStore is a driver.Store in this process's memory, on a Clock: the
// keys an in-memory Limiter keeps as records rather than as its policy's
// typed state, because their configuration is not the limiter's (a
// bucket replaced with KeyBucket.ReplaceConfiguration, a policy per key).
// Kept as records, they are decided by the codecs of package record, as a
// store's keys are, and so migrate from one configuration to another
// exactly as a store's do. A record expires at its TTL on the clock.
//
// MapStore is safe for simultaneous use by multiple goroutines.
type MapStore struct {
	clock   Clock
	seed    maphash.Seed
	nshards uint64 // the shards in use, the first of shards: fewer under a small bound
	shards  [mapShards]mapShard
}

const mapShards = 16

type mapShard struct {
	mu  sync.Mutex
	m   map[string]mapEntry
	max int // the most keys the shard holds; 0: no bound
	_   [40]byte
}

type mapEntry struct {
	rec     []byte
	expires int64 // on the clock; 0: never
}

var (
	_ driver.Store   = (*MapStore)(nil)
	_ driver.Deleter = (*MapStore)(nil)
)

// NewMapStore returns an empty MapStore on clock, holding at most maxKeys
// keys (0: no bound beyond expiry): past its share of the bound, a shard
// evicts an arbitrary key. The bound is split exactly among shards of at
// least minKeysPerShard keys, as Table's is.
func NewMapStore(clock Clock, maxKeys int) *MapStore {
	s := &MapStore{clock: clock, seed: maphash.MakeSeed(), nshards: mapShards}
	if maxKeys > 0 {
		s.nshards = uint64(min(max(maxKeys/minKeysPerShard, 1), mapShards))
	}
	for i := range s.nshards {
		sh := &s.shards[i]
		sh.m = make(map[string]mapEntry)
		if maxKeys > 0 {
			sh.max = maxKeys / int(s.nshards)
			if int(i) < maxKeys%int(s.nshards) {
				sh.max++
			}
		}
	}
	return s
}

func (s *MapStore) shard(key string) *mapShard {
	return &s.shards[maphash.String(s.seed, key)%s.nshards]
}

// load returns key's record, nil when it has none or it expired at now.
// load requires that sh.mu is held.
func (sh *mapShard) load(key string, now int64) ([]byte, bool) {
	e, ok := sh.m[key]
	if ok && e.expires != 0 && e.expires <= now {
		delete(sh.m, key)
		return nil, false
	}
	return e.rec, ok
}

// Update runs fn on key's record and keeps what it returns. It never
// fails but for ctx having ended.
func (s *MapStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.clock.Now()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec, present := sh.load(key, now)
	next, ttl, changed := fn(rec)
	if !changed {
		return nil
	}
	if !present {
		sh.sweep(now)
	}
	// The record's memory is reused: fn kept nothing of it.
	e := mapEntry{rec: append(rec[:0], next...)}
	if ttl > 0 && int64(ttl) < math.MaxInt64-now { // past MaxInt64: never
		e.expires = now + int64(ttl)
	}
	sh.m[key] = e
	return nil
}

// sweep drops up to two expired records, and an arbitrary one when the
// shard is full, before a new key is inserted. sweep requires that
// sh.mu is held.
func (sh *mapShard) sweep(now int64) {
	i := 0
	for k, e := range sh.m {
		if e.expires != 0 && e.expires <= now {
			delete(sh.m, k)
		}
		if i++; i == 2 {
			break
		}
	}
	if sh.max > 0 && len(sh.m) >= sh.max {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
}

// Delete forgets key.
func (s *MapStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err // as the driver contract asks: nothing deleted
	}
	sh := s.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
	return nil
}

// Has reports whether key has a record that has not expired.
func (s *MapStore) Has(key string) bool {
	sh := s.shard(key)
	sh.mu.Lock()
	_, ok := sh.load(key, s.clock.Now())
	sh.mu.Unlock()
	return ok
}

// Len is the number of records held, expired ones not yet dropped
// included.
func (s *MapStore) Len() int {
	n := 0
	for i := range s.nshards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// TTL is how long a store should keep a record that is worth no more
// than no state from expiresAt on, as Store gives it to its stores.
func TTL(expiresAt, now int64) time.Duration { return ttl(expiresAt, now) }
