package sluice

import (
	"context"
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

// AllowN is Bucket.AllowN with a snapshot.
func (v VerboseBucket) AllowN(n int64) (Verbose[Result], error) {
	return verbose(func(s *Snapshot) (Result, error) { return v.b.decide("VerboseBucket.AllowN", n, false, s) })
}

// PeekN is Bucket.PeekN with a snapshot.
func (v VerboseBucket) PeekN(n int64) (Verbose[Result], error) {
	return verbose(func(s *Snapshot) (Result, error) { return v.b.decide("VerboseBucket.PeekN", n, true, s) })
}

// TryConsumeUpTo is Bucket.TryConsumeUpTo with a snapshot; pass
// math.MaxInt64 for TryConsumeAsMuchAsPossible.
func (v VerboseBucket) TryConsumeUpTo(limit int64) (Verbose[int64], error) {
	return verbose(func(s *Snapshot) (int64, error) { return v.b.tryConsumeUpTo("VerboseBucket.TryConsumeUpTo", limit, s) })
}

// ConsumeIgnoringRateLimits is Bucket.ConsumeIgnoringRateLimits with a snapshot.
func (v VerboseBucket) ConsumeIgnoringRateLimits(n int64) (Verbose[time.Duration], error) {
	return verbose(func(s *Snapshot) (time.Duration, error) {
		return v.b.consumeIgnoringRateLimits("VerboseBucket.ConsumeIgnoringRateLimits", n, s)
	})
}

// AddTokens is Bucket.AddTokens with a snapshot.
func (v VerboseBucket) AddTokens(n int64) (Snapshot, error) {
	var s Snapshot
	err := v.b.add(tokenbucket.OpAddTokens, "VerboseBucket.AddTokens", n, &s)
	return s, err
}

// ForceAddTokens is Bucket.ForceAddTokens with a snapshot.
func (v VerboseBucket) ForceAddTokens(n int64) (Snapshot, error) {
	var s Snapshot
	err := v.b.add(tokenbucket.OpForceAddTokens, "VerboseBucket.ForceAddTokens", n, &s)
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

// VerboseKeyBucket is the view of a KeyBucket whose calls also return a
// Snapshot of the key's bucket after the call, as VerboseBucket is of a
// Bucket. The calls behave exactly as the KeyBucket's own.
type VerboseKeyBucket struct{ b *KeyBucket }

// Verbose returns the verbose view of b.
func (b *KeyBucket) Verbose() VerboseKeyBucket { return VerboseKeyBucket{b} }

// AllowN is KeyBucket.AllowN with a snapshot.
func (v VerboseKeyBucket) AllowN(ctx context.Context, n int64) (Verbose[Result], error) {
	return verbose(func(s *Snapshot) (Result, error) { return v.b.decide(ctx, "VerboseKeyBucket.AllowN", n, false, s) })
}

// PeekN is KeyBucket.PeekN with a snapshot.
func (v VerboseKeyBucket) PeekN(ctx context.Context, n int64) (Verbose[Result], error) {
	return verbose(func(s *Snapshot) (Result, error) { return v.b.decide(ctx, "VerboseKeyBucket.PeekN", n, true, s) })
}

// TryConsumeUpTo is KeyBucket.TryConsumeUpTo with a snapshot; pass
// math.MaxInt64 for TryConsumeAsMuchAsPossible.
func (v VerboseKeyBucket) TryConsumeUpTo(ctx context.Context, limit int64) (Verbose[int64], error) {
	return verbose(func(s *Snapshot) (int64, error) {
		return v.b.tryConsumeUpTo(ctx, "VerboseKeyBucket.TryConsumeUpTo", limit, s)
	})
}

// ConsumeIgnoringRateLimits is KeyBucket.ConsumeIgnoringRateLimits with a
// snapshot.
func (v VerboseKeyBucket) ConsumeIgnoringRateLimits(ctx context.Context, n int64) (Verbose[time.Duration], error) {
	return verbose(func(s *Snapshot) (time.Duration, error) {
		return v.b.consumeIgnoringRateLimits(ctx, "VerboseKeyBucket.ConsumeIgnoringRateLimits", n, s)
	})
}

// AddTokens is KeyBucket.AddTokens with a snapshot.
func (v VerboseKeyBucket) AddTokens(ctx context.Context, n int64) (Snapshot, error) {
	var s Snapshot
	_, err := v.b.apply(ctx, "VerboseKeyBucket.AddTokens", tokenbucket.Request{Op: tokenbucket.OpAddTokens, Tokens: n}, &s)
	return s, err
}

// ForceAddTokens is KeyBucket.ForceAddTokens with a snapshot.
func (v VerboseKeyBucket) ForceAddTokens(ctx context.Context, n int64) (Snapshot, error) {
	var s Snapshot
	_, err := v.b.apply(ctx, "VerboseKeyBucket.ForceAddTokens", tokenbucket.Request{Op: tokenbucket.OpForceAddTokens, Tokens: n}, &s)
	return s, err
}

// Reset is KeyBucket.Reset with a snapshot.
func (v VerboseKeyBucket) Reset(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	_, err := v.b.apply(ctx, "VerboseKeyBucket.Reset", tokenbucket.Request{Op: tokenbucket.OpReset}, &s)
	return s, err
}

// AvailableTokens is KeyBucket.AvailableTokens with a snapshot: the
// bucket's diagnostics, changing nothing.
func (v VerboseKeyBucket) AvailableTokens(ctx context.Context) (Verbose[int64], error) {
	var out Verbose[int64]
	res, err := v.b.apply(ctx, "VerboseKeyBucket.AvailableTokens", tokenbucket.Request{Op: tokenbucket.OpAvailable}, &out.Snapshot)
	out.Value = res.Value
	return out, err
}

// ReplaceConfiguration is KeyBucket.ReplaceConfiguration with a snapshot.
func (v VerboseKeyBucket) ReplaceConfiguration(ctx context.Context, cfg BucketConfig, strategy Inheritance) (Snapshot, error) {
	var s Snapshot
	err := v.b.replace(ctx, "VerboseKeyBucket.ReplaceConfiguration", cfg, strategy, &s)
	return s, err
}
