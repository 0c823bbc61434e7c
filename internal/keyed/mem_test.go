package keyed

import (
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
)

// Mem keeps each key's typed state in a sharded map: the plain form of
// Table, kept as the model the table's tests and fuzzing compare it with.
// It is what the in-memory engine was before the table replaced it.
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

var _ Keys = (*Mem[fixedwindow.State, fixedwindow.Config])(nil)

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

func (k *Mem[S, M]) Consume(key string, now, n int64) policy.Decision {
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

func (k *Mem[S, M]) Take(key string, now, n int64) bool {
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	present, live := k.load(sh, key, now)
	res, changed := k.m.Reserve(&sh.cur, live, now, n, 0)
	if changed {
		k.save(sh, key, present, now)
	}
	return res.Code == policy.OK && res.Allowed
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

func (k *Mem[S, M]) Update(key string, now int64, f func(state []byte) ([]byte, bool)) {
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	present, live := k.load(sh, key, now)
	var cur []byte
	if live {
		cur = k.m.AppendState(nil, &sh.cur)
	}
	next, changed := f(cur)
	switch {
	case !changed:
	case len(next) == 0:
		delete(sh.m, key)
	case k.m.DecodeState(next, &sh.cur) == nil:
		k.save(sh, key, present, now)
	}
}

func (k *Mem[S, M]) Reset(key string) {
	sh := k.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

func (k *Mem[S, M]) Quota() int64 { return k.m.Quota() }

func (k *Mem[S, M]) Limits() []int64 { return policy.Limits(k.m) }

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

// Buckets is nil: the table's token-bucket view is tested on its own.
func (k *Mem[S, M]) Buckets() Buckets { return nil }
