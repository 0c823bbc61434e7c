package sluice

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy"
)

// Cost is what a cost known only after the work (a model's streamed
// tokens, a response's bytes) did to a key: the answer of Limiter.Charge,
// Hold, Settle and Debt.
//
// A key can owe tokens: a charge larger than what is left is taken
// anyway, and the excess is debt that the key pays back, by its policy's
// refill or its next windows, before any request is admitted again. Each
// policy holds its debt in the state it has (docs/policies.md, "Debt"),
// so the tokens taken over a long run never exceed the limit by more than
// the debt outstanding, which is at most the largest single charge.
type Cost struct {
	// Result is the decision: for Charge and Hold, AllowN's answer for
	// the tokens (Allowed: they fitted; a Hold that is not Allowed took
	// nothing and has no ID); for Settle and Debt, PeekN's answer for 1
	// token after the call, whose Remaining is what the key has left.
	Result
	// Debt is what the key owes after the call, in tokens: 0 when it
	// owes nothing.
	Debt int64
	// ID is a Hold's identifier, for Settle: opaque, printable (URL-safe
	// base64) and valid in any process sharing the limiter's store.
	ID string
	// Settled reports, for Settle, that the hold was open and is now
	// settled; false when it was settled already, its TTL had ended (its
	// estimate stays charged) or the ID is of no hold.
	Settled bool
}

func costOf(s keyed.Settled) Cost {
	return Cost{Result: resultOf(s.Res), Debt: s.Debt, Settled: s.Found}
}

// debts returns the limiter's Debts, or the error of op on a policy or a
// configuration that cannot hold debt.
func (l *Limiter) debtsFor(op string) (engine.Debts, error) {
	if l.debts == nil {
		return nil, fmt.Errorf("sluice: %s: policy %s cannot owe tokens (the Debt section of docs/policies.md lists the policies that can; a policy per key cannot): %w",
			op, l.policy, errors.ErrUnsupported)
	}
	return l.debts, nil
}

// Charge takes n tokens for key whatever is left, as Bucket4j's
// consumeIgnoringRateLimits: what exceeds what is left becomes debt that
// later requests pay first. It is for costs reported after the fact, which
// must count even when they exceed the limit. The Result is AllowN's
// answer for n (Allowed: they fitted without debt), its RetryAfter that
// of 1 token.
//
// It returns an *ArgumentError for n ≤ 0 (any n above the limit is a
// valid charge), an error matching errors.ErrUnsupported for a policy
// that cannot owe tokens (SlidingWindow, SlidingLog, Shaper; a policy per
// key), a *StoreError under FailClosed, and ctx's error.
func (l *Limiter) Charge(ctx context.Context, key string, n int64) (Cost, error) {
	const op = "Limiter.Charge"
	if err := ctx.Err(); err != nil {
		return Cost{}, err
	}
	d, err := l.debtsFor(op)
	if err != nil {
		return Cost{}, err
	}
	if n <= 0 {
		return Cost{}, &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "must be positive"}
	}
	s, err := d.Charge(ctx, key, n)
	if err != nil {
		return Cost{}, storeError(op, key, err)
	}
	if s.Res.Code == policy.ChargeOverflow {
		return Cost{}, &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "must leave a debt whose wait fits in int64 nanoseconds"}
	}
	notify(l.observer, s.Res.Allowed, n)
	return costOf(s), nil
}

// Hold takes an estimate of n tokens for key, admitted or refused as
// AllowN(ctx, key, n) would be, and when admitted opens a hold on it for
// ttl, to be settled once with the actual cost (Settle). A hold never
// settled stays charged its estimate when its ttl ends. The hold lives
// with the key's state (in the store, for a limiter with one), so another
// process sharing the store can settle it.
//
// It returns an *ArgumentError for n or ttl ≤ 0, for n above the limit
// where the policy forbids that, or when the key already has 1,024 holds
// open; an error matching errors.ErrUnsupported for a policy that cannot
// owe tokens; a *StoreError under FailClosed; and ctx's error. A store
// that fails under FailOpen admits the hold and counts nothing.
func (l *Limiter) Hold(ctx context.Context, key string, n int64, ttl time.Duration) (Cost, error) {
	const op = "Limiter.Hold"
	if err := ctx.Err(); err != nil {
		return Cost{}, err
	}
	d, err := l.debtsFor(op)
	if err != nil {
		return Cost{}, err
	}
	if ttl <= 0 {
		return Cost{}, &ArgumentError{Op: op, Arg: "ttl", Value: ttl, Want: "must be positive"}
	}
	id := rand.Uint64()
	s, err := d.Hold(ctx, key, id, n, int64(ttl))
	if errors.Is(err, engine.ErrHoldsFull) {
		return Cost{}, &ArgumentError{Op: op, Arg: "key", Value: key, Want: "must have fewer than 1024 holds open"}
	}
	if err != nil {
		return Cost{}, storeError(op, key, err)
	}
	if s.Res.Code != policy.OK {
		return Cost{}, limiterError(op, s.Res, n, 0, l.limit)
	}
	notify(l.observer, s.Res.Allowed, n)
	c := costOf(s)
	if c.Allowed {
		c.ID = holdID(id, key)
	}
	return c, nil
}

// Settle settles the hold id with its actual cost n ≥ 0: what the hold
// took beyond n is given back as far as the policy still counts it (see
// docs/policies.md), and what n exceeds it by is charged, as Charge
// does, debt included. It settles once: a retried Settle with the same id
// changes nothing, and neither does one after the hold's ttl ended; Cost's
// Settled tells them apart. Its Result is PeekN's answer for 1 token
// after the settlement.
//
// It returns an *ArgumentError for n < 0 or an id that no Hold returned,
// an error matching errors.ErrUnsupported for a policy that cannot owe
// tokens, a *StoreError under FailClosed, and ctx's error.
func (l *Limiter) Settle(ctx context.Context, id string, n int64) (Cost, error) {
	const op = "Limiter.Settle"
	if err := ctx.Err(); err != nil {
		return Cost{}, err
	}
	d, err := l.debtsFor(op)
	if err != nil {
		return Cost{}, err
	}
	if n < 0 {
		return Cost{}, &ArgumentError{Op: op, Arg: "tokens", Value: n, Want: "must not be negative"}
	}
	hid, key, ok := parseHoldID(id)
	if !ok {
		return Cost{}, &ArgumentError{Op: op, Arg: "id", Value: id, Want: "must be the ID of a Hold"}
	}
	s, err := d.Settle(ctx, key, hid, n)
	if err != nil {
		return Cost{}, storeError(op, key, err)
	}
	return costOf(s), nil
}

// Debt reports what key owes now, with PeekN's answer for 1 token: for
// inspecting a key. It returns an error matching errors.ErrUnsupported
// for a policy that cannot owe tokens, a *StoreError under FailClosed,
// and ctx's error.
func (l *Limiter) Debt(ctx context.Context, key string) (Cost, error) {
	const op = "Limiter.Debt"
	if err := ctx.Err(); err != nil {
		return Cost{}, err
	}
	d, err := l.debtsFor(op)
	if err != nil {
		return Cost{}, err
	}
	s, err := d.Debt(ctx, key)
	if err != nil {
		return Cost{}, storeError(op, key, err)
	}
	return costOf(s), nil
}

// holdID is the printable ID of the hold id on key: the key travels in
// it, so that any process can find the hold's record.
func holdID(id uint64, key string) string {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(key)), id)
	return base64.RawURLEncoding.EncodeToString(append(b, key...))
}

// parseHoldID is holdID's inverse.
func parseHoldID(s string) (id uint64, key string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 8 {
		return 0, "", false
	}
	return binary.LittleEndian.Uint64(b), string(b[8:]), true
}

// memDebts is the Debts of p's keys in memory, nil when p cannot owe
// tokens.
func memDebts(p Policy, keys keyed.Keys, clock Clock) engine.Debts {
	e, err := p.erased()
	if err != nil {
		return nil
	}
	d, ok := policy.DebtsOf(e)
	if !ok {
		return nil
	}
	return &engine.MemDebts{Keys: keys, Erased: e, Debts: d, Clock: clock}
}
