package limitcore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func newLimiter(t *testing.T, p sluice.Policy) *sluice.Limiter {
	t.Helper()
	l, err := sluice.NewLimiter(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCheckLimits(t *testing.T) {
	l := newLimiter(t, sluice.NoLimit())
	type limit struct {
		name   string
		l      *sluice.Limiter
		hasKey bool
	}
	tests := []struct {
		name   string
		limits []limit
		want   string // the Field of the problem, "" for none
	}{
		{"none", nil, "limits"},
		{"one", []limit{{"a", l, true}}, ""},
		{"empty name", []limit{{"", l, true}}, "limits[0].Name"},
		{"control character", []limit{{"a\n", l, true}}, "limits[0].Name"},
		{"non-ASCII", []limit{{"é", l, true}}, "limits[0].Name"},
		{"same name", []limit{{"a", l, true}, {"a", l, true}}, "limits[1].Name"},
		{"no limiter", []limit{{"a", nil, true}}, "limits[0].Limiter"},
		{"no key", []limit{{"a", l, true}, {"b", l, false}}, "limits[1].Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CheckLimits(len(tt.limits), func(i int) (string, *sluice.Limiter, bool) {
				return tt.limits[i].name, tt.limits[i].l, tt.limits[i].hasKey
			})
			switch {
			case tt.want == "" && p != nil:
				t.Errorf("CheckLimits = %+v, want nil", p)
			case tt.want != "" && (p == nil || p.Field != tt.want):
				t.Errorf("CheckLimits = %+v, want a problem with %s", p, tt.want)
			}
		})
	}
}

func TestCost(t *testing.T) {
	if c, err := Cost(3, nil); c != 3 || err != nil {
		t.Errorf("Cost(3, nil) = %d, %v; want 3, nil", c, err)
	}
	for _, c := range []int64{0, -1} {
		if _, err := Cost(c, nil); err == nil {
			t.Errorf("Cost(%d, nil) = nil error, want one", c)
		}
	}
}

// TestDecideSeveral: a limit that rejects takes nothing from the others,
// which report what they have without the request; the rejection is the
// limit with the longest wait.
func TestDecideSeveral(t *testing.T) {
	ctx := context.Background()
	roomy := newLimiter(t, sluice.FixedWindow(10, time.Hour))
	spent := newLimiter(t, sluice.FixedWindow(1, time.Hour))
	slow := newLimiter(t, sluice.FixedWindow(1, 2*time.Hour))
	for _, l := range []*sluice.Limiter{spent, slow} {
		if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
	}
	ds := []Decision{
		{Index: 0, Limiter: roomy, Key: "k", Cost: 2},
		{Index: 1, Limiter: spent, Key: "k", Cost: 1},
		{Index: 2, Limiter: slow, Key: "k", Cost: 1},
	}
	worst, err := Decide(ctx, ds)
	if err != nil || worst == nil || worst.Index != 2 {
		t.Fatalf("Decide = %+v, %v; want the rejection of limit 2", worst, err)
	}
	if ds[0].Taken || ds[0].Res.Remaining != 10 {
		t.Errorf("the roomy limit: taken %v, Remaining %d; want not taken, 10", ds[0].Taken, ds[0].Res.Remaining)
	}
	if res, err := roomy.Peek(ctx, "k"); err != nil || res.Remaining != 9 {
		t.Errorf("roomy.Peek = %+v, %v; want 10 left, less the peeked token", res, err)
	}
}

func TestDecidePasses(t *testing.T) {
	ctx := context.Background()
	a, b := newLimiter(t, sluice.FixedWindow(5, time.Hour)), newLimiter(t, sluice.FixedWindow(5, time.Hour))
	ds := []Decision{{Index: 0, Limiter: a, Key: "k", Cost: 2}, {Index: 1, Limiter: b, Key: "k", Cost: 3}}
	if worst, err := Decide(ctx, ds); worst != nil || err != nil {
		t.Fatalf("Decide = %+v, %v; want nil, nil", worst, err)
	}
	for i, want := range []int64{3, 2} {
		if !ds[i].Taken || ds[i].Res.Remaining != want {
			t.Errorf("limit %d: taken %v, Remaining %d; want taken, %d", i, ds[i].Taken, ds[i].Res.Remaining, want)
		}
	}
}

// TestDecideAboveLimit: a cost above the limit never passes, whichever
// way the policy reports it.
func TestDecideAboveLimit(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{sluice.FixedWindow(5, time.Hour), sluice.TokenBucket(5, 5, time.Hour)} {
		ds := []Decision{{Limiter: newLimiter(t, p), Key: "k", Cost: 6}}
		worst, err := Decide(ctx, ds)
		if err != nil || worst == nil || worst.Res.RetryAfter != sluice.Never || worst.Res.Remaining != 5 {
			t.Errorf("%v: Decide = %+v, %v; want a rejection that never passes, 5 left", p, worst, err)
		}
	}
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 0, 1: 1, time.Second: 1, time.Second + 1: 2} {
		if got := Seconds(d); got != want {
			t.Errorf("Seconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestDeferred checks that Decide takes nothing of a deferred decision,
// reports it as it stands before the request (once, whether another limit
// rejects or not), and that Settle takes it when counts says so.
func TestDeferred(t *testing.T) {
	ctx := context.Background()
	deferred := newLimiter(t, sluice.FixedWindow(5, time.Hour))
	counted := newLimiter(t, sluice.FixedWindow(2, time.Hour))
	decide := func() ([]Decision, *Decision) {
		ds := []Decision{
			{Index: 0, Limiter: deferred, Key: "k", Cost: 2, Defer: true},
			{Index: 1, Limiter: counted, Key: "k", Cost: 1},
		}
		d, err := Decide(ctx, ds)
		if err != nil {
			t.Fatal(err)
		}
		return ds, d
	}
	for i := range 3 {
		ds, d := decide()
		wantRejected := i == 2 // the counted limit holds 2
		if (d != nil) != wantRejected || ds[0].Taken || ds[0].Res.Remaining != int64(5-2*i) {
			t.Fatalf("request %d: rejected by %v, deferred %+v; want rejected %v, nothing taken, %d remaining before it",
				i, d, ds[0], wantRejected, 5-2*i)
		}
		if d == nil {
			if _, err := Settle(ctx, ds, func(index int) bool { return index == 0 }); err != nil {
				t.Fatal(err)
			}
			if !ds[0].Taken {
				t.Fatalf("request %d: Settle took nothing of the deferred decision", i)
			}
		}
	}
	res, err := deferred.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining != 0 {
		t.Errorf("the deferred limit after two requests of 2 settled = %+v, want 1 left, so 0 after a peek of 1", res)
	}
}
