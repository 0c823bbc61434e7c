package concurrency

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

const (
	t0  = int64(1_700_000_000_000_000_000)
	sec = int64(time.Second)
)

func TestContract(t *testing.T) {
	policytest.Run[State](t,
		Config{Limit: 1, Lease: 10},
		Config{Limit: 3, Lease: 100},
		Config{Limit: 5, Lease: 7 * sec},
		Config{Limit: MaxLimit, Lease: 1},
	)
}

func FuzzDecodeState(f *testing.F) {
	m := Config{Limit: 3, Lease: 10 * sec}
	var s State
	policytest.Decide(f, m, &s, false, t0, 1)
	policytest.Decide(f, m, &s, true, t0+sec, 2)
	f.Add(m.AppendState(nil, &s))
	f.Add(m.AppendState(nil, &State{Last: math.MaxInt64, Slots: []policy.Slot{{ID: math.MaxInt64, Expires: math.MinInt64, Tokens: 3}}}))
	f.Fuzz(func(t *testing.T, src []byte) { policytest.DecodeState(t, m, src) })
}

// step is one slot operation of a worked example, at At after t0.
type step struct {
	At   int64
	Op   policy.SlotOp
	Want policy.SlotResult
}

func acquire(n, ttl int64) policy.SlotOp { return policy.SlotOp{Kind: policy.Acquire, N: n, TTL: ttl} }
func release(id int64) policy.SlotOp     { return policy.SlotOp{Kind: policy.Release, ID: id} }
func renew(id, ttl int64) policy.SlotOp  { return policy.SlotOp{Kind: policy.Renew, ID: id, TTL: ttl} }

func held3(remaining, resetAfter int64) policy.Result {
	return policy.Result{Allowed: true, Limit: 3, Remaining: remaining, ResetAfter: resetAfter}
}

func TestSlots(t *testing.T) {
	// Limit 3, lease 10s. Slot IDs are the acquisition times (t0, t0+1s,
	// ...), or one above the last when two come in one nanosecond.
	m := Config{Limit: 3, Lease: 10 * sec}
	steps := []step{
		{0, acquire(1, 10*sec), policy.SlotResult{Result: held3(2, 10*sec), Slot: policy.Slot{ID: t0, Expires: t0 + 10*sec, Tokens: 1}}},
		{0, acquire(1, 5*sec), policy.SlotResult{Result: held3(1, 10*sec), Slot: policy.Slot{ID: t0 + 1, Expires: t0 + 5*sec, Tokens: 1}}},
		{sec, acquire(1, 10*sec), policy.SlotResult{Result: held3(0, 10*sec), Slot: policy.Slot{ID: t0 + sec, Expires: t0 + 11*sec, Tokens: 1}}},
		// Full: the first slot to lapse (t0+1, at +5s) frees one.
		{2 * sec, acquire(1, 10*sec), policy.SlotResult{Result: policy.Result{Limit: 3, RetryAfter: 3 * sec, ResetAfter: 9 * sec}}},
		// Two need the second to lapse too (t0, at +10s).
		{2 * sec, acquire(2, 10*sec), policy.SlotResult{Result: policy.Result{Limit: 3, RetryAfter: 8 * sec, ResetAfter: 9 * sec}}},
		// A release frees its slot at once.
		{3 * sec, release(t0 + sec), policy.SlotResult{Result: held3(1, 7*sec)}},
		// Releasing it again finds nothing: not held.
		{3 * sec, release(t0 + sec), policy.SlotResult{Result: policy.Result{Limit: 3, Remaining: 1, ResetAfter: 7 * sec}}},
		{3 * sec, acquire(1, 10*sec), policy.SlotResult{Result: held3(0, 10*sec), Slot: policy.Slot{ID: t0 + 3*sec, Expires: t0 + 13*sec, Tokens: 1}}},
		// A renewal extends the slot to TTL from now...
		{4 * sec, renew(t0, 10*sec), policy.SlotResult{Result: held3(0, 10*sec), Slot: policy.Slot{ID: t0, Expires: t0 + 14*sec, Tokens: 1}}},
		// ... and never shortens it.
		{4 * sec, renew(t0, sec), policy.SlotResult{Result: held3(0, 10*sec), Slot: policy.Slot{ID: t0, Expires: t0 + 14*sec, Tokens: 1}}},
		// At +5s the slot t0+1 lapsed: its holder's renewal is refused,
		// and the slot is free for another.
		{5 * sec, renew(t0+1, 10*sec), policy.SlotResult{Result: policy.Result{Limit: 3, Remaining: 1, ResetAfter: 9 * sec}}},
		{5 * sec, acquire(1, 10*sec), policy.SlotResult{Result: held3(0, 10*sec), Slot: policy.Slot{ID: t0 + 5*sec, Expires: t0 + 15*sec, Tokens: 1}}},
		// Argument errors: the TTL's bound is the lease.
		{5 * sec, acquire(1, 11*sec), policy.SlotResult{Result: policy.Result{Code: policy.TTLOutOfRange, Limit: 10 * sec}}},
		{5 * sec, acquire(1, 0), policy.SlotResult{Result: policy.Result{Code: policy.TTLOutOfRange, Limit: 10 * sec}}},
		{5 * sec, renew(t0, -1), policy.SlotResult{Result: policy.Result{Code: policy.TTLOutOfRange, Limit: 10 * sec}}},
		{5 * sec, acquire(4, sec), policy.SlotResult{Result: policy.Result{Code: policy.TokensAboveLimit, Limit: 3}}},
		{5 * sec, acquire(0, sec), policy.SlotResult{Result: policy.Result{Code: policy.NonPositiveTokens}}},
		{5 * sec, policy.SlotOp{}, policy.SlotResult{Result: policy.Result{Code: policy.NoSlots}}},
	}
	var s State
	exists := false
	for i, st := range steps {
		before := m.AppendState(nil, &s)
		got, changed := m.Slot(&s, exists, t0+st.At, st.Op)
		if got != st.Want {
			t.Fatalf("step %d: Slot(%+v) at +%v = %+v, want %+v", i, st.Op, time.Duration(st.At), got, st.Want)
		}
		if changed != (got.Allowed) {
			t.Fatalf("step %d: Slot(%+v) changed = %v, allowed %v", i, st.Op, changed, got.Allowed)
		}
		if !changed && string(m.AppendState(nil, &s)) != string(before) {
			t.Fatalf("step %d: Slot(%+v) reported no change but changed the state", i, st.Op)
		}
		exists = exists || changed
	}
}

// TestConsumeIsAcquire: Consume holds a slot for the lease, and Peek
// says so first.
func TestConsumeIsAcquire(t *testing.T) {
	m := Config{Limit: 2, Lease: sec}
	var s State
	policytest.Steps(t, m, &s, false, t0, []policytest.Step{
		policytest.Consume(0, 1, policytest.Allowed(2, 1, sec)),
		policytest.Consume(sec/2, 1, policytest.Allowed(2, 0, sec)),
		policytest.Consume(sec/2, 1, policytest.Rejected(2, 0, sec/2, sec)),
		policytest.Consume(sec, 1, policytest.Allowed(2, 0, sec)),
	})
}

// TestIDsAfterExpiry: a key whose state lapsed and was dropped issues IDs
// above every ID it issued before, so a late release of a lapsed slot
// never frees another's.
func TestIDsAfterExpiry(t *testing.T) {
	m := Config{Limit: 1, Lease: sec}
	var s State
	first, _ := m.Slot(&s, false, t0, acquire(1, sec))
	at := m.ExpiresAt(&s)
	var fresh State // the store dropped the record at its expiry
	second, _ := m.Slot(&fresh, false, at, acquire(1, sec))
	if second.Slot.ID <= first.Slot.ID {
		t.Fatalf("ID after the state lapsed = %d, want above %d", second.Slot.ID, first.Slot.ID)
	}
	if res, changed := m.Slot(&fresh, true, at, release(first.Slot.ID)); res.Allowed || changed {
		t.Fatalf("late release of lapsed slot %d = %+v, %v; want not held", first.Slot.ID, res, changed)
	}
}

// TestStateBound: a state with more than MaxLimit slots is refused, and
// a full one of MaxLimit fits its documented size.
func TestStateBound(t *testing.T) {
	m := Config{Limit: MaxLimit, Lease: 30 * sec}
	var s State
	for i := range int64(MaxLimit) {
		if res, _ := m.Slot(&s, i > 0, t0+i*int64(time.Millisecond), acquire(1, 30*sec)); !res.Allowed {
			t.Fatalf("acquire %d = %+v", i, res)
		}
	}
	enc := m.AppendState(nil, &s)
	if len(enc) > 30_000 {
		t.Errorf("a state of %d slots encodes in %d bytes, want at most 30 KB", MaxLimit, len(enc))
	}
	over := policy.AppendInts(nil, policy.TagConcurrency, t0, MaxLimit+1)
	if err := m.DecodeState(over, new(State)); err == nil {
		t.Errorf("DecodeState of %d slots = nil, want an error", MaxLimit+1)
	}
}
