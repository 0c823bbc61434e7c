// Package plans keeps sluice serve's plans in the limiters' store: a
// policy for a limiter's key, or for every key under a prefix, with a
// version, shared by every process on the store. Each process keeps all
// the plans in memory (a Catalog), so that deciding on a key never asks
// the store for its plan, and follows the others' writes by polling a
// change log (Sync). docs/plans.md describes it for users.
package plans

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Plan is a limiter's policy for one key, or for every key that starts
// with Key when Prefix is set.
type Plan struct {
	Limiter string
	Key     string
	Prefix  bool
	// Spec is the policy's description as config files write a limiter,
	// in compact JSON: {"policy":"fixed_window","limit":3,"interval":"1s"}.
	Spec string
	// Version is the number of the change that wrote the plan: unique
	// across the plans of a store, and higher for a later write.
	Version uint64
}

func (p Plan) id() ikey { return ikey{p.Limiter, p.Key, p.Prefix} }

// The layout of the store's records (format.go).
const (
	// numShards is how many records the plans are spread over: a write
	// rewrites one, and a process starting reads them all. At 1M plans a
	// shard holds about 250 plans, some 8 KB (docs/plans.md); DynamoDB's
	// 400 KB items hold some 12,000 plans a shard, 50M in all.
	numShards = 4096
	// logSlots is the length of the change log's ring: a process that
	// falls more changes behind reads every shard again.
	logSlots = 4096
	// pendingGrace is how long a process waits for a change whose number
	// was taken but not yet logged (its writer between the two) before it
	// reads every shard again, in case the writer died.
	pendingGrace = 10 * time.Second
)

// Errors of the Catalog's writes.
var (
	// ErrPrecondition is a write whose If-Match version is not the plan's.
	ErrPrecondition = errors.New("plans: the plan's version is not the one given")
	// ErrNotFound is a plan that is not there.
	ErrNotFound = errors.New("plans: no such plan")
)

// SpecError is a plan's description that is not a valid policy.
type SpecError struct{ Err error }

func (e *SpecError) Error() string { return "plans: policy: " + e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// Catalog is one process's view of the plans of a store, with the
// writes that change them. It is safe for concurrent use: decisions look
// plans up (Exact, Prefix) without a lock, while Sync and the writes
// replace one shard of the view at a time.
type Catalog struct {
	st  driver.Store
	now func() time.Time
	lag func(time.Duration) // told each change another process made, with its age

	mu       sync.Mutex             // serialises changes of the view below
	compiled map[string]*compiled   // by spec; guarded by mu
	names    map[string]string      // interned limiter names; guarded by mu
	prefixes map[string]map[int]int // by limiter, the count of prefixes of each length; guarded by mu
	counts   map[string]int         // plans by limiter; guarded by mu
	shards   [numShards]atomic.Pointer[shardIndex]
	lens     atomic.Pointer[map[string][]int] // by limiter, the lengths of its prefixes, longest first

	syncMu       sync.Mutex // one Sync at a time; guards the fields below
	loaded       bool
	cursor       uint64 // the last change applied
	pendingSeq   uint64
	pendingSince time.Time
}

// shardIndex is a shard's plans, never changed once published.
type shardIndex struct {
	plans []Plan
	byKey map[ikey]entry
}

type ikey struct {
	limiter, key string
	prefix       bool
}

type entry struct {
	version uint64
	c       *compiled
}

// compiled is a spec's policy, or why it is not one (a spec written by a
// later release, with a policy this one does not know).
type compiled struct {
	policy sluice.Policy
	err    error
}

// New returns the Catalog of the plans kept in st, which should be the
// plans' own namespace of the store. It reads nothing: Sync loads the
// plans. lag, when not nil, is told the age of each change of another
// process that Sync applies.
func New(st driver.Store, now func() time.Time, lag func(time.Duration)) *Catalog {
	c := &Catalog{st: st, now: now, lag: lag, compiled: make(map[string]*compiled), names: make(map[string]string),
		prefixes: make(map[string]map[int]int), counts: make(map[string]int)}
	empty := map[string][]int{}
	c.lens.Store(&empty)
	return c
}

// Compile checks a policy's description, JSON as config files describe a
// limiter, and returns its policy and its compact form, the Spec of a
// Plan. A compound describes its members inline: a plan cannot name the
// config's limiters, which change with it.
func Compile(desc []byte) (sluice.Policy, string, error) {
	n, err := yamlnode.FromJSON(desc)
	if err != nil {
		return nil, "", &SpecError{err}
	}
	d := policyspec.NewDecoder(policyspec.Options{})
	s, err := d.Decode("policy", n)
	if err != nil {
		return nil, "", &SpecError{err}
	}
	err = d.Resolve(s, func(m policyspec.Member) (*policyspec.Desc, error) {
		return nil, yamlnode.Errorf(m.Path, m.Node, "a plan's compound describes its members inline; it cannot name a limiter")
	})
	if err != nil {
		return nil, "", &SpecError{err}
	}
	if s.Policy == nil {
		return nil, "", &SpecError{fmt.Errorf("policy %s cannot limit keys", s.Spec.Name)}
	}
	if _, err := sluice.NewLimiter(s.Policy); err != nil {
		return nil, "", &SpecError{err}
	}
	var b []byte
	if b, err = compact(desc); err != nil {
		return nil, "", &SpecError{err}
	}
	return s.Policy, string(b), nil
}

func compact(desc []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(desc, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v) // sorted keys: one spec per description
}

// shardOf is the shard of a plan: FNV-1a of its limiter, key and kind,
// the same in every process.
func shardOf(limiter, key string, prefix bool) int {
	h := uint32(2166136261)
	for i := 0; i < len(limiter); i++ {
		h = (h ^ uint32(limiter[i])) * 16777619
	}
	h *= 16777619 // a NUL between the limiter and the key
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	if prefix {
		h = (h ^ 1) * 16777619
	}
	return int(h % numShards)
}

// Exact returns the policy of the plan of exactly key, if any.
func (c *Catalog) Exact(limiter, key string) (sluice.Policy, bool) {
	return c.lookup(limiter, key, false)
}

// Prefix returns the policy of the plan of the longest prefix of key,
// and that prefix's length.
func (c *Catalog) Prefix(limiter, key string) (sluice.Policy, int, bool) {
	for _, n := range (*c.lens.Load())[limiter] {
		if n > len(key) {
			continue
		}
		if p, ok := c.lookup(limiter, key[:n], true); ok {
			return p, n, true
		}
	}
	return nil, 0, false
}

func (c *Catalog) lookup(limiter, key string, prefix bool) (sluice.Policy, bool) {
	sh := c.shards[shardOf(limiter, key, prefix)].Load()
	if sh == nil {
		return nil, false
	}
	e, ok := sh.byKey[ikey{limiter, key, prefix}]
	if !ok || e.c.policy == nil {
		return nil, false
	}
	return e.c.policy, true
}

// Counts returns how many plans each limiter has.
func (c *Catalog) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// List returns, from this process's view, at most limit plans of
// limiter after the plan after (nil: from the first), in order of kind
// (keys, then prefixes) and key.
func (c *Catalog) List(limiter string, after *Plan, limit int) []Plan {
	var out []Plan
	for i := range c.shards {
		sh := c.shards[i].Load()
		if sh == nil {
			continue
		}
		for _, p := range sh.plans {
			if p.Limiter == limiter && (after == nil || comparePlans(p, *after) > 0) {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, comparePlans)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// First returns, from this process's view, limiter's first plan in
// List's order whose policy f accepts (a plan whose spec this release
// cannot compile has none, and is never accepted).
func (c *Catalog) First(limiter string, f func(sluice.Policy) bool) (Plan, bool) {
	var first Plan
	found := false
	for i := range c.shards {
		sh := c.shards[i].Load()
		if sh == nil {
			continue
		}
		for _, p := range sh.plans {
			if p.Limiter != limiter || found && comparePlans(p, first) >= 0 {
				continue
			}
			if e := sh.byKey[p.id()]; e.c != nil && e.c.policy != nil && f(e.c.policy) {
				first, found = p, true
			}
		}
	}
	return first, found
}

func comparePlans(a, b Plan) int {
	if a.Prefix != b.Prefix {
		if a.Prefix {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.Key, b.Key)
}

// replace publishes shard i's plans ps, read from or written to the store.
func (c *Catalog) replace(i int, ps []Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replaceLocked(i, ps)
	c.publishLens()
}

// replaceLocked requires that c.mu is held; the caller publishes the
// prefix lengths.
func (c *Catalog) replaceLocked(i int, ps []Plan) {
	if old := c.shards[i].Load(); old != nil {
		for _, p := range old.plans {
			c.count(p, -1)
		}
	}
	sh := &shardIndex{plans: ps, byKey: make(map[ikey]entry, len(ps))}
	for j := range ps {
		p := &ps[j]
		if name, ok := c.names[p.Limiter]; ok {
			p.Limiter = name
		} else {
			c.names[p.Limiter] = p.Limiter
		}
		comp, ok := c.compiled[p.Spec]
		if !ok {
			comp = new(compiled)
			comp.policy, _, comp.err = Compile([]byte(p.Spec))
			c.compiled[p.Spec] = comp
		}
		sh.byKey[p.id()] = entry{p.Version, comp}
		c.count(*p, 1)
	}
	c.shards[i].Store(sh)
}

// count adds d to p's counts; it requires that c.mu is held.
func (c *Catalog) count(p Plan, d int) {
	c.counts[p.Limiter] += d
	if c.counts[p.Limiter] == 0 {
		delete(c.counts, p.Limiter)
	}
	if !p.Prefix {
		return
	}
	m := c.prefixes[p.Limiter]
	if m == nil {
		m = make(map[int]int)
		c.prefixes[p.Limiter] = m
	}
	m[len(p.Key)] += d
	if m[len(p.Key)] == 0 {
		delete(m, len(p.Key))
	}
}

// publishLens publishes the prefix lengths; it requires that c.mu is held.
func (c *Catalog) publishLens() {
	lens := make(map[string][]int, len(c.prefixes))
	for l, m := range c.prefixes {
		for n := range m {
			lens[l] = append(lens[l], n)
		}
		slices.SortFunc(lens[l], func(a, b int) int { return b - a })
	}
	c.lens.Store(&lens)
}

// read returns the state of key in the store, or nil.
func (c *Catalog) read(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	err := c.st.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) {
		out = append(out[:0], state...)
		return nil, 0, false
	})
	return out, err
}

func shardKey(i int) string     { return "shard/" + strconv.Itoa(i) }
func slotKey(seq uint64) string { return "log/" + strconv.FormatUint(seq%logSlots, 10) }

const headKey = "head"

func (c *Catalog) readShard(ctx context.Context, i int) ([]Plan, error) {
	b, err := c.read(ctx, shardKey(i))
	if err != nil {
		return nil, err
	}
	ps, err := decodeShard(b, nil)
	if err != nil {
		return nil, fmt.Errorf("%w (shard %d)", err, i)
	}
	return ps, nil
}

// Get returns the plan of limiter and key (or prefix), read from the
// store.
func (c *Catalog) Get(ctx context.Context, limiter, key string, prefix bool) (Plan, error) {
	ps, err := c.readShard(ctx, shardOf(limiter, key, prefix))
	if err != nil {
		return Plan{}, err
	}
	want := ikey{limiter, key, prefix}
	for _, p := range ps {
		if p.id() == want {
			return p, nil
		}
	}
	return Plan{}, ErrNotFound
}

// Change is what a write did to a plan: Old is the plan before (nil when
// there was none), New after (nil when deleted). Both are the same plan
// when the write changed nothing.
type Change struct {
	Old, New *Plan
}

// Put writes p (its Version is set by the write), unless its plan has
// the same spec already, which writes nothing. With ifMatch, the plan
// must exist at that version, else ErrPrecondition; 0 asks for no plan
// at all.
func (c *Catalog) Put(ctx context.Context, p Plan, ifMatch *uint64) (Change, error) {
	if _, spec, err := Compile([]byte(p.Spec)); err != nil {
		return Change{}, err
	} else {
		p.Spec = spec
	}
	var ch Change
	err := c.write(ctx, shardOf(p.Limiter, p.Key, p.Prefix), func(ps []Plan, n uint64) ([]Plan, bool, error) {
		ch = Change{}
		i := slices.IndexFunc(ps, func(q Plan) bool { return q.id() == p.id() })
		if err := precondition(ps, i, ifMatch); err != nil {
			return nil, false, err
		}
		if i >= 0 {
			old := ps[i]
			ch.Old = &old
			if old.Spec == p.Spec {
				ch.New = &old
				return ps, false, nil
			}
			if old.Version > n {
				return nil, false, errSuperseded
			}
		}
		q := p
		q.Version = n
		ch.New = &q
		next := slices.Clone(ps)
		if i >= 0 {
			next[i] = q
		} else {
			next = append(next, q)
		}
		return next, true, nil
	})
	return ch, err
}

// Delete deletes the plan of limiter and key (or prefix); ErrNotFound
// when there is none. With ifMatch, the plan must be at that version.
func (c *Catalog) Delete(ctx context.Context, limiter, key string, prefix bool, ifMatch *uint64) (Change, error) {
	id := ikey{limiter, key, prefix}
	var ch Change
	err := c.write(ctx, shardOf(limiter, key, prefix), func(ps []Plan, n uint64) ([]Plan, bool, error) {
		ch = Change{}
		i := slices.IndexFunc(ps, func(q Plan) bool { return q.id() == id })
		if err := precondition(ps, i, ifMatch); err != nil {
			return nil, false, err
		}
		if i < 0 {
			return nil, false, ErrNotFound
		}
		old := ps[i]
		ch.Old = &old
		if old.Version > n {
			return nil, false, errSuperseded
		}
		return slices.Delete(slices.Clone(ps), i, i+1), true, nil
	})
	return ch, err
}

// precondition checks ifMatch against ps[i] (i < 0: no plan).
func precondition(ps []Plan, i int, ifMatch *uint64) error {
	switch {
	case ifMatch == nil:
		return nil
	case i < 0 && *ifMatch == 0, i >= 0 && ps[i].Version == *ifMatch:
		return nil
	}
	return ErrPrecondition
}

// errSuperseded is a write that took its number before another write of
// the same plan took a later one and wrote first: it takes a new number.
var errSuperseded = errors.New("plans: superseded")

// maxSuperseded bounds the numbers one write takes.
const maxSuperseded = 16

// editFunc returns shard's plans after a write numbered n (0 when the
// write has no number yet, to see whether it changes anything), and
// whether they changed. It may be called several times.
type editFunc func(ps []Plan, n uint64) ([]Plan, bool, error)

// write applies edit to shard i: a read first, to answer a write that
// changes nothing or fails its precondition without taking a number;
// then the next number, the shard's update, and the change's log
// record, in that order, so that whoever reads the record finds the
// shard written.
func (c *Catalog) write(ctx context.Context, i int, edit editFunc) error {
	ps, err := c.readShard(ctx, i)
	if err != nil {
		return err
	}
	_, changed, err := edit(ps, 0)
	switch {
	case errors.Is(err, errSuperseded): // a number decides
	case err != nil:
		return err
	case !changed:
		return nil
	}
	for range maxSuperseded {
		n, err := c.next(ctx)
		if err != nil {
			return err
		}
		var written []Plan
		var editErr error
		changed := false
		err = c.st.Update(ctx, shardKey(i), func(state []byte) ([]byte, time.Duration, bool) {
			written, changed, editErr = nil, false, nil
			cur, err := decodeShard(state, nil)
			if err != nil {
				editErr = fmt.Errorf("%w (shard %d)", err, i)
				return nil, 0, false
			}
			next, ch, err := edit(cur, n)
			if err != nil {
				editErr = err
				return nil, 0, false
			}
			written, changed = next, ch
			if !ch {
				return nil, 0, false
			}
			return appendShard(nil, next), 0, true
		})
		if err == nil {
			err = editErr
		}
		logged := slot{seq: n, shard: noShard, at: c.now().UnixNano()}
		if err == nil && changed {
			logged.shard = int64(i)
		}
		if lerr := c.log(ctx, logged); err == nil {
			err = lerr
		}
		if errors.Is(err, errSuperseded) {
			continue
		}
		if err == nil && changed {
			c.replace(i, written)
		}
		return err
	}
	return fmt.Errorf("plans: shard %d: %w %d times in a row", i, errSuperseded, maxSuperseded)
}

// next takes the next change number from the head record.
func (c *Catalog) next(ctx context.Context) (uint64, error) {
	var n uint64
	var decodeErr error
	err := c.st.Update(ctx, headKey, func(state []byte) ([]byte, time.Duration, bool) {
		cur, err := decodeHead(state)
		decodeErr = err
		if err != nil {
			return nil, 0, false
		}
		n = cur + 1
		return encodeHead(n), 0, true
	})
	if err == nil {
		err = decodeErr
	}
	return n, err
}

// log writes s to the change log, over an older change in its slot.
func (c *Catalog) log(ctx context.Context, s slot) error {
	return c.st.Update(ctx, slotKey(s.seq), func(state []byte) ([]byte, time.Duration, bool) {
		if old, err := decodeSlot(state); err == nil && old.seq > s.seq {
			return nil, 0, false // a change numbered logSlots later is there
		}
		return s.encode(), 0, true
	})
}

// Import writes the plans ps, each unless its plan has the same spec
// already, with one write per shard they fall in, at most workers at
// once. It returns how many plans it changed.
func (c *Catalog) Import(ctx context.Context, ps []Plan, workers int) (int, error) {
	byShard := map[int][]Plan{}
	for _, p := range ps {
		if _, spec, err := Compile([]byte(p.Spec)); err != nil {
			return 0, fmt.Errorf("plan of limiter %q, key %q: %w", p.Limiter, p.Key, err)
		} else {
			p.Spec = spec
		}
		i := shardOf(p.Limiter, p.Key, p.Prefix)
		byShard[i] = append(byShard[i], p)
	}
	var changed atomic.Int64
	sem := make(chan struct{}, max(workers, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i, batch := range byShard {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var k int64
			err := c.write(ctx, i, func(cur []Plan, n uint64) ([]Plan, bool, error) {
				k = 0
				next := slices.Clone(cur)
				for _, p := range batch {
					j := slices.IndexFunc(next, func(q Plan) bool { return q.id() == p.id() })
					switch {
					case j >= 0 && next[j].Spec == p.Spec:
						continue
					case j >= 0 && next[j].Version > n:
						return nil, false, errSuperseded
					}
					p.Version = n
					if j >= 0 {
						next[j] = p
					} else {
						next = append(next, p)
					}
					k++
				}
				return next, k > 0, nil
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			changed.Add(k)
		})
	}
	wg.Wait()
	return int(changed.Load()), errors.Join(errs...)
}

// Sync brings this process's view up to the store's: on its first call
// it reads every shard; after that it reads the change log since the
// last change applied and the shards those changes rewrote. A process
// that fell more than the log's length behind, or finds the log
// overwritten, reads every shard again. It returns the number of the
// last change applied.
func (c *Catalog) Sync(ctx context.Context) (uint64, error) {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	hb, err := c.read(ctx, headKey)
	if err != nil {
		return c.cursor, err
	}
	head, err := decodeHead(hb)
	if err != nil {
		return c.cursor, err
	}
	switch {
	case !c.loaded, head < c.cursor, head-c.cursor > logSlots:
		return c.cursor, c.loadLocked(ctx, head)
	case head == c.cursor:
		return c.cursor, nil
	}
	shards := map[int]bool{}
	last := c.cursor
	var lags []time.Duration
scan:
	for seq := c.cursor + 1; seq <= head; seq++ {
		b, err := c.read(ctx, slotKey(seq))
		if err != nil {
			return c.cursor, err
		}
		s, err := decodeSlot(b)
		if err != nil {
			return c.cursor, c.loadLocked(ctx, head)
		}
		switch {
		case s.seq == seq:
			if s.shard >= 0 && s.shard < numShards {
				shards[int(s.shard)] = true
				lags = append(lags, c.now().Sub(time.Unix(0, s.at)))
			}
			last = seq
		case s.seq < seq: // numbered, not yet logged: its writer is between the two
			now := c.now()
			if c.pendingSeq != seq {
				c.pendingSeq, c.pendingSince = seq, now
			}
			if now.Sub(c.pendingSince) > pendingGrace {
				return c.cursor, c.loadLocked(ctx, head)
			}
			break scan
		default: // overwritten: more than the ring behind
			return c.cursor, c.loadLocked(ctx, head)
		}
	}
	for i := range shards {
		ps, err := c.readShard(ctx, i)
		if err != nil {
			return c.cursor, err
		}
		c.replace(i, ps)
	}
	c.cursor = last
	if c.lag != nil {
		for _, d := range lags {
			c.lag(d)
		}
	}
	return c.cursor, nil
}

// loadWorkers is how many shards a load reads at once.
const loadWorkers = 8

// loadLocked reads every shard, applying the changes up to head at
// least; it requires that c.syncMu is held. A store without a change
// has no plans, and is not read further.
func (c *Catalog) loadLocked(ctx context.Context, head uint64) error {
	all := make([][]Plan, numShards)
	if head > 0 {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		next := make(chan int)
		var wg sync.WaitGroup
		var once sync.Once
		var loadErr error
		for range loadWorkers {
			wg.Go(func() {
				for i := range next {
					ps, err := c.readShard(ctx, i)
					if err != nil {
						once.Do(func() { loadErr = err; cancel() })
						return
					}
					all[i] = ps
				}
			})
		}
	feed:
		for i := range numShards {
			select {
			case next <- i:
			case <-ctx.Done():
				break feed
			}
		}
		close(next)
		wg.Wait()
		if loadErr != nil {
			return loadErr
		}
	}
	c.mu.Lock()
	for i, ps := range all {
		c.replaceLocked(i, ps)
	}
	c.publishLens()
	c.mu.Unlock()
	c.loaded, c.cursor = true, head
	return nil
}
