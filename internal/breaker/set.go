package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// Set is the circuit breakers in front of one store: one for the whole
// store, or, when the store says which of its partitions holds a key
// (driver.Partitioner: the masters of a Redis Cluster), one per
// partition, made at the partition's first use, so that a server that
// fails opens the circuit of its own keys only and the others' calls
// still go to the store.
//
// notify learns the state of the set as a whole: Open while any
// partition's circuit is open, HalfOpen while none is open and one is
// half-open, Closed when all are closed. A partition that no call asked
// for in IdleAfter is dropped: its keys moved to another partition (a
// master failed over to its replica), and a circuit nobody waits on must
// not keep the set open.
//
// Set is safe for simultaneous use by multiple goroutines.
type Set struct {
	threshold int
	notify    func(State)
	partition func(key string) string // nil: one breaker
	now       func() time.Time

	whole  *member                            // the partition "": the whole store, or a key whose partition is unknown
	parts  atomic.Pointer[map[string]*member] // copied on write, under mu
	pruned atomic.Int64                       // Unix nanoseconds of the last prune

	mu     sync.Mutex
	counts [HalfOpen + 1]int // guarded by mu: members in each state
	state  State             // guarded by mu: the set's
}

// IdleAfter is how long a partition that no call asks for keeps its
// breaker.
const IdleAfter = 2 * time.Second

// member is a partition's breaker.
type member struct {
	b     *Breaker
	used  atomic.Int64 // Unix nanoseconds of the last call that asked for it
	state State        // guarded by Set.mu: its state as last notified
	gone  bool         // guarded by Set.mu: dropped from the set
}

// NewSet returns the breakers of a store whose partition holds each key
// as partition says (nil: one breaker for every key). Each opens after
// threshold consecutive failures of its own (never when threshold ≤ 0);
// notify, if not nil, learns the set's state changes, in order and with
// the set locked.
func NewSet(threshold int, notify func(State), partition func(key string) string) *Set {
	s := &Set{threshold: threshold, notify: notify, partition: partition, now: time.Now}
	s.whole = s.newMember()
	s.counts[Closed] = 1
	s.parts.Store(&map[string]*member{})
	return s
}

// newMember returns a closed breaker that reports to the set.
func (s *Set) newMember() *member {
	m := &member{}
	m.b = New(s.threshold, func(st State) { s.moved(m, st) })
	m.b.now = func() time.Time { return s.now() }
	return m
}

// For returns the breaker of key's partition.
func (s *Set) For(key string) *Breaker {
	if s.partition == nil {
		return s.whole.b
	}
	p := s.partition(key)
	if p == "" {
		return s.whole.b
	}
	now := s.now().UnixNano()
	m := (*s.parts.Load())[p]
	if m == nil {
		m = s.add(p)
	}
	if now-m.used.Load() > int64(time.Millisecond) { // written at most once a millisecond
		m.used.Store(now)
	}
	if now-s.pruned.Load() > int64(IdleAfter/4) {
		s.prune(now)
	}
	return m.b
}

// add returns partition p's member, made closed if it has none.
func (s *Set) add(p string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.parts.Load()
	if m := old[p]; m != nil {
		return m
	}
	parts := make(map[string]*member, len(old)+1)
	for k, v := range old {
		parts[k] = v
	}
	m := s.newMember()
	m.used.Store(s.now().UnixNano())
	parts[p] = m
	s.parts.Store(&parts)
	s.counts[Closed]++
	return m
}

// prune drops the partitions that no call asked for in IdleAfter before
// now.
func (s *Set) prune(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now-s.pruned.Load() <= int64(IdleAfter/4) {
		return // another call pruned meanwhile
	}
	s.pruned.Store(now)
	old := *s.parts.Load()
	var parts map[string]*member
	for k, m := range old {
		if now-m.used.Load() <= int64(IdleAfter) {
			continue
		}
		if parts == nil {
			parts = make(map[string]*member, len(old))
			for k, v := range old {
				parts[k] = v
			}
		}
		delete(parts, k)
		m.gone = true
		s.counts[m.state]--
	}
	if parts != nil {
		s.parts.Store(&parts)
		s.update()
	}
}

// moved records that m's breaker moved to state st. It is m's breaker's
// notify, called with that breaker locked.
func (s *Set) moved(m *member, st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.gone {
		return
	}
	s.counts[m.state]--
	s.counts[st]++
	m.state = st
	s.update()
}

// update works out the set's state from its members' and tells notify
// of a change. It requires that s.mu is held.
func (s *Set) update() {
	st := Closed
	switch {
	case s.counts[Open] > 0:
		st = Open
	case s.counts[HalfOpen] > 0:
		st = HalfOpen
	}
	if st == s.state {
		return
	}
	s.state = st
	if s.notify != nil {
		s.notify(st)
	}
}
