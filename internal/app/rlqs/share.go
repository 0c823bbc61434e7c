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
// starts full with MaxTokens and earns PerFill tokens every Fill,
// continuously (Envoy's bucket refills at PerFill/Fill a second), never
// holding more than MaxTokens. Its rate is at most what its share of the
// limit allows; MaxTokens is its burst.
type Bucket struct {
	MaxTokens int64
	PerFill   int64
	// Fill is a whole number of seconds: Envoy reads only the seconds of
	// fill_interval for the rate (and a fraction would be lost).
	Fill time.Duration
}

// MaxMaxTokens is the largest MaxTokens and PerFill: Envoy's max_tokens
// and tokens_per_fill are uint32.
const MaxMaxTokens = math.MaxUint32

// BucketFor returns the bucket of a share of share tokens per window, for
// assignments that live ttl: Fill is the fewest whole seconds in which the
// share earns a token, PerFill what it earns in Fill rounded down, so that
// the bucket's rate never exceeds the share, and MaxTokens what the share
// earns in a quarter of a ttl, at least 1 and at most MaxMaxTokens, so that
// an Envoy may spend a report's worth of tokens at once. ok is false when
// share <= 0 or window <= 0: there is then no bucket, only a denial.
func BucketFor(share int64, window, ttl time.Duration) (b Bucket, ok bool) {
	if share <= 0 || window <= 0 {
		return Bucket{}, false
	}
	perToken := ceilDiv(int64(window), share) // nanoseconds per token
	fill := time.Duration(max(ceilDiv(perToken, int64(time.Second)), 1)) * time.Second
	perFill := min(mulDiv(share, int64(fill), int64(window)), MaxMaxTokens)
	burst := mulDiv(share, int64(max(ttl/4, 0)), int64(window))
	return Bucket{MaxTokens: min(max(burst, 1), MaxMaxTokens), PerFill: max(perFill, 1), Fill: fill}, true
}

// Distinct returns next, changed if need be so that Envoy tells it from
// prev: Envoy keeps its token bucket, tokens and rate, when a new
// assignment's max_tokens, tokens_per_fill and the nanoseconds of its
// fill_interval equal the old one's, even when the seconds differ. A next
// that differs from prev in Fill alone gets one more (or, at the top, one
// fewer) MaxTokens.
func Distinct(prev, next Bucket) Bucket {
	if prev == next || prev.MaxTokens != next.MaxTokens || prev.PerFill != next.PerFill || prev.Fill%time.Second != next.Fill%time.Second {
		return next
	}
	if next.MaxTokens < MaxMaxTokens {
		next.MaxTokens++
	} else {
		next.MaxTokens--
	}
	return next
}

// Due returns the most that b can admit from start until until, with the
// bucket full at start: MaxTokens plus the whole tokens earned,
// floor(elapsed*PerFill/Fill), saturating at math.MaxInt64. It is what a
// grant of b over that span must have been charged. It is MaxTokens when
// until <= start.
//
// Envoy's bucket refills continuously, so that at most MaxTokens plus the
// whole tokens earned are ever spent; a bucket that adds PerFill at the
// end of each Fill spends no more.
func (b Bucket) Due(start, until time.Time) int64 {
	d := until.Sub(start)
	if d <= 0 || b.Fill <= 0 {
		return b.MaxTokens
	}
	return satAdd(b.MaxTokens, mulDiv(int64(d), b.PerFill, int64(b.Fill)))
}

// Grant is what one Envoy was granted for one bucket: the bucket it was
// sent, since when (the server's clock when it was first sent), until
// when the server has paid for it, and how many tokens cover it.
type Grant struct {
	Bucket  Bucket
	Start   time.Time
	Until   time.Time
	Charged int64
}

// Used returns the most that g's bucket can have admitted if it is
// replaced at now, Envoy learning of it within guard: its Due until
// now+guard, at most what was charged.
func (g *Grant) Used(now time.Time, guard time.Duration) int64 {
	if !now.Before(g.Until) {
		return g.Charged
	}
	return min(g.Charged, g.Bucket.Due(g.Start, now.Add(guard)))
}

// Drop returns the tokens g was charged that its bucket can no longer
// admit once it is replaced at now (by another bucket or a blanket rule),
// with guard as in Used: they are the Envoy's credit toward its next
// grant. A nil g leaves none.
func Drop(g *Grant, now time.Time, guard time.Duration) int64 {
	if g == nil {
		return 0
	}
	return g.Charged - g.Used(now, guard)
}

// Renew returns the grant that covers b until until, given the grant g in
// force (nil for none) and the Envoy's credit at now, with the tokens to
// take from the limiter for it and the credit left. When g has the same
// bucket and is still in force (now < g.Until), Envoy extends its
// assignment without refilling its bucket, so only the refill of the
// longer span is due; otherwise Envoy starts a new, full bucket, due in
// full from now, and what g can no longer admit (Drop) joins the credit.
// The credit pays first. Nothing returned is negative.
//
// Whatever the sequence of renewals, the tokens taken from the limiter
// and the credit left together cover, for each bucket Envoy was sent,
// what it can admit from when it was sent until it was replaced (plus
// guard) or expired: the bound of docs/envoy.md.
func Renew(g *Grant, credit int64, b Bucket, now, until time.Time, guard time.Duration) (next Grant, pay, left int64) {
	credit = max(credit, 0)
	var due int64
	if g != nil && g.Bucket == b && now.Before(g.Until) {
		next = *g
		if until.After(g.Until) {
			next.Until = until
			due = max(b.Due(g.Start, until)-g.Charged, 0)
		}
	} else {
		credit = satAdd(credit, Drop(g, now, guard))
		due = b.Due(now, until)
		next = Grant{Bucket: b, Start: now, Until: until}
	}
	next.Charged = satAdd(next.Charged, due)
	use := min(credit, due)
	return next, due - use, credit - use
}

// Demand estimates an Envoy's demand in tokens per window from its last
// two reports: the requests it used (allowed and denied) over the time
// they cover, prevUsed over prevElapsed and used over elapsed, as
// (prevUsed+used)*window/(prevElapsed+elapsed), saturating. Two reports
// rather than one, because a bucket's first report covers almost no time
// (Envoy sends it at the bucket's first request), and a rate over it would
// be absurd. It is -1, unknown, when the reports cover no time; a negative
// count counts as 0.
func Demand(prevUsed int64, prevElapsed time.Duration, used int64, elapsed, window time.Duration) int64 {
	span := max(prevElapsed, 0) + max(elapsed, 0)
	if span <= 0 {
		return -1
	}
	return mulDiv(satAdd(max(prevUsed, 0), max(used, 0)), int64(window), int64(span))
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
	demand   int64 // tokens per window; -1 until a report covers some time
	used     int64 // the last report's
	elapsed  time.Duration
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

// MaxMembers bounds the Envoys of a fleet, and so the size of its record
// in a store: past it, a new Envoy is not a member and its share is 0.
const MaxMembers = 1024

// Report records a report of Envoy id at now: used requests (allowed and
// denied) over elapsed, in a window of window. The first report of an id
// makes it a member, whose demand counts as unknown (an equal part) until
// its reports cover some time; see Demand.
func (f *Fleet) Report(id string, now time.Time, used int64, elapsed, window time.Duration) {
	m := f.members[id]
	if m == nil {
		if len(f.members) >= MaxMembers {
			return // Assign gives it 0
		}
		m = &member{demand: -1}
		f.members[id] = m
	}
	m.seen = now
	m.demand = Demand(m.used, m.elapsed, used, elapsed, window)
	m.used, m.elapsed = max(used, 0), max(elapsed, 0)
}

// Keep records that Envoy id holds share after all, not what Assign
// returned: the charge of a larger bucket failed and the smaller one it
// had goes on, or it was denied (0). A share above what it is assigned is
// taken as that, so that Keep never raises the sum.
func (f *Fleet) Keep(id string, share int64) {
	if m := f.members[id]; m != nil {
		share = min(max(share, 0), m.assigned)
		f.assigned += share - m.assigned
		m.assigned = share
	}
}

// Assign returns Envoy id's share now, which it records as assigned. Its
// target is its part of Split over the members' demands (an unknown demand
// wanting Total). Below its target, it grows toward it as far as the
// others leave free; above it, it shrinks to it only when another member
// waits for room (its target above what it holds) or the sum is over
// Total. A change within a tenth of the share held is not made. Every
// change makes Envoy start a new bucket, whose prepaid tokens the old one
// loses, so shares move only when someone needs it. An id that is not a
// member gets 0.
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
	for i, k := range ids {
		d := f.members[k].demand
		if d < 0 {
			d = f.Total
		}
		demand[i] = d
	}
	targets := Split(f.Total, demand)
	var target int64
	waiting := false
	for i, k := range ids {
		o := f.members[k]
		if k == id {
			target = targets[i]
			continue
		}
		if targets[i] > o.assigned && targets[i]-o.assigned > o.assigned/10 {
			waiting = true
		}
	}
	cur := m.assigned
	next := cur
	switch {
	case f.assigned > f.Total:
		next = min(target, max(cur-(f.assigned-f.Total), 0))
	case target > cur && (cur == 0 || target-cur > cur/10):
		next = min(target, cur+(f.Total-f.assigned))
	case target < cur && waiting && (target == 0 || cur-target > cur/10):
		next = target
	}
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
