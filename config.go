package sluice

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

const never = math.MaxInt64

type refillKind uint8

const (
	greedy refillKind = iota + 1
	intervally
	intervallyAligned
)

// Refill says how a bandwidth regains tokens. Make one with Greedy,
// Intervally, IntervallyAligned or IntervallyAlignedAdaptive; the zero
// Refill is invalid.
type Refill struct {
	kind        refillKind
	tokens      int64
	period      time.Duration
	firstRefill time.Time
	adaptive    bool
}

// Greedy adds tokens as soon as possible: tokens per period, spread evenly,
// so Greedy(10, time.Second) gives one token every 100ms.
func Greedy(tokens int64, period time.Duration) Refill {
	return Refill{kind: greedy, tokens: tokens, period: period}
}

// Intervally adds all tokens at once when a whole period has passed since
// the last refill, and nothing in between.
func Intervally(tokens int64, period time.Duration) Refill {
	return Refill{kind: intervally, tokens: tokens, period: period}
}

// IntervallyAligned is Intervally on a fixed grid that passes through
// firstRefill (which must not be before the Unix epoch), for limits that
// reset at wall-clock times such as the top of the hour. A bucket with
// aligned refill needs a wall clock.
func IntervallyAligned(tokens int64, period time.Duration, firstRefill time.Time) Refill {
	return Refill{kind: intervallyAligned, tokens: tokens, period: period, firstRefill: firstRefill}
}

// IntervallyAlignedAdaptive is IntervallyAligned with adaptive initial
// tokens, Bucket4j's refillIntervallyAlignedWithAdaptiveInitialTokens: a
// bucket created before firstRefill starts with the tokens it would have
// had if it had existed since the previous grid point,
// min(capacity, max(0, capacity-tokens) + tokens·(firstRefill-now)/period).
// It cannot be combined with Bandwidth.WithInitialTokens.
func IntervallyAlignedAdaptive(tokens int64, period time.Duration, firstRefill time.Time) Refill {
	r := IntervallyAligned(tokens, period, firstRefill)
	r.adaptive = true
	return r
}

// Tokens is the number of tokens added per period.
func (r Refill) Tokens() int64 { return r.tokens }

// Period is the refill period.
func (r Refill) Period() time.Duration { return r.period }

// String returns the refill as a config file writes it, with its tokens
// and period: "greedy(10 per 1s)", "intervally(100 per 1h0m0s)",
// "intervally_aligned(100 per 1h0m0s, first 2026-01-01T00:00:00Z,
// adaptive)".
func (r Refill) String() string {
	switch r.kind {
	case greedy:
		return fmt.Sprintf("greedy(%d per %v)", r.tokens, r.period)
	case intervally:
		return fmt.Sprintf("intervally(%d per %v)", r.tokens, r.period)
	case intervallyAligned:
		s := fmt.Sprintf("intervally_aligned(%d per %v, first %s", r.tokens, r.period, r.firstRefill.UTC().Format(time.RFC3339Nano))
		if r.adaptive {
			s += ", adaptive"
		}
		return s + ")"
	}
	return "invalid refill"
}

// Bandwidth is one limit of a bucket: a capacity and a refill. A bucket may
// have several; a call consumes from all of them or from none.
//
// Bandwidth is a value: the With methods return a changed copy.
type Bandwidth struct {
	capacity   int64
	refill     Refill
	initial    int64
	hasInitial bool
	id         string
}

// Capacity returns a bandwidth of capacity tokens, refilled by refill, that
// starts full. A capacity above the tokens per period allows bursts; below
// it, the bucket can never hold a whole period's refill.
func Capacity(capacity int64, refill Refill) Bandwidth {
	return Bandwidth{capacity: capacity, refill: refill}
}

// Simple returns a bandwidth of capacity tokens that refills greedily, all of
// them per period: Limit(capacity, Greedy(capacity, period)).
func Simple(capacity int64, period time.Duration) Bandwidth {
	return Capacity(capacity, Greedy(capacity, period))
}

// String returns the bandwidth's capacity and refill, then its initial
// tokens and ID when it has them: "capacity=10 greedy(10 per 1s)",
// "capacity=1000 intervally(1000 per 1h0m0s) initial=0 id=hour".
func (b Bandwidth) String() string {
	s := fmt.Sprintf("capacity=%d %v", b.capacity, b.refill)
	if b.hasInitial {
		s += fmt.Sprintf(" initial=%d", b.initial)
	}
	if b.id != "" {
		s += " id=" + b.id
	}
	return s
}

// WithInitialTokens returns b starting with n tokens instead of a full
// bucket. n may exceed the capacity; it may not be negative. Unlike
// Bucket4j's withInitialTokens, it keeps the ID.
func (b Bandwidth) WithInitialTokens(n int64) Bandwidth {
	b.initial, b.hasInitial = n, true
	return b
}

// WithID returns b with an ID, which ReplaceConfiguration uses to match
// bandwidths of the old and the new configuration. IDs of a bucket must be
// unique; "" means no ID.
func (b Bandwidth) WithID(id string) Bandwidth {
	b.id = id
	return b
}

// Capacity is the most tokens the bandwidth refills to.
func (b Bandwidth) Capacity() int64 { return b.capacity }

// Refill is how the bandwidth regains tokens.
func (b Bandwidth) Refill() Refill { return b.refill }

// InitialTokens is the number of tokens a new bucket starts with, and
// whether it was set; when it was not, the bucket starts full.
func (b Bandwidth) InitialTokens() (int64, bool) { return b.initial, b.hasInitial }

// ID is the bandwidth's ID, or "".
func (b Bandwidth) ID() string { return b.id }

// BucketConfig is a bucket's configuration: one or more bandwidths.
// NewBucket, BucketPolicy (through NewLimiter) and ReplaceConfiguration
// validate it, returning a *ConfigError for the first rule it breaks.
type BucketConfig struct {
	Bandwidths []Bandwidth
}

// compile validates c and returns the internal form, which shares nothing
// with c.
func (c BucketConfig) compile() (*tokenbucket.Config, error) {
	if len(c.Bandwidths) == 0 {
		return nil, &ConfigError{Rule: RuleNoLimits, Bandwidth: -1, Msg: "at least one bandwidth is required"}
	}
	bws := make([]tokenbucket.Bandwidth, len(c.Bandwidths))
	for i, b := range c.Bandwidths {
		bad := func(rule Rule, field, value, msg string) error {
			return &ConfigError{Rule: rule, Bandwidth: i, ID: b.id, Field: field, Value: value, Msg: msg}
		}
		r := b.refill
		switch {
		case b.capacity <= 0:
			return nil, bad(RuleNonPositiveCapacity, "capacity", itoa(b.capacity), "must be positive")
		case r.kind == 0:
			return nil, bad(RuleUnknownRefill, "refill", "the zero Refill", "must be made by Greedy, Intervally or IntervallyAligned")
		case r.tokens <= 0:
			return nil, bad(RuleNonPositiveRefillTokens, "refill.tokens", itoa(r.tokens), "must be positive")
		case r.period <= 0:
			return nil, bad(RuleNonPositivePeriod, "refill.period", r.period.String(), "must be positive")
		case r.tokens > int64(r.period):
			return nil, bad(RuleRefillRateTooHigh, "refill", fmt.Sprintf("%d tokens per %v", r.tokens, r.period),
				"must not exceed 1 token per nanosecond")
		case b.hasInitial && b.initial < 0:
			return nil, bad(RuleNegativeInitialTokens, "initial tokens", itoa(b.initial), "must not be negative")
		case r.kind == intervallyAligned && r.adaptive && b.hasInitial:
			return nil, bad(RuleAdaptiveWithManual, "initial tokens", itoa(b.initial),
				"must not be set together with adaptive initial tokens")
		}
		if r.kind == intervallyAligned && r.firstRefill.Before(time.Unix(0, 0)) {
			return nil, bad(RuleNegativeFirstRefill, "refill.first_refill", r.firstRefill.UTC().Format(time.RFC3339Nano),
				"must not be before the Unix epoch")
		}
		if b.id != "" {
			for j := range i {
				if c.Bandwidths[j].id == b.id {
					return nil, bad(RuleDuplicateID, "id", strconv.Quote(b.id),
						fmt.Sprintf("must be unique, bandwidth %d has it too", j))
				}
			}
		}
		bws[i] = tokenbucket.Bandwidth{
			Capacity:     b.capacity,
			RefillTokens: r.tokens,
			Period:       int64(r.period),
			Intervally:   r.kind != greedy,
			Aligned:      r.kind == intervallyAligned,
			Adaptive:     r.adaptive,
			Initial:      b.initial,
			HasInitial:   b.hasInitial,
			ID:           b.id,
		}
		if r.kind == intervallyAligned {
			bws[i].FirstRefill = unixNano(r.firstRefill)
		}
	}
	return tokenbucket.NewConfig(bws...), nil
}

// unixNano is t.UnixNano, saturating at the int64 bounds where t is beyond
// them (before 1678 or after 2262) instead of wrapping around.
func unixNano(t time.Time) int64 {
	// Seconds well inside the range take the fast path.
	if s := t.Unix(); s > math.MinInt64/int64(time.Second) && s < math.MaxInt64/int64(time.Second) {
		return s*int64(time.Second) + int64(t.Nanosecond())
	}
	switch {
	case t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// hasAligned reports whether cfg refills on a wall-clock grid.
func hasAligned(cfg *tokenbucket.Config) bool {
	for i := range cfg.Bandwidths {
		if cfg.Bandwidths[i].Aligned {
			return true
		}
	}
	return false
}

// configOf rebuilds the user-facing form of a compiled configuration.
func configOf(cfg *tokenbucket.Config) BucketConfig {
	out := BucketConfig{Bandwidths: make([]Bandwidth, len(cfg.Bandwidths))}
	for i, b := range cfg.Bandwidths {
		period := time.Duration(b.Period)
		var r Refill
		switch {
		case b.Aligned && b.Adaptive:
			r = IntervallyAlignedAdaptive(b.RefillTokens, period, time.Unix(0, b.FirstRefill))
		case b.Aligned:
			r = IntervallyAligned(b.RefillTokens, period, time.Unix(0, b.FirstRefill))
		case b.Intervally:
			r = Intervally(b.RefillTokens, period)
		default:
			r = Greedy(b.RefillTokens, period)
		}
		out.Bandwidths[i] = Bandwidth{capacity: b.Capacity, refill: r, initial: b.Initial, hasInitial: b.HasInitial, id: b.ID}
	}
	return out
}

// Inheritance is how ReplaceConfiguration carries the tokens of the
// old configuration into the new one. Bandwidths are matched by ID; see
// ReplaceConfiguration.
type Inheritance uint8

// The token inheritance strategies, as Bucket4j names them.
const (
	// InheritProportionally keeps the fill ratio: 40 of 100 become 80 of 200.
	InheritProportionally Inheritance = Inheritance(tokenbucket.Proportionally)
	// InheritAsIs keeps the token count, cut down to the new capacity.
	InheritAsIs Inheritance = Inheritance(tokenbucket.AsIs)
	// InheritReset starts afresh, as a new bucket with the new configuration.
	InheritReset Inheritance = Inheritance(tokenbucket.ResetStrategy)
	// InheritAdditive adds the capacity gained: 80 of 200 become 180 of 300. A
	// capacity that shrinks is handled as InheritAsIs.
	InheritAdditive Inheritance = Inheritance(tokenbucket.Additive)
)

func (s Inheritance) String() string {
	switch s {
	case InheritProportionally:
		return "proportionally"
	case InheritAsIs:
		return "as_is"
	case InheritReset:
		return "reset"
	case InheritAdditive:
		return "additive"
	}
	return "Inheritance(" + strconv.Itoa(int(s)) + ")"
}
