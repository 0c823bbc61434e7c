package tokenbucket

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// TestContract runs the contract's suite on the token-bucket machines:
// Symfony's token bucket (strict, intervally), the leaky bucket (greedy),
// one that starts with fewer tokens than it holds, whose expired state
// is worth more than none, and a bucket of two bandwidths.
func TestContract(t *testing.T) {
	policytest.Run(t,
		NewSingle(intervallyBW(3, 3, 25), true),
		NewSingle(greedyBW(5, 2, 10), false),
		NewSingle(greedyBW(4, 1, 10).withInitial(1), false),
	)
	policytest.Run(t,
		NewMulti(NewConfig(greedyBW(5, 2, 10), intervallyBW(3, 3, 25))),
		NewMulti(NewConfig(intervallyBW(6, 2, 30).withInitial(0))),
	)
}

// FuzzDecodeState: policytest's checks of a decoder, for one bandwidth and
// for two.
func FuzzDecodeState(f *testing.F) {
	single := NewSingle(greedyBW(5, 2, 10), false)
	multi := NewMulti(NewConfig(greedyBW(5, 2, 10), intervallyBW(3, 3, 25)))
	f.Add(single.AppendState(nil, &BandwidthState{LastRefill: 7, Size: -3, Err: 9}))
	f.Add(multi.AppendState(nil, &State{{LastRefill: 1, Size: 5}, {LastRefill: maxI, Size: -maxI, Err: 24}}))
	f.Add([]byte{1, 6, 2, 0, 0, 20})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, src []byte) {
		if s := policytest.DecodeState(t, single, src); s != nil && (s.Err < 0 || s.Err >= 10) {
			t.Fatalf("DecodeState(%x) = %+v, rounding error outside [0, 10)", src, *s)
		}
		if s := policytest.DecodeState(t, multi, src); s != nil && len(*s) != 2 {
			t.Fatalf("DecodeState(%x) = %+v, want 2 bandwidths", src, *s)
		}
	})
}

// TestPacked: an intervally bandwidth packs and answers as its Single; a
// greedy one, whose states carry a rounding error, does not pack.
func TestPacked(t *testing.T) {
	for _, bw := range []Bandwidth{intervallyBW(3, 3, 25), intervallyBW(5, 1, 10), intervallyBW(6, 2, 30).withInitial(0), intervallyBW(1e9, 7, 1e9)} {
		for _, strict := range []bool{true, false} {
			m := NewSingle(bw, strict)
			p, ok := m.Packed()
			if !ok {
				t.Fatalf("%+v does not pack", bw)
			}
			policytest.Same(t, policy.Machine[BandwidthState](m), policy.Machine[PackedState](p))
			policytest.Run(t, policy.Machine[PackedState](p))
		}
	}
	if _, ok := NewSingle(greedyBW(5, 2, 10), false).Packed(); ok {
		t.Error("a greedy bandwidth packs")
	}
	m := NewSingle(intervallyBW(3, 3, 25), true)
	p, _ := m.Packed()
	var s PackedState
	if err := p.DecodeState(m.AppendState(nil, &BandwidthState{LastRefill: 1, Size: 2, Err: 3}), &s); !errors.Is(err, policy.ErrBadState) {
		t.Errorf("DecodeState of a rounding error: %v, want ErrBadState", err)
	}
}
