// Package shaper is the leaky bucket as a shaper, a pure state machine that
// spaces requests out at a constant rate instead of letting bursts through.
//
// The line drains Amount tokens per Interval: each token occupies
// Interval/Amount ns of it. A request of n tokens departs at the next free
// slot, or at once when the line is idle, and moves the next free slot on by
// n·Interval/Amount. Its wait is the time from now until it departs.
//
// Requests that have to wait form a queue of at most MaxQueue: this is the
// synchronous leaky bucket that bounds the number of blocked callers. Reserve
// is the shaping call, whose caller sleeps for Result.Wait before it goes;
// Consume is the non-blocking view, which lets through only a request that
// may go at once.
//
// The queue is not a count of callers, as in the usual synchronous leaky
// bucket, which a state machine could not keep: it never learns when a
// caller wakes. It is read off the schedule instead: the requests waiting at
// now are those whose departure is still ahead.
//
// The next free slot is kept exactly, as whole nanoseconds plus a fraction in
// units of 1/Amount ns, so no rounding accumulates however many requests
// pass. Only the durations returned to callers are rounded, up, to whole
// nanoseconds. Waits are measured from now, so a clock that goes back sees
// a longer wait; nothing is reset.
package shaper

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/policy"
)

// Config is a validated shaper: Amount > 0 tokens leave per Interval > 0 ns,
// and at most MaxQueue ≥ 0 requests wait. MaxQueue 0 queues nothing: the
// shaper then only lets through requests that find the line idle.
//
// The queue bound is a bound on time, exact in units of 1/Amount ns: a
// request may be queued only if its wait, the time from now until the next
// free slot, is at most MaxQueue slots, MaxQueue·Interval/Amount. For
// 1-token requests this is exactly "at most MaxQueue requests waiting, this
// one included", a request that departs at once not waiting. An n-token
// request occupies n slots, so it counts as n requests for the ones queued
// behind it.
//
// In a Result, Limit is Quota, MaxQueue+1; Remaining is how many more
// 1-token requests Reserve would accept at now with no bound on their wait,
// MaxQueue+1 on an idle line and 0 when the queue is full; ResetAfter is
// the time until the line is idle.
//
// The zero Config is not valid. A Config is safe for simultaneous use by
// multiple goroutines; a State is not.
type Config struct {
	Amount   int64
	Interval int64
	MaxQueue int64
}

// State is a key's next free slot: Next ns plus Frac/Amount ns, with
// 0 ≤ Frac < Amount. It saturates at Next = math.MaxInt64 (Frac 0), a slot
// beyond the int64 horizon. 16 bytes.
type State struct {
	Next int64
	Frac int64
}

var _ policy.Machine[State] = Config{}

// backlog is the time from now until s's next free slot, in units of
// 1/Amount ns, or 0 when the slot is at or before now. It is below
// 2^64·Amount for any State with 0 ≤ Frac < Amount.
func (c Config) backlog(s *State, exists bool, now int64) arith.U128 {
	if !exists || s.Next < now || s.Next == now && s.Frac <= 0 {
		return arith.U128{}
	}
	d := arith.Mul(uint64(s.Next)-uint64(now), uint64(c.Amount)) // Next ≥ now: exact
	lo, carry := bits.Add64(d.Lo, uint64(s.Frac), 0)
	return arith.U128{Hi: d.Hi + carry, Lo: lo}
}

// queueRoom is MaxQueue slots, the longest wait a request may queue for,
// in units of 1/Amount ns: below 2^126.
func (c Config) queueRoom() arith.U128 { return arith.Mul(uint64(c.MaxQueue), uint64(c.Interval)) }

// after returns the next free slot once n tokens depart at dep (Next,
// Frac): dep plus n·Interval/Amount, exact, saturating at the int64
// horizon. It requires 0 ≤ dep.Frac < Amount and n > 0.
func (c Config) after(dep State, n int64) State {
	saturated := State{Next: math.MaxInt64}
	a := uint64(c.Amount)
	span := arith.Mul(uint64(n), uint64(c.Interval)) // < 2^126
	if span.Hi >= a {
		return saturated // n·Interval/Amount ≥ 2^64 ns
	}
	q, r := bits.Div64(span.Hi, span.Lo, a)
	frac := uint64(dep.Frac) + r // < 2·Amount < 2^64
	if frac >= a {
		frac -= a
		if q == math.MaxUint64 {
			return saturated
		}
		q++
	}
	// room is MaxInt64-Next, in [0, 2^64) for any int64 Next.
	if room := uint64(math.MaxInt64) - uint64(dep.Next); q > room {
		return saturated
	}
	return State{Next: int64(uint64(dep.Next) + q), Frac: int64(frac)}
}

// result describes s at now after a decision.
func (c Config) result(s *State, exists bool, now int64, allowed bool, retryAfter int64) policy.Result {
	b := c.backlog(s, exists, now)
	// A 1-token request is queued if at most MaxQueue slots are ahead of it,
	// so with b/Interval slots ahead, MaxQueue+1-⌈b/Interval⌉ more fit, a
	// quotient below MaxQueue+1 when b is within the room.
	remaining := int64(0)
	if !c.queueRoom().Less(b) {
		remaining = policy.SatAdd(c.MaxQueue-arith.CeilDiv(b, uint64(c.Interval)), 1)
	}
	return policy.Result{
		Allowed:    allowed,
		Remaining:  remaining,
		RetryAfter: retryAfter,
		ResetAfter: arith.CeilDiv(b, uint64(c.Amount)),
		Limit:      c.Quota(),
	}
}

// Consume lets n tokens through if they can depart at once, the line being
// idle at now, and takes their slots. A request that would have to wait is
// rejected and takes nothing; RetryAfter is then its wait, after which the
// line is idle again. The queue bound plays no part: such a request waits
// for nothing. Any n > 0 is accepted: n tokens only delay the requests
// after them.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	if b := c.backlog(s, exists, now); !b.IsZero() {
		return c.result(s, exists, now, false, arith.CeilDiv(b, uint64(c.Amount))).Decision(0), false
	}
	next := c.after(State{Next: now}, n)
	changed := !exists || next != *s
	*s = next
	return c.result(s, true, now, true, 0).Decision(0), changed
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	next := *s
	d, _ := c.Consume(&next, exists, now, n)
	return d.Result(c.Quota())
}

// Reserve queues n tokens for the next free slot, if the queue has room for
// them and they depart within maxWait; Result.Wait is the time from now
// until they depart, rounded up to whole nanoseconds.
//
// A refused reservation takes nothing. When the queue is full, RetryAfter
// is the time until it has room for the request; otherwise, the wait being
// above maxWait, RetryAfter is that wait.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckReserve(n, maxWait); code != policy.OK {
		return policy.Result{Code: code}, false
	}
	b := c.backlog(s, exists, now)
	if room := c.queueRoom(); room.Less(b) {
		return c.result(s, exists, now, false, arith.CeilDiv(b.Sub(room), uint64(c.Amount))), false
	}
	wait := arith.CeilDiv(b, uint64(c.Amount))
	if wait > maxWait {
		return c.result(s, exists, now, false, wait), false
	}
	dep := State{Next: now}
	if !b.IsZero() {
		dep = *s
	}
	next := c.after(dep, n)
	changed := !exists || next != *s
	*s = next
	res := c.result(s, true, now, true, 0)
	res.Wait = wait
	return res, changed
}

// Cancel gives nothing back once requests were queued after the
// reservation: they keep their departures, and the line has a single next
// free slot, so the slots the reservation held cannot be handed out again
// without a later request departing with a new one at once. (policy.Undo
// restores a line nothing was queued on since exactly.)
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is the next free slot, rounded up to a whole nanosecond: from
// then on the line is idle.
func (c Config) ExpiresAt(s *State) int64 {
	if s.Frac > 0 {
		return policy.SatAdd(s.Next, 1)
	}
	return s.Next
}

// Quota is MaxQueue+1 (saturating), the requests an idle line accepts at
// once: one departs, MaxQueue wait.
func (c Config) Quota() int64 { return policy.SatAdd(c.MaxQueue, 1) }

// Window is the time to send Quota: the queue and the one leaving.
func (c Config) Window() int64 {
	return policy.TimeToEarn(c.Quota(), c.Amount, c.Interval, false)
}

// AppendState appends the encoding of *s to dst.
func (c Config) AppendState(dst []byte, s *State) []byte {
	return policy.AppendInts(dst, policy.TagShaper, s.Next, s.Frac)
}

// DecodeState decodes a state written by AppendState. A fraction outside
// [0, Amount) is refused: it was written under another Amount.
func (c Config) DecodeState(src []byte, s *State) error {
	var st State
	if err := policy.DecodeInts(src, policy.TagShaper, &st.Next, &st.Frac); err != nil {
		return err
	}
	if st.Frac < 0 || st.Frac >= c.Amount {
		return fmt.Errorf("%w: slot fraction %d outside [0, %d)", policy.ErrBadState, st.Frac, c.Amount)
	}
	*s = st
	return nil
}
