package compound

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// TestUndo: a compound state nothing was taken from since the
// reservation is restored exactly; otherwise each member gives back what
// it would alone: the fixed window nothing, the leaky bucket the tokens
// not taken after the reservation.
func TestUndo(t *testing.T) {
	leaky := tokenbucket.NewSingle(tokenbucket.Bandwidth{Capacity: 4, RefillTokens: 1, Period: 10, Initial: 4}, false)
	c := Config{Members: []policy.Erased{
		policy.Erase(fixedwindow.Config{Limit: 10, Interval: 1000}),
		policy.Erase[tokenbucket.BandwidthState](leaky),
	}}
	reserve := func(t *testing.T, s *State, exists bool, now, n int64) *policy.Receipt {
		t.Helper()
		var before []byte
		if exists {
			before = c.AppendState(nil, s)
		}
		res, changed := c.Reserve(s, exists, now, n, policy.Never)
		if !res.Allowed || !changed {
			t.Fatalf("Reserve(%d) at %d = %+v", n, now, res)
		}
		return &policy.Receipt{Tokens: n, At: now, Due: now + res.Wait, Before: before, After: c.AppendState(nil, s)}
	}
	var s State
	reserve(t, &s, false, 100, 3)
	before := c.AppendState(nil, &s)
	r := reserve(t, &s, true, 100, 3) // the bucket: 1 - 3 = -2, due at 120
	if out := policy.Undo(c, &s, true, 110, r); out != policy.Changed || !bytes.Equal(c.AppendState(nil, &s), before) {
		t.Errorf("Undo = %v, %v; want Changed, %v", out, c.AppendState(nil, &s), before)
	}

	r = reserve(t, &s, true, 100, 3) // bucket -2, window 6 hits
	reserve(t, &s, true, 100, 1)     // bucket -3, window 7 hits
	if out := policy.Undo(c, &s, true, 100, r); out != policy.Changed {
		t.Fatalf("Undo with a later request = %v, want Changed", out)
	}
	var hits fixedwindow.State
	var bucket tokenbucket.BandwidthState
	if err := (fixedwindow.Config{Limit: 10, Interval: 1000}).DecodeState(s.Parts[0], &hits); err != nil || hits.Hits != 7 {
		t.Errorf("window after Undo = %+v, %v; want 7 hits, nothing given back", hits, err)
	}
	if err := leaky.DecodeState(s.Parts[1], &bucket); err != nil || bucket.Size != -1 {
		t.Errorf("bucket after Undo = %+v, %v; want size -1: 3 less the 1 taken after", bucket, err)
	}
}
