package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/record"
	"github.com/sluicehq/sluice/internal/sleep"
)

// Slots reports whether the policy holds slots (Concurrency): whether
// Limiter.Acquire applies. It is not part of Policy, to keep the
// package's API small: httplimit and grpclimit ask it through an
// interface of their own.
func (p machinePolicy[S, M]) Slots() bool {
	_, ok := any(p.m).(policy.Slots[S])
	return ok && p.err == nil
}

// TakesSlots reports whether the policy's AllowN takes slots, which
// lapse after the lease unless Limiter.Release gives them back: the
// policy holds slots (Slots), or wraps one that does (a PenaltyBox of a
// Concurrency, or a Compound with such a box among its members), whose
// slots nothing gives back. As Slots, it is not part of Policy: sluice
// serve asks it, to refuse at configuration time a concurrency limit
// wired to Envoy's services, which never release.
func (p machinePolicy[S, M]) TakesSlots() bool { return p.err == nil && policy.TakesSlots[S](p.m) }

// holdsSlots reports whether p holds slots.
func holdsSlots(p Policy) bool {
	s, ok := p.(interface{ Slots() bool })
	return ok && s.Slots()
}

// Slot is a slot of a Concurrency limit: what Limiter.Acquire returns and
// Limiter.Release and Limiter.Renew take. Result.Allowed reports whether
// the slot is held; the rest of Result is the key's as for AllowN. A
// Slot is a value: a process may give back a slot another acquired,
// given its Key and ID (sluice serve's /api/v1/release does).
type Slot struct {
	Result
	// Key is the key the slot is held on.
	Key string
	// ID tells the slot apart from every other slot ever held on Key,
	// unless a clock goes back by more than the lease; 0 for no slot.
	ID int64
	// Expires is when the slot lapses unless renewed, on the limiter's
	// clock.
	Expires time.Time
	// TTL is how long the slot is held without renewal: the lease, or
	// the ttl it was acquired with; Renew renews it by TTL.
	TTL time.Duration
}

// slotOf is the Slot of r on key, held for ttl.
func slotOf(key string, ttl int64, r policy.SlotResult) Slot {
	s := Slot{Result: resultOf(r.Result), Key: key, ID: r.Slot.ID, TTL: time.Duration(ttl)}
	if r.Allowed && r.Slot.ID != 0 {
		s.Expires = time.Unix(0, r.Slot.Expires)
	}
	return s
}

// slotBackend is l's backend with slots, or the error of a limiter whose
// policy has none.
func (l *Limiter) slotBackend(op string) (engine.Slots, error) {
	if s, ok := l.backend.(engine.Slots); ok && holdsSlots(l.policy) {
		return s, nil
	}
	return nil, fmt.Errorf("sluice: Limiter.%s: policy %s holds no slots: %w", op, l.policy.Kind(), errors.ErrUnsupported)
}

// slotOp runs op on key, and turns its errors into the API's.
func (l *Limiter) slotOp(ctx context.Context, name, key string, op policy.SlotOp) (policy.SlotResult, error) {
	b, err := l.slotBackend(name)
	if err != nil {
		return policy.SlotResult{}, err
	}
	r, err := b.Slot(ctx, key, op)
	if err != nil {
		return r, storeError("Limiter."+name, key, err)
	}
	switch r.Code {
	case policy.OK:
		return r, nil
	case policy.NoSlots: // a key whose own policy (WithPolicyFor) holds none
		return r, fmt.Errorf("sluice: Limiter.%s: the policy of key %q holds no slots: %w", name, key, errors.ErrUnsupported)
	case policy.TTLOutOfRange:
		return r, &ArgumentError{Op: "Limiter." + name, Arg: "ttl", Value: time.Duration(op.TTL),
			Want: fmt.Sprintf("must be positive and at most the lease %v", time.Duration(r.Limit))}
	}
	return r, limiterError("Limiter."+name, r.Result, op.N, 0, l.limit)
}

// The polls of Acquire's wait for a slot: a release frees a slot before
// its expiry, which RetryAfter cannot foresee, so a waiter looks again
// at least this often, with jitter so that waiters do not come back
// together.
const (
	minPoll = time.Millisecond
	maxPoll = 50 * time.Millisecond
)

// Acquire takes a slot of one token on key, held for ttl (0: the
// policy's lease), waiting up to maxWait (0: not at all), and less when
// ctx has an earlier deadline, for one to be free. A slot not had within
// the wait is a Slot with Allowed false, RetryAfter the time until a
// slot lapses if no holder releases first; errors are for a ttl out of
// [0, lease] or a negative maxWait (*ArgumentError), a policy without
// slots (errors.ErrUnsupported), a store that failed (*StoreError), and
// ctx ending. Under FailOpen, a store failure grants a Slot of ID 0,
// which nothing holds.
//
// The wait polls: it looks again when the earliest slot lapses, and
// every few milliseconds (up to 50 ms, a twentieth of the lease) for a
// release, on the limiter's clock (a fake clock's Sleep in tests). It is
// not fair: a caller that comes later may take a slot before one that
// waited.
func (l *Limiter) Acquire(ctx context.Context, key string, ttl, maxWait time.Duration) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	if maxWait < 0 {
		return Slot{}, &ArgumentError{Op: "Limiter.Acquire", Arg: "maxWait", Value: maxWait, Want: "must not be negative"}
	}
	if ttl == 0 {
		ttl = l.policy.Window()
	}
	op := policy.SlotOp{Kind: policy.Acquire, N: 1, TTL: int64(ttl)}
	poll := min(max(ttl/20, minPoll), maxPoll)
	deadline := l.clock.Now() + int64(maxWait)
	for {
		r, err := l.slotOp(ctx, "Acquire", key, op)
		if err != nil {
			return Slot{}, err
		}
		notify(l.observer, r.Allowed, 1)
		left := time.Duration(deadline - l.clock.Now())
		if r.Allowed || left <= 0 {
			return slotOf(key, op.TTL, r), nil
		}
		d := min(time.Duration(r.RetryAfter), poll/2+rand.N(poll/2+1), left)
		if err := sleep.On(ctx, l.clock, d); err != nil {
			return Slot{}, err
		}
	}
}

// Release gives the slot s back, so that another holder may take it at
// once. The Slot it returns has Allowed false when s was not held any
// more (it lapsed, or was released), which is no error: nothing changed.
func (l *Limiter) Release(ctx context.Context, s Slot) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	r, err := l.slotOp(ctx, "Release", s.Key, policy.SlotOp{Kind: policy.Release, ID: s.ID})
	if err != nil {
		return Slot{}, err
	}
	return slotOf(s.Key, int64(s.TTL), r), nil
}

// Renew extends the slot s to s.TTL (0: the lease) from now, and never
// shortens it. The Slot it returns has Allowed false when s lapsed or was
// released: the slot is lost, and is not taken again (that could admit
// more than the limit), so its holder should stop or Acquire anew.
func (l *Limiter) Renew(ctx context.Context, s Slot) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	ttl := s.TTL
	if ttl == 0 {
		ttl = l.policy.Window()
	}
	r, err := l.slotOp(ctx, "Renew", s.Key, policy.SlotOp{Kind: policy.Renew, ID: s.ID, TTL: int64(ttl)})
	if err != nil {
		return Slot{}, err
	}
	return slotOf(s.Key, int64(ttl), r), nil
}

// slotRecords returns the backend of a limiter whose policy holds slots,
// in memory: its keys as records (engine.MemRecords), which slot
// operations run on as a store's records do. The in-memory table, the
// hot path of the other policies, has no slot operations.
func slotRecords(p Policy, clock Clock, maxKeys int) (*engine.MemRecords, error) {
	e, err := p.erased()
	if err != nil {
		return nil, err
	}
	codec := record.NewMachine(p.String(), e, 0)
	return &engine.MemRecords{Recs: keyed.NewMapStore(clock, maxKeys), Codec: codec, Clock: clock}, nil
}

// newSlotLimiter makes l, whose clock is set, decide on a policy that
// holds slots: its keys as records in memory, or in o's store with
// records in memory as the fallback of FailLocal.
func newSlotLimiter(l *Limiter, o *options) (*Limiter, error) {
	local, err := slotRecords(l.policy, l.clock, o.maxKeys)
	if err != nil {
		return nil, err
	}
	l.keys = engine.RecordLen{Keys: l.keys, Recs: local.Recs}
	l.backend = local
	if o.store == nil {
		return l, nil
	}
	setup, err := newStoreSetup(o, l.clock)
	if err != nil {
		return nil, err
	}
	codec, err := recordCodec(l.policy, setup.inherit, setup.version, false)
	if err != nil {
		return nil, err
	}
	l.backend = &engine.Failover{Policy: setup.fail, Store: &engine.Stored{Store: setup.store, Codec: codec, Clock: l.clock}, Local: local,
		Fleet: setup.fleet, Limit: l.limit}
	return l, nil
}
