package keyed

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Table keeps each key's typed state in a sharded open-addressing table:
// the state sits in the slot beside 16 bytes that hold a key of up to 12
// bytes, its length and 24 bits of its hash (a longer key's bytes are in
// the shard's arena), so a decision on an existing key is one hash, one
// lock and, for most keys, one slot read: a single cache miss in a large
// table, with no pointer for the garbage collector to follow. Keys are
// compared byte for byte: two keys are never merged, however their hashes
// collide.
//
// The table is a Robin Hood linear-probing table ordered by the hash: a
// key's home slot is its 24 hash bits scaled to the capacity,
// so a lookup stops at the first slot whose key lives nearer its home than
// the probe has come, and a deletion shifts the following run back (no
// tombstones). Capacities are not powers of two, so the table grows by a
// quarter and stays between 72% and 90% full once it has grown.
//
// A state past its machine's ExpiresAt is treated as absent and removed
// when next seen; each insertion also sweeps a few slots from a cursor
// that walks the shard, so idle keys do not accumulate, and a shard shrinks
// when a quarter full.
type Table[S any, M policy.Machine[S]] struct {
	m      M
	limits []int64 // policy.Limits(m)
	// lapses is policy.Lapses(m): Consume and Peek run on a state
	// past its ExpiresAt as it is, without asking ExpiresAt first.
	lapses  bool
	seed    maphash.Seed
	nshards uint64 // the shards in use, the first of shards: all but under a small bound
	shards  [shardCount]tableShard[S]
}

// slot is a key's place in a shard: its state and its packed key.
type slot[S any] struct {
	st S
	pkey
}

// pkey is a key packed in 16 bytes. The low byte of k0 is the key's
// length plus 1 for a key of up to inlineKey bytes, whose bytes follow in
// k0 (4) and k1 (8), little-endian and padded with zeros; it is longKey
// for a longer key, whose first 4 bytes follow in k0 and whose bytes are
// at the arena reference k1. Bits 8 to 31 of k0 are the tag, 24 bits of
// the key's hash, which set its home. An empty slot's k0 is 0.
//
// Two short keys are the same key exactly when their pkeys are equal.
type pkey struct{ k0, k1 uint64 }

const (
	inlineKey = 12
	longKey   = 0xff
)

// pack packs key, of hash h: the top 24 bits are the tag. It reads the
// key's bytes as words rather than copying them to a buffer and loading
// that, which stalls on the store.
func pack(key string, h uint64) pkey {
	n := len(key)
	if n > inlineKey {
		return pkey{k0: longKey | h>>40<<8 | load4(key)<<32}
	}
	var lo, hi uint64
	switch {
	case n == inlineKey:
		lo, hi = load4(key), load8(key[4:])
	case n >= 4:
		lo, hi = load4(key), loadShort(key[4:])
	default:
		lo = loadShort(key)
	}
	return pkey{k0: uint64(n+1) | h>>40<<8 | lo<<32, k1: hi}
}

// load4 and load8 read the first 4 or 8 bytes of s little-endian, which
// the compiler makes one load.
func load4(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

func load8(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// loadShort reads the up to 8 bytes of s little-endian.
func loadShort(s string) uint64 {
	if len(s) == 8 {
		return load8(s)
	}
	var v uint64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v
}

func (p pkey) tag() uint64 { return p.k0 >> 8 & (1<<24 - 1) }
func (p pkey) long() bool  { return p.k0&0xff == longKey }
func (p pkey) ref() uint32 { return uint32(p.k1) }
func (p pkey) empty() bool { return p.k0 == 0 }

type tableShard[S any] struct {
	mu    sync.Mutex
	slots []slot[S] // nil until the first key
	n     int       // occupied slots
	max   int       // the most keys the shard holds; 0: no bound. Set by bound.
	sweep int       // the next slot the expiry sweep looks at
	keys  arena     // the keys longer than inlineKey
	// cur holds the state of a call under way for a key not in the
	// table. A machine's methods take the state by pointer through the
	// generic dictionary, which makes a local variable escape to the heap;
	// a field of the (already heap allocated) shard costs nothing.
	cur S
	_   [64]byte
}

const (
	minSlots = 8
	// A shard grows at 9/10 full, by a quarter: to 18/25 full. Robin Hood
	// probing keeps lookups short that full, and the small steps keep a
	// slot's bytes per key between 1.11 and 1.39 slots.
	maxLoadNum, maxLoadDen = 9, 10
	growNum, growDen       = 25, 18
	// sweepSlots is how many slots an insertion checks for expiry.
	sweepSlots = 4
)

// NewTable returns the keys of machine m in a Table, holding at most
// maxKeys of them (0: no bound beyond expiry).
func NewTable[S any, M policy.Machine[S]](m M, maxKeys int) *Table[S, M] {
	k := &Table[S, M]{m: m, limits: policy.Limits(m), lapses: policy.Lapses(m), seed: maphash.MakeSeed(), nshards: shardCount}
	if maxKeys > 0 {
		ns := min(max(maxKeys/minKeysPerShard, 1), shardCount)
		k.nshards = uint64(ns)
		for i := range ns {
			k.shards[i].max = maxKeys / ns
			if i < maxKeys%ns {
				k.shards[i].max++
			}
		}
	}
	return k
}

var _ Keys = (*Table[tokenbucket.State, tokenbucket.Multi])(nil)

// locate hashes key once: the low half picks the shard, the high bits
// are the tag.
func (k *Table[S, M]) locate(key string) (*tableShard[S], pkey) {
	h := maphash.String(k.seed, key)
	hi, _ := bits.Mul64(h&0xffffffff, k.nshards<<32)
	return &k.shards[hi], pack(key, h)
}

// home is the slot where a key of tag would be without collisions: tag
// scaled to c slots, so that the table is sorted by tag.
func home(tag uint64, c int) int { return int(tag * uint64(c) >> 24) }

// find returns the slot of key, packed as p, or -1. find requires that
// sh.mu is held.
func (sh *tableShard[S]) find(key string, p pkey) int {
	c := len(sh.slots)
	if c == 0 {
		return -1
	}
	i := home(p.tag(), c)
	for d := 0; ; d++ {
		s := &sh.slots[i]
		if s.k0 == p.k0 {
			if s.k1 == p.k1 && !p.long() || p.long() && sh.keys.equal(s.ref(), key) {
				return i
			}
		} else if s.empty() {
			return -1
		}
		if sh.dist(i) < d { // a key of ours would have taken this slot
			return -1
		}
		if i++; i == c {
			i = 0
		}
	}
}

// dist is how far slot i is from its key's home. It requires that slot i
// is occupied and sh.mu is held.
func (sh *tableShard[S]) dist(i int) int {
	c := len(sh.slots)
	d := i - home(sh.slots[i].tag(), c)
	if d < 0 {
		d += c
	}
	return d
}

// place puts key p with state st in the table, which has a free slot,
// shifting the run it lands in. place requires that sh.mu is held.
func (sh *tableShard[S]) place(p pkey, st *S) {
	c := len(sh.slots)
	i := home(p.tag(), c)
	for d := 0; !sh.slots[i].empty() && sh.dist(i) >= d; d++ {
		if i++; i == c {
			i = 0
		}
	}
	j := i // the first free slot from i
	for !sh.slots[j].empty() {
		if j++; j == c {
			j = 0
		}
	}
	for j != i {
		p := j - 1
		if p < 0 {
			p = c - 1
		}
		sh.slots[j] = sh.slots[p]
		j = p
	}
	sh.slots[i] = slot[S]{st: *st, pkey: p}
	sh.n++
}

// remove deletes slot i and forgets its key's bytes, shifting back the
// keys after it that are away from their homes. remove requires that sh.mu
// is held.
func (sh *tableShard[S]) remove(i int) {
	if p := sh.slots[i].pkey; p.long() {
		sh.keys.free(p.ref())
	}
	c := len(sh.slots)
	for {
		j := i + 1
		if j == c {
			j = 0
		}
		if sh.slots[j].empty() || sh.dist(j) == 0 {
			break
		}
		sh.slots[i] = sh.slots[j]
		i = j
	}
	sh.slots[i] = slot[S]{}
	sh.n--
}

// resize moves every key to a table of c slots (at least n+1). resize
// requires that sh.mu is held.
func (sh *tableShard[S]) resize(c int) {
	old := sh.slots
	sh.slots, sh.n, sh.sweep = make([]slot[S], c), 0, 0
	for i := range old {
		if s := &old[i]; !s.empty() {
			sh.place(s.pkey, &s.st)
		}
	}
}

// capFor is the capacity of a shard to hold n keys after growing: n is
// 18/25 of it, or all a bounded shard can ever hold at 9/10.
func (sh *tableShard[S]) capFor(n int) int {
	c := max(n*growNum/growDen+1, minSlots)
	if sh.max > 0 {
		c = min(c, sh.max*maxLoadDen/maxLoadNum+1)
	}
	return c
}

// insert adds key, packed as p, with the state sh.cur, after sweeping a few
// slots and, in a full bounded shard, evicting a key. insert requires
// that sh.mu is held and key is not in the table.
func (k *Table[S, M]) insert(sh *tableShard[S], key string, p pkey, now int64) {
	k.sweepSome(sh, now)
	if sh.max > 0 && sh.n >= sh.max {
		// Full of live keys: evict the one at the sweep cursor.
		i := sh.sweep % len(sh.slots)
		for sh.slots[i].empty() {
			if i++; i == len(sh.slots) {
				i = 0
			}
		}
		sh.remove(i)
	}
	switch {
	case sh.slots == nil:
		sh.slots = make([]slot[S], sh.capFor(1))
	case (sh.n+1)*maxLoadDen > len(sh.slots)*maxLoadNum:
		sh.resize(sh.capFor(sh.n + 1))
	}
	if p.long() {
		if sh.keys.garbage > sh.keys.live && sh.keys.garbage >= minChunk {
			sh.compact()
		}
		ref, ok := sh.keys.add(key)
		if !ok {
			return // the arena is full (4 GiB of keys in one shard): not kept
		}
		p.k1 = uint64(ref)
	}
	sh.place(p, &sh.cur)
}

// sweepSome drops the expired states among the next sweepSlots slots from
// the cursor, and shrinks a shard left a quarter full. It requires that
// sh.mu is held.
func (k *Table[S, M]) sweepSome(sh *tableShard[S], now int64) {
	c := len(sh.slots)
	if c == 0 {
		return
	}
	i := sh.sweep
	for range sweepSlots {
		if i >= c {
			i = 0
		}
		if !sh.slots[i].empty() && k.m.ExpiresAt(&sh.slots[i].st) <= now {
			sh.remove(i) // the next key may have moved into slot i: look again
			continue
		}
		i++
	}
	sh.sweep = i
	if c > minSlots && sh.n*4 < c {
		sh.resize(max(sh.n*2, minSlots))
	}
}

// access finds key for a call at now: the slot of its live state (i ≥ 0),
// or -1 with sh.cur the zero state; a key whose state has expired is
// removed. access requires that sh.mu is held.
func (k *Table[S, M]) access(sh *tableShard[S], key string, p pkey, now int64) int {
	i := sh.find(key, p)
	if i >= 0 && k.m.ExpiresAt(&sh.slots[i].st) <= now {
		sh.remove(i)
		i = -1
	}
	if i < 0 {
		var zero S
		sh.cur = zero
	}
	return i
}

// decidable finds key for a Consume or Peek at now: as access,
// but a machine that lapses decides on an expired state as it is, which
// the sweep drops in time.
func (k *Table[S, M]) decidable(sh *tableShard[S], key string, p pkey, now int64) int {
	if !k.lapses {
		return k.access(sh, key, p, now)
	}
	i := sh.find(key, p)
	if i < 0 {
		var zero S
		sh.cur = zero
	}
	return i
}

// Consume decides in place on a live state: a machine leaves a state it
// reports unchanged as it was.
func (k *Table[S, M]) Consume(key string, now, n int64) policy.Decision {
	sh, p := k.locate(key)
	sh.mu.Lock()
	var d policy.Decision
	if i := k.decidable(sh, key, p, now); i >= 0 {
		d, _ = k.m.Consume(&sh.slots[i].st, true, now, n)
	} else {
		var changed bool
		if d, changed = k.m.Consume(&sh.cur, false, now, n); changed {
			k.insert(sh, key, p, now)
		}
	}
	sh.mu.Unlock()
	return d
}

func (k *Table[S, M]) Peek(key string, now, n int64) policy.Result {
	sh, p := k.locate(key)
	sh.mu.Lock()
	var res policy.Result
	if i := k.decidable(sh, key, p, now); i >= 0 {
		res = k.m.Peek(&sh.slots[i].st, true, now, n)
	} else {
		res = k.m.Peek(&sh.cur, false, now, n)
	}
	sh.mu.Unlock()
	return res
}

// load puts key's live state, if any, in sh.cur and returns its slot (-1
// for none). It requires that sh.mu is held.
func (k *Table[S, M]) load(sh *tableShard[S], key string, p pkey, now int64) int {
	i := k.access(sh, key, p, now)
	if i >= 0 {
		sh.cur = sh.slots[i].st
	}
	return i
}

// store keeps sh.cur as key's state, in slot i or a new one. It requires
// that sh.mu is held.
func (k *Table[S, M]) store(sh *tableShard[S], key string, p pkey, i int, now int64) {
	if i >= 0 {
		sh.slots[i].st = sh.cur
		return
	}
	k.insert(sh, key, p, now)
}

func (k *Table[S, M]) Reserve(key string, now, n, maxWait int64) (policy.Result, *policy.Receipt) {
	sh, p := k.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := k.load(sh, key, p, now)
	var before []byte
	if i >= 0 {
		before = k.m.AppendState(nil, &sh.cur)
	}
	res, changed := k.m.Reserve(&sh.cur, i >= 0, now, n, maxWait)
	if !changed {
		return res, nil
	}
	k.store(sh, key, p, i, now)
	if !res.Allowed {
		return res, nil
	}
	rc := policy.NewReceipt(now, n, res.Wait, before, k.m.AppendState(nil, &sh.cur))
	if res.Wait > 0 {
		res.Remaining = policy.RemainingAt(k.m.Peek(&sh.cur, true, rc.Due, 1))
	}
	return res, rc
}

func (k *Table[S, M]) Take(key string, now, n int64) bool {
	sh, p := k.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := k.load(sh, key, p, now)
	res, changed := k.m.Reserve(&sh.cur, i >= 0, now, n, 0)
	if changed {
		k.store(sh, key, p, i, now)
	}
	return res.Code == policy.OK && res.Allowed
}

func (k *Table[S, M]) Cancel(key string, now int64, r *policy.Receipt) {
	sh, p := k.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := k.load(sh, key, p, now)
	switch policy.Undo(k.m, &sh.cur, i >= 0, now, r) {
	case policy.Changed:
		k.store(sh, key, p, i, now)
	case policy.Dropped:
		if i >= 0 {
			sh.remove(i)
		}
	}
}

// Update runs f on key's state at now, encoded as the machine's
// AppendState writes it (empty for none), and keeps the state f returns
// when it reports a change: no state when it is empty, and nothing when it
// does not decode. f runs under the shard's lock and must not call k.
func (k *Table[S, M]) Update(key string, now int64, f func(state []byte) (next []byte, changed bool)) {
	sh, p := k.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := k.load(sh, key, p, now)
	var cur []byte
	if i >= 0 {
		cur = k.m.AppendState(nil, &sh.cur)
	}
	next, changed := f(cur)
	switch {
	case !changed:
	case len(next) == 0:
		if i >= 0 {
			sh.remove(i)
		}
	case k.m.DecodeState(next, &sh.cur) == nil:
		k.store(sh, key, p, i, now)
	}
}

func (k *Table[S, M]) Reset(key string) {
	sh, p := k.locate(key)
	sh.mu.Lock()
	if i := sh.find(key, p); i >= 0 {
		sh.remove(i)
	}
	sh.mu.Unlock()
}

func (k *Table[S, M]) Quota() int64 { return k.m.Quota() }

func (k *Table[S, M]) Limits() []int64 { return k.limits }

func (k *Table[S, M]) Len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Buckets returns k as token buckets when its machine is one (a Single
// over a BandwidthState or a PackedState, or a Multi over a State), else
// nil.
func (k *Table[S, M]) Buckets() Buckets {
	if cfg := bucketConfig[S](k.m); cfg != nil {
		return tableBuckets[S, M]{k: k, cfg: cfg}
	}
	return nil
}

// tableBuckets is the Buckets view of a Table whose machine is a token
// bucket.
type tableBuckets[S any, M policy.Machine[S]] struct {
	k   *Table[S, M]
	cfg *tokenbucket.Config
}

func (b tableBuckets[S, M]) Config() *tokenbucket.Config { return b.cfg }

func (b tableBuckets[S, M]) WithBucket(key string, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State) bool) {
	k, cfg := b.k, b.cfg
	sh, p := k.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := k.load(sh, key, p, now)
	live := i >= 0
	if withBucketState(cfg, &sh.cur, live, now, f) {
		k.store(sh, key, p, i, now)
	}
}

// arena holds a shard's keys' bytes, each as its length (a uvarint) and
// its bytes, in chunks of up to maxChunk bytes, so that a key costs its
// bytes plus one, and an arena wastes at most a chunk.
//
// A reference is the chunk's index (from 1: 0 is an empty slot) above
// chunkBits bits of offset, so an arena holds up to 2^18-1 chunks: 4 GiB
// of keys of up to 16 KiB, a key per chunk above that. The bytes of
// removed keys are garbage until a compaction, which copies the live keys
// to fresh chunks once there is more garbage than live bytes.
type arena struct {
	chunks  [][]byte // chunks[0] is nil
	fill    int      // the chunk keys are appended to; 0: none yet
	live    int      // bytes of the keys held
	garbage int      // bytes of removed keys
}

const (
	chunkBits = 14
	maxChunk  = 1 << chunkBits
	minChunk  = 256
	maxChunks = 1<<(32-chunkBits) - 1
)

// bytesAt returns the encoded key at ref: its length and where its bytes
// start in the chunk.
func (a *arena) bytesAt(ref uint32) (c []byte, off, n int) {
	c = a.chunks[ref>>chunkBits]
	off = int(ref & (maxChunk - 1))
	if b := c[off]; b < 0x80 {
		return c, off + 1, int(b)
	}
	v, w := binary.Uvarint(c[off:])
	return c, off + w, int(v)
}

func (a *arena) equal(ref uint32, key string) bool {
	c, off, n := a.bytesAt(ref)
	return n == len(key) && string(c[off:off+n]) == key
}

func sizeOf(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n)) + n
}

func (a *arena) free(ref uint32) {
	_, _, n := a.bytesAt(ref)
	size := sizeOf(n)
	a.live -= size
	a.garbage += size
}

// add copies key into the arena and returns its reference; ok is false
// when the arena is full.
func (a *arena) add(key string) (ref uint32, ok bool) {
	ref, dst, ok := a.alloc(sizeOf(len(key)))
	if ok {
		a.chunks[ref>>chunkBits] = appendKey(dst, key)
	}
	return ref, ok
}

// alloc makes room for size bytes and returns their reference and the
// chunk to append them to (appending to it is the caller's part).
func (a *arena) alloc(size int) (ref uint32, dst []byte, ok bool) {
	if len(a.chunks) == 0 {
		a.chunks = append(a.chunks, nil) // reference 0 is an empty slot
	}
	if size > maxChunk || a.fill == 0 || len(a.chunks[a.fill])+size > cap(a.chunks[a.fill]) {
		if len(a.chunks) > maxChunks {
			return 0, nil, false
		}
		next := minChunk
		if a.fill != 0 {
			next = min(2*cap(a.chunks[a.fill]), maxChunk)
		}
		i := len(a.chunks)
		a.chunks = append(a.chunks, make([]byte, 0, max(next, size)))
		if size <= maxChunk {
			a.fill = i // a chunk of one key above maxChunk is not filled further
		} else {
			a.live += size
			return uint32(i) << chunkBits, a.chunks[i], true
		}
	}
	c := a.chunks[a.fill]
	a.live += size
	return uint32(a.fill)<<chunkBits | uint32(len(c)), c, true
}

func appendKey(dst []byte, key string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(key))), key...)
}

// compact copies the keys of sh's slots to a fresh arena that replaces
// sh.keys, leaving the garbage behind. It requires that sh.mu is held.
func (sh *tableShard[S]) compact() {
	old := &sh.keys
	var fresh arena
	fresh.chunks = append(make([][]byte, 0, 2), nil, make([]byte, 0, min(max(old.live, minChunk), maxChunk)))
	fresh.fill = 1
	for i := range sh.slots {
		s := &sh.slots[i]
		if !s.long() {
			continue
		}
		c, off, n := old.bytesAt(s.ref())
		// There is room: the fresh arena needs fewer chunks than the old.
		ref, dst, _ := fresh.alloc(sizeOf(n))
		fresh.chunks[ref>>chunkBits] = append(binary.AppendUvarint(dst, uint64(n)), c[off:off+n]...)
		s.k1 = uint64(ref)
	}
	*old = fresh
}
