package sluice

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Observer is told of everything a Limiter, Bucket or KeyBucket decides
// and of every call it makes to its store, one Event at a time: the hook
// for metrics (packages sluiceprom and sluiceotel), logs and traces. Set
// it with WithObserver.
//
// As for a Listener, reads (PeekN, AvailableTokens), added tokens, resets
// and configuration changes are not decisions and are not reported as
// such; the store calls they make are. Events carry no key: metrics must
// not be labelled by key, whose values are unbounded.
//
// Observe is called on the goroutine that made the call, after the
// limiter's locks are released (except EventCircuit, see StoreListener's
// OnCircuit), so it must be quick, must not block, and must be safe for
// concurrent use.
//
// Observer is a separate hook from Listener, and not more methods on it,
// for two reasons: a method added to an interface breaks every type that
// implements it without embedding NopListener, while a field added to
// Event breaks no one; and one call with one value carries what a metric
// needs (the outcome, the tokens, the wait, the store's latency and
// error) without a method per case. A limiter with both tells both.
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
	// succeeded) and of EventStoreFailure.
	Err error
	// Failure is the policy applied on EventStoreFailure.
	Failure StoreFailure
	// Circuit is the breaker's new state on EventCircuit.
	Circuit CircuitState
}

// WithObserver sets an observer told of every decision, wait and store
// call of a Limiter, Bucket or KeyBucket (and of the buckets a Limiter's
// Bucket returns), besides the listener of WithListener. The default is
// none, which costs a nil check per decision; nil keeps it.
func WithObserver(obs Observer) Option {
	return Option{func(o *options) { o.observer = obs }}
}

// observe folds o.observer into o.listener, so that every place that tells
// the listener tells the observer too.
func (o *options) observe() {
	if o.observer != nil {
		o.listener = observed{next: o.listener, obs: o.observer}
	}
}

// observed is a StoreListener that turns the listener's calls into the
// observer's events and passes them on to next, the user's listener (nil
// when there is none).
type observed struct {
	next Listener
	obs  Observer
}

func (l observed) OnConsumed(tokens int64) {
	l.obs.Observe(Event{Kind: EventAllowed, Tokens: tokens})
	if l.next != nil {
		l.next.OnConsumed(tokens)
	}
}

func (l observed) OnRejected(tokens int64) {
	l.obs.Observe(Event{Kind: EventRejected, Tokens: tokens})
	if l.next != nil {
		l.next.OnRejected(tokens)
	}
}

func (l observed) OnWaited(d time.Duration) {
	l.obs.Observe(Event{Kind: EventWaited, Duration: d})
	if l.next != nil {
		l.next.OnWaited(d)
	}
}

func (l observed) OnCancelled(tokens int64) {
	l.obs.Observe(Event{Kind: EventCancelled, Tokens: tokens})
	if l.next != nil {
		l.next.OnCancelled(tokens)
	}
}

func (l observed) OnDelayed(d time.Duration) {
	l.obs.Observe(Event{Kind: EventDelayed, Duration: d})
	if l.next != nil {
		l.next.OnDelayed(d)
	}
}

func (l observed) OnStoreFailure(err error, f StoreFailure) {
	l.obs.Observe(Event{Kind: EventStoreFailure, Err: err, Failure: f})
	if sl, ok := l.next.(StoreListener); ok {
		sl.OnStoreFailure(err, f)
	}
}

func (l observed) OnCircuit(s CircuitState) {
	l.obs.Observe(Event{Kind: EventCircuit, Circuit: s})
	if sl, ok := l.next.(StoreListener); ok {
		sl.OnCircuit(s)
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
