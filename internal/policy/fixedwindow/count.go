package fixedwindow

import (
	"math/bits"

	"github.com/sluicehq/sluice/internal/policy"
)

// The counting of a window counter, apart from where its windows fall on
// the time line, shared with package calendar, whose periods are windows
// of the calendar's lengths. A count is the tokens taken from the current
// window on at limit tokens a window, reserved ones beyond limit
// included, which the next windows repay, limit each, so that no window
// serves more than limit. Windows are numbered from the current one, 0.
// limit is positive, hits and n are not negative.

// Windows is the number of windows that hits occupy, at least one.
func Windows(hits, limit int64) uint64 {
	return max(ceilDiv(uint64(hits), uint64(limit)), 1)
}

// Carry is what is left of hits k windows later, and false when nothing
// is: the windows they occupied have all passed, and the counter starts
// afresh.
func Carry(hits, limit int64, k uint64) (int64, bool) {
	if k >= ceilDiv(uint64(hits), uint64(limit)) {
		return 0, false
	}
	// k < ceil(hits/limit), so k·limit < hits.
	return hits - int64(k)*limit, true
}

// First is the first window with room for n more tokens: window j has
// room when hits+n ≤ (j+1)·limit.
func First(hits, n, limit int64) uint64 {
	return ceilDiv(uint64(hits)+uint64(n), uint64(limit)) - 1
}

// Admit decides a reservation of n tokens in window j, the first with
// room for them (First), which starts in wait, at most maxWait away: it
// returns the count once they are reserved, the room left in the windows
// before j spent, or else the RetryAfter of the refusal. Hits that would
// not fit in an int64, or a window past the end of the time line (wait
// Never), are refused with RetryAfter Never.
func Admit(hits, n, limit int64, j uint64, wait, maxWait int64) (after, retryAfter int64, ok bool) {
	hi, base := bits.Mul64(j, uint64(limit))
	if hi != 0 || base < uint64(hits) {
		base = uint64(hits)
	}
	sum := base + uint64(n)
	switch {
	case sum > policy.Never || sum < base || wait == policy.Never:
		return hits, policy.Never, false
	case wait > maxWait:
		return hits, wait, false
	}
	return int64(sum), 0, true
}

// Result is the Result of a decision that leaves hits counted, whose
// windows have all passed in resetAfter.
func Result(limit, hits int64, allowed bool, retryAfter, resetAfter int64) policy.Result {
	return Decision(limit, hits, allowed, retryAfter, resetAfter).Result(limit)
}

// Decision is Result as Consume answers it.
func Decision(limit, hits int64, allowed bool, retryAfter, resetAfter int64) policy.Decision {
	return policy.Decision{
		Verdict:    policy.Verdict{Allowed: allowed},
		Remaining:  max(limit-hits, 0),
		RetryAfter: retryAfter,
		ResetAfter: resetAfter,
	}
}

func ceilDiv(a, b uint64) uint64 {
	if a <= b { // one window or none, the common case: no division
		return min(a, 1)
	}
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
