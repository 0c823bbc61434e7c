package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Snapshot is the state of a bucket at one time, for diagnostics, as
// Bucket.Snapshot and KeyBucket.Snapshot return it: Bucket4j's verbose
// result.
type Snapshot struct {
	// Time is the snapshot's time, in nanoseconds of the bucket's clock.
	Time int64
	// Config is the configuration in force.
	Config BucketConfig
	// AvailableTokens is the least of Bandwidths, as AvailableTokens returns.
	AvailableTokens int64
	// Bandwidths holds the tokens of each bandwidth, in configuration order.
	Bandwidths []int64
	// TimeToFullRefill is how long until every bandwidth is full.
	TimeToFullRefill time.Duration
}

func (s *Snapshot) fill(cfg *tokenbucket.Config, st tokenbucket.State, now int64) {
	s.Time = now
	s.Config = configOf(cfg)
	s.AvailableTokens = tokenbucket.Available(st)
	s.Bandwidths = make([]int64, len(st))
	for i := range st {
		s.Bandwidths[i] = st[i].Size
	}
	s.TimeToFullRefill = time.Duration(tokenbucket.TimeToFull(cfg, st, now))
}
