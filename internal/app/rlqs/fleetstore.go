package rlqs

import (
	"context"
	"encoding/json"
	"time"
)

// A bucket's fleet is kept in a driver.Store (WithFleetStore), as a record
// updated atomically by each report, so that several sluice processes on
// one store share one fleet: the shares they assign sum to at most the
// limit whichever process each Envoy's stream reaches.

// fleetRecord is a Fleet as stored: JSON, a few dozen bytes per Envoy, at
// most MaxMembers of them.
type fleetRecord struct {
	Members map[string]memberRecord `json:"m"`
}

type memberRecord struct {
	Demand   int64 `json:"d"`
	Used     int64 `json:"u"`
	Elapsed  int64 `json:"e"` // nanoseconds
	Assigned int64 `json:"a"`
	Seen     int64 `json:"s"` // Unix nanoseconds
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
		if m.Assigned < 0 || m.Used < 0 || m.Elapsed < 0 || m.Demand < -1 {
			return NewFleet(total)
		}
		f.members[id] = &member{demand: m.Demand, used: m.Used, elapsed: time.Duration(m.Elapsed),
			assigned: m.Assigned, seen: time.Unix(0, m.Seen)}
		f.assigned = satAdd(f.assigned, m.Assigned)
	}
	return f
}

// encode returns f's record.
func (f *Fleet) encode() []byte {
	r := fleetRecord{Members: make(map[string]memberRecord, len(f.members))}
	for id, m := range f.members {
		r.Members[id] = memberRecord{Demand: m.demand, Used: m.used, Elapsed: int64(m.elapsed),
			Assigned: m.assigned, Seen: m.seen.UnixNano()}
	}
	b, _ := json.Marshal(r) // maps of strings and integers always encode
	return b
}

// fleetOp runs op on the fleet at key, atomically in the fleet store,
// after dropping the members idle for abandon at now. The record lives
// twice abandon past its last update. op may run more than once (after a
// conflict), so it must only set what its last run decides.
func (s *Service) fleetOp(ctx context.Context, key string, total int64, now time.Time, abandon time.Duration, op func(f *Fleet)) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	return s.opts.fleets.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) {
		f := decodeFleet(state, total)
		for _, id := range f.Idle(now, abandon) {
			f.Leave(id)
		}
		op(f)
		return f.encode(), 2 * abandon, true
	})
}
