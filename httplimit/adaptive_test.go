package httplimit

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// nopStore is a store that keeps nothing, for the arithmetic's tests.
type nopStore struct{}

func (nopStore) Update(context.Context, string, driver.UpdateFunc) error { return nil }

// testAdaptive is an Adaptive of 10 to 100 requests a second, gaining 10
// a second, cut to 90%.
func testAdaptive() *Adaptive {
	a := &Adaptive{Store: nopStore{}, Min: 10, Max: 100, Increase: 10}
	if err := a.check(); err != nil {
		panic(err)
	}
	return a
}

const sec = int64(time.Second)

func TestAdaptiveRateAt(t *testing.T) {
	a := testAdaptive()
	s := aimd{rate: 50_000, since: 0}
	for _, tc := range []struct {
		now, want int64
	}{
		{-sec, 50_000}, // a clock behind the one that cut: no gain, no loss
		{0, 50_000},
		{sec / 10, 51_000},
		{sec, 60_000},
		{5 * sec, 100_000},
		{5*sec - 1, 99_999},
		{6 * sec, 100_000},
		{1 << 62, 100_000},
	} {
		if got := a.rateAt(s, tc.now); got != tc.want {
			t.Errorf("rateAt(%d) = %d mreq/s, want %d", tc.now, got, tc.want)
		}
	}
}

// TestAdaptiveReserve spaces slots by the rate, from now or from the
// last slot, and refuses one beyond the maximum wait, unchanged.
func TestAdaptiveReserve(t *testing.T) {
	a := testAdaptive()
	s := a.fresh(0) // 100/s: a slot every 10ms
	var at int64
	var ok bool
	for i, want := range []int64{0, 10e6, 20e6} {
		if s, at, ok = a.reserve(s, 0, time.Second); !ok || at != want {
			t.Fatalf("reserve #%d = %d, %v, want %d, true", i, at, ok, want)
		}
	}
	if next, at, ok := a.reserve(s, 0, 29*time.Millisecond); ok || at != 30e6 || next != s {
		t.Errorf("reserve with a wait of 29ms = %+v, %d, %v; want unchanged, 30ms, false", next, at, ok)
	}
	if _, at, ok := a.reserve(s, sec, 0); !ok || at != sec {
		t.Errorf("reserve a second later = %d, %v, want now, true", at, ok)
	}
}

// TestAdaptiveCut cuts once per epoch, to Backoff percent, never below
// Min.
func TestAdaptiveCut(t *testing.T) {
	a := testAdaptive()
	s := a.fresh(0)
	s, ok := a.cut(s, sec, 0)
	if !ok || s.rate != 90_000 || s.since != sec {
		t.Fatalf("cut = %+v, %v, want rate 90000 since 1s", s, ok)
	}
	if again, ok := a.cut(s, sec+1, 0); ok || again != s {
		t.Errorf("a second refusal of the old epoch cut again: %+v", again)
	}
	if s2, ok := a.cut(s, sec, sec); !ok || s2.since != sec+1 {
		t.Errorf("a cut at the epoch's own instant = %+v, %v, want a new epoch", s2, ok)
	}
	for range 50 {
		s, _ = a.cut(s, s.since, s.since)
	}
	if s.rate != 10_000 {
		t.Errorf("after 50 cuts the rate is %d mreq/s, want Min, 10000", s.rate)
	}
	// Back at Max 9 s after the last cut (10 → 100 at 10/s), and kept a
	// second more.
	if got, want := a.ttl(s, s.since), 10*time.Second; got != want {
		t.Errorf("ttl = %v, want %v", got, want)
	}
}

func TestAdaptiveState(t *testing.T) {
	s := aimd{rate: 42_000, since: -5, tat: 1 << 60}
	got, err := decodeAIMD(s.append(nil))
	if err != nil || got != s {
		t.Fatalf("decodeAIMD(append(%+v)) = %+v, %v", s, got, err)
	}
	for _, b := range [][]byte{nil, {1}, append([]byte{2}, s.append(nil)[1:]...), aimd{}.append(nil), append(s.append(nil), 0)} {
		if _, err := decodeAIMD(b); err == nil {
			t.Errorf("decodeAIMD(%x) = nil error, want one", b)
		}
	}
}

func FuzzDecodeAIMD(f *testing.F) {
	f.Add(aimd{rate: 1000, since: 1, tat: 2}.append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeAIMD(b)
		if err != nil {
			return
		}
		if s.rate <= 0 {
			t.Fatalf("decoded a rate of %d", s.rate)
		}
		if got := s.append(nil); string(got) != string(b) {
			t.Fatalf("append(decode(%x)) = %x", b, got)
		}
	})
}
