package tokenbucket

import (
	"testing"

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
