// Package lease is the arithmetic of quota leasing: a process takes a
// lease of tokens from a key's shared policy state in one store update,
// spends it locally, and comes back to the store when the lease runs out
// or expires.
//
// Leases are carved out of the limit: a grant is an ordinary consumption
// of the shared state (Take), so the tokens a process holds are tokens the
// policy has already counted as taken. Summed over every process, what
// passes never exceeds what the exact policy would have let pass by the
// time it passes (over-admission 0), as long as a lease is spent before
// the policy would have forgotten its tokens: a fixed window's lease ends
// with its window (Grant's until). What leasing costs is
// under-admission: tokens granted to a process that does not spend them
// before its lease expires are lost, never given back to the shared
// state, so at any moment at most the sum of the unspent leases, P×Max
// for P processes, is held out of the others' reach, and each such
// token is lost for good at the latest TTL after its grant.
//
// The lease size adapts to the process's rate: each take asks for what
// the process spent per TTL since its previous take (so that a lease
// lasts about TTL), at most twice the previous size, within [Min, Max].
// An idle process's next lease shrinks to Min; a busy one's doubles per
// take up to Max.
//
// Everything here is pure integer arithmetic on nanoseconds taken as
// values: no clock, lock or I/O. Callers hold a lock around a Lease.
package lease

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/sluicehq/sluice/internal/policy"
)

// Config bounds the leases: Min and Max tokens per lease (1 ≤ Min ≤
// Max), and TTL, the nanoseconds a lease's tokens may be spent after its
// grant (TTL > 0).
type Config struct {
	Min, Max int64
	TTL      int64
}

// Check returns an error that says which bound c breaks, or nil.
func (c Config) Check() error {
	switch {
	case c.Min < 1:
		return fmt.Errorf("min must be at least 1, got %d", c.Min)
	case c.Max < c.Min:
		return fmt.Errorf("max must be at least min %d, got %d", c.Min, c.Max)
	case c.TTL <= 0:
		return errors.New("ttl must be positive")
	}
	return nil
}

// Lease is one process's lease on one key: the tokens it may spend
// without asking the store, and what its next take should ask for. The
// zero Lease holds nothing and asks for Min at its first take.
//
// A Lease is not safe for simultaneous use: its owner locks it.
type Lease struct {
	left    int64 // unspent tokens
	expires int64 // when left lapses
	size    int64 // the size asked for at the last take; 0 before the first
	since   int64 // the time of the last take
	used    int64 // tokens spent since the last take, its own request's included
}

// Left is the tokens the lease still holds at now: 0 once it expired.
func (l *Lease) Left(now int64) int64 {
	if now >= l.expires {
		return 0
	}
	return l.left
}

// Expires is when the lease's unspent tokens lapse.
func (l *Lease) Expires() int64 { return l.expires }

// Spend takes n tokens (n ≥ 1) from the lease at now if it holds them,
// and reports whether it did. It never takes part of n.
func (l *Lease) Spend(now, n int64) bool {
	if n < 1 || l.Left(now) < n {
		return false
	}
	l.left -= n
	l.used += n
	return true
}

// Drain empties the lease at now and returns the tokens it held, for a
// request that needs more than the lease has: it spends them with the
// tokens it takes from the store, or gives them back with Refund if the
// store refuses it.
func (l *Lease) Drain(now int64) int64 {
	left := l.Left(now)
	l.left = 0
	return left
}

// Refund puts back n tokens that Drain returned at the same lease, for a
// request the store refused. Tokens whose lease expired meanwhile stay
// lost.
func (l *Lease) Refund(now, n int64) {
	if n > 0 && now < l.expires {
		l.left += n
	}
}

// Want is the size of the next lease to ask for at now: the tokens spent
// since the last take scaled to TTL, at most twice the last size, within
// [c.Min, c.Max]. The first take asks for c.Min.
func (l *Lease) Want(c Config, now int64) int64 {
	if l.size == 0 {
		return c.Min
	}
	grow := c.Max
	if l.size <= c.Max/2 {
		grow = 2 * l.size
	}
	want := grow
	if elapsed := now - l.since; elapsed > 0 {
		want = min(grow, scale(l.used, c.TTL, elapsed))
	}
	return max(c.Min, min(want, c.Max))
}

// scale is used×ttl/elapsed, rounded down, or MaxInt64 when it does not
// fit; used ≥ 0, ttl > 0 and elapsed > 0.
func scale(used, ttl, elapsed int64) int64 {
	hi, lo := bits.Mul64(uint64(used), uint64(ttl))
	if hi >= uint64(elapsed) { // the quotient would not fit in 64 bits
		return policy.Never
	}
	q, _ := bits.Div64(hi, lo, uint64(elapsed))
	if q > uint64(policy.Never) {
		return policy.Never
	}
	return int64(q)
}

// Grant records a take at now that asked for want tokens beyond the
// request's spent, and got granted tokens in all (0 when refused, else
// at least spent): spent go to the request at once, the rest become the
// lease, which expires at now+c.TTL, or at until when that is sooner
// (the end of a fixed window; policy.Never for none). The tokens of the
// previous lease must have been drained first.
func (l *Lease) Grant(c Config, now, want, spent, granted, until int64) {
	l.size = want
	l.since = now
	l.used = 0
	if granted < spent || granted <= 0 {
		l.left, l.expires = 0, now
		return
	}
	l.used = spent
	l.left = granted - spent
	l.expires = min(policy.SatAdd(now, c.TTL), until)
}

// Shared is a key's shared state as a store holds it: the consumption and
// peek of a policy on its encoded state (record.Codec is one).
type Shared interface {
	Peek(state []byte, now, n int64) policy.Result
	Consume(state []byte, now, n int64) (res policy.Result, next []byte, changed bool)
}

// Take computes a grant on the shared state: need tokens (≥ 1) for the
// request at hand and up to want more (≥ 0) for the lease, as much as the
// state has, in one consumption, so that it runs inside one store update.
// granted is 0 when even need cannot be had, and then res is the policy's
// refusal of need (its RetryAfter is for need tokens); otherwise it is
// between need and need+want, and res is the result of consuming it (its
// Remaining is what the shared state has left after the grant). Take
// asks no more than the policy's limit in one consumption, so that
// policies refusing more than their limit as an error still grant.
func Take(s Shared, state []byte, now, need, want int64) (res policy.Result, granted int64, next []byte, changed bool) {
	take := need
	if want > 0 {
		p := s.Peek(state, now, 1)
		avail := int64(0)
		if p.Code == policy.OK && p.Allowed {
			avail = policy.SatAdd(p.Remaining, 1)
		}
		take = max(need, min(policy.SatAdd(need, want), avail))
		if p.Limit > 0 {
			take = max(need, min(take, p.Limit))
		}
	}
	res, next, changed = s.Consume(state, now, take)
	if res.Code == policy.OK && res.Allowed {
		return res, take, next, changed
	}
	if take > need { // the peek was optimistic: fall back to the request alone
		res, next, changed = s.Consume(state, now, need)
		if res.Code == policy.OK && res.Allowed {
			return res, need, next, changed
		}
	}
	return res, 0, next, changed
}
