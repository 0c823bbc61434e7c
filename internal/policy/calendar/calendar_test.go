package calendar

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

const (
	hour  = int64(time.Hour)
	never = policy.Never
)

// The steps and results of the worked examples.
var (
	consume, peek, reserve     = policytest.Consume, policytest.Peek, policytest.Reserve
	allowed, granted, rejected = policytest.Allowed, policytest.Granted, policytest.Rejected
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// at is the instant of a local date and time in loc, in nanoseconds.
func at(loc *time.Location, y int, m time.Month, d, h int) int64 {
	return time.Date(y, m, d, h, 0, 0, 0, loc).UnixNano()
}

// TestDecisions works through the calendar's hard cases by hand. Every
// base is a period's first instant, and the times are offsets from it in
// real (elapsed) hours.
func TestDecisions(t *testing.T) {
	ny, paris := zone(t, "America/New_York"), zone(t, "Europe/Paris")
	daily := New(3, time.Date(2026, 1, 1, 0, 0, 0, 0, ny), 0, 1)
	tests := []struct {
		name  string
		cfg   Config
		base  int64
		steps []policytest.Step
	}{
		{
			// 2026-03-08 in New York: midnight EST to midnight EDT is 23
			// hours; the clocks skip 02:00–03:00. The quota resets at
			// +23h, not +24h.
			name: "a spring-forward day is 23 hours",
			cfg:  daily,
			base: at(ny, 2026, 3, 8, 0),
			steps: []policytest.Step{
				consume(hour, 3, allowed(3, 0, 22*hour)),
				consume(5*hour, 1, rejected(3, 0, 18*hour, 18*hour)),
				consume(23*hour-1, 1, rejected(3, 0, 1, 1)),
				consume(23*hour, 1, allowed(3, 2, 24*hour)),
			},
		},
		{
			// 2026-11-01: midnight EDT to midnight EST is 25 hours; 01:00
			// to 02:00 comes twice.
			name: "a fall-back day is 25 hours",
			cfg:  daily,
			base: at(ny, 2026, 11, 1, 0),
			steps: []policytest.Step{
				consume(0, 3, allowed(3, 0, 25*hour)),
				consume(24*hour, 1, rejected(3, 0, hour, hour)),
				consume(25*hour-1, 1, rejected(3, 0, 1, 1)),
				consume(25*hour, 3, allowed(3, 0, 24*hour)),
			},
		},
		{
			// February 2028 has 29 days: from its 1st, the month's quota
			// resets 29×24h later, on March 1st; March is an hour short,
			// New York's clocks going forward on the 12th.
			name: "february of a leap year",
			cfg:  New(2, time.Date(2026, 1, 1, 0, 0, 0, 0, ny), 1, 0),
			base: at(ny, 2028, 2, 1, 0),
			steps: []policytest.Step{
				consume(0, 2, allowed(2, 0, 29*24*hour)),
				consume(28*24*hour, 1, rejected(2, 0, 24*hour, 24*hour)),
				consume(29*24*hour, 1, allowed(2, 1, 31*24*hour-hour)),
			},
		},
		{
			// Anchored on the 31st: the periods start on January 31,
			// February 29 (2028 is a leap year), March 31, April 30.
			name: "an anchor on the 31st starts on the last day of shorter months",
			cfg:  New(1, time.Date(2026, 1, 31, 0, 0, 0, 0, time.UTC), 1, 0),
			base: at(time.UTC, 2028, 1, 31, 0),
			steps: []policytest.Step{
				consume(0, 1, allowed(1, 0, 29*24*hour)),
				consume(28*24*hour, 1, rejected(1, 0, 24*hour, 24*hour)),
				consume(29*24*hour, 1, allowed(1, 0, 31*24*hour)),
				consume(60*24*hour, 1, allowed(1, 0, 30*24*hour)), // March 31 to April 30
				consume(61*24*hour, 1, rejected(1, 0, 29*24*hour, 29*24*hour)),
			},
		},
		{
			// Weeks from Monday in Paris: the week of 2026-03-23 holds the
			// spring-forward Sunday, so it is 167 hours.
			name: "a week across a change of clocks",
			cfg:  New(5, time.Date(2026, 1, 5, 0, 0, 0, 0, paris), 0, 7),
			base: at(paris, 2026, 3, 23, 0),
			steps: []policytest.Step{
				consume(0, 5, allowed(5, 0, 167*hour)),
				consume(100*hour, 1, rejected(5, 0, 67*hour, 67*hour)),
				consume(167*hour, 1, allowed(5, 4, 168*hour)),
			},
		},
		{
			// A period may start at another time of day: at 09:00 local,
			// the day of the change of clocks is 23 hours from 09:00 EST
			// to 09:00 EDT.
			name: "a day that starts at 09:00",
			cfg:  New(1, time.Date(2026, 1, 1, 9, 0, 0, 0, ny), 0, 1),
			base: at(ny, 2026, 3, 7, 9),
			steps: []policytest.Step{
				consume(-hour, 1, allowed(1, 0, hour)), // 08:00 is the day before's
				consume(0, 1, allowed(1, 0, 23*hour)),
				consume(22*hour, 1, rejected(1, 0, hour, hour)),
			},
		},
		{
			// Reservations are debt that the next periods repay, as in
			// a fixed window: 2 more of a full day wait for the next day,
			// 2 more for the one after, spending what is left of the
			// next.
			name: "reservations wait for the period with room",
			cfg:  daily,
			base: at(ny, 2026, 11, 1, 0),
			steps: []policytest.Step{
				consume(hour, 3, allowed(3, 0, 24*hour)),
				reserve(hour, 2, 24*hour-1, rejected(3, 0, 24*hour, 24*hour)),
				reserve(hour, 2, 24*hour, granted(3, 0, 48*hour, 24*hour)),
				reserve(hour, 2, never, granted(3, 0, 72*hour, 48*hour)),
				// The second reservation spent the room of November 2 and
				// took 2 of November 3: 1 is left there.
				consume(25*hour, 1, rejected(3, 0, 24*hour, 48*hour)),
				peek(49*hour, 1, allowed(3, 0, 24*hour)),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			policytest.Steps(t, tt.cfg, &s, false, tt.base, tt.steps)
		})
	}
}

// TestArgumentErrors: no tokens, and more than the limit, are argument
// errors that change nothing.
func TestArgumentErrors(t *testing.T) {
	c := New(3, time.Time{}, 0, 1)
	s := State{Period: 7, Hits: 1}
	for _, n := range []int64{0, -1, 4} {
		want := policy.Refusal(policy.CheckTokens(n, 3, true), 3)
		if res, changed := policytest.Decide(t, c, &s, true, 0, n); res != want || changed {
			t.Errorf("Consume(%d) = %+v, %v; want %+v, no change", n, res, changed, want)
		}
		if res, changed := c.Reserve(&s, true, 0, n, never); res != want || changed {
			t.Errorf("Reserve(%d) = %+v, %v; want %+v, no change", n, res, changed, want)
		}
	}
	if s != (State{Period: 7, Hits: 1}) {
		t.Errorf("argument errors changed the state to %+v", s)
	}
}

// TestEncoding pins the encoding byte by byte.
func TestEncoding(t *testing.T) {
	c := New(3, time.Time{}, 0, 1)
	// Header 1, tag 12; zig-zag 3 → 6, 300 → 600 = 0xd8 0x04.
	s := State{Period: 3, Hits: 300}
	want := []byte{1, 12, 6, 0xd8, 0x04}
	if got := c.AppendState(nil, &s); string(got) != string(want) {
		t.Fatalf("AppendState(%+v) = %x, want %x", s, got, want)
	}
	var got State
	if err := c.DecodeState(want, &got); err != nil || got != s {
		t.Fatalf("DecodeState(%x) = %+v, %v", want, got, err)
	}
	sentinel := State{Period: 1, Hits: 2}
	got = sentinel
	if err := c.DecodeState([]byte{1, 12, 0, 1}, &got); !errors.Is(err, policy.ErrBadState) || got != sentinel {
		t.Errorf("DecodeState(negative hits) = %+v, %v; want ErrBadState, no change", got, err)
	}
}

// contractConfigs are quotas of a few tokens in zones with changes of
// clocks of an hour, of half an hour (Lord Howe), at midnight (Santiago),
// and a skipped day (Apia, 2011-12-30).
func contractConfigs(t testing.TB) []policy.Machine[State] {
	var out []policy.Machine[State]
	for _, z := range []string{"America/New_York", "Australia/Lord_Howe", "America/Santiago", "Pacific/Apia", "UTC"} {
		loc := zone(t, z)
		out = append(out,
			New(3, time.Date(2020, 1, 1, 0, 0, 0, 0, loc), 0, 1),
			New(2, time.Date(2020, 1, 31, 2, 30, 0, 0, loc), 1, 0),
			New(4, time.Date(2019, 12, 30, 0, 0, 0, 0, loc), 0, 7))
	}
	return out
}

// TestContract runs the contract's suite with time steps around a day,
// which cross the daily periods and, over a history, the weeks and
// months, and around a month.
func TestContract(t *testing.T) {
	all := contractConfigs(t)
	policytest.RunSpan(t, 24*hour, all...)
	// The months and weeks of the first two zones, a month at a time: the
	// other zones' days are covered above, and a calendar's decisions
	// take a few conversions of time each, slow under the race detector.
	policytest.RunSpan(t, 30*24*hour, all[1:6]...)
	// Skipped days of Apia: 2011-12-30 does not exist there.
	apia := zone(t, "Pacific/Apia")
	policytest.RunSpan(t, 24*hour, New(2, time.Date(2011, 12, 29, 0, 0, 0, 0, apia), 0, 1))
}

// TestTimeLineEdges: periods that start before or after the int64 time
// line saturate, and a state there decides without overflow.
func TestTimeLineEdges(t *testing.T) {
	c := New(2, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 1200, 0)
	for _, now := range []int64{math.MinInt64, math.MinInt64 + 1, 0, math.MaxInt64 - 1, math.MaxInt64} {
		var s State
		res, _ := policytest.Decide(t, c, &s, false, now, 1)
		if !res.Allowed || res.ResetAfter < 0 {
			t.Errorf("Consume at %d = %+v, want allowed", now, res)
		}
		res, _ = c.Reserve(&s, true, now, 2, never)
		if res.Code != policy.OK {
			t.Errorf("Reserve at %d = %+v", now, res)
		}
	}
	for _, s := range []State{{Period: math.MaxInt64, Hits: math.MaxInt64}, {Period: math.MinInt64, Hits: math.MaxInt64}} {
		res, _ := policytest.Decide(t, c, &s, true, 0, 1)
		if res.Code != policy.OK {
			t.Errorf("Consume on %+v = %+v", s, res)
		}
		_ = c.ExpiresAt(&s)
	}
}

func FuzzDecodeState(f *testing.F) {
	c := New(3, time.Date(2020, 1, 31, 0, 0, 0, 0, zone(f, "America/New_York")), 1, 0)
	f.Add(c.AppendState(nil, &State{Period: 70, Hits: 2}))
	f.Add([]byte{1, 12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2})
	f.Fuzz(func(t *testing.T, src []byte) { policytest.DecodeState(t, c, src) })
}

// BenchmarkConsume is a decision within a day of New York: the price of
// the calendar is finding the day, its start and its end, in the zone.
func BenchmarkConsume(b *testing.B) {
	ny := zone(b, "America/New_York")
	c := New(1<<40, time.Date(2026, 1, 1, 0, 0, 0, 0, ny), 0, 1)
	base := at(ny, 2026, 3, 8, 1)
	b.Run("allow", func(b *testing.B) {
		b.ReportAllocs()
		var s State
		exists := false
		now := base
		for b.Loop() {
			_, ch := c.Consume(&s, exists, now, 1)
			exists = exists || ch
			now++
		}
	})
	b.Run("reject", func(b *testing.B) {
		b.ReportAllocs()
		s := State{Period: c.index(base), Hits: c.Limit}
		now := base
		for b.Loop() {
			c.Consume(&s, true, now, 1)
			now++
		}
	})
}
