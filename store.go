package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

// StoreFailure is what a Limiter does when its store fails: cannot be
// reached, or answers too late. Contention is not a failure: a call whose
// update lost races to other writers runs again, until it wins or its
// store timeout ends.
type StoreFailure uint8

// The store failure policies.
const (
	// FailClosed rejects: the call returns a *StoreError and takes
	// nothing it knows of. It is the default.
	FailClosed StoreFailure = iota
	// FailOpen lets the request through, as if the limit were not there,
	// and reports it to the observer. Result.Remaining is then 0.
	FailOpen
	// FailLocal decides on an in-memory limiter of the same policy in this
	// process, which holds each key's state from its first failure on, as
	// if the key were new then. A fleet of n processes may then let n
	// times the limit through.
	FailLocal
	// FailShare decides as FailLocal does, on this process's share of
	// the limit: 1/n of it, n being the processes that shared the store
	// at this process's last look. Each process beats into a record of
	// the store (under a key of NUL and "sluice:fleet"), at most every
	// second, after a store call that succeeded, and counts in the fleet
	// until 3 s after its last beat. A fleet that stayed the same for
	// those few seconds before the store failed then lets the limit
	// through, as one limiter would from a fresh key, where FailLocal
	// lets n times it. A process that has not seen its fleet yet fails
	// closed, as do a KeyBucket's calls (a bucket's full API has no
	// share). docs/stores.md states the bound.
	FailShare
)

func (f StoreFailure) String() string {
	switch f {
	case FailClosed:
		return "fail closed"
	case FailOpen:
		return "fail open"
	case FailLocal:
		return "local fallback"
	case FailShare:
		return "local share"
	}
	return fmt.Sprintf("StoreFailure(%d)", uint8(f))
}

// DefaultStoreTimeout bounds each call of a Limiter to its store, from the
// call's start to its answer, unless WithStoreTimeout says otherwise.
const DefaultStoreTimeout = time.Second

// StoreError is a store's failure, as a Limiter that fails closed returns
// it. Err wraps the store's error, which matches (errors.Is) either
// driver.ErrUnavailable (nothing was taken: the store could not be
// reached, refused the call, did not answer within the store timeout
// before anything was sent, or the circuit is open: ErrCircuitOpen) or
// driver.ErrIndeterminate (tokens may have been taken). A store timeout
// also matches context.DeadlineExceeded.
type StoreError struct {
	// Op is the operation, e.g. "Limiter.AllowN".
	Op string
	// Key is the key whose state could not be read or written.
	Key string
	// Err is the store's error.
	Err error
}

// Error names the key by its first driver.QuotedKeyLen bytes (and its
// length, when longer).
func (e *StoreError) Error() string {
	return fmt.Sprintf("sluice: %s of key %s: %v", e.Op, driver.QuoteKey(e.Key), e.Err)
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// storeSetup is what a Limiter or KeyBucket with a store is built of:
// the engine over o.store, and the failure policy in front of it.
type storeSetup struct {
	store   *keyed.Store
	fail    engine.FailurePolicy
	inherit tokenbucket.Strategy
	version record.ConfigVersion // WithConfigVersion's
	fleet   *engine.Fleet        // FailShare's, else nil
}

// newStoreSetup validates o's store options and builds the engine on
// clock.
func newStoreSetup(o *options, clock Clock) (storeSetup, error) {
	timeout := o.storeTimeout
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	inherit := o.inheritance
	if inherit == 0 {
		inherit = InheritProportionally
	}
	if err := checkInheritance("NewLimiter", "WithInheritance", inherit); err != nil {
		return storeSetup{}, err
	}
	if o.storeFailure > FailShare {
		return storeSetup{}, &ArgumentError{Op: "NewLimiter", Arg: "WithStoreFailure", Value: o.storeFailure,
			Want: "must be FailClosed, FailOpen, FailLocal or FailShare"}
	}
	fail := engine.FailurePolicy{Failure: engine.Failure(o.storeFailure)}
	var notify func(breaker.State)
	if obs := o.observer; obs != nil {
		fail.OnFailure = func(err error) { obs.Observe(Event{Kind: EventStoreFailure, Err: err, Failure: o.storeFailure}) }
		notify = func(s breaker.State) { obs.Observe(Event{Kind: EventCircuit, Circuit: circuitStates[s]}) }
	}
	threshold := o.circuitFailures
	if threshold == 0 {
		threshold = defaultCircuitFailures
	}
	var partition func(string) string
	if p, ok := o.store.(driver.Partitioner); ok {
		partition = p.Partition
	}
	st := keyed.NewStore(observedStore(o.store, o.observer), clock, timeout, breaker.NewSet(threshold, notify, partition))
	var fleet *engine.Fleet
	if o.storeFailure == FailShare {
		// Other processes read the beats' times: a monotonic clock's
		// would mean nothing to them.
		now := clock.Now
		if !clock.IsWallClock() {
			now = WallClock().Now
		}
		fleet = engine.NewFleet(o.store, now, timeout)
	}
	return storeSetup{store: st, fail: fail, inherit: tokenbucket.Strategy(inherit), version: configVersion(o.configVersion, o.observer),
		fleet: fleet}, nil
}

// failedOpen reports whether err is a store failure under FailOpen, on
// its way from the failure policy: the calls that decide whether tokens
// pass let them through.
func failedOpen(err error) bool {
	var sf *engine.StoreFailed
	return errors.As(err, &sf) && sf.Open
}

// storeError is the error a call op on key returns for err: the
// *StoreError of a store's failure, which the engine returns as a
// *engine.StoreFailed, with op and key; err itself otherwise (the
// caller's context ending, a bad argument, a policy function's error).
func storeError(op, key string, err error) error {
	var sf *engine.StoreFailed
	if errors.As(err, &sf) {
		return &StoreError{Op: op, Key: key, Err: sf.Err}
	}
	return err
}
