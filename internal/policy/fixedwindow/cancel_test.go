package fixedwindow

import (
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// TestUndo: a window counter is restored exactly when nothing was taken
// after the reservation, including the room it spent in earlier windows,
// and gives nothing back otherwise.
func TestUndo(t *testing.T) {
	c := Config{Limit: 3, Interval: 10}
	reserve := func(t *testing.T, s *State, now, n int64) *policy.Receipt {
		t.Helper()
		before := c.AppendState(nil, s)
		res, changed := c.Reserve(s, true, now, n, policy.Never)
		if !res.Allowed || !changed {
			t.Fatalf("Reserve(%d) at %d = %+v", n, now, res)
		}
		return &policy.Receipt{Tokens: n, At: now, Due: now + res.Wait, Before: before, After: c.AppendState(nil, s)}
	}
	t.Run("a reservation into the next window, room spent", func(t *testing.T) {
		s := State{Start: 100, Hits: 2}
		r := reserve(t, &s, 104, 2) // window 110: 1 place of window 100 spent
		if s != (State{Start: 100, Hits: 5}) || r.Due != 110 {
			t.Fatalf("Reserve = %+v due %d, want hits 5 due 110", s, r.Due)
		}
		if out := policy.Undo(c, &s, true, 107, r); out != policy.Changed || s != (State{Start: 100, Hits: 2}) {
			t.Errorf("Undo = %v, %+v; want Changed, hits 2 again", out, s)
		}
	})
	t.Run("a later reservation: nothing back", func(t *testing.T) {
		s := State{Start: 100, Hits: 3}
		r := reserve(t, &s, 104, 2) // window 110
		reserve(t, &s, 104, 1)      // window 110 too
		if out := policy.Undo(c, &s, true, 104, r); out != policy.Unchanged || s.Hits != 6 {
			t.Errorf("Undo = %v, %+v; want Unchanged with 6 hits: taking 2 out would move the later one into window 100", out, s)
		}
	})
}
