// Package calendar is the calendar quota as a pure state machine: Limit
// tokens per calendar period, a day, a week, a month or a run of them,
// in a time zone, with its periods starting on the local calendar (at
// midnight, or another time of day) rather than at multiples of a fixed
// duration. A day across a daylight-saving change is 23 or 25 hours long,
// a month 28 to 31 days, February 29 days in a leap year: each period is
// exactly as long as the calendar makes it.
//
// The periods are numbered from the anchor, the start of period 0, a
// local date and time of day in the zone: with Days, period k starts Days·k
// local days after the anchor's date, at its time of day; with Months,
// Months·k months after the anchor's month, on the anchor's day of the
// month, or the month's last day when it has fewer days (an anchor on the
// 31st starts its periods on April 30, February 28 or 29), at its time of
// day. A local time that the zone skips (a spring-forward gap) is taken as
// package time's Date normalizes it, the same instant in every process.
//
// The counting is the fixed window's, aligned on the periods: a state is
// the period it counts in and the tokens taken there, including reserved
// tokens beyond Limit, which later periods repay one Limit each, so that
// no period serves more than Limit. Only the period boundaries need the
// calendar; the counting is package fixedwindow's (Carry, First, Admit).
package calendar

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
)

// Config is a validated calendar quota: Limit > 0 tokens per period of
// Months months or Days days, exactly one of them positive, anchored at
// the local date and time of day of Anchor in its Location. Make one with
// New. A Config is safe for simultaneous use by multiple goroutines.
type Config struct {
	Limit int64
	// Months and Days are the period: exactly one is positive.
	Months, Days int64

	loc *time.Location
	// The anchor: its month counted from year 0 (year·12 + month − 1), its
	// day counted from 1970-01-01 (civil), its day of the month, and its
	// time of day, as local clock fields.
	month, day        int64
	mday              int
	hour, minute, sec int
	nsec              int

	// memo is the period the last call found, shared by every key and
	// every goroutine: finding a period takes a few conversions of time in
	// the zone, a hundred times a window's decision, and nearly every call
	// is in the period of the one before. nil (a Config not made by New)
	// finds every period afresh.
	memo *atomic.Pointer[span]
}

// span is period k, from start to end (start(k), start(k+1)).
type span struct{ k, start, end int64 }

// State is a key's period, its number counted from the anchor, and the
// tokens taken in it, including reserved ones beyond Limit, which spill
// into the next periods. 16 bytes.
type State struct {
	Period int64
	Hits   int64
}

var _ policy.Machine[State] = Config{}

// New returns the calendar quota of limit tokens per period of months
// months or days days, anchored at anchor's local date and time of day in
// anchor's Location. It does not validate: package sluice does.
func New(limit int64, anchor time.Time, months, days int64) Config {
	y, m, d := anchor.Date()
	h, mi, s := anchor.Clock()
	return Config{Limit: limit, Months: months, Days: days, loc: anchor.Location(),
		month: int64(y)*12 + int64(m) - 1, day: daysFromCivil(int64(y), int64(m), int64(d)), mday: d,
		hour: h, minute: mi, sec: s, nsec: anchor.Nanosecond(), memo: new(atomic.Pointer[span])}
}

// Location is the zone of the periods.
func (c Config) Location() *time.Location { return c.loc }

// The instants an int64 of nanoseconds since the epoch can hold.
var (
	firstInstant = time.Unix(0, math.MinInt64)
	lastInstant  = time.Unix(0, math.MaxInt64)
)

// start is the instant period k starts at, saturating at the ends of the
// int64 time line: math.MinInt64 for a period starting before it, Never
// after it.
func (c Config) start(k int64) int64 {
	var y, m, d int64
	if c.Months > 0 {
		mi, ok := mulAdd(k, c.Months, c.month)
		if !ok {
			return saturated(k)
		}
		y, m = floorDiv(mi, 12), mi-floorDiv(mi, 12)*12+1
		d = min(int64(c.mday), int64(daysIn(y, m)))
	} else {
		dn, ok := mulAdd(k, c.Days, c.day)
		if !ok {
			return saturated(k)
		}
		y, m, d = civilFromDays(dn)
	}
	// Years outside these are outside the int64 time line in every zone,
	// and would overflow time.Date's int arithmetic when far enough.
	switch {
	case y < 1677:
		return math.MinInt64
	case y > 2262:
		return policy.Never
	}
	t := time.Date(int(y), time.Month(m), int(d), c.hour, c.minute, c.sec, c.nsec, c.loc)
	switch {
	case t.Before(firstInstant):
		return math.MinInt64
	case t.After(lastInstant):
		return policy.Never
	}
	return t.UnixNano()
}

// saturated is the start of a period k so far from the anchor that its
// number of months or days does not fit in an int64.
func saturated(k int64) int64 {
	if k < 0 {
		return math.MinInt64
	}
	return policy.Never
}

// index is the number of the period that holds now: the k with
// start(k) ≤ now < start(k+1), from the memo when it holds now.
func (c Config) index(now int64) int64 {
	if c.memo == nil {
		return c.find(now)
	}
	if p := c.memo.Load(); p != nil && p.start <= now && now < p.end {
		return p.k
	}
	k := c.find(now)
	c.memo.Store(&span{k: k, start: c.start(k), end: c.start(k + 1)})
	return k
}

// startOf is start(k), from the memo when it holds k's start.
func (c Config) startOf(k int64) int64 {
	if c.memo != nil {
		if p := c.memo.Load(); p != nil {
			switch k {
			case p.k:
				return p.start
			case p.k + 1:
				return p.end
			}
		}
	}
	return c.start(k)
}

// find is index without the memo. The local date of now puts it in the
// period of that date, or the one before when now's time of day is before
// the anchor's; the steps after it settle that, and any shift of a
// daylight-saving change, in a step or two.
func (c Config) find(now int64) int64 {
	y, m, d := time.Unix(0, now).In(c.loc).Date()
	var k int64
	if c.Months > 0 {
		k = floorDiv(int64(y)*12+int64(m)-1-c.month, c.Months)
	} else {
		k = floorDiv(daysFromCivil(int64(y), int64(m), int64(d))-c.day, c.Days)
	}
	// The bounds on the steps only matter at the ends of the time line,
	// where saturated starts stop telling periods apart.
	for i := 0; i < 4 && k > math.MinInt64 && c.start(k) > now; i++ {
		k--
	}
	for i := 0; i < 4 && k < math.MaxInt64 && c.start(k+1) <= now; i++ {
		k++
	}
	return k
}

// roll moves s forward to the period that holds now, k. A state whose
// tokens, debt included, are all spent by then is replaced by a fresh
// one. A clock that went back stays in the current period.
func (c Config) roll(s *State, exists bool, k int64) {
	if !exists {
		*s = State{Period: k}
		return
	}
	if k <= s.Period {
		return
	}
	hits, _ := fixedwindow.Carry(s.Hits, c.Limit, uint64(k)-uint64(s.Period))
	*s = State{Period: k, Hits: hits}
}

// until is the time from now to the start of period j after s's, clamped
// to [0, Never].
func (c Config) until(s *State, j uint64, now int64) int64 {
	if j > math.MaxInt64 || s.Period > math.MaxInt64-int64(j) {
		return policy.Never
	}
	at := c.startOf(s.Period + int64(j))
	if at <= now {
		return 0
	}
	return int64(min(uint64(at)-uint64(now), policy.Never))
}

// result describes s at now after a decision.
func (c Config) result(s *State, now int64, allowed bool, retryAfter int64) policy.Result {
	return fixedwindow.Result(c.Limit, s.Hits, allowed, retryAfter, c.until(s, fixedwindow.Windows(s.Hits, c.Limit), now))
}

// Consume takes n tokens if the current period still has them. More than
// Limit is an argument error. A rejection's RetryAfter is the time until
// the period with room starts: the exact instant of the boundary.
func (c Config) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if code := policy.CheckTokens(n, c.Limit, true); code != policy.OK {
		return policy.Refusal(code, c.Limit).Decision(0), false
	}
	next := *s
	c.roll(&next, exists, c.index(now))
	if j := fixedwindow.First(next.Hits, n, c.Limit); j > 0 {
		return c.result(&next, now, false, c.until(&next, j, now)).Decision(0), false
	}
	next.Hits += n
	*s = next
	return c.result(s, now, true, 0).Decision(0), true
}

// Peek answers as Consume would, taking nothing.
func (c Config) Peek(s *State, exists bool, now, n int64) policy.Result {
	next := *s
	d, _ := c.Consume(&next, exists, now, n)
	return d.Result(c.Quota())
}

// Reserve takes n tokens in the first period that has room for them, if
// that period starts within maxWait. As for the fixed window, the room
// left in the periods before it is spent, so that no period serves more
// than Limit. Hits that would not fit in an int64 are refused with
// RetryAfter Never.
func (c Config) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if code := policy.CheckTokens(n, c.Limit, true); code != policy.OK {
		return policy.Refusal(code, c.Limit), false
	}
	if maxWait < 0 {
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	next := *s
	c.roll(&next, exists, c.index(now))
	j := fixedwindow.First(next.Hits, n, c.Limit)
	var wait int64
	if j > 0 {
		wait = c.until(&next, j, now)
	}
	hits, retryAfter, ok := fixedwindow.Admit(next.Hits, n, c.Limit, j, wait, maxWait)
	if !ok {
		return c.result(&next, now, false, retryAfter), false
	}
	next.Hits = hits
	*s = next
	res := c.result(s, now, true, 0)
	res.Wait = wait
	return res, true
}

// Cancel gives nothing back once the counter has moved on since the
// reservation, as the fixed window's: a counter cannot tell its tokens
// from later ones. (policy.Undo restores an unchanged counter exactly.)
func (c Config) Cancel(s *State, now int64, r *policy.Receipt) bool { return false }

// ExpiresAt is the end of the last period that holds any of the hits.
func (c Config) ExpiresAt(s *State) int64 {
	w := fixedwindow.Windows(s.Hits, c.Limit)
	if w > math.MaxInt64 || s.Period > math.MaxInt64-int64(w) {
		return policy.Never
	}
	return c.startOf(s.Period + int64(w))
}

// Leasing is policy.LeasesToWindowEnd, as for a fixed window: a lease is
// hits taken at once, and its tokens are forgotten with the period they
// were counted in.
func (Config) Leasing() policy.Leasing { return policy.LeasesToWindowEnd }

// Lapses is true: a state past its expiry is replaced by a fresh one in
// the period of now (roll), as for a key with no state.
func (Config) Lapses() bool { return true }

// Quota is the tokens per period.
func (c Config) Quota() int64 { return c.Limit }

// The average lengths of the periods, for Window: a day of 24 hours and
// the Gregorian calendar's month, 365.2425/12 days.
const (
	day   = int64(24 * time.Hour)
	month = int64(2_629_746 * time.Second)
)

// Window is the period's average length, Months Gregorian months of
// 30.436875 days or Days days of 24 hours, so that Quota per Window is
// the long-run rate. The real periods are the calendar's: Result's
// RetryAfter and ResetAfter give their exact ends.
func (c Config) Window() int64 {
	if c.Months > 0 {
		return policy.SatMul(c.Months, month)
	}
	return policy.SatMul(c.Days, day)
}

// AppendState appends the encoding of *s to dst.
func (c Config) AppendState(dst []byte, s *State) []byte {
	return policy.AppendInts(dst, policy.TagCalendar, s.Period, s.Hits)
}

// DecodeState decodes a state written by AppendState.
func (c Config) DecodeState(src []byte, s *State) error {
	var st State
	if err := policy.DecodeInts(src, policy.TagCalendar, &st.Period, &st.Hits); err != nil {
		return err
	}
	if st.Hits < 0 {
		return fmt.Errorf("%w: calendar hits %d, want at least 0", policy.ErrBadState, st.Hits)
	}
	*s = st
	return nil
}

var _ policy.WordCodec[State] = Config{}

// Words is 2: a State is its Period and Hits, so that a compound keeps it
// as words (see policy.WordCodec).
func (Config) Words() int { return 2 }

// PutWords writes *s into w[:2].
func (Config) PutWords(w []int64, s *State) { w[0], w[1] = s.Period, s.Hits }

// GetWords sets *s from w[:2].
func (Config) GetWords(s *State, w []int64) { s.Period, s.Hits = w[0], w[1] }

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// mulAdd is k·m + a, and whether it fits in an int64, for m > 0.
func mulAdd(k, m, a int64) (int64, bool) {
	if k > (math.MaxInt64-max(a, 0))/m || k < (math.MinInt64-min(a, 0))/m {
		return 0, false
	}
	return k*m + a, true
}

// daysIn is the number of days of month m (1–12) of year y.
func daysIn(y, m int64) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to the proleptic
// Gregorian date y-m-d (Howard Hinnant's days_from_civil), for |y| below
// 2^50.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the date days after 1970-01-01, daysFromCivil's
// inverse (Hinnant's civil_from_days).
func civilFromDays(days int64) (y, m, d int64) {
	z := days + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}
