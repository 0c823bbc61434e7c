package resilience

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/limitcore"
)

// ErrBulkheadFull is matched (errors.Is) by the error of a call that found
// its bulkhead full for the whole of its MaxWaitDuration: Resilience4j's
// BulkheadFullException.
var ErrBulkheadFull = errors.New("resilience: bulkhead full")

// RuleBulkheadCalls is the rule of a BulkheadConfig whose
// MaxConcurrentCalls is out of [1, 1000].
const RuleBulkheadCalls sluice.Rule = "max_concurrent_calls_out_of_range"

// BulkheadConfig configures a Bulkhead, with Resilience4j's names;
// DefaultBulkheadConfig returns Resilience4j's defaults.
type BulkheadConfig struct {
	// MaxConcurrentCalls is how many calls may run at once, in [1,
	// 1000]. Resilience4j accepts 0, a bulkhead that refuses every call;
	// sluice refuses it, as it refuses every limit of nothing.
	MaxConcurrentCalls int64
	// MaxWaitDuration is how long a call may wait for room, ≥ 0; 0 does
	// not wait.
	MaxWaitDuration time.Duration
	// Lease, sluice's addition, is how long a call that never completes
	// (its process crashed) keeps its place: a running call renews it.
	// 0 is 30 seconds.
	Lease time.Duration
}

// DefaultBulkheadConfig returns Resilience4j's defaults: 25 concurrent
// calls, and no wait for room.
func DefaultBulkheadConfig() BulkheadConfig {
	return BulkheadConfig{MaxConcurrentCalls: 25}
}

const defaultBulkheadLease = 30 * time.Second

// Bulkhead is Resilience4j's SemaphoreBulkhead: at most
// MaxConcurrentCalls calls run at once, and a call waits up to
// MaxWaitDuration for room. Unlike Resilience4j's, which counts in one
// process, a Bulkhead made with sluice.WithStore counts across every
// process that shares the store and the name, and a call whose process
// crashed gives its place back after its lease, on a concurrency limit
// (sluice.Concurrency). It is safe for simultaneous use by multiple
// goroutines.
type Bulkhead struct {
	name string
	cfg  BulkheadConfig
	l    *sluice.Limiter
}

// NewBulkhead returns the bulkhead called name (the key its calls are
// counted under in a store) of cfg. opts are the options of
// sluice.NewLimiter: WithStore to share it among processes, WithClock,
// WithObserver, WithStoreFailure, ... It returns a *sluice.ConfigError for
// a field of cfg out of bounds, and NewLimiter's errors.
func NewBulkhead(name string, cfg BulkheadConfig, opts ...sluice.Option) (*Bulkhead, error) {
	switch {
	case cfg.MaxConcurrentCalls < 1 || cfg.MaxConcurrentCalls > 1000:
		return nil, &sluice.ConfigError{Rule: RuleBulkheadCalls, Bandwidth: -1,
			Field: "MaxConcurrentCalls", Value: strconv.FormatInt(cfg.MaxConcurrentCalls, 10), Msg: "must be 1 to 1000"}
	case cfg.MaxWaitDuration < 0:
		return nil, &sluice.ConfigError{Rule: RuleNegativeTimeout, Bandwidth: -1,
			Field: "MaxWaitDuration", Value: cfg.MaxWaitDuration.String(), Msg: "must not be negative"}
	case cfg.Lease < 0:
		return nil, &sluice.ConfigError{Rule: sluice.RuleNonPositivePeriod, Bandwidth: -1,
			Field: "Lease", Value: cfg.Lease.String(), Msg: "must not be negative"}
	}
	if cfg.Lease == 0 {
		cfg.Lease = defaultBulkheadLease
	}
	l, err := sluice.NewLimiter(sluice.Concurrency(cfg.MaxConcurrentCalls, cfg.Lease), opts...)
	if err != nil {
		return nil, err
	}
	return &Bulkhead{name: name, cfg: cfg, l: l}, nil
}

// Config returns the bulkhead's configuration, its Lease set.
func (b *Bulkhead) Config() BulkheadConfig { return b.cfg }

// AcquirePermission waits up to MaxWaitDuration (and not past ctx's
// deadline) for room for a call, and returns the onComplete that gives it
// back, which the caller must call once when the call ends; meanwhile
// the place is renewed, until ctx ends. A full bulkhead is an error
// matching ErrBulkheadFull; a store that failed is the limiter's
// *sluice.StoreError.
func (b *Bulkhead) AcquirePermission(ctx context.Context) (onComplete func(), err error) {
	s, err := b.l.Acquire(ctx, b.name, 0, b.cfg.MaxWaitDuration)
	if err != nil {
		return nil, err
	}
	if !s.Allowed {
		return nil, fmt.Errorf("resilience: bulkhead %q: %d concurrent calls, waited %v: %w",
			b.name, b.cfg.MaxConcurrentCalls, b.cfg.MaxWaitDuration, ErrBulkheadFull)
	}
	return limitcore.Hold(ctx, []limitcore.Decision{{Limiter: b.l, Key: b.name, Slot: s}}), nil
}

// Do runs fn when the bulkhead has room for it, as Resilience4j's
// executeSupplier: it returns AcquirePermission's error without running
// fn, and otherwise fn's error, having given the place back when fn
// returned or panicked.
func (b *Bulkhead) Do(ctx context.Context, fn func(context.Context) error) error {
	done, err := b.AcquirePermission(ctx)
	if err != nil {
		return err
	}
	defer done()
	return fn(ctx)
}

// AvailableConcurrentCalls is how many more calls could start now:
// Resilience4j's metric of that name.
func (b *Bulkhead) AvailableConcurrentCalls(ctx context.Context) (int64, error) {
	r, err := b.l.Peek(ctx, b.name)
	if err != nil {
		return 0, err
	}
	if r.Allowed { // an allowed Remaining is what there was less the one peeked at
		return r.Remaining + 1, nil
	}
	return r.Remaining, nil
}
