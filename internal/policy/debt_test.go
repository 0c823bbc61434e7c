package policy_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/compound"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/shaper"
	"github.com/sluicehq/sluice/internal/policy/slidinglog"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// TestDebtWorkedExamples is docs/policies.md's worked example of debt on
// each policy that holds it: 1,000 tokens a minute, a fresh key charged
// 1,500. It owes 500; nothing is admitted until time has paid them, and
// the first token comes at the instant each policy's arithmetic says.
func TestDebtWorkedExamples(t *testing.T) {
	const minute = int64(time.Minute)
	t0 := int64(1_700_000_000_000_000_000)
	bucket := tokenbucket.NewSingle(tokenbucket.Bandwidth{Capacity: 1000, RefillTokens: 1000, Period: minute}, true)
	window := fixedwindow.Config{Limit: 1000, Interval: minute}
	tests := []struct {
		name  string
		m     policy.Erased
		first int64 // when the first token after the charge is admitted, from t0
	}{
		// 501 tokens to refill at 1,000 a minute: 501 × 60 ms.
		{"token bucket", policy.Erase[tokenbucket.BandwidthState](bucket), 501 * minute / 1000},
		// The TAT is 1,500 × 60 ms ahead; a token conforms once it is
		// within the burst of 1,000 × 60 ms less the token's own 60 ms.
		{"gcra", policy.Erase[gcra.State](gcra.Config{Limit: 1000, Rate: 1000, Period: minute}), 501 * minute / 1000},
		// The window of t0 holds 1,500: the next one starts with 500
		// spilled into it, and admits at its start.
		{"fixed window", policy.Erase[fixedwindow.State](window), minute},
		{"compound", policy.Erase[compound.State](compound.Config{Members: []policy.Erased{
			policy.Erase[tokenbucket.BandwidthState](bucket), policy.Erase[fixedwindow.State](window)}}), minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := policy.DebtsOf(tt.m)
			if !ok {
				t.Fatalf("DebtsOf = false, want a Debtor")
			}
			res, st, changed := d.Charge(nil, t0, 1500, nil)
			if res.Code != policy.OK || res.Allowed || !changed || res.Remaining != 0 {
				t.Fatalf("Charge(1500) = %+v, %v; want taken, not Allowed, Remaining 0", res, changed)
			}
			if got := d.Debt(st, t0); got != 500 {
				t.Fatalf("Debt = %d, want 500", got)
			}
			if res.RetryAfter != tt.first {
				t.Errorf("Charge's RetryAfter = %v, want %v", time.Duration(res.RetryAfter), time.Duration(tt.first))
			}
			if r := tt.m.Peek(st, t0+tt.first-1, 1); r.Allowed {
				t.Errorf("Peek(1) 1ns before %v = %+v, want refused", time.Duration(tt.first), r)
			}
			if r := tt.m.Peek(st, t0+tt.first, 1); !r.Allowed {
				t.Errorf("Peek(1) at %v = %+v, want allowed", time.Duration(tt.first), r)
			}
		})
	}
}

// TestNoDebt: the policies whose state cannot hold debt say so.
func TestNoDebt(t *testing.T) {
	for name, m := range map[string]policy.Erased{
		"sliding log": policy.Erase[slidinglog.State](slidinglog.Config{Limit: 10, Interval: int64(time.Second)}),
		"shaper":      policy.Erase[shaper.State](shaper.Config{Amount: 1, Interval: int64(time.Second), MaxQueue: 3}),
	} {
		if _, ok := policy.DebtsOf(m); ok {
			t.Errorf("DebtsOf(%s) = true, want false", name)
		}
	}
}
