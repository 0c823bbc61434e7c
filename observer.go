package sluice

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Observer is told of everything a Limiter, Bucket or KeyBucket decides
// and of every call it makes to its store, one Event at a time: the one
// hook for metrics (packages sluiceprom and sluiceotel), logs and traces,
// and for what the library would otherwise log itself (the library never
// logs). Set it with WithObserver.
//
// Reads (PeekN, AvailableTokens, Snapshot), added tokens, resets and
// configuration changes are not decisions and are not reported as such;
// the store calls they make are. Events carry no key: metrics must not be
// labelled by key, whose values are unbounded.
//
// Observe is called on the goroutine that made the call, after the
// limiter's locks are released (except EventCircuit, which is told in the
// order of the breaker's changes, with the breaker locked: it must not
// call the limiter), so it must be quick, must not block, and must be
// safe for concurrent use.
//
// An Observer has one method taking one Event, not a method per case, so
// that a kind of event or a field added later breaks no implementation.
type Observer interface {
	Observe(e Event)
}

// ObserverFunc is a function used as an Observer.
type ObserverFunc func(e Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what an Event reports, and so which of its fields are
// set.
type EventKind uint8

// The kinds of Event.
const (
	// EventAllowed is a decision that let Tokens through and took them:
	// AllowN, TryConsume and the like, a reservation that is OK (its
	// delay follows as EventDelayed), and a blocking call's reservation
	// before it sleeps.
	EventAllowed EventKind = iota + 1
	// EventRejected is a decision that refused Tokens and took nothing.
	EventRejected
	// EventDelayed is the delay Duration of the reservation just reported
	// as EventAllowed, which the caller waits itself.
	EventDelayed
	// EventWaited is a blocking call that slept Duration for its tokens.
	EventWaited
	// EventCancelled is a blocking call whose context ended while it
	// waited: its Tokens were given back.
	EventCancelled
	// EventStoreCall is a call to the store, successful or not: Op names
	// it ("update", "delete"), Duration is its latency, Err its error.
	EventStoreCall
	// EventStoreFailure is a decision that a store failure decided: Err
	// is the store's error and Failure the policy applied.
	EventStoreFailure
	// EventCircuit is the circuit breaker moving to Circuit.
	EventCircuit
	// EventWaiting is a blocking call that starts to sleep Duration for
	// its Tokens; EventWaited or EventCancelled follows when it wakes, so
	// that the calls sleeping now can be counted.
	EventWaiting
	// EventVersionConflict is a key whose stored configuration has the
	// version of the limiter's (WithConfigVersion) but differs from it:
	// the stored one is kept, and Err says which it is. Two
	// configurations must not share a version; a limiter tells it once.
	EventVersionConflict
)

func (k EventKind) String() string {
	switch k {
	case EventAllowed:
		return "allowed"
	case EventRejected:
		return "rejected"
	case EventDelayed:
		return "delayed"
	case EventWaited:
		return "waited"
	case EventCancelled:
		return "cancelled"
	case EventStoreCall:
		return "store call"
	case EventStoreFailure:
		return "store failure"
	case EventCircuit:
		return "circuit"
	case EventWaiting:
		return "waiting"
	case EventVersionConflict:
		return "version conflict"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// The store operations of EventStoreCall, named as sluice serve's
// sluice_store_duration_seconds labels them.
const (
	StoreOpUpdate = "update"
	StoreOpDelete = "delete"
)

// Event is what an Observer is told. Kind says which fields are set; the
// others are zero. Fields may be added: build Events with field names.
type Event struct {
	Kind EventKind
	// Tokens is the tokens decided on (EventAllowed, EventRejected),
	// waited for (EventWaiting) or given back (EventCancelled).
	Tokens int64
	// Duration is the delay of EventDelayed, the sleep of EventWaiting
	// and EventWaited, and the latency of EventStoreCall, which is
	// measured on the wall clock (time.Now) whatever WithClock says.
	Duration time.Duration
	// Op is the store operation of EventStoreCall: StoreOpUpdate or
	// StoreOpDelete.
	Op string
	// Err is the store's error of EventStoreCall (nil when the call
	// succeeded) and of EventStoreFailure, and the conflict of
	// EventVersionConflict.
	Err error
	// Failure is the policy applied on EventStoreFailure.
	Failure StoreFailure
	// Circuit is the breaker's new state on EventCircuit.
	Circuit CircuitState
	// Shadow is set on the EventRejected of a limiter in shadow mode
	// (WithShadow): the policy refused Tokens and took nothing, but the
	// request was let through.
	Shadow bool
}

// WithObserver sets an observer told of every decision, wait and store
// call of a Limiter, Bucket or KeyBucket (and of the buckets a Limiter's
// Bucket returns). The default is none, which costs a nil check per
// decision; nil keeps it.
func WithObserver(obs Observer) Option {
	return Option{name: "WithObserver", scope: anyConstructor, set: func(o *options) { o.observer = obs }}
}

// notify tells obs, which may be nil, whether n tokens were taken.
func notify(obs Observer, allowed bool, n int64) {
	if obs == nil {
		return
	}
	kind := EventRejected
	if allowed {
		kind = EventAllowed
	}
	obs.Observe(Event{Kind: kind, Tokens: n})
}

// notifyShadow tells obs, which may be nil, of res, a decision on n
// tokens of a limiter in shadow mode.
func notifyShadow(obs Observer, res Result, n int64) {
	if obs == nil {
		return
	}
	if res.ShadowRejected {
		obs.Observe(Event{Kind: EventRejected, Tokens: n, Shadow: true})
		return
	}
	obs.Observe(Event{Kind: EventAllowed, Tokens: n})
}

// tell tells obs, which may be nil, of e.
func tell(obs Observer, e Event) {
	if obs != nil {
		obs.Observe(e)
	}
}

// observedStore returns s timed for obs: every call is an EventStoreCall.
// It returns s itself when obs is nil, and keeps s's Delete.
func observedStore(s driver.Store, obs Observer) driver.Store {
	if obs == nil {
		return s
	}
	t := timedStore{s: s, obs: obs}
	if _, ok := s.(driver.Deleter); ok {
		return timedDeleter{t}
	}
	return t
}

// timedStore reports the latency of each Update to obs.
type timedStore struct {
	s   driver.Store
	obs Observer
}

func (t timedStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	start := time.Now()
	err := t.s.Update(ctx, key, fn)
	t.obs.Observe(Event{Kind: EventStoreCall, Op: StoreOpUpdate, Duration: time.Since(start), Err: err})
	return err
}

// timedDeleter is a timedStore over a store that can delete.
type timedDeleter struct{ timedStore }

func (t timedDeleter) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := t.s.(driver.Deleter).Delete(ctx, key)
	t.obs.Observe(Event{Kind: EventStoreCall, Op: StoreOpDelete, Duration: time.Since(start), Err: err})
	return err
}
