package rlqs

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// RebalanceEvery is the shortest time between two rebalances of one
// bucket's fleet: a report that finds the last one older runs one before
// it is answered, and a new member's first report waits for the next.
// So a fleet costs at most one rebalance (O(n log n) for n Envoys, plus a
// store update of its record with WithFleetStore) per RebalanceEvery,
// and each report a constant amount, whatever the fleet's size.
const RebalanceEvery = 100 * time.Millisecond

// fleet is one bucket's fleet on one limiter, as this Service serves it:
// a Fleet of the members of its streams, which reports update and answers
// read without a rebalance. Without a fleet store the Fleet is the whole
// fleet; with one, the whole fleet is a record in the store, shared by
// the sluice processes on it, and each rebalance merges this Service's
// members into it, rebalances them and reads their offers back.
type fleet struct {
	key string // in Service.fleets and in the fleet store

	mu      sync.Mutex // guards the fields below
	f       *Fleet
	refs    int           // streams' buckets that point here
	left    []string      // members gone since the last rebalance, with a fleet store
	window  time.Duration // the limiter's, at the last report
	abandon time.Duration // the domain's abandon_after, at the last report
	last    time.Time     // when the last rebalance began
	next    chan struct{} // closed when the next rebalance ends; nil: none asked for
	running bool          // a goroutine runs the rebalances asked for
}

// fleetOf returns the fleet of key, counting one more bucket that points
// to it; leave undoes that.
func (s *Service) fleetOf(key string) *fleet {
	s.fleetsMu.Lock()
	defer s.fleetsMu.Unlock()
	fl := s.fleets[key]
	if fl == nil {
		fl = &fleet{key: key, f: NewFleet(0)}
		s.fleets[key] = fl
	}
	fl.mu.Lock()
	fl.refs++
	fl.mu.Unlock()
	return fl
}

// report folds a report of stream id into fl and returns id's share: a
// new member (joined) waits for the next rebalance, and a report that
// finds the last one RebalanceEvery old runs one first. ctx bounds the
// wait; a member still not rebalanced then gets its current offer.
func (s *Service) report(ctx context.Context, fl *fleet, id string, joined bool, now time.Time, used int64, elapsed, window, abandon time.Duration, total int64) int64 {
	fl.mu.Lock()
	fl.f.SetTotal(total)
	fl.window, fl.abandon = window, abandon
	member := fl.f.Report(id, now, used, elapsed, window)
	if member && (joined || now.Sub(fl.last) >= RebalanceEvery || fl.last.IsZero()) {
		done := s.rebalance(fl)
		fl.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		fl.mu.Lock()
	}
	defer fl.mu.Unlock()
	if s.opts.fleets == nil {
		return fl.f.Grow(id)
	}
	return fl.f.Offer(id)
}

// hold records that stream id was sent share.
func (fl *fleet) hold(id string, share int64) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.f.Hold(id, share)
}

// leave takes stream id out of fl, which it releases; the last bucket to
// leave removes fl, writing the fleet's record first with a fleet store.
func (s *Service) leave(ctx context.Context, fl *fleet, id string) {
	s.fleetsMu.Lock()
	fl.mu.Lock()
	fl.f.Leave(id)
	if s.opts.fleets != nil {
		fl.left = append(fl.left, id)
	}
	fl.refs--
	last := fl.refs == 0
	if last {
		delete(s.fleets, fl.key)
	}
	var done <-chan struct{}
	if last && len(fl.left) > 0 {
		done = s.rebalance(fl)
	}
	fl.mu.Unlock()
	s.fleetsMu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// rebalance asks for a rebalance of fl and returns a channel closed when
// one that began after the call has ended. The rebalances asked for while
// one runs are one, run RebalanceEvery after it began. It requires that
// fl.mu is held.
func (s *Service) rebalance(fl *fleet) <-chan struct{} {
	if fl.next == nil {
		fl.next = make(chan struct{})
	}
	done := fl.next
	if !fl.running {
		fl.running = true
		go s.rebalances(fl)
	}
	return done
}

// rebalances runs the rebalances asked of fl until none is.
func (s *Service) rebalances(fl *fleet) {
	for {
		fl.mu.Lock()
		if fl.next == nil {
			fl.running = false
			fl.mu.Unlock()
			return
		}
		wait := RebalanceEvery - s.opts.now().Sub(fl.last)
		fl.mu.Unlock()
		if wait > 0 && wait <= RebalanceEvery {
			// Real time, whatever the service's clock: it bounds the
			// rebalances' CPU.
			time.Sleep(wait)
		}
		fl.mu.Lock()
		done := fl.next
		fl.next = nil
		fl.last = s.opts.now()
		if s.opts.fleets == nil {
			for _, id := range fl.f.Idle(fl.last, fl.abandon) {
				fl.f.Leave(id) // a stream that stopped reading its answers
			}
			fl.f.Rebalance(nil)
			fl.mu.Unlock()
		} else {
			s.sync(fl) // unlocks fl.mu
		}
		close(done)
	}
}

// sync merges fl's members into the fleet's record in the store,
// rebalances them and reads their offers back. A store that fails leaves
// the offers as they were until the next rebalance. It requires that
// fl.mu is held, and releases it.
func (s *Service) sync(fl *fleet) {
	now, total, abandon := fl.last, fl.f.Total, fl.abandon
	mine := make(map[string]member, len(fl.f.members))
	for id, m := range fl.f.members {
		c := *m
		// What it may spend until it learns of the offers read back.
		c.held = m.reserve()
		mine[id] = c
	}
	left := fl.left
	fl.left = nil
	fl.mu.Unlock()

	offers := make(map[string]int64, len(mine))
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.timeout)
	defer cancel()
	err := s.opts.fleets.Update(ctx, fl.key, func(state []byte) ([]byte, time.Duration, bool) {
		f := decodeFleet(state, total)
		for _, id := range left {
			f.Leave(id)
		}
		for _, id := range f.Idle(now, abandon) {
			f.Leave(id) // members of a process that went away
		}
		for id, m := range mine {
			if f.members[id] == nil && len(f.members) >= MaxMembers {
				continue
			}
			f.Leave(id)
			c := m
			f.members[id] = &c
			f.reserved += c.reserve()
		}
		f.Rebalance(func(id string) bool { _, ok := mine[id]; return ok })
		clear(offers)
		for id := range mine {
			offers[id] = f.Offer(id)
		}
		return f.encode(), 2 * abandon, true
	})
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if err != nil {
		fl.left = append(left, fl.left...) // written at the next one
		s.opts.logger.Warn("rlqs: fleet not rebalanced; its shares stay as they are", "err", err)
		return
	}
	for id, o := range offers {
		if m := fl.f.members[id]; m != nil {
			fl.f.setOffer(m, o)
		}
	}
}

// A bucket's fleet is kept in a driver.Store with WithFleetStore, as a
// record that each rebalance updates atomically, so that several sluice
// processes on one store share one fleet: the shares they offer sum to at
// most the limit whichever process each Envoy's stream reaches.

// fleetRecord is a Fleet as stored: JSON, a few dozen bytes per Envoy, at
// most MaxMembers of them.
type fleetRecord struct {
	Members map[string]memberRecord `json:"m"`
}

type memberRecord struct {
	Demand  int64 `json:"d"`
	Used    int64 `json:"u"`
	Elapsed int64 `json:"e"` // nanoseconds
	Held    int64 `json:"h"`
	Offer   int64 `json:"o"`
	Seen    int64 `json:"s"` // Unix nanoseconds
}

// decodeFleet returns the fleet of a stored record, sharing total. A
// missing record, or one that does not decode or breaks the invariants (a
// negative share, too many members), is an empty fleet: a store's bytes
// are outside input, and an empty fleet only makes the Envoys' next
// reports rebuild it.
func decodeFleet(state []byte, total int64) *Fleet {
	f := NewFleet(total)
	if len(state) == 0 {
		return f
	}
	var r fleetRecord
	if err := json.Unmarshal(state, &r); err != nil || len(r.Members) > MaxMembers {
		return f
	}
	for id, m := range r.Members {
		if m.Held < 0 || m.Offer < 0 || m.Used < 0 || m.Elapsed < 0 || m.Demand < -1 {
			return NewFleet(total)
		}
		mm := &member{demand: m.Demand, used: m.Used, elapsed: time.Duration(m.Elapsed),
			held: m.Held, offer: m.Offer, seen: time.Unix(0, m.Seen)}
		f.members[id] = mm
		f.reserved = satAdd(f.reserved, mm.reserve())
	}
	return f
}

// encode returns f's record.
func (f *Fleet) encode() []byte {
	r := fleetRecord{Members: make(map[string]memberRecord, len(f.members))}
	for id, m := range f.members {
		r.Members[id] = memberRecord{Demand: m.demand, Used: m.used, Elapsed: int64(m.elapsed),
			Held: m.held, Offer: m.offer, Seen: m.seen.UnixNano()}
	}
	b, _ := json.Marshal(r) // maps of strings and integers always encode
	return b
}
