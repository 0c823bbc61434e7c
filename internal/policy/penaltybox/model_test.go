package penaltybox

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

// model is the penalty box as a history of strikes, each with its time
// and its penalty: a key is blocked within an strike's penalty, and a new
// strike's penalty is the one after the chain of strikes before it,
// each of which came less than forgive after the block before it ended.
// The inner policy is the real machine, whose tests are its own.
type model struct {
	c       Config
	inner   []byte
	strikes []strike
}

type strike struct{ at, penalty int64 }

func (m *model) blocked(now int64) bool {
	n := len(m.strikes)
	return n > 0 && now < m.strikes[n-1].at+m.strikes[n-1].penalty
}

// chain is how many strikes in a row, the last first, are not forgiven
// at now.
func (m *model) chain(now int64) int {
	k := 0
	for i := len(m.strikes) - 1; i >= 0; i-- {
		o := m.strikes[i]
		end := o.at + o.penalty
		if i == len(m.strikes)-1 && len(m.c.Penalties) > 1 && now >= end+m.c.Forgive ||
			i == len(m.strikes)-1 && len(m.c.Penalties) == 1 && now >= end {
			break
		}
		k++
		if i > 0 {
			prev := m.strikes[i-1]
			if o.at >= prev.at+prev.penalty+m.c.Forgive {
				break
			}
		}
	}
	return k
}

// consume answers a Consume of n at now: whether it passes.
func (m *model) consume(now, n int64) bool {
	if m.blocked(now) {
		return false
	}
	res, next, changed := m.c.Inner.Consume(m.inner, now, n, nil)
	if res.Allowed {
		if changed {
			m.inner = next
		}
		return true
	}
	k := min(m.chain(now)+1, len(m.c.Penalties))
	m.strikes = append(m.strikes, strike{now, m.c.Penalties[k-1]})
	return false
}

// TestModel compares the box with the model over random histories on a
// small grid of times, and checks every time before a refusal's
// RetryAfter: none lets the request through.
func TestModel(t *testing.T) {
	inner := policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 2, Interval: 5})
	for _, c := range []Config{
		box(inner, 0, 4),
		box(inner, 10, 3, 7, 20),
		box(inner, 1, 2, 2, 9),
	} {
		for seed := range uint64(30) {
			rng := rand.New(rand.NewPCG(seed, 3))
			m := &model{c: c}
			var s State
			exists := false
			now := int64(1000)
			for step := range 300 {
				now += rng.Int64N(7)
				n := 1 + rng.Int64N(2)
				res, changed := policytest.Decide(t, c, &s, exists, now, n)
				if want := m.consume(now, n); res.Allowed != want {
					t.Fatalf("%v seed %d step %d: Consume(%d) at %d = %+v, the model says %v", c.Penalties, seed, step, n, now, res, want)
				}
				exists = exists || changed
				if res.Allowed {
					continue
				}
				for at := now + 1; at < now+res.RetryAfter && res.RetryAfter < 1000; at++ {
					if p := c.Peek(&s, exists, at, n); p.Allowed {
						t.Fatalf("seed %d step %d: refused at %d with RetryAfter %d, but Peek at %d allows", seed, step, now, res.RetryAfter, at)
					}
				}
			}
		}
	}
}
