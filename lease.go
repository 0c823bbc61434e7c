package sluice

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/lease"
	"github.com/sluicehq/sluice/internal/policy"
)

// Lease configures quota leasing (WithLease): each process takes tokens
// from a key's shared state in the store ahead of its requests, a lease
// of between Min and Max tokens, in one store update, and spends them
// locally, going back to the store when the lease is spent or TTL after
// it was taken, when what is left of it lapses.
//
// Leases are carved out of the limit, so leasing never admits more than
// the exact policy: a lease's tokens are taken from the shared state when
// it is granted, and a fixed window's lease ends with its window. It can
// admit less: the tokens a process holds but has not spent are out of the
// other processes' reach, at most Max per process, and those still unspent
// when the lease expires are lost (they are not given back to the shared
// state). The lease size follows each process's rate: about what it
// spends in TTL, at most twice the last lease, within [Min, Max]; an
// idle process's next lease is Min. See docs/stores.md, "Quota leasing".
type Lease struct {
	// Min and Max bound the tokens of one lease: 1 ≤ Min ≤ Max.
	Min, Max int64
	// TTL is how long a lease's tokens may be spent after it was taken,
	// and so how long tokens a process does not spend are held out of
	// the others' reach. It must be positive.
	TTL time.Duration
}

// WithLease makes a Limiter with a store decide from leases of its
// shared tokens (see Lease): about one store round trip per lease rather
// than per decision, for keys too hot for a round trip per request.
// AllowN and PeekN use the lease; ReserveN, WaitN, Reset and Bucket go to
// the store each call, exactly as without leasing.
//
// Under leasing, an allowed Result's Remaining is what this process's
// lease still holds plus what the shared state had left at this process's
// last store update for the key (other processes may have taken some
// since), and its ResetAfter counts from that update. A refusal is always
// the store's answer for the tokens the lease could not cover, with its
// exact RetryAfter.
//
// It applies only to a limiter with WithStore (in memory a limiter is
// already local). NewLimiter returns an *ArgumentError for values out of
// bounds, and one that also matches errors.ErrUnsupported for a policy
// whose state cannot be leased: only the policies whose state a lease can
// debit by many tokens at once can, and their constructors say so.
func WithLease(l Lease) Option {
	return Option{name: "WithLease", scope: storeOnly, set: func(o *options) { o.lease = &l }}
}

// check returns the *ArgumentError of l for p, or nil.
func (l *Lease) check(p Policy) error {
	if l == nil {
		return nil
	}
	if err := l.config().Check(); err != nil {
		return &ArgumentError{Op: "NewLimiter", Arg: "WithLease", Value: *l, Want: err.Error()}
	}
	if p.leasing() != policy.NoLease {
		return nil
	}
	return &ArgumentError{Op: "NewLimiter", Arg: "WithLease", Value: p.Kind(),
		Want: "needs a policy whose state can be leased", kind: errors.ErrUnsupported}
}

func (l *Lease) config() lease.Config {
	return lease.Config{Min: l.Min, Max: l.Max, TTL: int64(l.TTL)}
}
