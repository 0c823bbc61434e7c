package calendar

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/policytest"
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

// TestSameAsAlignedWindow: in UTC, where every day is 24 hours, a daily
// calendar anchored at midnight is the fixed window of 24 hours aligned on
// the epoch, and a weekly one from Thursday (1970-01-01 was one) the
// aligned window of 7 days: every answer is the same, over random
// histories of consumes, peeks and reservations, the clock sometimes
// going back.
func TestSameAsAlignedWindow(t *testing.T) {
	day := 24 * hour
	for _, tt := range []struct {
		cal Config
		fw  fixedwindow.Config
	}{
		{New(3, time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), 0, 1), fixedwindow.Config{Limit: 3, Interval: day, Aligned: true}},
		{New(5, time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), 0, 7), fixedwindow.Config{Limit: 5, Interval: 7 * day, Aligned: true}},
	} {
		w := tt.fw.Interval
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 11))
			var sc State
			var sf fixedwindow.State
			exists := false
			now := int64(1_700_000_000_000_000_000) + rng.Int64N(w)
			for step := range 500 {
				now += rng.Int64N(w/2) - w/16
				n := 1 + rng.Int64N(tt.fw.Limit)
				var rc, rf policy.Result
				var cc, cf bool
				switch op := rng.IntN(4); op {
				case 0, 1:
					rc, cc = policytest.Decide(t, tt.cal, &sc, exists, now, n)
					rf, cf = policytest.Decide(t, tt.fw, &sf, exists, now, n)
				case 2:
					rc, rf = tt.cal.Peek(&sc, exists, now, n), tt.fw.Peek(&sf, exists, now, n)
				default:
					maxWait := rng.Int64N(3 * w)
					rc, cc = tt.cal.Reserve(&sc, exists, now, n, maxWait)
					rf, cf = tt.fw.Reserve(&sf, exists, now, n, maxWait)
				}
				if rc != rf || cc != cf {
					t.Fatalf("seed %d step %d at %d, %d tokens: calendar %+v, %v; aligned window %+v, %v", seed, step, now, n, rc, cc, rf, cf)
				}
				exists = exists || cc
				if exists && tt.cal.ExpiresAt(&sc) != tt.fw.ExpiresAt(&sf) {
					t.Fatalf("seed %d step %d: ExpiresAt %d, the window's %d", seed, step, tt.cal.ExpiresAt(&sc), tt.fw.ExpiresAt(&sf))
				}
			}
		}
	}
}

// TestMemoConcurrent: goroutines on either side of a boundary share the
// memo of the period, and each gets its own period's answer.
func TestMemoConcurrent(t *testing.T) {
	ny := zone(t, "America/New_York")
	c := New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, ny), 0, 1)
	boundary := time.Date(2026, 3, 9, 0, 0, 0, 0, ny).UnixNano()
	done := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			for i := range 2000 {
				now := boundary - 1 + int64((g+i)%2)
				s := State{Period: c.index(boundary) - 1, Hits: 1}
				res := c.Peek(&s, true, now, 1)
				if want := now >= boundary; res.Allowed != want && err == nil {
					err = fmt.Errorf("Peek at %d = %+v, want allowed %v", now, res, want)
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
