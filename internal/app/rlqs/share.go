package rlqs

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// This file is the arithmetic of shares: how a limit of Total tokens per
// Window is carved into the token buckets of the Envoys that enforce it,
// and what each bucket is charged to the shared limiter. It is pure: the
// time is a value, nothing here locks, blocks or touches a store, so that
// it can be unified with quota leasing (internal/lease) later.

// Split divides total tokens among Envoys whose demands (tokens wanted in
// the same span) are demand, max-min fairly: an Envoy that wants less than
// an equal part of what is left gets what it wants, the others share the
// rest equally; what nobody wants is then spread equally over all of them
// as room to grow, the largest demands getting the odd tokens. The shares
// sum to exactly total when total > 0 (none is negative), and are all 0
// when total <= 0. A negative demand counts as 0. Split does not modify
// demand.
func Split(total int64, demand []int64) []int64 {
	n := len(demand)
	share := make([]int64, n)
	if n == 0 || total <= 0 {
		return share
	}
	// Indexes by demand, smallest first; equal demands in index order, so
	// that the result does not depend on the sort's stability.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	want := func(i int) int64 { return max(demand[i], 0) }
	slices.SortFunc(order, func(a, b int) int {
		if want(a) != want(b) {
			if want(a) < want(b) {
				return -1
			}
			return 1
		}
		return a - b
	})
	left := total
	for k, i := range order {
		fair := left / int64(n-k)
		share[i] = min(want(i), fair)
		left -= share[i]
	}
	// The spare tokens: equally, then one each to the largest demands.
	each, odd := left/int64(n), left%int64(n)
	for k := n - 1; k >= 0; k-- {
		i := order[k]
		share[i] += each
		if odd > 0 {
			share[i]++
			odd--
		}
	}
	return share
}

// Bucket is the token bucket an Envoy enforces for one assignment: it
// starts full with MaxTokens and gains one token every Fill, never holding
// more than MaxTokens. Its rate, one token per Fill, is what its share of
// the limit allows; MaxTokens is its burst.
type Bucket struct {
	MaxTokens int64
	Fill      time.Duration
}

// MaxMaxTokens is the largest MaxTokens: Envoy's max_tokens is a uint32.
const MaxMaxTokens = math.MaxUint32

// BucketFor returns the bucket of a share of share tokens per window, for
// assignments that live ttl: Fill is window/share rounded up, so that the
// bucket's rate never exceeds the share, and MaxTokens what the share
// earns in half a ttl, at least 1 and at most MaxMaxTokens, so that an
// Envoy may spend a report's worth of tokens at once. ok is false when
// share <= 0 or window <= 0: there is then no bucket, only a denial.
func BucketFor(share int64, window, ttl time.Duration) (b Bucket, ok bool) {
	if share <= 0 || window <= 0 {
		return Bucket{}, false
	}
	fill := ceilDiv(int64(window), share)
	burst := mulDiv(share, int64(max(ttl/2, 0)), int64(window))
	return Bucket{MaxTokens: min(max(burst, 1), MaxMaxTokens), Fill: time.Duration(fill)}, true
}

// Due returns the most that b can admit from start until until, with the
// bucket full at start: MaxTokens plus one token per whole Fill elapsed,
// saturating at math.MaxInt64. It is what a grant of b over that span
// must have been charged. It is MaxTokens when until <= start.
//
// Envoy's bucket refills continuously, so that at most MaxTokens plus
// floor(elapsed/Fill) whole tokens are ever spent; a bucket that adds its
// token at the end of each Fill spends no more.
func (b Bucket) Due(start, until time.Time) int64 {
	d := until.Sub(start)
	if d <= 0 || b.Fill <= 0 {
		return b.MaxTokens
	}
	return satAdd(b.MaxTokens, int64(d/b.Fill))
}

// Grant is what one Envoy was granted for one bucket: the bucket it was
// sent, since when (the server's clock when it was first sent), until
// when the server has charged for it, and how many tokens were charged.
type Grant struct {
	Bucket  Bucket
	Start   time.Time
	Until   time.Time
	Charged int64
}

// Renew returns the grant that covers b until until, and the tokens to
// charge for it, given the grant g in force (nil for none) at now. When g
// has the same bucket and is still in force (now < g.Until), Envoy
// extends its assignment without refilling its bucket, so only the refill
// of the longer span is charged; otherwise Envoy starts a new, full
// bucket, charged in full from now. The charge is never negative.
func Renew(g *Grant, b Bucket, now, until time.Time) (Grant, int64) {
	if g != nil && g.Bucket == b && now.Before(g.Until) {
		next := Grant{Bucket: b, Start: g.Start, Until: until, Charged: g.Charged}
		if until.After(g.Until) {
			due := b.Due(g.Start, until)
			charge := max(due-g.Charged, 0)
			next.Charged += charge
			return next, charge
		}
		next.Until = g.Until
		return next, 0
	}
	due := b.Due(now, until)
	return Grant{Bucket: b, Start: now, Until: until, Charged: due}, due
}

// Demand estimates an Envoy's demand in tokens per window from a report
// of used requests (allowed and denied) over elapsed: used*window/elapsed,
// saturating, averaged with the previous estimate prev so that one quiet
// or busy report moves it halfway. prev < 0 means no estimate yet: the
// report alone counts. A report over no time keeps prev (or 0).
func Demand(prev, used int64, elapsed, window time.Duration) int64 {
	if elapsed <= 0 || used < 0 {
		return max(prev, 0)
	}
	rate := mulDiv(used, int64(window), int64(elapsed))
	if prev < 0 {
		return rate
	}
	return prev/2 + rate/2 + (prev%2+rate%2)/2
}

// Fleet is the Envoys that share one bucket's limit of Total tokens per
// window, and the share each was assigned. The sum of the assigned shares
// never exceeds Total: an Envoy's share grows only into what the others
// do not hold, and the others shrink to theirs at their next Assign, so
// that a rebalance takes at most one report of each Envoy. A Fleet is not
// safe for simultaneous use.
type Fleet struct {
	// Total is the tokens per window the fleet shares.
	Total int64
	// members by Envoy id.
	members  map[string]*member
	assigned int64 // the sum of members' assigned
}

type member struct {
	demand   int64 // tokens per window; -1 until the first report
	assigned int64
	seen     time.Time // the last report
}

// NewFleet returns an empty fleet sharing total tokens per window.
func NewFleet(total int64) *Fleet {
	return &Fleet{Total: max(total, 0), members: map[string]*member{}}
}

// Len returns the number of Envoys in the fleet.
func (f *Fleet) Len() int { return len(f.members) }

// Assigned returns the sum of the shares assigned, at most Total.
func (f *Fleet) Assigned() int64 { return f.assigned }

// Report records a report of Envoy id at now: used requests (allowed and
// denied) over elapsed, in a window of window. The first report of an id
// makes it a member, whose demand counts as unknown (an equal part) until
// a report covers some time.
func (f *Fleet) Report(id string, now time.Time, used int64, elapsed, window time.Duration) {
	m := f.members[id]
	if m == nil {
		m = &member{demand: -1}
		f.members[id] = m
	}
	m.seen = now
	if elapsed > 0 {
		m.demand = Demand(m.demand, used, elapsed, window)
	}
}

// Assign returns Envoy id's share now, which it records as assigned: its
// part of Split over the members' demands (an unknown demand wanting
// Total), or, when that is more than it holds, as much more as the others
// leave free. A share within an eighth of the one it holds is left as it
// is, so that the bucket sent stays the same and Envoy keeps its tokens.
// An id that is not a member gets 0.
func (f *Fleet) Assign(id string) int64 {
	m := f.members[id]
	if m == nil {
		return 0
	}
	ids := make([]string, 0, len(f.members))
	for k := range f.members {
		ids = append(ids, k)
	}
	slices.Sort(ids)
	demand := make([]int64, len(ids))
	me := 0
	for i, k := range ids {
		d := f.members[k].demand
		if d < 0 {
			d = f.Total
		}
		demand[i] = d
		if k == id {
			me = i
		}
	}
	target := Split(f.Total, demand)[me]
	cur := m.assigned
	if cur > 0 && target > 0 && abs(target-cur) <= cur/8 && f.assigned <= f.Total {
		return cur
	}
	next := min(target, cur+(f.Total-f.assigned))
	f.assigned += next - cur
	m.assigned = next
	return next
}

// Leave removes Envoy id, releasing its share.
func (f *Fleet) Leave(id string) {
	if m := f.members[id]; m != nil {
		f.assigned -= m.assigned
		delete(f.members, id)
	}
}

// Idle returns the members whose last report is older than after at now,
// sorted; the caller makes them Leave.
func (f *Fleet) Idle(now time.Time, after time.Duration) []string {
	var ids []string
	for id, m := range f.members {
		if now.Sub(m.seen) > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// SetTotal changes the fleet's limit, for a reload; shares above the new
// total shrink at their next Assign, and none grows until the sum is
// within it again.
func (f *Fleet) SetTotal(total int64) { f.Total = max(total, 0) }

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// ceilDiv returns a/b rounded up, for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// mulDiv returns a*b/c rounded down for a, b >= 0, c > 0, in 128 bits,
// saturating at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// satAdd returns a+b for a, b >= 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
