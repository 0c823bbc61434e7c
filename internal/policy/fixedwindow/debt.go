package fixedwindow

import "github.com/sluicehq/sluice/internal/policy"

// Debt is a window's count above Limit: the excess spills into the next
// windows on the same grid (roll), which serve it before anything else,
// as a reservation's tokens beyond a window already do. Nothing is added
// to the state.

var _ policy.Debtor[State] = Config{}

// Charge counts n tokens in the current window whatever it holds, any n
// above Limit included. Its Result is Consume's answer for n (Allowed:
// they fitted in the window), describing the state after the charge, with
// the RetryAfter of 1 token. A count past MaxInt64 is ChargeOverflow.
func (c Config) Charge(s *State, exists bool, now, n int64) (policy.Result, bool) {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}, false
	}
	next := *s
	c.roll(&next, exists, now)
	hits := uint64(next.Hits) + uint64(n)
	if hits > policy.Never {
		return policy.Result{Code: policy.ChargeOverflow}, false
	}
	allowed := hits <= uint64(c.Limit)
	next.Hits = int64(hits)
	*s = next
	var retryAfter int64
	if !allowed {
		retryAfter = c.until(s, First(s.Hits, 1, c.Limit), now)
	}
	return c.result(s, now, allowed, retryAfter), true
}

// Refund takes up to n tokens back out of the current window's count
// when they were counted in it (at, the time they were, is not before the
// window's start): a window that has ended served them.
func (c Config) Refund(s *State, exists bool, now, at, n int64) bool {
	if !exists || n <= 0 {
		return false
	}
	next := *s
	c.roll(&next, true, now)
	if at < next.Start || next.Hits == 0 {
		return false
	}
	next.Hits -= min(n, next.Hits)
	*s = next
	return true
}

// Debt is the count above Limit in the window that holds now.
func (c Config) Debt(s *State, exists bool, now int64) int64 {
	if !exists {
		return 0
	}
	next := *s
	c.roll(&next, true, now)
	return max(next.Hits-c.Limit, 0)
}
