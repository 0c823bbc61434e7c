package policytest

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// Same checks that machine b answers every call as machine a does and
// reaches states of the same encoding, over seeded random histories of
// consumes, peeks, reservations and cancellations of a few tokens at times
// drawn around a's Window, the clock sometimes going back. It proves a
// packed form (tokenbucket.Packed, slidingwindow.Packed) against the
// machine it packs.
func Same[S, P any](t *testing.T, a policy.Machine[S], b policy.Machine[P]) {
	t.Helper()
	w := max(a.Window(), 1)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var sa S
		var sb P
		exists := false
		now := int64(rng.Uint64() >> 1 & (1<<62 - 1))
		if seed%4 == 0 {
			now = -now
		}
		for step := range 400 {
			now = policy.SatAdd(now, rng.Int64N(w+w/2+2)-w/8)
			n := rng.Int64N(max(a.Quota(), 1)+2) + 1
			var ra, rb policy.Result
			var ca, cb bool
			op := rng.IntN(10)
			switch {
			case op < 6:
				ra, ca = Decide(t, a, &sa, exists, now, n)
				rb, cb = Decide(t, b, &sb, exists, now, n)
			case op < 8:
				ra, rb = a.Peek(&sa, exists, now, n), b.Peek(&sb, exists, now, n)
			default:
				maxWait := rng.Int64N(2 * w)
				before := encodeIf(a, &sa, exists)
				ra, ca = a.Reserve(&sa, exists, now, n, maxWait)
				rb, cb = b.Reserve(&sb, exists, now, n, maxWait)
				if ca && cb && ra.Allowed && rng.IntN(2) == 0 {
					later := policy.SatAdd(now, rng.Int64N(w+1))
					r := &policy.Receipt{Tokens: n, At: now, Due: policy.SatAdd(now, ra.Wait), Before: before, After: a.AppendState(nil, &sa)}
					if a.Cancel(&sa, later, r) != b.Cancel(&sb, later, r) {
						t.Fatalf("seed %d step %d: Cancel at %d reports a different change", seed, step, later)
					}
				}
			}
			if ra != rb || ca != cb {
				t.Fatalf("seed %d step %d (op %d, now %d, n %d): %+v, %v against %+v, %v", seed, step, op, now, n, rb, cb, ra, ca)
			}
			exists = exists || ca
			if !exists {
				continue
			}
			if ea, eb := a.AppendState(nil, &sa), b.AppendState(nil, &sb); !bytes.Equal(ea, eb) {
				t.Fatalf("seed %d step %d: state %x, want %x", seed, step, eb, ea)
			}
			if ea, eb := a.ExpiresAt(&sa), b.ExpiresAt(&sb); ea != eb {
				t.Fatalf("seed %d step %d: ExpiresAt %d, want %d", seed, step, eb, ea)
			}
		}
	}
}

func encodeIf[S any](m policy.Machine[S], s *S, exists bool) []byte {
	if !exists {
		return nil
	}
	return m.AppendState(nil, s)
}
