package tokenbucket

import (
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// reserveOn reserves n tokens on st at now and returns the states around
// the reservation and its due time.
func reserveOn(t *testing.T, cfg *Config, st State, now, n int64) (before, after State, due int64) {
	t.Helper()
	before = append(State(nil), st...)
	res, ok := Reserve(cfg, st, now, n, policy.Never)
	if !ok {
		t.Fatalf("Reserve(%d) at %d refused: %+v", n, now, res)
	}
	return before, append(State(nil), st...), now + res.Wait
}

func TestUndo(t *testing.T) {
	t.Run("nothing between: exactly as before", func(t *testing.T) {
		cfg := NewConfig(greedyBW(10, 1, 10))
		st := State{{LastRefill: 3, Size: 2, Err: 7}}
		before, after, due := reserveOn(t, cfg, st, 8, 5)
		if !Undo(cfg, st, before, after, due, 8, 5) || st[0] != before[0] {
			t.Errorf("Undo = %+v, want %+v", st, before)
		}
	})
	t.Run("after the due time: nothing", func(t *testing.T) {
		cfg := NewConfig(greedyBW(10, 1, 10))
		st := State{{LastRefill: 0, Size: 0}}
		before, after, due := reserveOn(t, cfg, st, 0, 2) // due at 20
		if Undo(cfg, st, before, after, due, 21, 2) {
			t.Errorf("Undo after the due time changed the state to %+v", st)
		}
	})
	// Greedy, 1 token per 10ns, empty at 0: the first reservation of 5 is
	// due at 50, a second of 2 at 70. Cancelling the first gives back 3:
	// the 2 taken after it counted on the tokens it held (x/time/rate's
	// rule), or a new request could go at 50 with the second one at 70
	// still going, beyond the rate.
	t.Run("a later reservation keeps its tokens", func(t *testing.T) {
		cfg := NewConfig(greedyBW(10, 1, 10))
		st := State{{LastRefill: 0, Size: 0}}
		before, after, due := reserveOn(t, cfg, st, 0, 5)
		reserveOn(t, cfg, st, 0, 2)
		if !Undo(cfg, st, before, after, due, 0, 5) || st[0].Size != -4 {
			t.Errorf("Undo = %+v, want size -4", st)
		}
	})
	// Intervally, 5 tokens per 100ns: 3 left of the first period; a
	// reservation of 3 takes them and 1 of the next period, and a later one
	// 2 more of it, both due at 100. All 3 back would leave the whole next
	// period to new requests besides the later 2: 7 tokens in a period of
	// 5. Only 1 comes back.
	t.Run("a later reservation due in the same period", func(t *testing.T) {
		cfg := NewConfig(intervallyBW(5, 5, 100))
		st := State{{LastRefill: 0, Size: 2}}
		before, after, due := reserveOn(t, cfg, st, 10, 3)
		if _, _, d := reserveOn(t, cfg, st, 10, 2); d != due {
			t.Fatalf("the later reservation is due at %d, want %d like the first", d, due)
		}
		if !Undo(cfg, st, before, after, due, 10, 3) || st[0].Size != -2 {
			t.Errorf("Undo = %+v, want size -2", st)
		}
	})
	t.Run("tokens added since: never above the capacity", func(t *testing.T) {
		cfg := NewConfig(greedyBW(10, 1, 10), intervallyBW(4, 4, 100))
		st := State{{LastRefill: 0, Size: 10}, {LastRefill: 0, Size: 4}}
		before, after, due := reserveOn(t, cfg, st, 0, 4)
		AddTokens(cfg, st, 3)
		if !Undo(cfg, st, before, after, due, 0, 4) || st[0].Size != 10 || st[1].Size != 4 {
			t.Errorf("Undo = %+v, want sizes 10 and 4", st)
		}
	})
	t.Run("a bandwidth emptied since gives back nothing", func(t *testing.T) {
		cfg := NewConfig(greedyBW(10, 1, 10))
		st := State{{LastRefill: 0, Size: 4}}
		before, after, due := reserveOn(t, cfg, st, 0, 4)
		reserveOn(t, cfg, st, 0, 6) // 6 after it: more than the 4 it held
		if Undo(cfg, st, before, after, due, 0, 4) || st[0].Size != -6 {
			t.Errorf("Undo = %+v, want size -6 unchanged", st)
		}
	})
}
