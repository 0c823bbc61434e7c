package rlqs

import (
	"math"
	"slices"
	"testing"
	"time"

)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSplit(t *testing.T) {
	tests := []struct {
		name   string
		total  int64
		demand []int64
		want   []int64
	}{
		{"none", 100, nil, []int64{}},
		{"no limit", 0, []int64{5, 5}, []int64{0, 0}},
		{"equal", 100, []int64{100, 100}, []int64{50, 50}},
		{"spare spread", 100, []int64{10, 10}, []int64{50, 50}},
		{"small demand kept, rest to the big one", 100, []int64{10, 500}, []int64{10, 90}},
		{"max-min", 90, []int64{10, 1000, 1000}, []int64{10, 40, 40}},
		{"odd tokens to the largest demand", 10, []int64{100, 200, 300}, []int64{3, 3, 4}},
		{"more envoys than tokens", 2, []int64{1, 5, 9}, []int64{0, 1, 1}},
		{"negative demand is none", 10, []int64{-5, 100}, []int64{0, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(tt.total, tt.demand)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split(%d, %v) = %v, want %v", tt.total, tt.demand, got, tt.want)
			}
		})
	}
}

func FuzzSplit(f *testing.F) {
	f.Add(int64(100), int64(1), int64(50), int64(1000))
	f.Add(int64(1), int64(0), int64(0), int64(0))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(-1), int64(3))
	f.Fuzz(func(t *testing.T, total, a, b, c int64) {
		demand := []int64{a, b, c}
		got := Split(total, demand)
		var sum int64
		for i, s := range got {
			if s < 0 {
				t.Fatalf("Split(%d, %v)[%d] = %d, want >= 0", total, demand, i, s)
			}
			sum += s
		}
		want := max(total, 0)
		if sum != want {
			t.Fatalf("Split(%d, %v) sums to %d, want %d", total, demand, sum, want)
		}
	})
}

func TestBucketFor(t *testing.T) {
	tests := []struct {
		name        string
		share       int64
		window, ttl time.Duration
		want        Bucket
		ok          bool
	}{
		{"100 a second, ttl 2s", 100, time.Second, 2 * time.Second, Bucket{MaxTokens: 100, Fill: 10 * time.Millisecond}, true},
		{"rounds fill up", 3, time.Second, time.Second, Bucket{MaxTokens: 1, Fill: 333333334}, true},
		{"burst at least 1", 5, 15 * time.Minute, time.Second, Bucket{MaxTokens: 1, Fill: 3 * time.Minute}, true},
		{"burst capped", math.MaxInt64, time.Second, time.Hour, Bucket{MaxTokens: MaxMaxTokens, Fill: 1}, true},
		{"no share", 0, time.Second, time.Second, Bucket{}, false},
		{"no window", 10, 0, time.Second, Bucket{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := BucketFor(tt.share, tt.window, tt.ttl)
			if got != tt.want || ok != tt.ok {
				t.Errorf("BucketFor(%d, %v, %v) = %+v, %v, want %+v, %v", tt.share, tt.window, tt.ttl, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	b := Bucket{MaxTokens: 10, Fill: 100 * time.Millisecond}
	other := Bucket{MaxTokens: 5, Fill: 100 * time.Millisecond}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	g1, c1 := Renew(nil, b, at(0), at(1000))
	if c1 != 20 {
		t.Fatalf("first Renew charged %d, want 10 + 10 refills", c1)
	}
	// Extended before it ends: only the longer span's refill.
	g2, c2 := Renew(&g1, b, at(500), at(1500))
	if c2 != 5 || g2.Start != at(0) || g2.Charged != 25 {
		t.Fatalf("extension = %+v, charged %d, want start t0, charged 25 in all, 5 now", g2, c2)
	}
	// Not longer: nothing.
	if g, c := Renew(&g2, b, at(600), at(1400)); c != 0 || g.Until != at(1500) {
		t.Fatalf("shorter renewal = %+v, charged %d, want unchanged, 0", g, c)
	}
	// Another bucket: Envoy starts a full one.
	if g, c := Renew(&g2, other, at(600), at(1600)); c != 15 || g.Start != at(600) {
		t.Fatalf("new bucket = %+v, charged %d, want 5 + 10 from 600ms", g, c)
	}
	// The same bucket after it ended: Envoy starts over too.
	if g, c := Renew(&g2, b, at(1500), at(2500)); c != 20 || g.Start != at(1500) {
		t.Fatalf("after expiry = %+v, charged %d, want 20 from 1500ms", g, c)
	}
}

// FuzzRenew: however a grant is extended, what it was charged in all
// covers what its bucket can admit from its start to its end: the bound of
// docs/envoy.md.
func FuzzRenew(f *testing.F) {
	f.Add(int64(10), int64(100), uint16(500), uint16(1000), uint16(300), uint16(1200))
	f.Fuzz(func(t *testing.T, maxTokens, fillMs int64, step1, ttl1, step2, ttl2 uint16) {
		if maxTokens <= 0 || fillMs <= 0 || fillMs > 1e6 {
			return
		}
		b := Bucket{MaxTokens: maxTokens, Fill: time.Duration(fillMs) * time.Millisecond}
		now := t0
		g, total := Renew(nil, b, now, now.Add(time.Duration(ttl1)*time.Millisecond))
		for _, s := range []struct{ step, ttl uint16 }{{step1, ttl1}, {step2, ttl2}} {
			now = now.Add(time.Duration(s.step) * time.Millisecond)
			if !now.Before(g.Until) {
				break
			}
			var c int64
			g, c = Renew(&g, b, now, now.Add(time.Duration(s.ttl)*time.Millisecond))
			if c < 0 {
				t.Fatalf("Renew charged %d", c)
			}
			total += c
		}
		if due := b.Due(g.Start, g.Until); total < due {
			t.Fatalf("charged %d in all, but the bucket can admit %d from %v to %v", total, due, g.Start, g.Until)
		}
	})
}

func TestDemand(t *testing.T) {
	tests := []struct {
		name            string
		prev, used      int64
		elapsed, window time.Duration
		want            int64
	}{
		{"first report", -1, 50, 500 * time.Millisecond, time.Second, 100},
		{"halfway", 100, 0, time.Second, time.Second, 50},
		{"no time", 40, 10, 0, time.Second, 40},
		{"no time, no estimate", -1, 10, 0, time.Second, 0},
		{"saturates", -1, math.MaxInt64, time.Nanosecond, time.Hour, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Demand(tt.prev, tt.used, tt.elapsed, tt.window); got != tt.want {
				t.Errorf("Demand(%d, %d, %v, %v) = %d, want %d", tt.prev, tt.used, tt.elapsed, tt.window, got, tt.want)
			}
		})
	}
}

// TestFleet: load moves from one Envoy to another, a third joins and one
// leaves; at every step the shares assigned sum to at most the total.
func TestFleet(t *testing.T) {
	f := NewFleet(100)
	w := time.Second
	check := func(step string) {
		t.Helper()
		if f.Assigned() > f.Total {
			t.Fatalf("%s: assigned %d of %d", step, f.Assigned(), f.Total)
		}
	}
	f.Report("a", t0, 0, 0, w)
	if got := f.Assign("a"); got != 100 {
		t.Fatalf("lone Envoy's share = %d, want 100", got)
	}
	check("a alone")
	f.Report("b", t0, 0, 0, w)
	if got := f.Assign("b"); got != 0 {
		t.Fatalf("b's share while a holds all = %d, want 0", got)
	}
	check("b joins")
	// a reports little use, b much: a shrinks, then b grows.
	f.Report("a", t0.Add(time.Second), 10, time.Second, w)
	f.Report("b", t0.Add(time.Second), 200, time.Second, w)
	a := f.Assign("a")
	check("a shrinks")
	b := f.Assign("b")
	check("b grows")
	if a >= 50 || b <= 50 || a+b != 100 {
		t.Fatalf("shares after the load moved to b = a %d, b %d, want a < 50 < b, summing to 100", a, b)
	}
	// The load moves back: b must shrink before a can grow.
	f.Report("a", t0.Add(2*time.Second), 400, time.Second, w)
	f.Report("b", t0.Add(2*time.Second), 0, time.Second, w)
	a2 := f.Assign("a")
	check("a asks first")
	if a2 != a {
		t.Fatalf("a's share before b shrinks = %d, want %d (nothing free)", a2, a)
	}
	f.Assign("b")
	check("b shrinks")
	if a3 := f.Assign("a"); a3 <= a {
		t.Fatalf("a's share after b shrank = %d, want more than %d", a3, a)
	}
	check("a grows")
	// b goes quiet past the abandon time, and leaves.
	if got := f.Idle(t0.Add(10*time.Second), 5*time.Second); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Idle = %v, want [a b]", got)
	}
	f.Leave("b")
	check("b leaves")
	if got := f.Assign("a"); got != 100 {
		t.Fatalf("a's share once b left = %d, want 100", got)
	}
	f.SetTotal(40)
	if got := f.Assign("a"); got != 40 {
		t.Fatalf("a's share after the total fell = %d, want 40", got)
	}
	check("total falls")
}
