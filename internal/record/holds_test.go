package record

import (
	"bytes"
	"slices"
	"testing"
)

func TestHoldsRoundTrip(t *testing.T) {
	inner := []byte{Version, kindMachine, 1, 2, 3, 4, 5, 6, 7, 8, 42}
	holds := []Hold{{ID: 1, Tokens: 100, At: 10, Expires: 20}, {ID: 1 << 63, Tokens: 5, At: -3, Expires: 30}}
	rec := JoinHolds(holds, inner, 0)
	got, gotInner := SplitHolds(rec)
	if !slices.Equal(got, holds) || !bytes.Equal(gotInner, inner) {
		t.Fatalf("SplitHolds(JoinHolds(%v, %x)) = %v, %x", holds, inner, got, gotInner)
	}
	// At 20 the first has expired and is not written; at 30 neither is,
	// and the record is the policy's alone.
	if got, _ := SplitHolds(JoinHolds(holds, inner, 20)); !slices.Equal(got, holds[1:]) {
		t.Errorf("holds written at 20 = %v, want %v", got, holds[1:])
	}
	if rec := JoinHolds(holds, inner, 30); !bytes.Equal(rec, inner) {
		t.Errorf("JoinHolds at 30 = %x, want the inner record %x", rec, inner)
	}
	if got := HoldsExpireAt(holds); got != 30 {
		t.Errorf("HoldsExpireAt = %d, want 30", got)
	}
	// Every proper prefix of the holds is no state, never a panic.
	for i := 1; i < len(rec)-len(inner); i++ {
		if h, in := SplitHolds(rec[:i]); h != nil || in != nil {
			t.Errorf("SplitHolds(%x) = %v, %x; want no state", rec[:i], h, in)
		}
	}
}

// FuzzSplitHolds: a stored record is outside input; SplitHolds never
// panics, and what it reads, written back, reads the same.
func FuzzSplitHolds(f *testing.F) {
	f.Add(JoinHolds([]Hold{{ID: 7, Tokens: 1, At: 0, Expires: 9}}, []byte{1, 1}, 0))
	f.Add([]byte{VersionHolds, 0})
	f.Fuzz(func(t *testing.T, rec []byte) {
		holds, inner := SplitHolds(rec)
		if holds == nil {
			return
		}
		again, in2 := SplitHolds(JoinHolds(holds, inner, -1<<63))
		if !slices.Equal(again, holds) || !bytes.Equal(in2, inner) {
			t.Fatalf("round trip of %x: %v, %x; then %v, %x", rec, holds, inner, again, in2)
		}
	})
}
