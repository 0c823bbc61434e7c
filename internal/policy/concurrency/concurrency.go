// Package concurrency is a limit of what is in flight, as a pure state
// machine: at most Limit tokens held at once per key, in slots that are
// acquired and given back (policy.Slots), a counting semaphore whose
// permits lapse. A slot lapses at its expiry unless renewed, so a holder
// that crashed without releasing keeps its slot at most one lease: a
// crash can only under-admit, for at most a lease, never over-admit.
//
// Consume acquires a slot for the lease and forgets its ID: the slot is
// held until it lapses. Reserve is not supported: a slot is held from the
// moment it is granted.
//
// The state is the slots held and the last ID issued. Slot IDs are
// strictly increasing on a key: an ID is the larger of now and the last
// ID plus 1, and the state is kept (ExpiresAt) until its last ID has
// passed, so a key whose record lapsed starts again above every ID it
// issued, unless a clock goes back. A release or renewal of a lapsed slot
// therefore never touches another holder's slot.
//
// # Bound
//
// Limit is at most MaxLimit, so a state holds at most MaxLimit slots: the
// record a store reads and writes whole at every operation stays under
// 30 KB (each slot three varints), and every operation is O(slots held).
package concurrency

import (
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/internal/policy"
)

// MaxLimit is the largest Limit, and so the most slots a key holds.
const MaxLimit = 1000

// Config is a limit of Limit tokens held at once, in slots that lapse
// after at most Lease ns unless renewed. Limit must be in [1, MaxLimit]
// and Lease positive; the caller validates them. A Config is a value and
// safe for simultaneous use by multiple goroutines.
type Config struct {
	Limit int64
	Lease int64
}

// State is a key's slots. The zero value holds none.
//
// A State refers to memory that the methods and DecodeState reuse, as a
// slice does: after one copy of a State is changed, other copies of it
// must not be used.
type State struct {
	// Last is the last ID issued on the key.
	Last int64
	// Slots are the slots, IDs strictly increasing, lapsed ones included
	// until the next change drops them.
	Slots []policy.Slot
}

var (
	_ policy.Machine[State] = Config{}
	_ policy.Slots[State]   = Config{}
)

// held returns the tokens of the slots of s live at now, and the latest
// expiry among them (now when none).
func held(s *State, exists bool, now int64) (tokens, last int64) {
	last = now
	if !exists {
		return 0, last
	}
	for _, sl := range s.Slots {
		if sl.Expires > now {
			tokens += sl.Tokens
			last = max(last, sl.Expires)
		}
	}
	return tokens, last
}

// answer is the result, at now, of a request for n tokens held for ttl
// on s: allowed when the live slots leave room for them. A key that
// issued the last ID there is refuses for ever.
func (c Config) answer(s *State, exists bool, now, n, ttl int64) policy.Result {
	tokens, last := held(s, exists, now)
	res := policy.Result{Limit: c.Limit, ResetAfter: last - now}
	switch {
	case exists && s.Last == math.MaxInt64:
		res.RetryAfter = policy.Never
	case tokens+n <= c.Limit:
		res.Allowed = true
		res.Remaining = c.Limit - tokens - n
		res.ResetAfter = max(last, policy.SatAdd(now, ttl)) - now // the new slot's
		return res
	default:
		res.RetryAfter = c.lapse(s, now, tokens+n-c.Limit)
	}
	res.Remaining = max(c.Limit-tokens, 0)
	return res
}

// lapse is the time from now until enough live slots of s lapse to free
// need > 0 tokens, at most all of them: when no holder releases first.
func (c Config) lapse(s *State, now, need int64) int64 {
	live := make([]policy.Slot, 0, len(s.Slots))
	for _, sl := range s.Slots {
		if sl.Expires > now {
			live = append(live, sl)
		}
	}
	slices.SortFunc(live, func(a, b policy.Slot) int { return cmpInt(a.Expires, b.Expires) })
	for _, sl := range live {
		if need -= sl.Tokens; need <= 0 {
			return sl.Expires - now
		}
	}
	return policy.Never // not reached: need is at most the tokens held
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// check is the argument check of a request for n tokens held for ttl.
func (c Config) check(n, ttl int64) policy.Code {
	if code := policy.CheckTokens(n, c.Limit, true); code != policy.OK {
		return code
	}
	if ttl <= 0 || ttl > c.Lease {
		return policy.TTLOutOfRange
	}
	return policy.OK
}

// refusal is the result of the argument error code.
func (c Config) refusal(code policy.Code) policy.Result {
	if code == policy.TTLOutOfRange {
		return policy.Result{Code: code, Limit: c.Lease}
	}
	return policy.Refusal(code, c.Limit)
}

// compact drops the slots of s that lapsed at now; s exists.
func compact(s *State, now int64) {
	s.Slots = slices.DeleteFunc(s.Slots, func(sl policy.Slot) bool { return sl.Expires <= now })
}

// acquire takes a slot of n tokens for ttl at now if there is room.
func (c Config) acquire(s *State, exists bool, now, n, ttl int64) (policy.SlotResult, bool) {
	if code := c.check(n, ttl); code != policy.OK {
		return policy.SlotResult{Result: c.refusal(code)}, false
	}
	res := c.answer(s, exists, now, n, ttl)
	if !res.Allowed {
		return policy.SlotResult{Result: res}, false
	}
	if !exists {
		*s = State{Slots: s.Slots[:0]}
	}
	compact(s, now)
	id := max(now, policy.SatAdd(s.Last, 1), 1)
	sl := policy.Slot{ID: id, Expires: policy.SatAdd(now, ttl), Tokens: n}
	s.Last = id
	s.Slots = append(s.Slots, sl)
	return policy.SlotResult{Result: res, Slot: sl}, true
}

// Slot runs op on s at now; see policy.Slots. Release and Renew answer
// Allowed false, changing nothing, when the slot lapsed or was released.
// A renewal never shortens a slot.
func (c Config) Slot(s *State, exists bool, now int64, op policy.SlotOp) (policy.SlotResult, bool) {
	switch op.Kind {
	case policy.Acquire:
		return c.acquire(s, exists, now, op.N, op.TTL)
	case policy.Release, policy.Renew:
	default:
		return policy.SlotResult{Result: policy.Result{Code: policy.NoSlots}}, false
	}
	if op.Kind == policy.Renew && (op.TTL <= 0 || op.TTL > c.Lease) {
		return policy.SlotResult{Result: c.refusal(policy.TTLOutOfRange)}, false
	}
	i := -1
	if exists {
		i = slices.IndexFunc(s.Slots, func(sl policy.Slot) bool { return sl.ID == op.ID && sl.Expires > now })
	}
	if i < 0 {
		return policy.SlotResult{Result: c.after(s, exists, now)}, false
	}
	var sl policy.Slot
	if op.Kind == policy.Release {
		s.Slots = slices.Delete(s.Slots, i, i+1)
	} else {
		s.Slots[i].Expires = max(s.Slots[i].Expires, policy.SatAdd(now, op.TTL))
		sl = s.Slots[i]
	}
	compact(s, now)
	res := c.after(s, true, now)
	res.Allowed = true
	return policy.SlotResult{Result: res, Slot: sl}, true
}

// after is the state of s at now as a result: Remaining, ResetAfter and
// Limit, with Allowed false.
func (c Config) after(s *State, exists bool, now int64) policy.Result {
	tokens, last := held(s, exists, now)
	return policy.Result{Limit: c.Limit, Remaining: max(c.Limit-tokens, 0), ResetAfter: last - now}
}

// Consume acquires a slot of n tokens for the lease, whose ID it does not
// report: it lapses at the lease's end. n ≤ 0 and n > Limit are argument
// errors.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	res, changed := c.acquire(s, exists, now, n, c.Lease)
	return res.Result.Decision(0), changed
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	if code := c.check(n, c.Lease); code != policy.OK {
		return c.refusal(code)
	}
	return c.answer(s, exists, now, n, c.Lease)
}

// Reserve is not supported: it returns Result{Code:
// policy.ReserveNotSupported} and changes nothing.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	return policy.Result{Code: policy.ReserveNotSupported}, false
}

// Cancel gives nothing back: a concurrency limit cannot reserve.
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is when the last slot lapses, or after the last ID issued if
// that is later, so that the IDs of a key whose state was dropped start
// above it; MinInt64 for a state that never issued one.
func (c Config) ExpiresAt(s *State) int64 {
	if s.Last == 0 && len(s.Slots) == 0 {
		return math.MinInt64
	}
	at := policy.SatAdd(s.Last, 1)
	for _, sl := range s.Slots {
		at = max(at, sl.Expires)
	}
	return at
}

// Quota is the limit of tokens held at once.
func (c Config) Quota() int64 { return c.Limit }

// Window is the lease: Limit per lease is what passes when every holder
// keeps its slot a full lease, the least a concurrency limit lets
// through; holders that release sooner get more through.
func (c Config) Window() int64 { return c.Lease }

// AppendState appends the encoding of *s to dst: the last ID, the number
// of slots, then each slot's ID (after the one before, the first after 0),
// expiry (after its ID) and tokens. Differences are taken modulo 2^64,
// so that every state round-trips.
func (c Config) AppendState(dst []byte, s *State) []byte {
	dst = policy.AppendInts(dst, policy.TagConcurrency, s.Last, int64(len(s.Slots)))
	var prev int64
	for _, sl := range s.Slots {
		dst = policy.AppendInt(dst, int64(uint64(sl.ID)-uint64(prev)))
		dst = policy.AppendInt(dst, int64(uint64(sl.Expires)-uint64(sl.ID)))
		dst = policy.AppendInt(dst, sl.Tokens)
		prev = sl.ID
	}
	return dst
}

// DecodeState decodes a state written by AppendState into *s, reusing its
// memory. More than MaxLimit slots, IDs not strictly increasing or above
// the last ID, and tokens outside [1, MaxLimit] are errors matching
// policy.ErrBadState; *s is then unchanged.
func (c Config) DecodeState(src []byte, s *State) error {
	rest, err := policy.ReadHeader(src, policy.TagConcurrency)
	if err != nil {
		return err
	}
	var last, count int64
	if last, rest, err = policy.ReadInt(rest); err != nil {
		return err
	}
	if count, rest, err = policy.ReadInt(rest); err != nil {
		return err
	}
	if count < 0 || count > MaxLimit {
		return fmt.Errorf("%w: %d slots, want at most %d", policy.ErrBadState, count, MaxLimit)
	}
	// Check everything before touching *s.
	if err := scan(rest, int(count), last, nil); err != nil {
		return err
	}
	slots := s.Slots[:0]
	_ = scan(rest, int(count), last, func(sl policy.Slot) { slots = append(slots, sl) })
	*s = State{Last: last, Slots: slots}
	return nil
}

// scan reads count slots from src, checks them against the last ID and
// passes each one to emit, if not nil.
func scan(src []byte, count int, last int64, emit func(policy.Slot)) error {
	var prev int64
	for i := range count {
		var d, e, tokens int64
		var err error
		if d, src, err = policy.ReadInt(src); err != nil {
			return err
		}
		if e, src, err = policy.ReadInt(src); err != nil {
			return err
		}
		if tokens, src, err = policy.ReadInt(src); err != nil {
			return err
		}
		id := int64(uint64(prev) + uint64(d))
		switch {
		case i > 0 && id <= prev:
			return fmt.Errorf("%w: slot %d's ID %d is not above the one before, %d", policy.ErrBadState, i, id, prev)
		case id > last:
			return fmt.Errorf("%w: slot %d's ID %d is above the last ID issued, %d", policy.ErrBadState, i, id, last)
		case tokens < 1 || tokens > MaxLimit:
			return fmt.Errorf("%w: slot %d holds %d tokens, want 1 to %d", policy.ErrBadState, i, tokens, MaxLimit)
		}
		if emit != nil {
			emit(policy.Slot{ID: id, Expires: int64(uint64(id) + uint64(e)), Tokens: tokens})
		}
		prev = id
	}
	if len(src) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", policy.ErrBadState, len(src))
	}
	return nil
}
