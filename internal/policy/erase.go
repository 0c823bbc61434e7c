package policy

import (
	"math"
	"sync"
)

// Erased is a Machine whose state is its encoding, for callers that hold
// states of several policies side by side (a compound policy) or that keep
// only bytes (a byte-oriented store).
//
// A state is what the machine's AppendState wrote. An empty state (nil or
// of length 0) is no state: a key not seen yet or expired. A state past
// its ExpiresAt at the call's now is no state too, as the in-memory store
// and the stores see it, so that a policy behaves the same wherever its
// state is kept (alone, or in a compound while another member keeps the
// key alive). A state that does not decode (written by another policy,
// another version, or corrupted) also counts as no state, as a store that
// dropped it would.
//
// The methods that may change the state append the new encoding to dst[:0]
// and return it as next, so a caller that passes back a buffer with room
// for it allocates nothing. dst may share its array with state: state is
// decoded before next is written (provided the machine's S keeps no
// reference into the bytes it was decoded from). When changed is false,
// next is dst[:0], empty, and state still holds: nothing is to be written.
//
// An Erased is safe for simultaneous use by multiple goroutines.
type Erased interface {
	// Consume decides whether n tokens may pass at now, as Machine.Consume.
	Consume(state []byte, now, n int64, dst []byte) (d Decision, next []byte, changed bool)
	// Reserve takes n tokens within maxWait, as Machine.Reserve.
	Reserve(state []byte, now, n, maxWait int64, dst []byte) (res Result, next []byte, changed bool)
	// Peek answers as Consume would, changing nothing.
	Peek(state []byte, now, n int64) Result
	// Cancel gives back the reservation r, as Undo does. When it changed
	// the state, next is the new state, empty when the key is back to no
	// state.
	Cancel(state []byte, now int64, r *Receipt, dst []byte) (next []byte, changed bool)
	// ExpiresAt is the time from which state is worth no more than no state,
	// as Machine.ExpiresAt; for no state it is math.MinInt64.
	ExpiresAt(state []byte) int64
	// Quota is the policy's limit, as Machine.Quota.
	Quota() int64
	// Limits is the limits a Decision's Bound indexes, as Limits does for
	// the machine.
	Limits() []int64
	// Window is the time over which Quota applies, as Machine.Window.
	Window() int64
}

// Erase returns m as an Erased, which is also a WordMachine when m is a
// WordCodec[S], and a SlotErased when m has Slots[S].
//
// Each call decodes the state into a value of S taken from a pool, so a
// machine with a fixed-size state costs no allocation once dst has room for
// the encoding. m must not keep the *S it is given past a call, which no
// pure state machine does.
func Erase[S any](m Machine[S]) Erased {
	if wc, ok := m.(WordCodec[S]); ok {
		return newWordErased(m, wc)
	}
	e := &erased[S]{m: m, limits: Limits(m)}
	e.pool.New = func() any { return new(S) }
	if sl, ok := m.(Slots[S]); ok {
		return erasedSlots[S]{erased: e, slots: sl}
	}
	return e
}

// erased is the Erased form of a Machine[S]. The pool holds *S values whose
// contents are meaningless between calls; it spares an allocation per call,
// as a *S passed to an interface method escapes to the heap.
type erased[S any] struct {
	m      Machine[S]
	limits []int64
	pool   sync.Pool
}

// load takes a *S from the pool and decodes state into it. It reports
// whether state holds a key's live state at now; when it does not (no
// state, one that does not decode, or one past its ExpiresAt), *s is the
// zero S, as for a key seen for the first time: so a policy behaves the
// same whether its state lives alone in a store or beside others' in a
// compound. The caller must give s back with e.pool.Put.
func (e *erased[S]) load(state []byte, now int64) (s *S, exists bool) {
	s = e.pool.Get().(*S)
	if len(state) != 0 && e.m.DecodeState(state, s) == nil && e.m.ExpiresAt(s) > now {
		return s, true
	}
	var zero S
	*s = zero
	return s, false
}

func (e *erased[S]) Consume(state []byte, now, n int64, dst []byte) (Decision, []byte, bool) {
	s, exists := e.load(state, now)
	res, changed := e.m.Consume(s, exists, now, n)
	next := dst[:0]
	if changed {
		next = e.m.AppendState(next, s)
	}
	e.pool.Put(s)
	return res, next, changed
}

func (e *erased[S]) Reserve(state []byte, now, n, maxWait int64, dst []byte) (Result, []byte, bool) {
	s, exists := e.load(state, now)
	res, changed := e.m.Reserve(s, exists, now, n, maxWait)
	next := dst[:0]
	if changed {
		next = e.m.AppendState(next, s)
	}
	e.pool.Put(s)
	return res, next, changed
}

func (e *erased[S]) Cancel(state []byte, now int64, r *Receipt, dst []byte) ([]byte, bool) {
	s, exists := e.load(state, now)
	next := dst[:0]
	out := Undo(e.m, s, exists, now, r)
	if out == Changed {
		next = e.m.AppendState(next, s)
	}
	e.pool.Put(s)
	return next, out != Unchanged
}

func (e *erased[S]) Peek(state []byte, now, n int64) Result {
	s, exists := e.load(state, now)
	res := e.m.Peek(s, exists, now, n)
	e.pool.Put(s)
	return res
}

func (e *erased[S]) ExpiresAt(state []byte) int64 {
	s, exists := e.load(state, math.MinInt64)
	at := int64(math.MinInt64)
	if exists {
		at = e.m.ExpiresAt(s)
	}
	e.pool.Put(s)
	return at
}

func (e *erased[S]) Quota() int64 { return e.m.Quota() }

func (e *erased[S]) Limits() []int64 { return e.limits }

func (e *erased[S]) Window() int64 { return e.m.Window() }
