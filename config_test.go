package sluice_test

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestConfigValidation(t *testing.T) {
	aligned := func(adaptive bool) sluice.Refill {
		if adaptive {
			return sluice.IntervallyAlignedAdaptive(10, time.Minute, time.Unix(1_700_000_000, 0))
		}
		return sluice.IntervallyAligned(10, time.Minute, time.Unix(1_700_000_000, 0))
	}
	ok := sluice.Simple(10, time.Second)
	tests := []struct {
		name      string
		bws       []sluice.Bandwidth
		rule      sluice.Rule
		bandwidth int
		id        string
		field     string
		value     string
	}{
		{"no bandwidths", nil, sluice.RuleNoLimits, -1, "", "", ""},
		{"empty bandwidths", []sluice.Bandwidth{}, sluice.RuleNoLimits, -1, "", "", ""},
		{"zero capacity", []sluice.Bandwidth{sluice.Capacity(0, sluice.Greedy(1, time.Second))}, sluice.RuleNonPositiveCapacity, 0, "", "capacity", "0"},
		{"negative capacity, second, with id", []sluice.Bandwidth{ok, sluice.Capacity(-5, sluice.Greedy(1, time.Second)).WithID("b")},
			sluice.RuleNonPositiveCapacity, 1, "b", "capacity", "-5"},
		{"zero Refill", []sluice.Bandwidth{sluice.Capacity(10, sluice.Refill{})}, sluice.RuleUnknownRefill, 0, "", "refill", "the zero Refill"},
		{"zero refill tokens", []sluice.Bandwidth{sluice.Capacity(10, sluice.Greedy(0, time.Second))}, sluice.RuleNonPositiveRefillTokens, 0, "", "refill.tokens", "0"},
		{"negative refill tokens, intervally", []sluice.Bandwidth{sluice.Capacity(10, sluice.Intervally(-1, time.Second))}, sluice.RuleNonPositiveRefillTokens, 0, "", "refill.tokens", "-1"},
		{"zero period", []sluice.Bandwidth{sluice.Capacity(10, sluice.Greedy(1, 0))}, sluice.RuleNonPositivePeriod, 0, "", "refill.period", "0s"},
		{"negative period", []sluice.Bandwidth{sluice.Capacity(10, sluice.Greedy(1, -1))}, sluice.RuleNonPositivePeriod, 0, "", "refill.period", "-1ns"},
		{"negative period, aligned", []sluice.Bandwidth{sluice.Capacity(10, sluice.IntervallyAligned(1, -time.Hour, time.Unix(0, 0)))},
			sluice.RuleNonPositivePeriod, 0, "", "refill.period", "-1h0m0s"},
		// limitations.adoc: simple(2, 1ns), simple(1001, 1000ns) and
		// simple(1_000_001, 1ms) all ask for more than 1 token per ns.
		{"2 tokens per ns", []sluice.Bandwidth{sluice.Simple(2, time.Nanosecond)}, sluice.RuleRefillRateTooHigh, 0, "", "refill", "2 tokens per 1ns"},
		{"1001 tokens per 1000ns", []sluice.Bandwidth{sluice.Simple(1001, 1000*time.Nanosecond)}, sluice.RuleRefillRateTooHigh, 0, "", "refill", "1001 tokens per 1µs"},
		{"1000001 tokens per ms", []sluice.Bandwidth{sluice.Simple(1_000_001, time.Millisecond)}, sluice.RuleRefillRateTooHigh, 0, "", "refill", "1000001 tokens per 1ms"},
		{"negative initial tokens", []sluice.Bandwidth{ok.WithInitialTokens(-1)}, sluice.RuleNegativeInitialTokens, 0, "", "initial tokens", "-1"},
		{"adaptive with initial tokens", []sluice.Bandwidth{sluice.Capacity(10, aligned(true)).WithInitialTokens(5)}, sluice.RuleAdaptiveWithManual, 0, "", "initial tokens", "5"},
		{"adaptive with zero initial tokens", []sluice.Bandwidth{sluice.Capacity(10, aligned(true)).WithInitialTokens(0)}, sluice.RuleAdaptiveWithManual, 0, "", "initial tokens", "0"},
		{"first refill before the epoch", []sluice.Bandwidth{sluice.Capacity(10, sluice.IntervallyAligned(10, time.Minute, time.Unix(-1, 0)))},
			sluice.RuleNegativeFirstRefill, 0, "", "refill.first_refill", "1969-12-31T23:59:59Z"},
		{"first refill zero time", []sluice.Bandwidth{ok, sluice.Capacity(10, sluice.IntervallyAlignedAdaptive(10, time.Minute, time.Time{})).WithID("z")},
			sluice.RuleNegativeFirstRefill, 1, "z", "refill.first_refill", "0001-01-01T00:00:00Z"},
		{"duplicate id", []sluice.Bandwidth{ok.WithID("x"), ok, ok.WithID("x")}, sluice.RuleDuplicateID, 2, "x", "id", `"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := sluice.BucketConfig{Bandwidths: tt.bws}
			for _, err := range []error{bucketPolicyErr(cfg), newBucketErr(cfg)} {
				var ce *sluice.ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("error = %v (%T), want a *sluice.ConfigError", err, err)
				}
				if !errors.Is(err, sluice.ErrInvalidConfig) {
					t.Errorf("errors.Is(%v, ErrInvalidConfig) = false, want true", err)
				}
				if errors.Is(err, sluice.ErrInvalidArgument) {
					t.Errorf("errors.Is(%v, ErrInvalidArgument) = true, want false", err)
				}
				got := [5]string{string(ce.Rule), strconv.Itoa(ce.Bandwidth), ce.ID, ce.Field, ce.Value}
				want := [5]string{string(tt.rule), strconv.Itoa(tt.bandwidth), tt.id, tt.field, tt.value}
				if got != want {
					t.Errorf("ConfigError{Rule, Bandwidth, ID, Field, Value} = %q, want %q", got, want)
				}
				msg := err.Error()
				if !strings.HasPrefix(msg, "sluice: ") || !strings.Contains(msg, tt.value) || !strings.Contains(msg, tt.field) || ce.Msg == "" {
					t.Errorf("Error() = %q, want the prefix \"sluice: \", the field %q and the value %q", msg, tt.field, tt.value)
				}
			}
		})
	}
}

func newBucketErr(cfg sluice.BucketConfig) error {
	_, err := sluice.NewBucket(cfg, sluice.WithClock(sluicetest.NewFakeClock(t0)))
	return err
}

func TestConfigErrorMessages(t *testing.T) {
	tests := []struct {
		name string
		cfg  sluice.BucketConfig
		want string
	}{
		{"whole configuration", sluice.BucketConfig{}, "sluice: config: at least one bandwidth is required"},
		{"bandwidth", sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(0, time.Second)}},
			"sluice: bandwidth 0: capacity must be positive, got 0"},
		{"bandwidth with id", sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second), sluice.Simple(-3, time.Second).WithID("api")}},
			`sluice: bandwidth 1 (id "api"): capacity must be positive, got -3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := bucketPolicyErr(tt.cfg); err == nil || err.Error() != tt.want {
				t.Errorf("NewLimiter(BucketPolicy) = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestConfigValid(t *testing.T) {
	tests := []struct {
		name string
		bws  []sluice.Bandwidth
	}{
		{"one token per ns", []sluice.Bandwidth{sluice.Simple(1000, 1000*time.Nanosecond)}},
		// There is no rule that capacity ≥ tokens per period.
		{"capacity below the refill", []sluice.Bandwidth{sluice.Capacity(100, sluice.Greedy(400, time.Minute))}},
		{"initial tokens zero", []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)}},
		{"initial tokens above capacity", []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(1000)}},
		{"first refill at the epoch", []sluice.Bandwidth{sluice.Capacity(10, sluice.IntervallyAlignedAdaptive(10, time.Minute, time.Unix(0, 0)))}},
		{"aligned with initial tokens", []sluice.Bandwidth{sluice.Capacity(10, sluice.IntervallyAligned(10, time.Minute, time.Unix(0, 0))).WithInitialTokens(3)}},
		{"two bandwidths without id", []sluice.Bandwidth{sluice.Simple(10, time.Second), sluice.Simple(100, time.Minute)}},
		{"longest period", []sluice.Bandwidth{sluice.Simple(1, time.Duration(1<<63-1))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := sluice.BucketConfig{Bandwidths: tt.bws}
			if err := bucketPolicyErr(cfg); err != nil {
				t.Errorf("NewLimiter(BucketPolicy) = %v, want nil", err)
			}
			if err := newBucketErr(cfg); err != nil {
				t.Errorf("NewBucket() = %v, want nil", err)
			}
		})
	}
}

// TestAlignedNeedsWallClock: aligned refill is fixed in Unix time, so a
// bucket with it needs a wall clock; the default clock is one then.
func TestAlignedNeedsWallClock(t *testing.T) {
	aligned := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(10, time.Second),
		sluice.Capacity(10, sluice.IntervallyAligned(10, time.Hour, time.Unix(0, 0))).WithID("hourly"),
	}}
	tests := []struct {
		name  string
		clock sluice.Clock
	}{
		{"monotonic", sluice.MonotonicClock()},
		{"monotonic in milliseconds", sluice.Millis(sluice.MonotonicClock())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := sluice.NewBucket(aligned, sluice.WithClock(tt.clock))
			var ce *sluice.ConfigError
			if !errors.As(err, &ce) || b != nil {
				t.Fatalf("NewBucket() = %v, %v, want nil, a *ConfigError", b, err)
			}
			if ce.Rule != sluice.RuleAlignedNeedsWallClock || ce.Bandwidth != 1 || ce.ID != "hourly" || !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("NewBucket() = %#v, want rule %q for bandwidth 1 (hourly)", ce, sluice.RuleAlignedNeedsWallClock)
			}
		})
	}

	wall := []struct {
		name string
		opts []sluice.Option
	}{
		{"default clock", nil},
		{"nil clock keeps the default", []sluice.Option{sluice.WithClock(nil)}},
		{"wall clock", []sluice.Option{sluice.WithClock(sluice.WallClock())}},
		{"wall clock in milliseconds", []sluice.Option{sluice.WithClock(sluice.Millis(sluice.WallClock()))}},
		{"fake clock", []sluice.Option{sluice.WithClock(sluicetest.NewFakeClock(t0))}},
	}
	for _, tt := range wall {
		t.Run(tt.name, func(t *testing.T) {
			b, err := sluice.NewBucket(aligned, tt.opts...)
			if err != nil {
				t.Fatalf("NewBucket() = %v, want nil", err)
			}
			// Created long after the first refill and not adaptive: full.
			checkAvailable(t, b, 10)
		})
	}
}

// TestConfigurationRoundTrip: Configuration returns what the bucket was
// built with. (First refills are made with time.Unix, so that DeepEqual also
// matches their Location.)
func TestConfigurationRoundTrip(t *testing.T) {
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(10, time.Second).WithID("a"),
		sluice.Capacity(100, sluice.Intervally(5, time.Minute)).WithInitialTokens(3),
		sluice.Capacity(7, sluice.IntervallyAlignedAdaptive(7, time.Hour, time.Unix(1_700_000_000, 0))).WithID("c"),
		sluice.Capacity(7, sluice.IntervallyAligned(3, time.Hour, time.Unix(0, 5))).WithInitialTokens(0).WithID("d"),
	}}
	b := newBucket(t, sluicetest.NewFakeClock(t0), cfg.Bandwidths)
	got := b.Snapshot().Config
	if !reflect.DeepEqual(got, cfg) {
		t.Errorf("Configuration() = %+v, want %+v", got, cfg)
	}
	got.Bandwidths[0] = sluice.Simple(1, time.Second)
	if again := b.Snapshot().Config; !reflect.DeepEqual(again, cfg) {
		t.Errorf("Configuration() after changing a returned copy = %+v, want %+v", again, cfg)
	}

	next := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(20, time.Minute).WithID("a")}}
	if err := b.ReplaceConfiguration(next, sluice.InheritAsIs); err != nil {
		t.Fatalf("ReplaceConfiguration() = %v", err)
	}
	if got := b.Snapshot().Config; !reflect.DeepEqual(got, next) {
		t.Errorf("Configuration() after ReplaceConfiguration = %+v, want %+v", got, next)
	}
}

// TestConfigIsCopied: changing the Config after NewBucket changes nothing.
func TestConfigIsCopied(t *testing.T) {
	bws := []sluice.Bandwidth{sluice.Simple(10, time.Second)}
	b := newBucket(t, sluicetest.NewFakeClock(t0), bws)
	bws[0] = sluice.Simple(1, time.Second)
	checkAvailable(t, b, 10)
}

func TestBandwidthAccessors(t *testing.T) {
	first := time.Unix(1_700_000_000, 0)
	bw := sluice.Capacity(50, sluice.IntervallyAligned(5, time.Minute, first)).WithID("x").WithInitialTokens(3)
	if bw.Capacity() != 50 || bw.ID() != "x" || bw.Refill().Tokens() != 5 || bw.Refill().Period() != time.Minute {
		t.Errorf("accessors = %d, %q, %d, %v, want 50, \"x\", 5, 1m0s", bw.Capacity(), bw.ID(), bw.Refill().Tokens(), bw.Refill().Period())
	}
	// Unlike Bucket4j's withInitialTokens, WithInitialTokens keeps the ID.
	if n, ok := bw.InitialTokens(); n != 3 || !ok {
		t.Errorf("InitialTokens() = %d, %v, want 3, true", n, ok)
	}
	if n, ok := sluice.Simple(10, time.Second).InitialTokens(); n != 0 || ok {
		t.Errorf("InitialTokens() = %d, %v, want 0, false", n, ok)
	}
	simple := sluice.Simple(10, time.Second)
	if simple.Capacity() != 10 || simple.Refill().Tokens() != 10 || simple.Refill().Period() != time.Second || simple.ID() != "" {
		t.Errorf("Simple(10, 1s) = %d, %d, %v, %q, want 10, 10, 1s, \"\"", simple.Capacity(), simple.Refill().Tokens(), simple.Refill().Period(), simple.ID())
	}
}

func TestInheritanceString(t *testing.T) {
	tests := []struct {
		s    sluice.Inheritance
		want string
	}{
		{sluice.InheritProportionally, "proportionally"},
		{sluice.InheritAsIs, "as_is"},
		{sluice.InheritReset, "reset"},
		{sluice.InheritAdditive, "additive"},
		{0, "Inheritance(0)"},
		{9, "Inheritance(9)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Inheritance(%d).String() = %q, want %q", uint8(tt.s), got, tt.want)
		}
	}
}

// bucketPolicyErr is the error of a keyed limiter of cfg on a wall clock,
// the other constructor that validates a bucket's configuration.
func bucketPolicyErr(cfg sluice.BucketConfig) error {
	_, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithClock(sluice.WallClock()))
	return err
}
