// Package policytest checks that a policy machine keeps the contract of
// package policy, as drivertest does for stores: every machine package
// calls Run from a test, DecodeState from its FuzzDecodeState target, and
// CheckRetry, CheckExpiry and CheckReserveWait from its own model checks.
//
// Run drives each machine through a seeded random history (consumes,
// reservations, peeks and cancellations at times drawn around its Window)
// and checks, at every state it reaches:
//
//   - the encoding: AppendState appends, DecodeState reads it back to a
//     state of the same encoding, and refuses (with policy.ErrBadState,
//     changing nothing, never panicking) every proper prefix, another
//     version, another policy's tag, an overlong integer and a trailing
//     byte;
//   - Peek answers as Consume then does, and changes nothing; a call that
//     reports no change changes nothing; argument errors change nothing;
//   - a rejection's RetryAfter is exact: the request passes then, not 1ns
//     before; a reservation's wait is exact: with a maxWait 1ns below it,
//     it is refused and changes nothing;
//   - at ExpiresAt a state is worth no more than no state: no state
//     allows nothing it refuses;
//   - a reservation cancelled (policy.Undo) with nothing in between
//     leaves the key exactly as it found it;
//   - Reserve answers ReserveNotSupported on every state or on none, as
//     policy.Reserves says;
//   - for a machine that claims policy.Lapses: past ExpiresAt, Consume,
//     Reserve and Peek answer on the state as on no state, and so does a
//     call after them on the states each left;
//   - for a policy.Debtor (policy.HoldsDebt): a charge of any size is
//     taken, answers Allowed as Consume would have, and its RetryAfter
//     for 1 token is exact; a key that owes debt admits nothing; a charge
//     refunded at once leaves the key answering as before it.
//
// The per-policy tests keep what is particular to a policy: its worked
// examples, its model, its encoding byte by byte. The worked examples are
// tables of Steps, which Steps runs with the checks every example needs.
package policytest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// Run checks the contract on each machine; see the package comment.
// Machines of small limits (a few tokens) and short windows exercise the
// most.
func Run[S any](t *testing.T, machines ...policy.Machine[S]) {
	t.Helper()
	for i, m := range machines {
		t.Run(fmt.Sprintf("%T#%d", m, i), func(t *testing.T) { run(t, m, uint64(i)) })
	}
}

// RunSpan is Run with the histories' time steps drawn around span
// rather than each machine's Window: for a machine whose periods are too
// long for Run's steps to cross (a calendar's days and months), with a
// span that crosses them.
func RunSpan[S any](t *testing.T, span int64, machines ...policy.Machine[S]) {
	t.Helper()
	for i, m := range machines {
		t.Run(fmt.Sprintf("%T#%d", m, i), func(t *testing.T) { runSpan(t, m, uint64(i), span) })
	}
}

// run runs the histories of one machine, seeded by seed.
func run[S any](t testing.TB, m policy.Machine[S], seed uint64) {
	t.Helper()
	runSpan(t, m, seed, 0)
}

// runSpan runs the histories of one machine, seeded by seed, with time
// steps around span, or around its Window when span is 0.
func runSpan[S any](t testing.TB, m policy.Machine[S], seed uint64, span int64) {
	t.Helper()
	for i := range uint64(10) {
		h := &history[S]{t: t, m: m, rng: rand.New(rand.NewPCG(seed, i)), span: span}
		h.run(200)
	}
}

// history drives one key of a machine.
type history[S any] struct {
	t      testing.TB
	m      policy.Machine[S]
	rng    *rand.Rand
	s      S
	exists bool
	now    int64
	span   int64 // the time steps' scale; 0: the machine's Window
}

// encode returns the encoding of *s.
func encode[S any](m policy.Machine[S], s *S) []byte { return m.AppendState(nil, s) }

// state returns a copy of the key's state, or a zero state when it has
// none (whose encoding a machine may refuse).
func (h *history[S]) state() *S {
	if !h.exists {
		return new(S)
	}
	return clone(h.t, h.m, &h.s)
}

// clone returns a copy of *s that shares nothing with it.
func clone[S any](t testing.TB, m policy.Machine[S], s *S) *S {
	t.Helper()
	c := new(S)
	if err := m.DecodeState(encode(m, s), c); err != nil {
		t.Fatalf("DecodeState(AppendState(%+v)) = %v", *s, err)
	}
	return c
}

// quota is the tokens a request draws from: up to the machine's limit,
// at most 8.
func (h *history[S]) quota() int64 { return max(1, min(h.m.Quota(), 8)) }

// step returns a time step around the machine's window.
func (h *history[S]) step() int64 {
	w := h.m.Window()
	if w <= 0 || w > 1<<40 {
		w = 100
	}
	if h.span > 0 {
		w = h.span
	}
	switch h.rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return h.rng.Int64N(3 * w) // past most expiries
	}
	return h.rng.Int64N(w/4 + 1)
}

func (h *history[S]) run(steps int) {
	h.now = 1_700_000_000_000_000_000 + h.rng.Int64N(1<<30)
	// A machine that never keeps a state (no limit) is still checked on
	// the zero state, if it encodes one.
	if h.m.DecodeState(encode(h.m, &h.s), new(S)) == nil {
		h.checkState()
	}
	for range steps {
		h.now += h.step()
		n := 1 + h.rng.Int64N(h.quota())
		if h.rng.IntN(10) == 0 {
			n = h.m.Quota() + int64(h.rng.IntN(2)) // at and above the limit
		}
		if h.exists {
			h.checkState()
			if policy.Lapses(h.m) {
				h.checkLapse(n)
			}
		}
		h.checkArguments()
		if policy.HoldsDebt(h.m) && h.rng.IntN(4) == 0 {
			h.charge(1 + h.rng.Int64N(2*h.quota()))
			continue
		}
		switch h.rng.IntN(3) {
		case 0:
			h.consume(n)
		case 1:
			h.reserve(n)
		default:
			h.undo(n)
		}
	}
}

// checkLapse checks, at a time at or past the state's ExpiresAt, that a
// call of each kind answers on the state as on no state, and that a
// Consume after it answers the same on the states the two calls left.
func (h *history[S]) checkLapse(n int64) {
	t, m := h.t, h.m
	t.Helper()
	at := m.ExpiresAt(&h.s)
	w := max(m.Window(), 1)
	if at > math.MaxInt64-4*w {
		return // expires past the end of the time line, or near it
	}
	at = max(at, h.now) + h.rng.Int64N(2*w+1)
	later := at + h.rng.Int64N(w+1)
	n2 := 1 + h.rng.Int64N(h.quota())
	maxWait := h.rng.Int64N(2 * w)
	for kind := range 3 {
		a, b := h.state(), new(S)
		var ra, rb policy.Result
		var ca, cb bool
		switch kind {
		case 0:
			ra, ca = Decide(t, m, a, true, at, n)
			rb, cb = Decide(t, m, b, false, at, n)
		case 1:
			ra, ca = m.Reserve(a, true, at, n, maxWait)
			rb, cb = m.Reserve(b, false, at, n, maxWait)
		default:
			ra, rb = m.Peek(a, true, at, n), m.Peek(b, false, at, n)
		}
		if ra != rb || ca != cb {
			t.Fatalf("lapsed state %x (ExpiresAt %d) at %d, call %d of %d tokens: %+v, %v; on no state %+v, %v",
				encode(m, &h.s), m.ExpiresAt(&h.s), at, kind, n, ra, ca, rb, cb)
		}
		ra, _ = Decide(t, m, a, true, later, n2)
		rb, _ = Decide(t, m, b, cb, later, n2)
		if ra != rb {
			t.Fatalf("lapsed state %x (ExpiresAt %d) after call %d of %d tokens at %d: Consume(%d) at %d = %+v; from no state %+v",
				encode(m, &h.s), m.ExpiresAt(&h.s), kind, n, at, n2, later, ra, rb)
		}
	}
}

// consume checks Peek against Consume, a rejection's RetryAfter, and
// keeps the state Consume leaves.
func (h *history[S]) consume(n int64) {
	t, m := h.t, h.m
	t.Helper()
	before := encode(m, &h.s)
	peek := m.Peek(&h.s, h.exists, h.now, n)
	if got := encode(m, &h.s); !bytes.Equal(got, before) {
		t.Fatalf("Peek(%d) at %d changed the state from %x to %x", n, h.now, before, got)
	}
	old := h.state()
	res, changed := Decide(t, m, &h.s, h.exists, h.now, n)
	if peek != res {
		t.Fatalf("state %x at %d: Peek(%d) = %+v, but Consume = %+v", before, h.now, n, peek, res)
	}
	if !changed {
		if got := encode(m, &h.s); !bytes.Equal(got, before) {
			t.Fatalf("Consume(%d) at %d reported no change but changed the state from %x to %x", n, h.now, before, got)
		}
	}
	if res.Code == policy.OK && !res.Allowed {
		left, exists := old, h.exists
		if changed { // a new key's bucket, kept
			left, exists = clone(t, m, &h.s), true
		}
		CheckRetry(t, m, left, exists, h.now, n, res.RetryAfter)
	}
	h.exists = h.exists || changed
}

// reserve checks that a reservation's wait is exact, and keeps the state
// it leaves.
func (h *history[S]) reserve(n int64) {
	t, m := h.t, h.m
	t.Helper()
	maxWait := h.rng.Int64N(max(1, 2*m.Window()))
	if h.rng.IntN(4) == 0 {
		maxWait = policy.Never
	}
	old := h.state()
	before := encode(m, &h.s)
	res, changed := m.Reserve(&h.s, h.exists, h.now, n, maxWait)
	if !changed {
		if got := encode(m, &h.s); !bytes.Equal(got, before) {
			t.Fatalf("Reserve(%d, %d) at %d reported no change but changed the state from %x to %x", n, maxWait, h.now, before, got)
		}
	}
	if unsupported := res.Code == policy.ReserveNotSupported; unsupported == policy.Reserves(m) {
		t.Fatalf("state %x: Reserve(%d, %d) at %d = %+v, but policy.Reserves = %v", before, n, maxWait, h.now, res, !unsupported)
	}
	CheckReserveWait(t, m, old, h.exists, h.now, n, res)
	h.exists = h.exists || changed
}

// charge checks a Debtor's charge, its debt and its refund, and keeps
// the state the charge leaves.
func (h *history[S]) charge(n int64) {
	t, m := h.t, h.m
	t.Helper()
	d := m.(policy.Debtor[S])
	peek := m.Peek(&h.s, h.exists, h.now, n)
	peek1 := m.Peek(&h.s, h.exists, h.now, 1)
	before := encode(m, &h.s)
	s := h.state()
	res, changed := d.Charge(s, h.exists, h.now, n)
	if res.Code != policy.OK {
		t.Fatalf("state %x: Charge(%d) at %d = %+v, want it taken", before, n, h.now, res)
	}
	if want := peek.Code == policy.OK && peek.Allowed; res.Allowed != want {
		t.Fatalf("state %x: Charge(%d) at %d = %+v, but Consume would answer %+v", before, n, h.now, res, peek)
	}
	exists := h.exists || changed
	if debt := d.Debt(s, exists, h.now); debt > 0 {
		if r := m.Peek(s, exists, h.now, 1); r.Allowed {
			t.Fatalf("state %x after Charge(%d) at %d owes %d, but Peek(1) = %+v", encode(m, s), n, h.now, debt, r)
		}
	}
	if !res.Allowed && changed {
		CheckRetry(t, m, clone(t, m, s), true, h.now, 1, res.RetryAfter)
	}
	if changed {
		back := clone(t, m, s)
		d.Refund(back, true, h.now, h.now, n)
		if got := m.Peek(back, true, h.now, 1); got != peek1 {
			t.Fatalf("state %x: Charge(%d) then Refund(%d) at %d: Peek(1) = %+v, want %+v as before", before, n, n, h.now, got, peek1)
		}
	}
	h.s, h.exists = *s, exists
}

// undo reserves n and cancels the reservation with nothing in between:
// the key must be exactly as before, or have no state if it had none.
func (h *history[S]) undo(n int64) {
	t, m := h.t, h.m
	t.Helper()
	s := h.state()
	var before []byte
	if h.exists {
		before = encode(m, s)
	}
	res, changed := m.Reserve(s, h.exists, h.now, n, policy.Never)
	if !res.Allowed || !changed {
		return // nothing reserved, nothing to give back
	}
	r := &policy.Receipt{Tokens: n, At: h.now, Due: policy.SatAdd(h.now, res.Wait), Before: before, After: encode(m, s)}
	at := h.now
	if r.Due > at {
		at += h.rng.Int64N(r.Due - at + 1) // cancelled at most when due
	}
	switch out := policy.Undo(m, s, true, at, r); {
	case before == nil && out != policy.Dropped:
		t.Fatalf("reserve %d at %d on a new key, cancel at %d: Undo = %v, want Dropped", n, h.now, at, out)
	case before != nil && (out != policy.Changed || !bytes.Equal(encode(m, s), before)):
		t.Fatalf("state %x: reserve %d at %d, cancel at %d: Undo = %v, state %x; want Changed, %x", before, n, h.now, at, out, encode(m, s), before)
	}
}

// checkArguments checks that argument errors are reported and change
// nothing.
func (h *history[S]) checkArguments() {
	t, m := h.t, h.m
	t.Helper()
	before := encode(m, &h.s)
	for _, n := range []int64{0, -1} {
		if res, changed := Decide(t, m, &h.s, h.exists, h.now, n); res.Code != policy.NonPositiveTokens || changed {
			t.Fatalf("Consume(%d) = %+v, %v; want NonPositiveTokens and no change", n, res, changed)
		}
		if res, changed := m.Reserve(&h.s, h.exists, h.now, n, policy.Never); res.Code == policy.OK || res.Allowed || changed {
			t.Fatalf("Reserve(%d) = %+v, %v; want an argument error and no change", n, res, changed)
		}
	}
	if res, changed := m.Reserve(&h.s, h.exists, h.now, 1, -1); res.Code == policy.OK || res.Allowed || changed {
		t.Fatalf("Reserve(1, maxWait -1) = %+v, %v; want an argument error and no change", res, changed)
	}
	if got := encode(m, &h.s); !bytes.Equal(got, before) {
		t.Fatalf("argument errors changed the state from %x to %x", before, got)
	}
}

// checkState checks the encoding of the current state and its expiry.
func (h *history[S]) checkState() {
	t, m := h.t, h.m
	t.Helper()
	enc := encode(m, &h.s)
	if got := m.AppendState([]byte{0xee}, &h.s); got[0] != 0xee || !bytes.Equal(got[1:], enc) {
		t.Fatalf("AppendState(ee, s) = %x, want ee%x", got, enc)
	}
	var s S
	if err := m.DecodeState(enc, &s); err != nil || !bytes.Equal(encode(m, &s), enc) {
		t.Fatalf("DecodeState(%x) = %v, state %x; want it back", enc, err, encode(m, &s))
	}
	for _, bad := range badEncodings(enc) {
		checkRefused(t, m, &h.s, bad)
	}
	checkExpiryBound(t, m, &h.s, h.quota())
}

// badEncodings returns encodings that every decoder must refuse, made
// from the valid encoding enc: its proper prefixes, another version,
// another policy's tags, an overlong integer after the header and a
// trailing byte.
func badEncodings(enc []byte) [][]byte {
	var out [][]byte
	for i := range len(enc) {
		out = append(out, enc[:i:i])
	}
	for _, v := range []byte{0, policy.Version + 1, 255} {
		out = append(out, append([]byte{v}, enc[1:]...))
	}
	for tag := range 16 {
		if byte(tag) != enc[1] {
			out = append(out, append([]byte{enc[0], byte(tag)}, enc[2:]...))
		}
	}
	overlong := append([]byte{enc[0], enc[1]}, bytes.Repeat([]byte{0xff}, 10)...)
	out = append(out, append(append(overlong, 0x01), enc[2:]...))
	return append(out, append(enc[:len(enc):len(enc)], 0))
}

// checkRefused checks that DecodeState refuses src into a copy of *s with
// an error matching policy.ErrBadState, leaving the copy as it was.
func checkRefused[S any](t testing.TB, m policy.Machine[S], s *S, src []byte) {
	t.Helper()
	c := clone(t, m, s)
	was := encode(m, c)
	err := m.DecodeState(src, c)
	if !errors.Is(err, policy.ErrBadState) {
		t.Fatalf("DecodeState(%x) = %v, want an error matching ErrBadState", src, err)
	}
	if got := encode(m, c); !bytes.Equal(got, was) {
		t.Fatalf("DecodeState(%x) failed but changed the state from %x to %x", src, was, got)
	}
}

// Decide is m.Consume with its Decision as a Result, its limit looked up
// in policy.Limits(m): the form the checks and the tests compare. It fails
// t when the Decision's Bound is outside Limits.
func Decide[S any](t testing.TB, m policy.Machine[S], s *S, exists bool, now, n int64) (policy.Result, bool) {
	t.Helper()
	d, changed := m.Consume(s, exists, now, n)
	return resultIn(t, d, policy.Limits(m), now, n), changed
}

// DecideBytes is Decide for an Erased: e.Consume with its Decision as a
// Result.
func DecideBytes(t testing.TB, e policy.Erased, state []byte, now, n int64, dst []byte) (policy.Result, []byte, bool) {
	t.Helper()
	d, next, changed := e.Consume(state, now, n, dst)
	return resultIn(t, d, e.Limits(), now, n), next, changed
}

// resultIn is d, a Consume(n) at now, as a Result of a machine whose
// limits are limits; it fails t when d.Bound is outside them.
func resultIn(t testing.TB, d policy.Decision, limits []int64, now, n int64) policy.Result {
	t.Helper()
	if int(d.Bound) >= len(limits) {
		t.Fatalf("Consume(%d) at %d = %+v: Bound out of its %d limits", n, now, d, len(limits))
	}
	return d.ResultIn(limits)
}

// CheckRetry checks a rejection's RetryAfter ra of Consume(n) at now:
// from *s (exists), the state the rejection left the key in, the same
// request passes at now+ra and not 1ns before. A RetryAfter of
// policy.Never, or past the end of the time line, is for the caller's
// model to check.
func CheckRetry[S any](t testing.TB, m policy.Machine[S], s *S, exists bool, now, n, ra int64) {
	t.Helper()
	if ra <= 0 {
		t.Fatalf("state %x at %d: rejected Consume(%d) RetryAfter = %d, want > 0", encode(m, s), now, n, ra)
	}
	at := policy.SatAdd(now, ra)
	if ra == policy.Never || at == math.MaxInt64 {
		return
	}
	if res := m.Peek(s, exists, at, n); !res.Allowed {
		t.Fatalf("state %x at %d: Consume(%d) RetryAfter = %d, but then Peek = %+v", encode(m, s), now, n, ra, res)
	}
	if res := m.Peek(s, exists, at-1, n); res.Allowed {
		t.Fatalf("state %x at %d: Consume(%d) RetryAfter = %d, but 1ns earlier Peek = %+v", encode(m, s), now, n, ra, res)
	}
}

// CheckReserveWait checks res, the answer of Reserve(n, maxWait) at now
// from *s (exists), the state before the call: a granted reservation is
// granted the same with a maxWait of exactly its wait, and refused with
// 1ns less, changing an existing key's state not at all. (What a refusal's RetryAfter means
// differs: the wait the tokens need for most policies, the time until the
// queue has room for a shaper's full queue, whatever maxWait was.)
func CheckReserveWait[S any](t testing.TB, m policy.Machine[S], s *S, exists bool, now, n int64, res policy.Result) {
	t.Helper()
	if res.Code != policy.OK || !res.Allowed {
		return
	}
	if got, _ := m.Reserve(copyOf(t, m, s, exists), exists, now, n, res.Wait); got != res {
		t.Fatalf("state %x at %d: Reserve(%d) = %+v, but with maxWait %d, its wait, = %+v", encode(m, s), now, n, res, res.Wait, got)
	}
	if res.Wait == 0 {
		return
	}
	if got, changed := m.Reserve(copyOf(t, m, s, exists), exists, now, n, res.Wait-1); got.Allowed || changed && exists {
		t.Fatalf("state %x at %d: Reserve(%d) waits %d, but with maxWait 1ns less = %+v, changed %v", encode(m, s), now, n, res.Wait, got, changed)
	}
}

// copyOf is clone, or a zero state for a key without one.
func copyOf[S any](t testing.TB, m policy.Machine[S], s *S, exists bool) *S {
	if !exists {
		return new(S)
	}
	return clone(t, m, s)
}

// CheckExpiry checks that at its ExpiresAt, *s answers Consume(n) exactly
// as no state does, and leaves the same state: for the policies whose
// expired state is the same as none. (For all of them, Run checks that it
// allows no more than none.)
func CheckExpiry[S any](t testing.TB, m policy.Machine[S], s *S, n int64) {
	t.Helper()
	at := m.ExpiresAt(s)
	if at == math.MaxInt64 {
		return // saturated: the state expires after the end of the time line
	}
	a, b := clone(t, m, s), new(S)
	ra, ca := Decide(t, m, a, true, at, n)
	rb, cb := Decide(t, m, b, false, at, n)
	if ra != rb || ca != cb || (ca && !bytes.Equal(encode(m, a), encode(m, b))) {
		t.Fatalf("state %x at its ExpiresAt %d: Consume(%d) = %+v, %v, %x; but on no state %+v, %v, %x",
			encode(m, s), at, n, ra, ca, encode(m, a), rb, cb, encode(m, b))
	}
}

// checkExpiryBound checks that at ExpiresAt, *s is worth no more than no
// state: no state lets through no request that *s would refuse, so that
// a store that drops *s then lets through no more. (No state may be
// stricter: a bucket that starts with fewer tokens than it holds.)
func checkExpiryBound[S any](t testing.TB, m policy.Machine[S], s *S, q int64) {
	t.Helper()
	at := m.ExpiresAt(s)
	if at == math.MaxInt64 {
		return
	}
	for n := int64(1); n <= q; n++ {
		if m.Peek(new(S), false, at, n).Allowed && !m.Peek(clone(t, m, s), true, at, n).Allowed {
			t.Fatalf("state %x at its ExpiresAt %d refuses %d, which no state allows", encode(m, s), at, n)
		}
	}
}

// DecodeState is the body of a FuzzDecodeState target: DecodeState(src)
// fails with policy.ErrBadState and changes nothing, or succeeds with a
// state that encodes back to a state of the same encoding and that is
// safe to decide on (Peek answers as Consume, for a token and for the
// limit). It returns the decoded state, or nil when src is refused.
func DecodeState[S any](t testing.TB, m policy.Machine[S], src []byte) *S {
	t.Helper()
	sentinel := new(S)
	Decide(t, m, sentinel, false, 7, 1) // a state that is not the zero value
	s := clone(t, m, sentinel)
	was := encode(m, s)
	if err := m.DecodeState(src, s); err != nil {
		if !errors.Is(err, policy.ErrBadState) {
			t.Fatalf("DecodeState(%x) = %v, want an error matching ErrBadState", src, err)
		}
		if got := encode(m, s); !bytes.Equal(got, was) {
			t.Fatalf("DecodeState(%x) failed but changed the state from %x to %x", src, was, got)
		}
		return nil
	}
	enc := encode(m, s)
	again := new(S)
	if err := m.DecodeState(enc, again); err != nil || !bytes.Equal(encode(m, again), enc) {
		t.Fatalf("DecodeState(%x) = %x, which decodes to %x, %v", src, enc, encode(m, again), err)
	}
	now := m.ExpiresAt(s)
	for _, n := range []int64{1, m.Quota()} {
		c := clone(t, m, s)
		peek := m.Peek(c, true, now, n)
		if res, _ := Decide(t, m, c, true, now, n); res != peek {
			t.Fatalf("decoded state %x at %d: Peek(%d) = %+v, but Consume = %+v", enc, now, n, peek, res)
		}
		m.Reserve(clone(t, m, s), true, now, n, policy.Never)
	}
	return s
}
