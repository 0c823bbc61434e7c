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
		{"100 a second, ttl 2s", 100, time.Second, 2 * time.Second, Bucket{MaxTokens: 50, PerFill: 100, Fill: time.Second}, true},
		{"rounds the rate down", 7, 2 * time.Second, time.Second, Bucket{MaxTokens: 1, PerFill: 3, Fill: time.Second}, true},
		{"slow: the fewest whole seconds that earn a token", 5, 15 * time.Minute, time.Second, Bucket{MaxTokens: 1, PerFill: 1, Fill: 3 * time.Minute}, true},
		{"slow, not a whole second", 3, 10 * time.Second, time.Second, Bucket{MaxTokens: 1, PerFill: 1, Fill: 4 * time.Second}, true},
		{"capped", math.MaxInt64, time.Second, time.Hour, Bucket{MaxTokens: MaxMaxTokens, PerFill: MaxMaxTokens, Fill: time.Second}, true},
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

func TestDistinct(t *testing.T) {
	a := Bucket{MaxTokens: 1, PerFill: 1, Fill: 3 * time.Second}
	tests := []struct {
		name       string
		prev, next Bucket
		want       Bucket
	}{
		{"same", a, a, a},
		{"differs in more than Fill", a, Bucket{MaxTokens: 2, PerFill: 1, Fill: 4 * time.Second}, Bucket{MaxTokens: 2, PerFill: 1, Fill: 4 * time.Second}},
		{"Fill alone: one more token", a, Bucket{MaxTokens: 1, PerFill: 1, Fill: 4 * time.Second}, Bucket{MaxTokens: 2, PerFill: 1, Fill: 4 * time.Second}},
		{"at the top: one fewer", Bucket{MaxTokens: MaxMaxTokens, PerFill: 1, Fill: time.Second}, Bucket{MaxTokens: MaxMaxTokens, PerFill: 1, Fill: 2 * time.Second}, Bucket{MaxTokens: MaxMaxTokens - 1, PerFill: 1, Fill: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Distinct(tt.prev, tt.next); got != tt.want {
				t.Errorf("Distinct(%+v, %+v) = %+v, want %+v", tt.prev, tt.next, got, tt.want)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	// 10 tokens a second, as Envoy's fill_interval must be whole seconds.
	b := Bucket{MaxTokens: 10, PerFill: 10, Fill: time.Second}
	other := Bucket{MaxTokens: 5, PerFill: 10, Fill: time.Second}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const guard = 50 * time.Millisecond
	g1, pay, credit := Renew(nil, 0, b, at(0), at(1000), guard)
	if pay != 20 || credit != 0 {
		t.Fatalf("first Renew = pay %d, credit %d, want 10 + 10 refills, 0", pay, credit)
	}
	// Extended before it ends: only the longer span's refill.
	g2, pay, _ := Renew(&g1, 0, b, at(500), at(1500), guard)
	if pay != 5 || g2.Start != at(0) || g2.Charged != 25 {
		t.Fatalf("extension = %+v, pay %d, want start t0, charged 25 in all, 5 now", g2, pay)
	}
	// Not longer: nothing.
	if g, pay, _ := Renew(&g2, 0, b, at(600), at(1400), guard); pay != 0 || g.Until != at(1500) {
		t.Fatalf("shorter renewal = %+v, pay %d, want unchanged, 0", g, pay)
	}
	// Another bucket at 600ms: Envoy starts a full one, and the old one,
	// replaced by 650ms, admits at most 10 + 6 of its 25.
	g3, pay, credit := Renew(&g2, 0, other, at(600), at(1600), guard)
	if g3.Start != at(600) || g3.Charged != 15 || pay != 6 || credit != 0 {
		t.Fatalf("new bucket = %+v, pay %d, credit %d, want 15 from 600ms, 9 of them from the credit: pay 6, credit 0", g3, pay, credit)
	}
	// Dropped for a denial: the credit waits for the next grant.
	if got := Drop(&g2, at(600), guard); got != 9 {
		t.Fatalf("Drop = %d, want 9", got)
	}
	if _, pay, credit := Renew(nil, 30, b, at(0), at(1000), guard); pay != 0 || credit != 10 {
		t.Fatalf("Renew with credit 30 = pay %d, credit %d, want 0, 10", pay, credit)
	}
	// The same bucket after it ended: Envoy starts over, no credit.
	if g, pay, credit := Renew(&g2, 0, b, at(1500), at(2500), guard); pay != 20 || credit != 0 || g.Start != at(1500) {
		t.Fatalf("after expiry = %+v, pay %d, credit %d, want 20 from 1500ms", g, pay, credit)
	}
}

// FuzzRenew: however grants are extended and replaced, the tokens taken
// and the credit left cover what every bucket sent can admit from when
// it was sent until it was replaced (plus the guard) or its end: the
// bound of docs/envoy.md.
func FuzzRenew(f *testing.F) {
	f.Add(int64(10), int64(100), uint16(500), uint16(1000), uint16(300), uint16(1200), false, true)
	f.Fuzz(func(t *testing.T, maxTokens, fillMs int64, step1, ttl1, step2, ttl2 uint16, change1, change2 bool) {
		if maxTokens <= 0 || fillMs <= 0 || fillMs > 1e6 || maxTokens > 1e9 {
			return
		}
		const guard = 20 * time.Millisecond
		buckets := [2]Bucket{{MaxTokens: maxTokens, PerFill: fillMs, Fill: time.Second}, {MaxTokens: maxTokens/2 + 1, PerFill: fillMs + 7, Fill: 2 * time.Second}}
		now := t0
		cur := 0
		g, taken, credit := Renew(nil, 0, buckets[cur], now, now.Add(time.Duration(ttl1)*time.Millisecond), guard)
		var admissible int64 // of the buckets replaced so far
		for _, s := range []struct {
			step, ttl uint16
			change    bool
		}{{step1, ttl1, change1}, {step2, ttl2, change2}} {
			now = now.Add(time.Duration(s.step) * time.Millisecond)
			next := cur
			if s.change {
				next = 1 - cur
			}
			if next != cur || !now.Before(g.Until) {
				admissible += min(g.Bucket.Due(g.Start, now.Add(guard)), g.Bucket.Due(g.Start, g.Until))
			}
			cur = next
			var pay int64
			g, pay, credit = Renew(&g, credit, buckets[cur], now, now.Add(time.Duration(s.ttl)*time.Millisecond), guard)
			if pay < 0 || credit < 0 {
				t.Fatalf("Renew = pay %d, credit %d", pay, credit)
			}
			taken += pay
		}
		admissible += g.Bucket.Due(g.Start, g.Until)
		if taken-credit < admissible {
			t.Fatalf("took %d with %d of it credit left, but the buckets sent can admit %d", taken, credit, admissible)
		}
	})
}

func TestDemand(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name              string
		prevUsed, used    int64
		prevElapsed, elap time.Duration
		want              int64
	}{
		{"first report, at the first request", 0, 1, 0, ms(0), -1},
		{"first report over some time", 0, 50, 0, ms(500), 100},
		{"the first report's instant barely counts", 1, 40, time.Microsecond, ms(100), 409},
		{"two reports", 100, 0, time.Second, time.Second, 50},
		{"negative counts as 0", -5, 10, 0, time.Second, 10},
		{"saturates", math.MaxInt64, math.MaxInt64, 0, time.Nanosecond, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Demand(tt.prevUsed, tt.prevElapsed, tt.used, tt.elap, time.Second); got != tt.want {
				t.Errorf("Demand(%d, %v, %d, %v, 1s) = %d, want %d", tt.prevUsed, tt.prevElapsed, tt.used, tt.elap, got, tt.want)
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

// FuzzFleet: whatever the reports, joins, leaves and failed charges, the
// shares assigned never sum to more than the total, none is negative,
// and Assigned is their sum.
func FuzzFleet(f *testing.F) {
	f.Add(int64(100), []byte{0, 10, 1, 20, 2, 30, 3, 0, 0, 40})
	f.Add(int64(1), []byte{0, 255, 1, 255, 2, 255, 4, 1})
	f.Fuzz(func(t *testing.T, total int64, ops []byte) {
		if total < 0 || total > 1e12 || len(ops) > 200 {
			return
		}
		fl := NewFleet(total)
		now := t0
		ids := []string{"a", "b", "c"}
		for i := 0; i+1 < len(ops); i += 2 {
			id := ids[int(ops[i+1])%len(ids)]
			now = now.Add(10 * time.Millisecond)
			switch ops[i] % 5 {
			case 0:
				fl.Report(id, now, int64(ops[i+1])*7, 100*time.Millisecond, time.Second)
			case 1:
				fl.Assign(id)
			case 2:
				fl.Leave(id)
			case 3:
				fl.Keep(id, int64(ops[i+1]))
			case 4:
				fl.Report(id, now, int64(ops[i+1]), 0, time.Second)
				fl.Assign(id)
			}
			var sum int64
			for _, m := range fl.members {
				if m.assigned < 0 {
					t.Fatalf("step %d: a share of %d", i/2, m.assigned)
				}
				sum += m.assigned
			}
			if sum != fl.Assigned() || sum > total {
				t.Fatalf("step %d: shares sum to %d, Assigned %d, total %d", i/2, sum, fl.Assigned(), total)
			}
		}
	})
}

// FuzzDecodeFleet: a stored fleet record, whatever its bytes, decodes to
// a fleet whose shares are not negative and sum to Assigned, and which
// encodes to a record that decodes the same.
func FuzzDecodeFleet(f *testing.F) {
	good := NewFleet(100)
	good.Report("a", t0, 10, time.Second, time.Second)
	good.Assign("a")
	f.Add(good.encode())
	f.Add([]byte(`{"m":{"x":{"a":-1}}}`))
	f.Add([]byte(`{"m":null}`))
	f.Fuzz(func(t *testing.T, state []byte) {
		fl := decodeFleet(state, 100)
		var sum int64
		for _, m := range fl.members {
			if m.assigned < 0 {
				t.Fatalf("decoded a share of %d", m.assigned)
			}
			sum = satAdd(sum, m.assigned)
		}
		if sum != fl.Assigned() {
			t.Fatalf("shares sum to %d, Assigned %d", sum, fl.Assigned())
		}
		again := decodeFleet(fl.encode(), 100)
		if again.Len() != fl.Len() || again.Assigned() != fl.Assigned() {
			t.Fatalf("round trip: %d members, %d assigned; want %d, %d", again.Len(), again.Assigned(), fl.Len(), fl.Assigned())
		}
	})
}
