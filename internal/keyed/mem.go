// Package keyed is the engine under a Limiter: a policy's state for every
// key, in this process's memory (Mem, the hot path of most users) or in a
// driver.Store (Store, with per-key batching, records and a circuit
// breaker), and the token-bucket views of both that a KeyBucket runs on.
//
// Time is a value here: the in-memory methods take now, and the store
// reads its clock when it runs a batch, so that a decision is made at the
// time of the write it goes into.
package keyed

import (
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Keys is a policy's state for every key in this process's memory: an
// in-memory Limiter's, and the local fallback of one with a store. Its
// methods are safe for simultaneous use.
type Keys interface {
	// Consume decides whether n tokens may pass for key at now, taking
	// them if so.
	Consume(key string, now, n int64) policy.Result
	// Decide is Consume with the result's fields as results, which the
	// caller gets in registers: a policy.Result, of more than 4 fields,
	// is copied through memory at each call that returns it.
	Decide(key string, now, n int64) (code policy.Code, allowed bool, remaining, retryAfter, resetAfter, limit int64)
	// Peek answers as Consume would, taking nothing.
	Peek(key string, now, n int64) policy.Result
	// Reserve takes n tokens for key within maxWait; a granted
	// reservation that took something comes with the receipt for Cancel.
	Reserve(key string, now, n, maxWait int64) (policy.Result, *policy.Receipt)
	// Cancel gives back the reservation of receipt r at now, as
	// policy.Undo does.
	Cancel(key string, now int64, r *policy.Receipt)
	// Reset forgets key's state.
	Reset(key string)
	// Len is the number of keys held, expired ones not yet dropped
	// included.
	Len() int
	// Quota is the policy's limit.
	Quota() int64
	// Buckets returns the keys as token buckets, or nil when the policy
	// is not a token bucket.
	Buckets() Buckets
}

// Buckets is the token-bucket view of Keys, for a KeyBucket.
type Buckets interface {
	// Config is the policy's bucket configuration.
	Config() *tokenbucket.Config
	// WithBucket runs f on key's bucket state at now (a new bucket's if
	// the key has none) and stores it if f reports a change.
	WithBucket(key string, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State) bool)
}

const shardCount = 64 // enough to keep 2-8 cores off each other's locks

// minKeysPerShard is the fewest keys a shard of a bounded limiter holds:
// a bound of n keys uses n/minKeysPerShard shards (1 to shardCount), so
// that the bound splits exactly among them and every shard has room
// enough to fill evenly with the others.
const minKeysPerShard = 1024

// Mem keeps each key's typed state in a sharded map, so a key costs
// its state and the map's slot, nothing more: no pointer, no encoding.
//
// A state past its machine's ExpiresAt is treated as absent and removed
// when next seen; each insertion also checks a couple of other keys of
// its shard, so idle keys do not accumulate.
type Mem[S any, M policy.Machine[S]] struct {
	m       M
	seed    maphash.Seed
	nshards uint64 // the shards in use, the first of shards: all but under a small bound
	shards  [shardCount]memShard[S]
}

type memShard[S any] struct {
	mu  sync.Mutex
	m   map[string]S
	max int // the most keys the shard holds; 0: no bound. Set by bound.
	// cur holds the state of the call under way. A machine's methods take
	// the state by pointer through the generic dictionary, which makes a
	// local variable escape to the heap; a field of the (already heap
	// allocated) shard costs nothing. swept is the same for the sweep.
	cur, swept S
	_          [64]byte // keep shards' locks on separate cache lines
}

// NewMem returns the keys of machine m, holding at most maxKeys of them
// (0: no bound beyond expiry).
func NewMem[S any, M policy.Machine[S]](m M, maxKeys int) *Mem[S, M] {
	k := &Mem[S, M]{m: m, seed: maphash.MakeSeed(), nshards: shardCount}
	for i := range k.shards {
		k.shards[i].m = make(map[string]S)
	}
	k.bound(maxKeys)
	return k
}

var _ Keys = (*Mem[tokenbucket.State, tokenbucket.Multi])(nil)

func (k *Mem[S, M]) shard(key string) *memShard[S] {
	// Lemire's reduction: the high word of h·n is uniform in [0, n).
	hi, _ := bits.Mul64(maphash.String(k.seed, key), k.nshards)
	return &k.shards[hi]
}

// load puts key's state in sh.cur and reports whether the key is in the
// map, and whether its state is still live; an expired state reads as the
// zero state. load requires that sh.mu is held.
func (k *Mem[S, M]) load(sh *memShard[S], key string, now int64) (present, live bool) {
	sh.cur, present = sh.m[key]
	if present && k.m.ExpiresAt(&sh.cur) <= now {
		var zero S
		sh.cur = zero
		return true, false
	}
	return present, present
}

// save stores sh.cur for key; inserting a new key also drops up to two
// expired states of other keys. save requires that sh.mu is held.
func (k *Mem[S, M]) save(sh *memShard[S], key string, present bool, now int64) {
	if !present {
		i := 0
		for other := range sh.m { // map iteration starts at a random key
			sh.swept = sh.m[other]
			if k.m.ExpiresAt(&sh.swept) <= now {
				delete(sh.m, other)
			}
			if i++; i == 2 {
				break
			}
		}
		if sh.max > 0 && len(sh.m) >= sh.max {
			for other := range sh.m { // full of live keys: evict an arbitrary one
				delete(sh.m, other)
				break
			}
		}
	}
	sh.m[key] = sh.cur
}

func (k *Mem[S, M]) Decide(key string, now, n int64) (policy.Code, bool, int64, int64, int64, int64) {
	r := k.Consume(key, now, n)
	return r.Code, r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, r.Limit
}

func (k *Mem[S, M]) Consume(key string, now, n int64) policy.Result {
	sh := k.shard(key)
	sh.mu.Lock()
	present, live := k.load(sh, key, now)
	res, changed := k.m.Consume(&sh.cur, live, now, n)
	if changed {
		k.save(sh, key, present, now)
	}
	sh.mu.Unlock()
	return res
}

func (k *Mem[S, M]) Peek(key string, now, n int64) policy.Result {
	sh := k.shard(key)
	sh.mu.Lock()
	_, live := k.load(sh, key, now)
	res := k.m.Peek(&sh.cur, live, now, n)
	sh.mu.Unlock()
	return res
}

func (k *Mem[S, M]) Reserve(key string, now, n, maxWait int64) (policy.Result, *policy.Receipt) {
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	present, live := k.load(sh, key, now)
	var before []byte
	if live {
		before = k.m.AppendState(nil, &sh.cur)
	}
	res, changed := k.m.Reserve(&sh.cur, live, now, n, maxWait)
	if !changed {
		return res, nil
	}
	k.save(sh, key, present, now)
	if !res.Allowed {
		return res, nil
	}
	rc := policy.NewReceipt(now, n, res.Wait, before, k.m.AppendState(nil, &sh.cur))
	if res.Wait > 0 {
		res.Remaining = policy.RemainingAt(k.m.Peek(&sh.cur, true, rc.Due, 1))
	}
	return res, rc
}

func (k *Mem[S, M]) Cancel(key string, now int64, r *policy.Receipt) {
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	present, live := k.load(sh, key, now)
	switch policy.Undo(k.m, &sh.cur, live, now, r) {
	case policy.Changed:
		k.save(sh, key, present, now)
	case policy.Dropped:
		delete(sh.m, key)
	}
}

func (k *Mem[S, M]) Reset(key string) {
	sh := k.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

func (k *Mem[S, M]) Quota() int64 { return k.m.Quota() }

// bound splits n among the shards in use, the first n%nshards taking
// one key more, so that the shards' bounds add up to n exactly.
func (k *Mem[S, M]) bound(n int) {
	if n <= 0 {
		return
	}
	ns := min(max(n/minKeysPerShard, 1), shardCount)
	k.nshards = uint64(ns)
	for i := range ns {
		k.shards[i].max = n / ns
		if i < n%ns {
			k.shards[i].max++
		}
	}
}

func (k *Mem[S, M]) Len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// bucketMachine is implemented by the token-bucket machines.
type bucketMachine interface{ Config() *tokenbucket.Config }

// Buckets returns k as token buckets when its machine is one (a Single
// over a BandwidthState, or a Multi over a State), else nil.
func (k *Mem[S, M]) Buckets() Buckets {
	if cfg := bucketConfig[S](k.m); cfg != nil {
		return memBuckets[S, M]{k: k, cfg: cfg}
	}
	return nil
}

// bucketConfig returns m's configuration when m is a token-bucket machine
// whose state S is a BandwidthState or a State, else nil.
func bucketConfig[S any, M policy.Machine[S]](m M) *tokenbucket.Config {
	bm, ok := any(m).(bucketMachine)
	if !ok {
		return nil
	}
	var zero S
	switch any(&zero).(type) {
	case *tokenbucket.BandwidthState, *tokenbucket.PackedState, *tokenbucket.State:
		return bm.Config()
	}
	return nil
}

// memBuckets is the Buckets view of a Mem whose machine is a token bucket.
type memBuckets[S any, M policy.Machine[S]] struct {
	k   *Mem[S, M]
	cfg *tokenbucket.Config
}

func (b memBuckets[S, M]) Config() *tokenbucket.Config { return b.cfg }

func (b memBuckets[S, M]) WithBucket(key string, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State) bool) {
	k, cfg := b.k, b.cfg
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	present, live := k.load(sh, key, now)
	if withBucketState(cfg, &sh.cur, live, now, f) {
		k.save(sh, key, present, now)
	}
}

// withBucketState runs f on cur, a key's typed token-bucket state (a
// BandwidthState, a PackedState or a State; a new bucket of cfg at now
// unless live), as a tokenbucket.State, and reports whether f changed it,
// cur then holding the change.
func withBucketState[S any](cfg *tokenbucket.Config, cur *S, live bool, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State) bool) bool {
	var buf [4]tokenbucket.BandwidthState
	st := buf[:len(cfg.Bandwidths)]
	if len(cfg.Bandwidths) > len(buf) {
		st = make(tokenbucket.State, len(cfg.Bandwidths))
	}
	switch p := any(cur).(type) {
	case *tokenbucket.BandwidthState:
		if live {
			st[0] = *p
		} else {
			tokenbucket.Init(cfg, st, now)
		}
		if !f(cfg, st) {
			return false
		}
		*p = st[0]
	case *tokenbucket.PackedState:
		if live {
			st[0] = p.Unpack()
		} else {
			tokenbucket.Init(cfg, st, now)
		}
		if !f(cfg, st) {
			return false
		}
		p.Store(&st[0])
	case *tokenbucket.State:
		if live && len(*p) == len(st) {
			copy(st, *p)
		} else {
			tokenbucket.Init(cfg, st, now)
		}
		if !f(cfg, st) {
			return false
		}
		*p = append((*p)[:0], st...) // cur's own array, which the table then keeps
	default:
		return false
	}
	return true
}
