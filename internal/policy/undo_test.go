package policy_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/compound"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/nolimit"
	"github.com/sluicehq/sluice/internal/policy/shaper"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// reservingMachines are the policies that can reserve, each as a store
// holds it, with a limit of a few tokens so that reservations run into
// debt.
func reservingMachines() map[string]policy.Erased {
	greedy := tokenbucket.Bandwidth{Capacity: 5, RefillTokens: 2, Period: 10, Initial: 5}
	intervally := tokenbucket.Bandwidth{Capacity: 3, RefillTokens: 3, Period: 25, Intervally: true, Initial: 3}
	return map[string]policy.Erased{
		"fixed window":         policy.Erase(fixedwindow.Config{Limit: 3, Interval: 10}),
		"aligned fixed window": policy.Erase(fixedwindow.Config{Limit: 4, Interval: 16, Aligned: true}),
		"gcra":                 policy.Erase(gcra.Config{Limit: 3, Rate: 3, Period: 10}),
		"shaper":               policy.Erase(shaper.Config{Amount: 2, Interval: 7, MaxQueue: 4}),
		"token bucket":         policy.Erase[tokenbucket.BandwidthState](tokenbucket.NewSingle(intervally, true)),
		"leaky bucket":         policy.Erase[tokenbucket.BandwidthState](tokenbucket.NewSingle(greedy, false)),
		"bucket":               policy.Erase[tokenbucket.State](tokenbucket.NewMulti(tokenbucket.NewConfig(greedy, intervally))),
		"compound": policy.Erase(compound.Config{Members: []policy.Erased{
			policy.Erase(fixedwindow.Config{Limit: 4, Interval: 20}),
			policy.Erase[tokenbucket.BandwidthState](tokenbucket.NewSingle(greedy, false)),
		}}),
		"no limit": policy.Erase(nolimit.Config{}),
	}
}

// key is one key's state as a store holds it.
type key struct {
	e     policy.Erased
	state []byte
}

func (k *key) reserve(now, n, maxWait int64) (policy.Result, *policy.Receipt) {
	before := k.state
	if k.e.ExpiresAt(before) <= now {
		before = nil // expired: the key has no state
	}
	res, next, changed := k.e.Reserve(k.state, now, n, maxWait, nil)
	if !changed {
		return res, nil
	}
	k.state = next
	if !res.Allowed {
		return res, nil
	}
	return res, &policy.Receipt{Tokens: n, At: now, Due: policy.SatAdd(now, res.Wait),
		Before: bytes.Clone(before), After: bytes.Clone(next)}
}

func (k *key) consume(now, n int64) policy.Result {
	d, next, changed := k.e.Consume(k.state, now, n, nil)
	if changed {
		k.state = next
	}
	return d.ResultIn(k.e.Limits())
}

func (k *key) cancel(now int64, r *policy.Receipt) {
	if next, changed := k.e.Cancel(k.state, now, r, nil); changed {
		k.state = next
	}
}

// live reports whether the key has a state at now.
func (k *key) live(now int64) bool { return len(k.state) != 0 && k.e.ExpiresAt(k.state) > now }

// available is how many tokens, up to q, a request could take from state
// at now.
func available(e policy.Erased, state []byte, now, q int64) int64 {
	for m := q; m > 0; m-- {
		if e.Peek(state, now, m).Allowed {
			return m
		}
	}
	return 0
}

// undoScenario drives one key through ops drawn from rng, reserves, may
// run more ops, and cancels the reservation: with nothing between, the
// key must be exactly as before the reservation; with requests between,
// it must never have more tokens than before the reservation, now or for
// a request that waits.
func undoScenario(t *testing.T, name string, e policy.Erased, rng *rand.Rand) {
	t.Helper()
	a := key{e: e}
	now := int64(rng.IntN(1000)) - 500
	q := min(e.Quota(), 6)
	for range rng.IntN(6) { // some history
		n := 1 + rng.Int64N(q)
		if rng.IntN(2) == 0 {
			a.consume(now, n)
		} else {
			a.reserve(now, n, rng.Int64N(60))
		}
		now += rng.Int64N(15)
	}
	n := 1 + rng.Int64N(q)
	before := a
	_, r := a.reserve(now, n, policy.Never)
	if r == nil {
		return // nothing reserved, nothing to give back
	}
	later := rng.IntN(4)
	for range later {
		now += rng.Int64N(4)
		m := 1 + rng.Int64N(q)
		if rng.IntN(2) == 0 {
			a.consume(now, m)
		} else {
			a.reserve(now, m, 40)
		}
	}
	if now < r.Due {
		now += rng.Int64N(r.Due - now + 1) // cancelled at most when it is due
	}
	a.cancel(now, r)
	if later == 0 {
		switch {
		case before.live(r.At) && !bytes.Equal(a.state, r.Before):
			t.Fatalf("%s: reserve %d at %d then cancel at %d: state %v, want %v as before", name, n, r.At, now, a.state, r.Before)
		case !before.live(r.At) && a.live(now):
			t.Fatalf("%s: reserve %d at %d on a new key then cancel at %d: state %v, want none", name, n, r.At, now, a.state)
		}
	}
	if got, was := available(e, a.state, now, q), available(e, before.state, now, q); got > was {
		t.Fatalf("%s: after cancel at %d, %d tokens available, more than the %d before the reservation", name, now, got, was)
	}
	for m := int64(1); m <= q; m++ {
		ra := e.Peek(a.state, now, m)
		rb := e.Peek(before.state, now, m)
		if !ra.Allowed && !rb.Allowed && ra.RetryAfter < rb.RetryAfter {
			t.Fatalf("%s: after cancel at %d, %d tokens in %d, sooner than the %d before the reservation", name, now, m, ra.RetryAfter, rb.RetryAfter)
		}
	}
}

// FuzzUndo checks the contract of Cancel on every policy that reserves: a
// reservation cancelled at once, nothing taken since, leaves the key
// exactly as it was (or with no state, for a new key); and with requests
// taken after it, the key after the cancel never lets more through, now
// or later, than the same key had the reservation never been made.
func FuzzUndo(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed, seed*7919)
	}
	machines := reservingMachines()
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		for name, e := range machines {
			rng := rand.New(rand.NewPCG(s1, s2))
			for range 50 {
				undoScenario(t, name, e, rng)
			}
		}
	})
}
