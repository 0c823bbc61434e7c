package concurrency

import (
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// model is a key's slots as a map, the obvious way: the machine must
// admit exactly what it admits.
type model struct {
	limit int64
	slots map[int64]policy.Slot
}

func (md *model) held(now int64) int64 {
	var n int64
	for _, sl := range md.slots {
		if sl.Expires > now {
			n += sl.Tokens
		}
	}
	return n
}

func (md *model) live(id, now int64) bool {
	sl, ok := md.slots[id]
	return ok && sl.Expires > now
}

// FuzzModel runs a history of slot operations, each byte triple an
// operation, against the model: the machine grants an acquisition
// exactly when the model has room, never holds more than the limit, and
// finds a slot to release or renew exactly when the model holds it.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 1, 5, 0, 2, 9, 1, 0, 3, 2, 1, 7, 0, 1, 200})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := Config{Limit: 4, Lease: 100}
		md := &model{limit: 4, slots: map[int64]policy.Slot{}}
		var s State
		exists := false
		now := t0
		var ids []int64
		for i := 0; i+2 < len(ops); i += 3 {
			kind, a, b := ops[i]%4, int64(ops[i+1]), int64(ops[i+2])
			now += b % 64
			var op policy.SlotOp
			switch kind {
			case 0, 3:
				op = policy.SlotOp{Kind: policy.Acquire, N: 1 + a%4, TTL: 1 + b%100}
			case 1, 2:
				var id int64
				if len(ids) > 0 {
					id = ids[int(a)%len(ids)]
				}
				op = policy.SlotOp{Kind: policy.Release, ID: id}
				if kind == 2 {
					op = policy.SlotOp{Kind: policy.Renew, ID: id, TTL: 1 + b%100}
				}
			}
			peek := m.Peek(&s, exists, now, max(op.N, 1))
			res, changed := m.Slot(&s, exists, now, op)
			switch op.Kind {
			case policy.Acquire:
				want := md.held(now)+op.N <= md.limit
				if res.Allowed != want {
					t.Fatalf("op %d: acquire %d at %d = %+v, model holds %d of %d", i/3, op.N, now, res, md.held(now), md.limit)
				}
				if op.TTL == m.Lease && peek.Allowed != res.Allowed {
					t.Fatalf("op %d: Peek = %+v, acquire = %+v", i/3, peek, res)
				}
				if res.Allowed {
					if _, dup := md.slots[res.Slot.ID]; dup {
						t.Fatalf("op %d: slot ID %d issued twice", i/3, res.Slot.ID)
					}
					md.slots[res.Slot.ID] = res.Slot
					ids = append(ids, res.Slot.ID)
				}
			default:
				want := md.live(op.ID, now)
				if res.Allowed != want {
					t.Fatalf("op %d: %v of slot %d at %d = %+v, model holds it: %v", i/3, op.Kind, op.ID, now, res, want)
				}
				if res.Allowed && op.Kind == policy.Release {
					delete(md.slots, op.ID)
				}
				if res.Allowed && op.Kind == policy.Renew {
					sl := md.slots[op.ID]
					sl.Expires = max(sl.Expires, now+op.TTL)
					md.slots[op.ID] = sl
					if res.Slot != sl {
						t.Fatalf("op %d: renewed slot = %+v, model %+v", i/3, res.Slot, sl)
					}
				}
			}
			if got, want := m.Limit-res.Remaining, md.held(now); res.Code == policy.OK && got != want && want <= m.Limit {
				t.Fatalf("op %d: Remaining %d, model holds %d of %d", i/3, res.Remaining, want, m.Limit)
			}
			if md.held(now) > m.Limit {
				t.Fatalf("op %d: %d held, above the limit %d", i/3, md.held(now), m.Limit)
			}
			exists = exists || changed
			// Round-trip through the encoding, as a store does.
			if exists {
				var again State
				if err := m.DecodeState(m.AppendState(nil, &s), &again); err != nil {
					t.Fatalf("op %d: DecodeState: %v", i/3, err)
				}
				s = again
			}
		}
	})
}
