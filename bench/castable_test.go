package bench

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// casFloors are floors too (see keyedFloors): issue 34's prototype table
// (casTable) deciding a request, returning whether it passes
// (floor-cas), a result of the five facts sluice's Result has, through
// one call behind an interface as a caller gets it (floor-cas-result),
// and four of them, which Go keeps in registers (floor-cas-result4).
// They show what the table's design saves and what a result larger than
// four words costs at the call that returns it. The table has twice as
// many slots as the run has keys (see casSlots), as a table sized to its
// keys would: 2M slots for 1k keys would spread them over 32 MB and
// charge the floor the cache and TLB misses of a table 2,000 times too
// large.
var casFloors = []keyedPeer{
	{"floor-cas", func(_ testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		t := newCASTable(r)
		return func(key string) (bool, error) {
			allowed, _, _, _ := t.take(key)
			return allowed, nil
		}, func() {}
	}},
	{"floor-cas-result", func(_ testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		var d casDecider = newCASTable(r)
		return func(key string) (bool, error) {
			res := d.Decide(key)
			return res.Allowed, nil
		}, func() {}
	}},
	{"floor-cas-result4", func(_ testing.TB, r keyedRegime) (func(string) (bool, error), func()) {
		var d casDecider = newCASTable(r)
		return func(key string) (bool, error) {
			res := d.Decide4(key)
			return res.Allowed, nil
		}, func() {}
	}},
}

// casSlots is the power of two at least twice keys, and 2M slots (room
// for 1M keys) when the run does not say how many keys it has.
func casSlots(keys int) int {
	if keys == 0 {
		keys = 1 << 20
	}
	n := 1 << 10
	for n < 2*keys {
		n <<= 1
	}
	return n
}

// casTable is not a limiter either but issue 34's prototype, as a floor:
// a fixed open-addressing table whose slot holds its key, set once under
// a lock, and one word of GCRA state (the theoretical arrival time, in
// ns) that a decision updates by compare-and-swap, taking no lock. Its
// arithmetic is exact only for the benchmark's regimes, whose emission
// interval is a whole number of ns; it never drops a key.
type casTable struct {
	mu    sync.Mutex // taken to set a slot's key
	seed  maphash.Seed
	slots []casSlot
	mask  uint64
	start time.Time
	// emission is the time one token takes; tolerance how far ahead of
	// now a key's arrival time may run.
	emission, tolerance int64
}

type casSlot struct {
	key atomic.Pointer[string]
	tat atomic.Int64
}

func newCASTable(r keyedRegime) *casTable {
	slots := casSlots(r.keys)
	e := int64(r.interval) / r.limit
	return &casTable{seed: maphash.MakeSeed(), slots: make([]casSlot, slots), mask: uint64(slots - 1),
		start: time.Now(), emission: e, tolerance: r.limit * e}
}

// slot finds key's slot, setting it in the first free one on its path.
func (t *casTable) slot(key string) *casSlot {
	for i := maphash.String(t.seed, key) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		k := s.key.Load()
		if k == nil {
			t.mu.Lock()
			if k = s.key.Load(); k == nil {
				own := key // a copy of the header, so that key itself stays on the stack
				k = &own
				s.key.Store(k)
			}
			t.mu.Unlock()
		}
		if *k == key {
			return s
		}
	}
}

// take is GCRA on key's slot at the monotonic clock: a request passes
// when its arrival time stays within tolerance of now. It returns the
// arrival times before and after, from which each floor builds its
// result.
func (t *casTable) take(key string) (allowed bool, tat, next, now int64) {
	now = int64(time.Since(t.start))
	s := t.slot(key)
	for {
		tat = s.tat.Load()
		next = max(tat, now) + t.emission
		if next-now > t.tolerance {
			return false, tat, next, now
		}
		if s.tat.CompareAndSwap(tat, next) {
			return true, tat, next, now
		}
	}
}

// casResult has a decision's five facts, as sluice.Result has them.
type casResult struct {
	Allowed                                  bool
	Remaining, RetryAfter, ResetAfter, Limit int64
}

// casResult4 has four of them, in the four words Go keeps in registers.
type casResult4 struct {
	Allowed                      bool
	Remaining, RetryAfter, Limit int64
}

// casDecider is casTable behind an interface, as a limiter's caller
// holds it: its result comes back through a call that is not inlined.
type casDecider interface {
	Decide(key string) casResult
	Decide4(key string) casResult4
}

func (t *casTable) Decide(key string) casResult {
	allowed, tat, next, now := t.take(key)
	if !allowed {
		return casResult{RetryAfter: next - now - t.tolerance, ResetAfter: max(tat-now, 0), Limit: t.tolerance / t.emission}
	}
	return casResult{Allowed: true, Remaining: (t.tolerance - (next - now)) / t.emission, ResetAfter: next - now,
		Limit: t.tolerance / t.emission}
}

func (t *casTable) Decide4(key string) casResult4 {
	allowed, _, next, now := t.take(key)
	if !allowed {
		return casResult4{RetryAfter: next - now - t.tolerance, Limit: t.tolerance / t.emission}
	}
	return casResult4{Allowed: true, Remaining: (t.tolerance - (next - now)) / t.emission, Limit: t.tolerance / t.emission}
}
