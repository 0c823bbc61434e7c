package lease

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

var second = int64(time.Second)

// shared returns the codecs of the three policies a lease works on: 100
// tokens per second, as a fixed window, a GCRA and a token bucket.
func shared() map[string]record.Codec {
	return map[string]record.Codec{
		"fixed_window": record.NewMachine("fw", policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 100, Interval: second}), tokenbucket.Proportionally),
		"gcra":         record.NewMachine("gcra", policy.Erase[gcra.State](gcra.Config{Limit: 100, Rate: 100, Period: second}), tokenbucket.Proportionally),
		"token_bucket": record.NewBucket(tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: 100, RefillTokens: 100, Period: second}), record.BucketOptions{}),
	}
}

func TestTake(t *testing.T) {
	for name, c := range shared() {
		t.Run(name, func(t *testing.T) {
			var rec []byte
			// The first grant: the request's 1 and a lease of 30.
			res, granted, next, changed := Take(c, rec, t0, 1, 30)
			if granted != 31 || !changed || !res.Allowed {
				t.Fatalf("Take(1, 30) on a new key = %d granted (%+v), want 31", granted, res)
			}
			rec = next
			if res.Remaining != 69 {
				t.Errorf("Take(1, 30).Remaining = %d, want 69", res.Remaining)
			}
			// Up to: 69 left, 100 asked for.
			_, granted, rec, _ = Take(c, rec, t0, 1, 99)
			if granted != 69 {
				t.Fatalf("Take(1, 99) with 69 left = %d granted, want 69", granted)
			}
			// Nothing left: the request is refused with its RetryAfter.
			res, granted, _, changed = Take(c, rec, t0, 1, 10)
			if granted != 0 || res.Allowed || changed || res.RetryAfter <= 0 {
				t.Errorf("Take(1, 10) on an empty key = %d granted, changed %v (%+v), want a refusal with a RetryAfter", granted, changed, res)
			}
			if p := c.Peek(rec, t0, 1); p.Allowed {
				t.Errorf("Peek(1) after taking the limit = %+v, want refused", p)
			}
		})
	}
}

func TestTakeMoreThanLimit(t *testing.T) {
	// A fixed window refuses more than its limit as an error: Take asks
	// at most the limit.
	c := shared()["fixed_window"]
	res, granted, _, _ := Take(c, nil, t0, 5, math.MaxInt64)
	if granted != 100 || !res.Allowed {
		t.Errorf("Take(5, MaxInt64) = %d granted (%+v), want the limit 100", granted, res)
	}
	res, granted, _, _ = Take(c, nil, t0, 101, 0)
	if granted != 0 || res.Code != policy.TokensAboveLimit {
		t.Errorf("Take(101, 0) = %d granted (%+v), want the policy's TokensAboveLimit", granted, res)
	}
}

func TestLease(t *testing.T) {
	c := Config{Min: 10, Max: 80, TTL: second}
	var l Lease
	if w := l.Want(c, t0); w != 10 {
		t.Fatalf("first Want = %d, want Min 10", w)
	}
	if l.Spend(t0, 1) {
		t.Fatal("the zero Lease spent a token")
	}
	l.Grant(c, t0, 10, 1, 11, policy.Never)
	if got := l.Left(t0); got != 10 {
		t.Fatalf("Left after a grant of 11 for a request of 1 = %d, want 10", got)
	}
	for i := range 10 {
		if !l.Spend(t0+int64(i), 1) {
			t.Fatalf("Spend %d of the lease's 10 refused", i+1)
		}
	}
	if l.Spend(t0+10, 1) {
		t.Fatal("Spend past the lease allowed")
	}
	// 11 spent in 100ms: 110 per TTL, at most twice 10.
	if w := l.Want(c, t0+100*int64(time.Millisecond)); w != 20 {
		t.Errorf("Want after spending 11 in 100ms = %d, want 20 (doubled)", w)
	}
	l.Grant(c, t0+100*int64(time.Millisecond), 20, 1, 21, policy.Never)
	// Expiry: what is left lapses at TTL.
	at := t0 + 100*int64(time.Millisecond) + second
	if got := l.Left(at - 1); got != 20 {
		t.Errorf("Left just before expiry = %d, want 20", got)
	}
	if got := l.Left(at); got != 0 || l.Spend(at, 1) {
		t.Errorf("Left at expiry = %d, want 0, and nothing to spend", got)
	}
	// Idle: 1 token spent in a whole TTL shrinks the lease to Min.
	if w := l.Want(c, at); w != 10 {
		t.Errorf("Want after an idle lease = %d, want Min 10", w)
	}
	// The cap of a fixed window's end.
	l.Grant(c, at, 10, 1, 11, at+5)
	if got := l.Left(at + 5); got != 0 {
		t.Errorf("Left at the window's end = %d, want 0", got)
	}
	// A refusal holds nothing.
	l.Grant(c, at, 10, 1, 0, policy.Never)
	if got := l.Left(at); got != 0 {
		t.Errorf("Left after a refusal = %d, want 0", got)
	}
}

func TestDrainRefund(t *testing.T) {
	c := Config{Min: 10, Max: 80, TTL: second}
	var l Lease
	l.Grant(c, t0, 10, 0, 10, policy.Never)
	if got := l.Drain(t0); got != 10 || l.Left(t0) != 0 {
		t.Fatalf("Drain = %d, Left after %d, want 10 and 0", got, l.Left(t0))
	}
	l.Refund(t0+1, 10)
	if got := l.Left(t0 + 1); got != 10 {
		t.Errorf("Left after Refund(10) = %d, want 10", got)
	}
	l.Drain(t0 + 1)
	l.Refund(t0+second, 10) // expired meanwhile
	if got := l.Left(t0 + second); got != 0 {
		t.Errorf("Left after a refund past expiry = %d, want 0", got)
	}
}

func TestWantBounds(t *testing.T) {
	c := Config{Min: 1, Max: math.MaxInt64, TTL: math.MaxInt64}
	l := Lease{size: math.MaxInt64 / 2, used: math.MaxInt64, since: t0}
	if w := l.Want(c, t0+1); w != math.MaxInt64-1 {
		t.Errorf("Want at the ends of int64 = %d, want %d (twice the last size)", w, int64(math.MaxInt64-1))
	}
	if got := scale(math.MaxInt64, math.MaxInt64, 1); got != policy.Never {
		t.Errorf("scale overflowing = %d, want MaxInt64", got)
	}
	if got := scale(3, 10, 4); got != 7 {
		t.Errorf("scale(3, 10, 4) = %d, want 7", got)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{Min: 0, Max: 1, TTL: 1}, {Min: 2, Max: 1, TTL: 1}, {Min: 1, Max: 1, TTL: 0}} {
		if c.Check() == nil {
			t.Errorf("%+v.Check() = nil, want an error", c)
		}
	}
	if err := (Config{Min: 1, Max: 1, TTL: 1}).Check(); err != nil {
		t.Errorf("a valid Check() = %v", err)
	}
}

// TestBound runs P processes' leases on one fixed window on a fixed
// timeline, each spending at its own rate, and checks the contract: no
// window admits more than its limit, and what the processes hold unspent
// never exceeds P×Max.
func TestBound(t *testing.T) {
	const (
		procs = 4
		limit = 1000
	)
	c := Config{Min: 5, Max: 100, TTL: 300 * int64(time.Millisecond)}
	sh := record.NewMachine("fw", policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: limit, Interval: second}), tokenbucket.Proportionally)
	var rec []byte
	leases := make([]Lease, procs)
	admitted := map[int64]int64{} // per window start (the key's first window opens at t0)
	step := int64(time.Millisecond)
	for now := t0; now < t0+5*second; now += step {
		for p := range procs {
			// Process p asks p+1 tokens a millisecond, the last one
			// stops halfway.
			if p == procs-1 && now >= t0+5*second/2 {
				continue
			}
			for range p + 1 {
				l := &leases[p]
				if l.Spend(now, 1) {
					admitted[(now-t0)/second]++
					continue
				}
				want := l.Want(c, now)
				res, granted, next, changed := Take(sh, rec, now, 1, want)
				if changed {
					rec = next
				}
				until := int64(policy.Never)
				if granted > 0 {
					until = policy.SatAdd(now, res.ResetAfter)
				}
				l.Grant(c, now, want, 1, granted, until)
				if granted > 0 {
					admitted[(now-t0)/second]++
				}
			}
		}
		var held int64
		for p := range procs {
			held += leases[p].Left(now)
		}
		if held > procs*c.Max {
			t.Fatalf("at %v the processes hold %d unspent, above P×Max %d", time.Duration(now-t0), held, procs*c.Max)
		}
	}
	for w, n := range admitted {
		if n > limit {
			t.Errorf("window %d admitted %d, above the limit %d", w, n, limit)
		}
		// Demand (10 a millisecond) is far above the limit: a window
		// admits its limit less what unspent leases lost, at most P×Max.
		if n < limit-procs*c.Max {
			t.Errorf("window %d admitted %d, below the limit %d less P×Max %d", w, n, limit, procs*c.Max)
		}
	}
}

// FuzzTake checks that a grant is all or nothing for the request, never
// more than asked, and never more than a fresh key's limit.
func FuzzTake(f *testing.F) {
	f.Add(int64(1), int64(10), int64(0), uint8(0))
	f.Add(int64(50), int64(1<<40), int64(3), uint8(1))
	f.Add(int64(1), int64(0), int64(99), uint8(2))
	codecs := []record.Codec{shared()["fixed_window"], shared()["gcra"], shared()["token_bucket"]}
	f.Fuzz(func(t *testing.T, need, want, pre int64, which uint8) {
		if need < 1 || want < 0 || pre < 0 || pre > 100 {
			t.Skip()
		}
		c := codecs[int(which)%len(codecs)]
		var rec []byte
		if pre > 0 {
			_, rec, _ = c.Consume(nil, t0, pre)
		}
		res, granted, _, _ := Take(c, rec, t0, need, want)
		switch {
		case granted == 0 && res.Allowed:
			t.Errorf("Take(%d, %d) granted nothing but allowed: %+v", need, want, res)
		case granted != 0 && (granted < need || granted-need > want):
			t.Errorf("Take(%d, %d) = %d granted, want in [need, need+want]", need, want, granted)
		case granted > 100-pre:
			t.Errorf("Take(%d, %d) after %d taken = %d granted, above the %d left", need, want, pre, granted, 100-pre)
		}
	})
}
