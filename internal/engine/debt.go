package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/record"
)

// Debts is a Backend whose keys can owe tokens (policy.Debtor) and hold
// estimates to settle later: Limiter.Charge, Hold, Settle and Debt run
// here. Every method's result describes the key after the call.
type Debts interface {
	// Charge takes n tokens for key whatever is left.
	Charge(ctx context.Context, key string, n int64) (keyed.Settled, error)
	// Hold takes n tokens for key as Consume does and, when allowed,
	// opens the hold id for ttl ns.
	Hold(ctx context.Context, key string, id uint64, n, ttl int64) (keyed.Settled, error)
	// Settle settles key's hold id at its actual cost n ≥ 0, once.
	Settle(ctx context.Context, key string, id uint64, n int64) (keyed.Settled, error)
	// Debt is what key owes now.
	Debt(ctx context.Context, key string) (keyed.Settled, error)
}

// ErrHoldsFull is keyed.ErrHoldsFull: a key has record.MaxHolds open.
var ErrHoldsFull = keyed.ErrHoldsFull

// MemDebts is Debts on keys in memory, whose states it works on encoded,
// through the policy's erased machine. The holds are kept beside the
// keys, under one lock: a hold is settled once, and its key's state
// changes with it, both under that lock.
type MemDebts struct {
	Keys   keyed.Keys
	Erased policy.Erased
	Debts  policy.Debts
	Clock  keyed.Clock
	// MaxHolds bounds the holds open on one key (0: record.MaxHolds), as
	// a store's record bounds them.
	MaxHolds int

	mu    sync.Mutex
	holds map[uint64]memHold
	// perKey counts the holds open on each key; sweepAt is the number of
	// holds at which the next sweep of expired ones runs.
	perKey  map[string]int
	sweepAt int
}

type memHold struct {
	key string
	record.Hold
}

// after is what key's encoded state st owes and has left at now.
func (m *MemDebts) after(st []byte, now int64) keyed.Settled {
	p := m.Erased.Peek(st, now, 1)
	p.Remaining = policy.RemainingAt(p)
	return keyed.Settled{Res: p, Debt: m.Debts.Debt(st, now)}
}

// take runs f, a decision on key's encoded state at now, as one update
// of the key, keeping the state f returns when it reports a change; it
// returns f's result and what key owes after it.
func (m *MemDebts) take(key string, now int64, f func(st []byte) (policy.Result, []byte, bool)) keyed.Settled {
	var out keyed.Settled
	m.Keys.Update(key, now, func(st []byte) ([]byte, bool) {
		res, next, changed := f(st)
		out.Res = res
		if changed {
			st = next
		}
		out.Debt = m.Debts.Debt(st, now)
		return next, changed
	})
	return out
}

func (m *MemDebts) Charge(_ context.Context, key string, n int64) (keyed.Settled, error) {
	now := m.Clock.Now()
	return m.take(key, now, func(st []byte) (policy.Result, []byte, bool) { return m.Debts.Charge(st, now, n, nil) }), nil
}

func (m *MemDebts) Hold(_ context.Context, key string, id uint64, n, ttl int64) (keyed.Settled, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.Clock.Now()
	m.sweep(now)
	most := m.MaxHolds
	if most == 0 {
		most = record.MaxHolds
	}
	if m.perKey[key] >= most {
		return keyed.Settled{}, ErrHoldsFull
	}
	out := m.take(key, now, func(st []byte) (policy.Result, []byte, bool) {
		d, next, changed := m.Erased.Consume(st, now, n, nil)
		return d.ResultIn(m.Erased.Limits()), next, changed
	})
	if out.Res.Code == policy.OK && out.Res.Allowed {
		if m.holds == nil {
			m.holds, m.perKey = make(map[uint64]memHold), make(map[string]int)
		}
		m.holds[id] = memHold{key: key, Hold: record.Hold{ID: id, Tokens: n, At: now, Expires: policy.SatAdd(now, ttl)}}
		m.perKey[key]++
	}
	return out, nil
}

// sweep drops the expired holds once their number has doubled since the
// last sweep, so that holds never settled cost amortised constant time.
// It requires that m.mu is held.
func (m *MemDebts) sweep(now int64) {
	if len(m.holds) < max(m.sweepAt, 64) {
		return
	}
	for id, h := range m.holds {
		if h.Expires <= now {
			m.drop(id, h.key)
		}
	}
	m.sweepAt = 2 * len(m.holds)
}

// drop forgets the hold id of key. It requires that m.mu is held.
func (m *MemDebts) drop(id uint64, key string) {
	delete(m.holds, id)
	if m.perKey[key]--; m.perKey[key] <= 0 {
		delete(m.perKey, key)
	}
}

func (m *MemDebts) Settle(_ context.Context, key string, id uint64, n int64) (keyed.Settled, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.Clock.Now()
	h, found := m.holds[id]
	found = found && h.key == key
	if found {
		m.drop(id, key)
		found = h.Expires > now // an expired hold stays charged its estimate
	}
	var out keyed.Settled
	m.Keys.Update(key, now, func(st []byte) ([]byte, bool) {
		next, changed := st, false
		switch {
		case !found:
		case n > h.Tokens:
			var nx []byte
			if _, nx, changed = m.Debts.Charge(st, now, n-h.Tokens, nil); changed {
				next = nx
			}
		case n < h.Tokens:
			var nx []byte
			if nx, changed = m.Debts.Refund(st, now, h.At, h.Tokens-n, nil); changed {
				next = nx
			}
		}
		out = m.after(next, now)
		return next, changed
	})
	out.Found = found
	return out, nil
}

func (m *MemDebts) Debt(_ context.Context, key string) (keyed.Settled, error) {
	var out keyed.Settled
	now := m.Clock.Now()
	m.Keys.Update(key, now, func(st []byte) ([]byte, bool) {
		out = m.after(st, now)
		return nil, false
	})
	return out, nil
}

// StoredDebts is Debts in a store, whose records' codec is a
// record.Debtor.
type StoredDebts struct {
	Store *keyed.Store
	Codec record.Debtor
}

func (s StoredDebts) Charge(ctx context.Context, key string, n int64) (keyed.Settled, error) {
	return s.Store.Charge(ctx, key, s.Codec, n)
}

func (s StoredDebts) Hold(ctx context.Context, key string, id uint64, n, ttl int64) (keyed.Settled, error) {
	return s.Store.Hold(ctx, key, s.Codec, id, n, ttl)
}

func (s StoredDebts) Settle(ctx context.Context, key string, id uint64, n int64) (keyed.Settled, error) {
	return s.Store.Settle(ctx, key, s.Codec, id, n)
}

func (s StoredDebts) Debt(ctx context.Context, key string) (keyed.Settled, error) {
	return s.Store.Debt(ctx, key, s.Codec)
}

// DebtsFailover is a store's Debts behind the failure policy, as
// Failover is its Backend's: Local is the in-memory fallback of
// FailLocal, and Limit the Limit of a result under FailOpen, which
// counts nothing. A hold opened on the fallback is settled there, when
// the store fails again at its settlement; one opened on the store and
// settled while it fails is not found.
type DebtsFailover struct {
	Policy FailurePolicy
	Store  Debts
	Local  Debts
	Limit  int64
}

func (f *DebtsFailover) call(ctx context.Context, fn func(Debts) (keyed.Settled, error)) (keyed.Settled, error) {
	v, err := fn(f.Store)
	if err == nil || errors.Is(err, ErrHoldsFull) {
		return v, err
	}
	if err = f.Policy.failed(ctx, err); err == nil {
		return fn(f.Local)
	}
	if sf, ok := err.(*StoreFailed); ok && sf.Open {
		return keyed.Settled{Res: policy.Result{Allowed: true, Limit: f.Limit}}, nil
	}
	return keyed.Settled{}, err
}

func (f *DebtsFailover) Charge(ctx context.Context, key string, n int64) (keyed.Settled, error) {
	return f.call(ctx, func(d Debts) (keyed.Settled, error) { return d.Charge(ctx, key, n) })
}

func (f *DebtsFailover) Hold(ctx context.Context, key string, id uint64, n, ttl int64) (keyed.Settled, error) {
	return f.call(ctx, func(d Debts) (keyed.Settled, error) { return d.Hold(ctx, key, id, n, ttl) })
}

func (f *DebtsFailover) Settle(ctx context.Context, key string, id uint64, n int64) (keyed.Settled, error) {
	return f.call(ctx, func(d Debts) (keyed.Settled, error) { return d.Settle(ctx, key, id, n) })
}

func (f *DebtsFailover) Debt(ctx context.Context, key string) (keyed.Settled, error) {
	return f.call(ctx, func(d Debts) (keyed.Settled, error) { return d.Debt(ctx, key) })
}
