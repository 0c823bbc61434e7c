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

// TestExpiresAtIntervally: an intervally bucket is kept the time it takes
// to refill from empty, counted from its last refill, as long as Symfony
// keeps a token bucket and its refill grid; a period more, as before,
// doubled the memory of a bucket that refills whole in one period.
func TestExpiresAtIntervally(t *testing.T) {
	const s = int64(1e9)
	tests := []struct {
		name     string
		bw       Bandwidth
		at, want int64 // a 1-token consume at t0+at; ExpiresAt - t0
	}{
		{"whole refill, first use", intervallyBW(10, 10, 10*s), 0, 10 * s},
		{"whole refill, later in the period", intervallyBW(10, 10, 10*s), 15 * s, 20 * s}, // last refill at 10s
		{"2 per period, first use", intervallyBW(10, 2, 10*s), 0, 50 * s},
		{"3 per period: ⌈10/3⌉ periods", intervallyBW(10, 3, 10*s), 0, 40 * s},
	}
	const t0 = int64(1_700_000_000) * s
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewSingle(tt.bw, true)
			var st BandwidthState
			m.Consume(&st, false, t0, 1)
			if _, ok := m.Consume(&st, true, t0+tt.at, 1); !ok {
				t.Fatalf("Consume at t0+%v changed nothing", tt.at)
			}
			if got := m.ExpiresAt(&st) - t0; got != tt.want {
				t.Errorf("ExpiresAt = t0+%v, want t0+%v", got, tt.want)
			}
			p, _ := m.Packed()
			ps, _ := Pack(&st)
			if got := p.ExpiresAt(&ps) - t0; got != tt.want {
				t.Errorf("Packed ExpiresAt = t0+%v, want t0+%v", got, tt.want)
			}
		})
	}
}
