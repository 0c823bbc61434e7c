package engine

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
)

// Slots is a Backend whose policy holds slots (a concurrency limit):
// Slot runs a slot operation on key. A backend of a policy without slots
// answers the Code policy.NoSlots.
type Slots interface {
	Slot(ctx context.Context, key string, op policy.SlotOp) (policy.SlotResult, error)
}

var (
	_ Slots = (*Stored)(nil)
	_ Slots = (*MemRecords)(nil)
	_ Slots = (*Failover)(nil)
	_ Slots = (*Plans[int])(nil)
	_ Slots = shared{}
)

var noSlots = policy.SlotResult{Result: policy.Result{Code: policy.NoSlots}}

func (s *Stored) Slot(ctx context.Context, key string, op policy.SlotOp) (policy.SlotResult, error) {
	c, ok := s.Codec.(keyed.Slotter)
	if !ok {
		return noSlots, nil
	}
	return s.Store.Slot(ctx, key, c, op)
}

func (m *MemRecords) Slot(ctx context.Context, key string, op policy.SlotOp) (res policy.SlotResult, err error) {
	c, ok := m.Codec.(keyed.Slotter)
	if !ok {
		return noSlots, nil
	}
	err = m.update(ctx, key, func(rec []byte, now int64) (next []byte, changed bool) {
		res, next, changed = c.Slot(rec, now, op)
		return next, changed
	})
	return res, err
}

// Slot runs op on the store, and on the local fallback under FailLocal
// while the store fails. Under FailOpen an acquisition is granted a slot
// of ID 0, which no store holds: a release or renewal of it finds
// nothing.
func (f *Failover) Slot(ctx context.Context, key string, op policy.SlotOp) (policy.SlotResult, error) {
	return onStore(ctx, f, func(b Backend) (policy.SlotResult, error) {
		s, ok := b.(Slots)
		if !ok {
			return policy.SlotResult{}, fmt.Errorf("engine: backend %T has no slots", b)
		}
		return s.Slot(ctx, key, op)
	}, func() policy.SlotResult {
		return policy.SlotResult{Result: policy.Result{Allowed: op.Kind == policy.Acquire, Limit: f.Limit}}
	})
}

func (k *Plans[P]) Slot(ctx context.Context, key string, op policy.SlotOp) (policy.SlotResult, error) {
	b, err := k.planOf(ctx, key)
	if err != nil {
		return policy.SlotResult{}, err
	}
	s, ok := b.Keys.(Slots)
	if !ok {
		return noSlots, nil
	}
	return s.Slot(ctx, key, op)
}

// Slot takes, under FailShare, a slot of n times the tokens asked for
// from this process's memory, so that the fleet's n processes hold about
// the limit together; a share too small for one slot is a refusal.
// Releases and renewals name their slot as they are.
func (s shared) Slot(ctx context.Context, key string, op policy.SlotOp) (policy.SlotResult, error) {
	b, ok := s.b.(Slots)
	if !ok {
		return noSlots, nil
	}
	if op.Kind == policy.Acquire {
		op.N = s.times(op.N)
	}
	r, err := b.Slot(ctx, key, op)
	if r.Code == policy.TokensAboveLimit {
		r = policy.SlotResult{Result: policy.Result{Limit: r.Limit, RetryAfter: policy.Never}}
	}
	r.Result = s.result(r.Result)
	return r, err
}
