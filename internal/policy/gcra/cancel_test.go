package gcra

import (
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// TestUndo reserves on a GCRA of 3 tokens per 30ns (T = 10ns) in bursts
// of 4, runs later requests and cancels the reservation.
func TestUndo(t *testing.T) {
	c := Config{Limit: 4, Rate: 3, Period: 30}
	reserve := func(t *testing.T, s *State, exists bool, now, n int64) *policy.Receipt {
		t.Helper()
		before := c.AppendState(nil, s)
		if !exists {
			before = nil
		}
		res, changed := c.Reserve(s, exists, now, n, policy.Never)
		if !res.Allowed || !changed {
			t.Fatalf("Reserve(%d) at %d = %+v", n, now, res)
		}
		return &policy.Receipt{Tokens: n, At: now, Due: now + res.Wait, Before: before, After: c.AppendState(nil, s)}
	}
	// policytest checks that a cancel with nothing between restores the
	// key exactly.
	// TAT 100 at 100; a reservation of 3 moves it to 130; a later one of 1
	// to 140. Cancelling the first moves the TAT back by 30 less the 10
	// taken after it: 120.
	t.Run("a later request keeps its share", func(t *testing.T) {
		s := State{TAT: 100}
		r := reserve(t, &s, true, 100, 3)
		reserve(t, &s, true, 100, 1)
		if !c.Cancel(&s, 100, r) || s != (State{TAT: 120}) {
			t.Errorf("Cancel = %+v, want TAT 120", s)
		}
	})
	t.Run("later requests took more than its share: nothing", func(t *testing.T) {
		s := State{TAT: 100}
		r := reserve(t, &s, true, 100, 1)
		reserve(t, &s, true, 100, 2)
		if c.Cancel(&s, 100, r) || s != (State{TAT: 130}) {
			t.Errorf("Cancel = %+v, want TAT 130 unchanged", s)
		}
	})
	// The key was reset and used again: only what of the reservation's
	// share [100, 130) the TAT still covers comes back.
	t.Run("a TAT behind where it left it", func(t *testing.T) {
		s := State{TAT: 100}
		r := reserve(t, &s, true, 100, 3)
		s = State{TAT: 115, Frac: 1}
		if !c.Cancel(&s, 100, r) || s != (State{TAT: 100}) {
			t.Errorf("Cancel = %+v, want TAT 100", s)
		}
		s = State{TAT: 90}
		if c.Cancel(&s, 100, r) {
			t.Errorf("Cancel of a TAT before the reservation's share changed it to %+v", s)
		}
	})
}
