package bench

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestEquivalentConfigs runs every implementation's benchmark configuration
// over one supplied timeline and checks that they admit the same number of
// calls, so the benchmarks compare the same limit. x/time/rate counts tokens
// in float64, hence the tolerance.
func TestEquivalentConfigs(t *testing.T) {
	type call struct {
		at    time.Duration // since t0
		calls int
	}
	tests := []struct {
		name     string
		rejected bool
		timeline []call
	}{
		// Burst at t0, then two calls per nanosecond (twice the rate) for
		// 5000ns, then a pause that refills 500, then 1000 more calls.
		{"allowed", false, []call{{0, 1500}, {1, 2}, {5000, 2}, {5500, 1000}}},
		// One call every 250ms for 60s. The step divides the period, as
		// the benchmark's does: with a step that does not, juju (whole
		// ticks counted from its start) keeps the fraction of a token that
		// the others drop at capacity, and admits more.
		{"rejected", true, []call{{0, 1}, {250 * time.Millisecond, 1}, {60 * time.Second, 1}}},
	}
	const tolerance = 2
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Expand the timeline: each pair of consecutive points gives
			// calls per step from one point to the next; a step is the
			// second point's offset for the first two points.
			var times []time.Time
			tl := tt.timeline
			for range tl[0].calls {
				times = append(times, t0)
			}
			step := tl[1].at - tl[0].at
			for at := tl[1].at; at <= tl[2].at; at += step {
				for range tl[1].calls {
					times = append(times, t0.Add(at))
				}
			}
			for i := 3; i < len(tl); i++ {
				for range tl[i].calls {
					times = append(times, t0.Add(tl[i].at))
				}
			}

			clk := &fakeTime{now: t0}
			xr := newXRate(tt.rejected)
			sl1 := newSluice(t, tt.rejected, 1, sluice.WithClock(sluicetest.NewFakeClock(t0.UnixNano())))
			sl3 := newSluice(t, tt.rejected, 3, sluice.WithClock(sluicetest.NewFakeClock(t0.UnixNano())))
			jclk := &fakeTime{now: t0}
			jj := newJuju(tt.rejected, jclk)
			th := newThrottled(t, tt.rejected, clk.Now)
			if tt.rejected {
				// The peers start full; sluice's first bandwidth starts
				// empty. Drain them at t0, as the benchmarks do.
				xr.AllowN(t0, rejectedBurst)
				jj.TakeAvailable(rejectedBurst)
				throttledAllow(t, th)
			}
			counts := map[string]int{}
			for _, at := range times {
				clk.now, jclk.now = at, at
				if xr.AllowN(at, 1) {
					counts["xrate"]++
				}
				if ok, _ := sl1.TryConsumeAt(at, 1); ok {
					counts["sluice"]++
				}
				if ok, _ := sl3.TryConsumeAt(at, 1); ok {
					counts["sluice3bw"]++
				}
				if jj.TakeAvailable(1) == 1 {
					counts["juju"]++
				}
				if throttledAllow(t, th) {
					counts["throttled"]++
				}
			}
			want := counts["sluice"]
			t.Logf("%d calls, allowed: %v", len(times), counts)
			for name, got := range counts {
				if got < want-tolerance || got > want+tolerance {
					t.Errorf("%s allowed %d, sluice %d (tolerance %d)", name, got, want, tolerance)
				}
			}
		})
	}
}
