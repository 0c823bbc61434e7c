package policy

// SlotKind is what a SlotOp does to a key's slots.
type SlotKind uint8

// The slot operations.
const (
	// Acquire takes a slot of N tokens for TTL, if the slots held leave
	// room for it.
	Acquire SlotKind = iota + 1
	// Release gives back the slot ID, if it is still held.
	Release
	// Renew extends the slot ID to TTL from now, if it is still held. A
	// slot that lapsed is not acquired again: that could admit more than
	// the limit.
	Renew
)

// SlotOp is one operation on a key's slots. TTL is in nanoseconds, more
// than 0 and at most the policy's lease.
type SlotOp struct {
	Kind SlotKind
	ID   int64 // Release, Renew: the slot's ID
	N    int64 // Acquire: the slot's tokens
	TTL  int64 // Acquire, Renew
}

// Slot is a slot held: its ID, unique among the slots ever held on its
// key (see the concurrency policy for how), the time it lapses at unless
// renewed, and its tokens.
type Slot struct {
	ID      int64
	Expires int64
	Tokens  int64
}

// SlotResult is a slot operation's answer. Result.Allowed is whether the
// slot was acquired, or for Release and Renew whether it was still held
// (a slot that lapsed or was released is not); Remaining, ResetAfter and
// Limit are as for Consume, after the operation. Slot is the slot acquired
// or renewed.
type SlotResult struct {
	Result
	Slot Slot
}

// Slots is implemented by a Machine whose state is a set of slots that
// are acquired and given back (a concurrency limit), rather than tokens
// that come back with time alone. Slot runs op on *s at now as Consume
// does: argument errors (NonPositiveTokens, TokensAboveLimit,
// TTLOutOfRange) change nothing, and changed=false leaves *s as it was.
type Slots[S any] interface {
	Slot(s *S, exists bool, now int64, op SlotOp) (res SlotResult, changed bool)
}

// SlotErased is an Erased whose machine has slots: Slot runs op on the
// encoded state, as Slots.Slot, writing the new state to dst[:0] as the
// other Erased methods do.
type SlotErased interface {
	Erased
	Slot(state []byte, now int64, op SlotOp, dst []byte) (res SlotResult, next []byte, changed bool)
}

// erasedSlots is the Erased form of a Machine[S] with slots.
type erasedSlots[S any] struct {
	*erased[S]
	slots Slots[S]
}

func (e erasedSlots[S]) Slot(state []byte, now int64, op SlotOp, dst []byte) (SlotResult, []byte, bool) {
	s, exists := e.load(state, now)
	res, changed := e.slots.Slot(s, exists, now, op)
	next := dst[:0]
	if changed {
		next = e.m.AppendState(next, s)
	}
	e.pool.Put(s)
	return res, next, changed
}

// TakesSlots reports whether m's Consume takes slots: m holds slots, or
// wraps an Erased that does (a penalty box of a concurrency limit), and
// then only the slot operations of m itself can give one back.
func TakesSlots[S any](m Machine[S]) bool {
	if _, ok := m.(Slots[S]); ok {
		return true
	}
	w, ok := m.(interface{ TakesSlots() bool })
	return ok && w.TakesSlots()
}

// ErasedTakesSlots is TakesSlots of the machine behind e.
func ErasedTakesSlots(e Erased) bool {
	w, ok := e.(interface{ takesSlots() bool })
	return ok && w.takesSlots()
}

func (e *erased[S]) takesSlots() bool { return TakesSlots(e.m) }
