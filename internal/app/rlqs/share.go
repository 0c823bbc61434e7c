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

// Affordable returns the largest share of at most share, and its bucket,
// whose renewal of g (as Renew: with credit, at now, until until) takes no
// more than avail tokens from the limiter: when the tokens of an Envoy's
// whole share are not there, it gets a bucket as large as those there pay
// for, rather than a denial until they are. ok is false when no share
// above 0 is paid for. It costs O(log share) renewals.
func Affordable(g *Grant, credit, share, avail int64, window, ttl time.Duration, now, until time.Time, guard time.Duration) (b Bucket, part int64, ok bool) {
	pay := func(s int64) (Bucket, int64) {
		bk, _ := BucketFor(s, window, ttl)
		if g != nil {
			bk = Distinct(g.Bucket, bk)
		}
		_, p, _ := Renew(g, credit, bk, now, until, guard)
		return bk, p
	}
	// The pay grows with the share (a bucket's tokens and rate do), so
	// the largest share paid for is found by halving.
	lo, hi := int64(0), share-1 // lo is paid for, or 0
	for lo < hi {
		mid := hi - (hi-lo)/2
		if _, p := pay(mid); p <= avail {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo <= 0 {
		return Bucket{}, 0, false
	}
	if bk, p := pay(lo); p <= avail {
		return bk, lo, true
	}
	return Bucket{}, 0, false
}

// MinDemandSpan is the shortest report whose requests alone estimate an
// Envoy's demand: a shorter one (a bucket's first report, which Envoy
// sends at the bucket's first request) is counted with the one before.
const MinDemandSpan = 100 * time.Millisecond

// Demand estimates an Envoy's demand in tokens per window from its
// reports: the requests it used (allowed and denied) over the time they
// cover, used over elapsed for the last report when elapsed is at least
// MinDemandSpan, else (prevUsed+used) over (prevElapsed+elapsed) with the
// report before, saturating. The last report alone, so that a change of
// load counts in full from the first report that shows it. It is -1,
// unknown, when the reports cover no time; a negative count counts as 0.
func Demand(prevUsed int64, prevElapsed time.Duration, used int64, elapsed, window time.Duration) int64 {
	used, elapsed = max(used, 0), max(elapsed, 0)
	if elapsed >= MinDemandSpan {
		return mulDiv(used, int64(window), int64(elapsed))
	}
	span := max(prevElapsed, 0) + elapsed
	if span <= 0 {
		return -1
	}
	return mulDiv(satAdd(max(prevUsed, 0), used), int64(window), int64(span))
}

// Fleet is the Envoys that share one bucket's limit of Total tokens per
// window, and their shares. Reports (Report) and answers (Offer, Hold)
// cost the same whatever the fleet's size; Rebalance, which costs
// O(n log n) for n members, recomputes the shares, and is meant to run on
// a tick, not per report.
//
// A member's share moves in two steps, because an Envoy spends the
// bucket it was sent until its next report replaces it: Rebalance sets its
// offer, the share its next answer gives, and Hold records what that
// answer sent. What a member holds or is offered is reserved for it, and
// the reservations, max(held, offer) per member, never sum to more than
// Total: a member is offered more only out of what nobody reserves, and
// one above its fair part is offered less when another needs it, the
// room it gives back counting as free once it holds the smaller share. A
// Fleet is not safe for simultaneous use.
type Fleet struct {
	// Total is the tokens per window the fleet shares.
	Total int64
	// members by Envoy id.
	members  map[string]*member
	reserved int64 // the sum of the members' reserve()
}

type member struct {
	demand  int64 // tokens per window; -1 until a report covers some time
	used    int64 // the last report's
	elapsed time.Duration
	held    int64 // the share of the last answer: what it may be spending
	offer   int64 // the share of its next answer
	target  int64 // its part of Split at the last Rebalance
	seen    time.Time
}

// reserve is what m may spend before the next Rebalance.
func (m *member) reserve() int64 { return max(m.held, m.offer) }

// need is what m needs of target: its demand, where known, up to target.
func (m *member) need() int64 {
	if m.demand < 0 {
		return m.target
	}
	return min(m.demand, m.target)
}

// short reports whether m reserves less than nine tenths of what it
// needs: it waits for room, and the members above their targets give it.
// Within a tenth of its need, a member does not make the others change
// buckets (which loses what their buckets had paid for ahead).
func (m *member) short() bool {
	need := m.need()
	return m.reserve() < need-need/10
}

// NewFleet returns an empty fleet sharing total tokens per window.
func NewFleet(total int64) *Fleet {
	return &Fleet{Total: max(total, 0), members: map[string]*member{}}
}

// Len returns the number of Envoys in the fleet.
func (f *Fleet) Len() int { return len(f.members) }

// Reserved returns the sum of what the members hold or are offered. After
// a Rebalance of every member it is at most Total.
func (f *Fleet) Reserved() int64 { return f.reserved }

// MaxMembers bounds the Envoys of a fleet, and so the size of its record
// in a store: past it, a new Envoy is not a member and its share is 0.
const MaxMembers = 1024

// Report records a report of Envoy id at now: used requests (allowed and
// denied) over elapsed, in a window of window. The first report of an id
// makes it a member, offered nothing until the next Rebalance, whose
// demand counts as unknown (an equal part) until its reports cover some
// time; see Demand. It reports whether id is a member.
func (f *Fleet) Report(id string, now time.Time, used int64, elapsed, window time.Duration) bool {
	m := f.members[id]
	if m == nil {
		if len(f.members) >= MaxMembers {
			return false // Offer gives it 0
		}
		m = &member{demand: -1}
		f.members[id] = m
	}
	m.seen = now
	m.demand = Demand(m.used, m.elapsed, used, elapsed, window)
	m.used, m.elapsed = max(used, 0), max(elapsed, 0)
	return true
}

// Offer returns the share of Envoy id's next answer; 0 when id is not a
// member.
func (f *Fleet) Offer(id string) int64 {
	if m := f.members[id]; m != nil {
		return m.offer
	}
	return 0
}

// Grow raises Envoy id's offer toward its target out of the room nobody
// reserves, when it is short of what it needs, and returns the offer: a
// member need not wait for the next Rebalance once the others have taken
// their smaller shares. Only a Fleet that holds every member knows that
// room: a Fleet of one process's members, whose others are in a store,
// must not Grow.
func (f *Fleet) Grow(id string) int64 {
	m := f.members[id]
	if m == nil {
		return 0
	}
	if free := f.Total - f.reserved; free > 0 && m.offer < m.target && m.short() {
		f.setOffer(m, m.offer+min(m.target-m.offer, free))
	}
	return m.offer
}

// Hold records that Envoy id was sent share (0 for a denial): its
// reservation falls to it once the offer is too. A share above what it
// reserves is taken as that, so that Hold never raises the sum.
func (f *Fleet) Hold(id string, share int64) {
	m := f.members[id]
	if m == nil {
		return
	}
	f.reserved -= m.reserve()
	m.held = min(max(share, 0), m.reserve())
	f.reserved += m.reserve()
}

func (f *Fleet) setOffer(m *member, offer int64) {
	f.reserved -= m.reserve()
	m.offer = max(offer, 0)
	f.reserved += m.reserve()
}

// Rebalance recomputes the offers of the members mine reports true for
// (every member for a nil mine); the others' offers, set by the process
// that serves them, stay as they are, and count as reserved. Each
// member's target is its part of Split over the members' demands (an
// unknown demand wanting Total). A member of mine above its target is
// offered its target when some member is short (see member.short) or
// the reservations are over Total, and keeps its share otherwise; then
// the members of mine below their targets, those short of what they need
// first, are offered more out of the room nobody reserves, up to their
// targets, by more than a tenth of their offers or from 0.
func (f *Fleet) Rebalance(mine func(id string) bool) {
	if len(f.members) == 0 {
		return
	}
	if mine == nil {
		mine = func(string) bool { return true }
	}
	ids := make([]string, 0, len(f.members))
	for id := range f.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	demand := make([]int64, len(ids))
	for i, id := range ids {
		d := f.members[id].demand
		if d < 0 {
			d = f.Total
		}
		demand[i] = d
	}
	targets := Split(f.Total, demand)
	waiting := false
	for i, id := range ids {
		m := f.members[id]
		m.target = targets[i]
		waiting = waiting || m.short()
	}
	over := f.reserved > f.Total
	// Shrinks: an offer below what a member holds releases nothing yet.
	for _, id := range ids {
		if m := f.members[id]; mine(id) {
			next := m.held
			if (waiting || over) && m.target < m.held {
				next = m.target
			}
			f.setOffer(m, next)
		}
	}
	// Growth, the members short of their needs first.
	for _, needy := range []bool{true, false} {
		for _, id := range ids {
			m := f.members[id]
			if !mine(id) || m.short() != needy || m.target <= m.offer || (m.offer > 0 && m.target-m.offer <= m.offer/10) {
				continue
			}
			if free := f.Total - f.reserved; free > 0 {
				f.setOffer(m, m.offer+min(m.target-m.offer, free))
			}
		}
	}
}

// Leave removes Envoy id, releasing its share.
func (f *Fleet) Leave(id string) {
	if m := f.members[id]; m != nil {
		f.reserved -= m.reserve()
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

// SetTotal changes the fleet's limit, for a reload; offers above the new
// total shrink at the next Rebalance, and none grows until the sum is
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
