package calendar

import (
	"testing"
	"time"
)

// reference is the start of period k of a quota anchored at anchor, by
// package time alone: the local date Days·k days or Months·k months on
// (normalized by time.Date on UTC dates, away from any zone), on the
// anchor's day of the month or the month's last, at the anchor's clock
// time in its zone.
func reference(anchor time.Time, months, days, k int) time.Time {
	y, m, d := anchor.Date()
	h, mi, s := anchor.Clock()
	if days > 0 {
		y, m, d = time.Date(y, m, d+days*k, 0, 0, 0, 0, time.UTC).Date()
	} else {
		first := time.Date(y, m+time.Month(months*k), 1, 0, 0, 0, 0, time.UTC)
		last := first.AddDate(0, 1, -1).Day()
		y, m, d = first.Year(), first.Month(), min(d, last)
	}
	return time.Date(y, m, d, h, mi, s, anchor.Nanosecond(), anchor.Location())
}

// TestModel compares the periods with the reference over decades, in
// zones with every kind of change of clocks, and checks that every
// instant around each boundary falls in the right period.
func TestModel(t *testing.T) {
	for _, z := range []string{"America/New_York", "Europe/Paris", "Australia/Lord_Howe", "America/Santiago",
		"Pacific/Apia", "Asia/Kathmandu", "Pacific/Chatham", "UTC"} {
		loc := zone(t, z)
		for _, tt := range []struct {
			anchor       time.Time
			months, days int
		}{
			{time.Date(2000, 1, 1, 0, 0, 0, 0, loc), 0, 1},
			{time.Date(1999, 12, 27, 0, 0, 0, 0, loc), 0, 7},
			{time.Date(2001, 3, 31, 2, 30, 0, 0, loc), 1, 0},
			{time.Date(2000, 1, 29, 0, 0, 0, 0, loc), 3, 0},
			{time.Date(2004, 2, 29, 23, 59, 59, 999, loc), 12, 0},
			{time.Date(2030, 6, 15, 1, 0, 0, 0, loc), 0, 10},
		} {
			c := New(1, tt.anchor, int64(tt.months), int64(tt.days))
			n := 12000 / max(tt.days, 30*tt.months) // about 33 years
			for k := -n; k <= n; k++ {
				want := reference(tt.anchor, tt.months, tt.days, k).UnixNano()
				got := c.start(int64(k))
				if got != want {
					t.Fatalf("%s %v every %d months %d days: start(%d) = %v, want %v", z, tt.anchor, tt.months, tt.days, k,
						time.Unix(0, got).In(loc), time.Unix(0, want).In(loc))
				}
				if c.start(int64(k+1)) == got {
					continue // an empty period (Apia's skipped day): no instant is in it
				}
				for _, d := range []int64{-1, 0, 1} {
					wantK := int64(k)
					if d < 0 {
						wantK = c.index(got - 1) // the previous period, or before it if that was empty
						if c.start(wantK) > got-1 || c.start(wantK+1) <= got-1 {
							t.Fatalf("%s: index(%d) = %d, whose period does not hold it", z, got-1, wantK)
						}
						continue
					}
					if i := c.index(got + d); i != wantK {
						t.Fatalf("%s %v: index(start(%d)%+d) = %d", z, tt.anchor, k, d, i)
					}
				}
			}
		}
	}
}
