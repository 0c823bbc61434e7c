// Package keyed is the state under the engine (package engine): a
// policy's state for every key, in this process's memory (Table, the hot
// path of most users) or in a driver.Store (Store, with per-key batching,
// records and a circuit breaker), and the token-bucket views of both that
// a KeyBucket runs on.
//
// Time is a value here: the in-memory methods take now, and the store
// reads its clock when it runs a batch, so that a decision is made at the
// time of the write it goes into.
package keyed

import (
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Keys is a policy's state for every key in this process's memory: an
// in-memory Limiter's, and the local fallback of one with a store. Its
// methods are safe for simultaneous use.
type Keys interface {
	// Consume decides whether n tokens may pass for key at now, taking
	// them if so.
	Consume(key string, now, n int64) policy.Decision
	// Peek answers as Consume would, taking nothing.
	Peek(key string, now, n int64) policy.Result
	// Reserve takes n tokens for key within maxWait; a granted
	// reservation that took something comes with the receipt for Cancel.
	Reserve(key string, now, n, maxWait int64) (policy.Result, *policy.Receipt)
	// Take takes n tokens for key if they are there at now: Reserve with
	// no wait, without a receipt, for a caller that will not cancel.
	Take(key string, now, n int64) bool
	// Cancel gives back the reservation of receipt r at now, as
	// policy.Undo does.
	Cancel(key string, now int64, r *policy.Receipt)
	// Update runs f on key's state at now, encoded, as one atomic step
	// (see Table.Update): for the calls that work on any policy's state
	// as bytes, a debt's charge and refund.
	Update(key string, now int64, f func(state []byte) (next []byte, changed bool))
	// Reset forgets key's state.
	Reset(key string)
	// Len is the number of keys held, expired ones not yet dropped
	// included.
	Len() int
	// Quota is the policy's limit.
	Quota() int64
	// Limits is the limits a Decision's Bound indexes (policy.Limits).
	Limits() []int64
	// Buckets returns the keys as token buckets, or nil when the policy
	// is not a token bucket.
	Buckets() Buckets
}

// Buckets is the token-bucket view of Keys, for a KeyBucket.
type Buckets interface {
	// Config is the policy's bucket configuration.
	Config() *tokenbucket.Config
	// WithBucket runs f on key's bucket state at now (a new bucket's if
	// the key has none) and stores it if f reports a change.
	WithBucket(key string, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State) bool)
}

const shardCount = 64 // enough to keep 2-8 cores off each other's locks

// minKeysPerShard is the fewest keys a shard of a bounded limiter holds:
// a bound of n keys uses n/minKeysPerShard shards (1 to shardCount), so
// that the bound splits exactly among them and every shard has room
// enough to fill evenly with the others.
const minKeysPerShard = 1024

// bucketMachine is implemented by the token-bucket machines.
type bucketMachine interface{ Config() *tokenbucket.Config }

// bucketConfig returns m's configuration when m is a token-bucket machine
// whose state S is a BandwidthState or a State, else nil.
func bucketConfig[S any, M policy.Machine[S]](m M) *tokenbucket.Config {
	bm, ok := any(m).(bucketMachine)
	if !ok {
		return nil
	}
	var zero S
	switch any(&zero).(type) {
	case *tokenbucket.BandwidthState, *tokenbucket.PackedState, *tokenbucket.State:
		return bm.Config()
	}
	return nil
}

// withBucketState runs f on cur, a key's typed token-bucket state (a
// BandwidthState, a PackedState or a State; a new bucket of cfg at now
// unless live), as a tokenbucket.State, and reports whether f changed it,
// cur then holding the change.
func withBucketState[S any](cfg *tokenbucket.Config, cur *S, live bool, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State) bool) bool {
	var buf [4]tokenbucket.BandwidthState
	st := buf[:len(cfg.Bandwidths)]
	if len(cfg.Bandwidths) > len(buf) {
		st = make(tokenbucket.State, len(cfg.Bandwidths))
	}
	switch p := any(cur).(type) {
	case *tokenbucket.BandwidthState:
		if live {
			st[0] = *p
		} else {
			tokenbucket.Init(cfg, st, now)
		}
		if !f(cfg, st) {
			return false
		}
		*p = st[0]
	case *tokenbucket.PackedState:
		if live {
			st[0] = p.Unpack()
		} else {
			tokenbucket.Init(cfg, st, now)
		}
		if !f(cfg, st) {
			return false
		}
		p.Store(&st[0])
	case *tokenbucket.State:
		if live && len(*p) == len(st) {
			copy(st, *p)
		} else {
			tokenbucket.Init(cfg, st, now)
		}
		if !f(cfg, st) {
			return false
		}
		*p = append((*p)[:0], st...) // cur's own array, which the table then keeps
	default:
		return false
	}
	return true
}
