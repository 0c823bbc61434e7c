package sluice

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/shaper"
	"github.com/sluicehq/sluice/internal/policy/slidinglog"
	"github.com/sluicehq/sluice/internal/policy/slidingwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Window is the length of time over which the policy's limit applies, so
// that Result.Limit per Window is its long-run rate: a window policy's
// interval; for a bucket, the time its bandwidth of smallest capacity takes
// to refill from empty (limit 100 refilled 10 a second: 10s); for GCRA, the
// time to earn its burst; for a shaper, the time to send its queue and one
// more; for a compound, the shortest of its members', since the member with
// the shortest window is the one that usually binds and that Result.Limit
// reports (name members apart where each must show). It is 0 for NoLimit and for an invalid policy.
//
// It is what HTTP's RateLimit-Policy header calls the window (w) and the
// span in which a simulation looks for the busiest burst.
func Window(p Policy) time.Duration {
	if p == nil {
		return 0
	}
	return time.Duration(p.window())
}

func (p machinePolicy[S, M]) window() int64 {
	if p.err != nil {
		return 0
	}
	switch m := any(p.m).(type) {
	case fixedwindow.Config:
		return m.Interval
	case slidingwindow.Config:
		return m.Interval
	case slidinglog.Config:
		return m.Interval
	case shaper.Config: // Result.Limit is the queue and the one leaving
		return timeToEarn(policy.SatAdd(m.MaxQueue, 1), m.Amount, m.Interval, false)
	case gcra.Config:
		return timeToEarn(m.Limit, m.Rate, m.Period, false)
	case tokenbucket.Single:
		return bucketWindow(m.Config())
	case tokenbucket.Multi:
		return bucketWindow(m.Config())
	}
	return p.win // a compound's, set by Compound; 0 for NoLimit
}

// bucketWindow is the refill time of the bandwidth with the smallest
// capacity, the one Result.Limit reports.
func bucketWindow(c *tokenbucket.Config) int64 {
	var best *tokenbucket.Bandwidth
	for i := range c.Bandwidths {
		if bw := &c.Bandwidths[i]; best == nil || bw.Capacity < best.Capacity {
			best = bw
		}
	}
	if best == nil {
		return 0
	}
	return timeToEarn(best.Capacity, best.RefillTokens, best.Period, best.Intervally)
}

// timeToEarn is how long tokens per period take to add up to n: whole
// periods when they come at once, else rounded up to the nanosecond,
// saturating at Never.
func timeToEarn(n, tokens, period int64, whole bool) int64 {
	if whole {
		return policy.SatMul(policy.CeilDiv(n, tokens), period)
	}
	hi, lo := bits.Mul64(uint64(n), uint64(period))
	if hi >= uint64(tokens) {
		return int64(Never)
	}
	q, r := bits.Div64(hi, lo, uint64(tokens))
	if r > 0 {
		q++
	}
	if q > uint64(Never) {
		return int64(Never)
	}
	return int64(q)
}
