package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Snapshot is the state of a bucket right after an operation, for
// diagnostics: Bucket4j's verbose result.
type Snapshot struct {
	// Time is the operation's time, in nanoseconds of the bucket's clock.
	Time int64
	// Config is the configuration in force after the operation.
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

// Verbose is a result with the snapshot of the bucket it came from.
type Verbose[T any] struct {
	Value    T
	Snapshot Snapshot
}

// VerboseBucket is the view of a Bucket whose calls also return a Snapshot.
// The calls behave exactly as the Bucket's own.
type VerboseBucket struct{ b *Bucket }

// Verbose returns the verbose view of b.
func (b *Bucket) Verbose() VerboseBucket { return VerboseBucket{b} }

func verbose[T any](f func(*Snapshot) (T, error)) (Verbose[T], error) {
	var v Verbose[T]
	var err error
	v.Value, err = f(&v.Snapshot)
	return v, err
}

// TryConsume is Bucket.TryConsume with a snapshot.
func (v VerboseBucket) TryConsume(n int64) (Verbose[bool], error) {
	return verbose(func(s *Snapshot) (bool, error) { return v.b.tryConsumeVerbose(n, s) })
}

// TryConsumeAndReturnRemaining is Bucket.TryConsumeAndReturnRemaining with a snapshot.
func (v VerboseBucket) TryConsumeAndReturnRemaining(n int64) (Verbose[ConsumptionProbe], error) {
	return verbose(func(s *Snapshot) (ConsumptionProbe, error) { return v.b.tryConsumeAndReturnRemaining(n, s) })
}

// EstimateAbilityToConsume is Bucket.EstimateAbilityToConsume with a snapshot.
func (v VerboseBucket) EstimateAbilityToConsume(n int64) (Verbose[EstimationProbe], error) {
	return verbose(func(s *Snapshot) (EstimationProbe, error) { return v.b.estimate(n, s) })
}

// TryConsumeUpTo is Bucket.TryConsumeUpTo with a snapshot; pass
// math.MaxInt64 for TryConsumeAsMuchAsPossible.
func (v VerboseBucket) TryConsumeUpTo(limit int64) (Verbose[int64], error) {
	return verbose(func(s *Snapshot) (int64, error) { return v.b.tryConsumeUpTo(limit, s) })
}

// ConsumeIgnoringRateLimits is Bucket.ConsumeIgnoringRateLimits with a snapshot.
func (v VerboseBucket) ConsumeIgnoringRateLimits(n int64) (Verbose[time.Duration], error) {
	return verbose(func(s *Snapshot) (time.Duration, error) { return v.b.consumeIgnoringRateLimits(n, s) })
}

// AddTokens is Bucket.AddTokens with a snapshot.
func (v VerboseBucket) AddTokens(n int64) (Snapshot, error) {
	var s Snapshot
	err := v.b.add(tokenbucket.OpAddTokens, "AddTokens", n, &s)
	return s, err
}

// ForceAddTokens is Bucket.ForceAddTokens with a snapshot.
func (v VerboseBucket) ForceAddTokens(n int64) (Snapshot, error) {
	var s Snapshot
	err := v.b.add(tokenbucket.OpForceAddTokens, "ForceAddTokens", n, &s)
	return s, err
}

// Reset is Bucket.Reset with a snapshot.
func (v VerboseBucket) Reset() Snapshot {
	var s Snapshot
	v.b.apply(v.b.clock.Now(), tokenbucket.Request{Op: tokenbucket.OpReset}, &s)
	return s
}

// AvailableTokens is Bucket.AvailableTokens with a snapshot.
func (v VerboseBucket) AvailableTokens() Verbose[int64] {
	var s Snapshot
	res := v.b.apply(v.b.clock.Now(), tokenbucket.Request{Op: tokenbucket.OpAvailable}, &s)
	return Verbose[int64]{Value: res.Value, Snapshot: s}
}

// ReplaceConfiguration is Bucket.ReplaceConfiguration with a snapshot.
func (v VerboseBucket) ReplaceConfiguration(cfg BucketConfig, strategy Inheritance) (Snapshot, error) {
	var s Snapshot
	err := v.b.replace(cfg, strategy, &s)
	return s, err
}
