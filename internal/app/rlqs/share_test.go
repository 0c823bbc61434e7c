package rlqs

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
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

// TestAffordable: the share Affordable returns is the largest whose
// renewal takes no more than the tokens there, for new buckets and for
// replacements of one in force with its credit.
func TestAffordable(t *testing.T) {
	const window, ttl = 2 * time.Second, time.Second
	guard := ttl / 8
	until := t0.Add(ttl + guard)
	inForce, _ := BucketFor(40, window, ttl)
	g := &Grant{Bucket: inForce, Start: t0.Add(-500 * time.Millisecond), Until: t0.Add(600 * time.Millisecond), Charged: 60}
	for _, tt := range []struct {
		name   string
		g      *Grant
		credit int64
	}{
		{"new", nil, 0},
		{"with credit", nil, 30},
		{"replacing one in force", g, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pay := func(s int64) int64 {
				bk, _ := BucketFor(s, window, ttl)
				if tt.g != nil {
					bk = Distinct(tt.g.Bucket, bk)
				}
				_, p, _ := Renew(tt.g, tt.credit, bk, t0, until, guard)
				return p
			}
			for avail := int64(0); avail <= 300; avail += 7 {
				bk, part, ok := Affordable(tt.g, tt.credit, 200, avail, window, ttl, t0, until, guard)
				if !ok {
					if pay(1) <= avail {
						t.Fatalf("Affordable(avail %d) found nothing, but a share of 1 takes %d", avail, pay(1))
					}
					continue
				}
				if part < 1 || part >= 200 || pay(part) > avail {
					t.Fatalf("Affordable(avail %d) = share %d taking %d, want at least 1, below 200, taking at most %d", avail, part, pay(part), avail)
				}
				if part < 199 && pay(part+1) <= avail {
					t.Fatalf("Affordable(avail %d) = share %d, but %d takes %d, within it", avail, part, part+1, pay(part+1))
				}
				if want, _ := BucketFor(part, window, ttl); tt.g != nil && bk != Distinct(tt.g.Bucket, want) || tt.g == nil && bk != want {
					t.Fatalf("Affordable(avail %d) bucket = %+v, want that of share %d", avail, bk, part)
				}
			}
		})
	}
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
		{"the last report alone once it covers MinDemandSpan", 100, 40, time.Second, ms(100), 400},
		{"a change of load counts in full at once", 100, 0, time.Second, time.Second, 0},
		{"a short report counts with the one before", 1, 40, ms(10), ms(40), 820},
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

// round is one report interval of a fleet driven by hand, as the service
// drives it: every member reports its demand over the interval and is
// answered its offer (Grow, then Hold, as the answers of a fleet kept in
// memory are), then the fleet is rebalanced, as a report finds it due
// within any interval longer than RebalanceEvery.
func round(f *Fleet, now time.Time, every, window time.Duration, demand map[string]int64) {
	for _, id := range slices.Sorted(maps.Keys(demand)) {
		f.Report(id, now, mulDiv(demand[id], int64(every), int64(window)), every, window)
		f.Hold(id, f.Grow(id))
	}
	f.Rebalance(nil)
}

// checkReserved fails t unless the members' reservations are not
// negative, sum to Reserved, and are within the total.
func checkReserved(t *testing.T, f *Fleet, step string) {
	t.Helper()
	var sum int64
	for id, m := range f.members {
		if m.held < 0 || m.offer < 0 {
			t.Fatalf("%s: %s holds %d, is offered %d", step, id, m.held, m.offer)
		}
		sum += m.reserve()
	}
	if sum != f.Reserved() || sum > f.Total {
		t.Fatalf("%s: reservations sum to %d, Reserved %d, total %d", step, sum, f.Reserved(), f.Total)
	}
}

// TestFleet: a lone Envoy gets the whole limit, a second waits for the
// first to take its smaller share, load moves between them, one leaves;
// at every step the reservations sum to at most the total.
func TestFleet(t *testing.T) {
	f := NewFleet(100)
	w := time.Second
	f.Report("a", t0, 0, 0, w)
	if got := f.Offer("a"); got != 0 {
		t.Fatalf("a's offer before a rebalance = %d, want 0", got)
	}
	f.Rebalance(nil)
	if got := f.Offer("a"); got != 100 {
		t.Fatalf("lone Envoy's offer = %d, want 100", got)
	}
	f.Hold("a", 100)
	f.Report("b", t0, 0, 0, w)
	f.Rebalance(nil)
	checkReserved(t, f, "b joins")
	if a, b := f.Offer("a"), f.Offer("b"); a != 50 || b != 0 {
		t.Fatalf("offers once b waits = a %d, b %d; want a 50 (its part), b 0 (a still holds 100)", a, b)
	}
	// a takes its half: b grows into it without waiting for a rebalance.
	f.Hold("a", f.Offer("a"))
	if got := f.Grow("b"); got != 50 {
		t.Fatalf("b's offer once a holds 50 = %d, want 50", got)
	}
	f.Hold("b", 50)
	checkReserved(t, f, "b grows")

	// a reports little use, b much: a shrinks, then b grows.
	now := t0.Add(time.Second)
	round(f, now, time.Second, w, map[string]int64{"a": 10, "b": 200})
	checkReserved(t, f, "load moves to b")
	round(f, now.Add(time.Second), time.Second, w, map[string]int64{"a": 10, "b": 200})
	if a, b := f.members["a"].held, f.members["b"].held; a != 10 || b != 90 {
		t.Fatalf("held after the load moved to b = a %d, b %d, want 10 and 90", a, b)
	}
	// b goes quiet past the abandon time, and leaves.
	if got := f.Idle(now.Add(10*time.Second), 5*time.Second); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Idle = %v, want [a b]", got)
	}
	f.Leave("b")
	checkReserved(t, f, "b leaves")
	f.Rebalance(nil)
	if got := f.Offer("a"); got != 100 {
		t.Fatalf("a's offer once b left = %d, want 100", got)
	}
	f.Hold("a", 100)
	f.SetTotal(40)
	f.Rebalance(nil)
	if got := f.Offer("a"); got != 40 {
		t.Fatalf("a's offer after the total fell = %d, want 40", got)
	}
	f.Hold("a", 40)
	checkReserved(t, f, "total falls")
}

// TestScaleUp: the case. n Envoys with high demand share a
// bucket, then one more joins: within two report intervals it holds its
// fair part, whatever n. (With a tenth of a share as the threshold for
// shrinking, nobody shrank once 9 or more were busy.)
func TestScaleUp(t *testing.T) {
	for _, n := range []int{1, 5, 8, 9, 12, 100, MaxMembers - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := NewFleet(10_000)
			demand := map[string]int64{}
			for i := range n {
				demand[fmt.Sprint("e", i)] = 100_000
			}
			now := t0
			for range 3 {
				now = now.Add(500 * time.Millisecond)
				round(f, now, 500*time.Millisecond, time.Second, demand)
			}
			demand["new"] = 100_000
			for range 3 { // its first report, then two intervals
				now = now.Add(500 * time.Millisecond)
				round(f, now, 500*time.Millisecond, time.Second, demand)
			}
			fair := int64(10_000 / (n + 1))
			if got := f.members["new"].held; got*10 < fair*8 {
				t.Errorf("the new Envoy holds %d two intervals after it joined %d busy ones, want at least 80%% of %d", got, n, fair)
			}
		})
	}
}

// fairShares is the max-min fair allocation of total over demand: each
// gets its demand up to the level that fills total, as water fills
// vessels (Split without the spare room it spreads).
func fairShares(total int64, demand []int64) []int64 {
	share := Split(total, demand)
	for i := range share {
		share[i] = min(share[i], max(demand[i], 0))
	}
	return share
}

// TestFairShareProperty: for any number of members up to MaxMembers, any
// demands before and after a change, and members joining with the
// change, every member with demand holds at least 80% of its max-min fair
// share two report intervals after the first report that shows the new
// demands; and at every step the reservations are within the total.
func TestFairShareProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 4))
	cases := 400
	if testing.Short() {
		cases = 50
	}
	for c := range cases {
		n := 1 + rng.IntN(MaxMembers)
		if c%4 != 0 {
			n = 1 + rng.IntN(40) // most cases small, where rounding bites
		}
		total := 1 + rng.Int64N(100_000)
		every := time.Duration(1+rng.IntN(20)) * 100 * time.Millisecond
		window := time.Duration(1+rng.IntN(60)) * time.Second
		randDemand := func() int64 {
			switch rng.IntN(4) {
			case 0:
				return 0
			case 1:
				return rng.Int64N(total/int64(n) + 1) // below an equal part
			default:
				return rng.Int64N(4*total + 1)
			}
		}
		f := NewFleet(total)
		demand := map[string]int64{}
		before := n - rng.IntN(n/2+1) // members before the change
		for i := range before {
			demand[fmt.Sprint("e", i)] = randDemand()
		}
		now := t0
		for range 1 + rng.IntN(4) {
			now = now.Add(every)
			round(f, now, every, window, demand)
			checkReserved(t, f, "before the change")
		}
		for i := range n {
			demand[fmt.Sprint("e", i)] = randDemand()
		}
		// The first report that shows the demands, then two intervals.
		for range 3 {
			now = now.Add(every)
			round(f, now, every, window, demand)
			checkReserved(t, f, "after the change")
		}
		ids := slices.Sorted(maps.Keys(demand))
		want := make([]int64, len(ids))
		for i, id := range ids {
			want[i] = demand[id]
		}
		fair := fairShares(total, want)
		for i, id := range ids {
			// The demand is estimated from whole requests per interval.
			d := mulDiv(mulDiv(want[i], int64(every), int64(window)), int64(window), int64(every))
			fi := min(fair[i], d)
			if got := f.members[id].held; got*10 < fi*8 {
				t.Fatalf("case %d (%d members, total %d, reports every %v, window %v): %s wants %d, holds %d, under 80%% of its fair share %d",
					c, n, total, every, window, id, want[i], got, fi)
			}
		}
	}
}

// TestFleetOfOneProcess: a Fleet of one process's members, rebalanced
// against others it does not serve, never offers more than the others
// leave unreserved, and shrinks its own members when another waits.
func TestFleetOfOneProcess(t *testing.T) {
	f := NewFleet(100)
	f.members["other"] = &member{demand: 1000, held: 0, offer: 46, seen: t0}
	f.members["mine"] = &member{demand: 1000, held: 54, offer: 54, seen: t0}
	f.reserved = 100
	mine := func(id string) bool { return id == "mine" }
	f.Rebalance(mine)
	if got := f.Offer("mine"); got != 54 {
		t.Fatalf("mine's offer while the other is offered 46 = %d, want 54 (46 is within a tenth of the other's 50)", got)
	}
	f.members["other"].offer = 0
	f.reserved = 54
	f.Rebalance(mine)
	if got, other := f.Offer("mine"), f.Offer("other"); got != 50 || other != 0 {
		t.Fatalf("offers once the other waits = mine %d, other %d; want mine shrunk to 50, the other's left to its process", got, other)
	}
	if got := f.Reserved(); got != 54 {
		t.Fatalf("Reserved = %d, want 54: mine may spend its 54 until it reports", got)
	}
}

// FuzzFleet: whatever the reports, answers, joins, leaves and rebalances,
// the reservations are never negative, sum to Reserved and, after a
// rebalance of every member, to at most the total; and Grow never takes
// them past it.
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
			switch ops[i] % 6 {
			case 0:
				fl.Report(id, now, int64(ops[i+1])*7, 100*time.Millisecond, time.Second)
			case 1:
				fl.Hold(id, fl.Grow(id))
			case 2:
				fl.Leave(id)
			case 3:
				fl.Hold(id, int64(ops[i+1]))
			case 4:
				fl.Rebalance(nil)
			case 5:
				fl.SetTotal(total - int64(ops[i+1]))
				fl.Rebalance(nil)
			}
			var sum int64
			for _, m := range fl.members {
				if m.held < 0 || m.offer < 0 {
					t.Fatalf("step %d: held %d, offer %d", i/2, m.held, m.offer)
				}
				sum += m.reserve()
			}
			if sum != fl.Reserved() {
				t.Fatalf("step %d: reservations sum to %d, Reserved %d", i/2, sum, fl.Reserved())
			}
			if ops[i]%6 == 4 && sum > fl.Total {
				t.Fatalf("step %d: reservations sum to %d after a rebalance, over the total %d", i/2, sum, fl.Total)
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
	good.Rebalance(nil)
	f.Add(good.encode())
	f.Add([]byte(`{"m":{"x":{"h":-1}}}`))
	f.Add([]byte(`{"m":null}`))
	f.Fuzz(func(t *testing.T, state []byte) {
		fl := decodeFleet(state, 100)
		var sum int64
		for _, m := range fl.members {
			if m.held < 0 || m.offer < 0 {
				t.Fatalf("decoded held %d, offer %d", m.held, m.offer)
			}
			sum = satAdd(sum, m.reserve())
		}
		if sum != fl.Reserved() {
			t.Fatalf("reservations sum to %d, Reserved %d", sum, fl.Reserved())
		}
		again := decodeFleet(fl.encode(), 100)
		if again.Len() != fl.Len() || again.Reserved() != fl.Reserved() {
			t.Fatalf("round trip: %d members, %d reserved; want %d, %d", again.Len(), again.Reserved(), fl.Len(), fl.Reserved())
		}
	})
}
