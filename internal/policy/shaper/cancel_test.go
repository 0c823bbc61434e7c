package shaper

import (
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// TestUndo: a line nothing was queued on since the reservation gets its
// slots back exactly; once a later request was queued behind it, nothing
// comes back, since the line has a single next free slot.
func TestUndo(t *testing.T) {
	c := Config{Amount: 1, Interval: 10, MaxQueue: 5}
	reserve := func(t *testing.T, s *State, exists bool, now int64) *policy.Receipt {
		t.Helper()
		var before []byte
		if exists {
			before = c.AppendState(nil, s)
		}
		res, changed := c.Reserve(s, exists, now, 1, policy.Never)
		if !res.Allowed || !changed {
			t.Fatalf("Reserve at %d = %+v", now, res)
		}
		return &policy.Receipt{Tokens: 1, At: now, Due: now + res.Wait, Before: before, After: c.AppendState(nil, s)}
	}
	var s State
	reserve(t, &s, false, 100)     // departs at 100
	r := reserve(t, &s, true, 100) // at 110
	if out := policy.Undo(c, &s, true, 105, r); out != policy.Changed || s != (State{Next: 110}) {
		t.Errorf("Undo = %v, %+v; want Changed, the next slot at 110 again", out, s)
	}
	r = reserve(t, &s, true, 105) // at 110
	reserve(t, &s, true, 105)     // at 120
	if out := policy.Undo(c, &s, true, 105, r); out != policy.Unchanged || s != (State{Next: 130}) {
		t.Errorf("Undo with a later request = %v, %+v; want Unchanged, next slot 130", out, s)
	}
}
