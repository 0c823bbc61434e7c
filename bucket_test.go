package sluice_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// op is one call on a bucket, named as it reads in a failure message.
type op struct {
	name string
	do   func(b *sluice.Bucket) (any, error)
}

func tryConsume(n int64) op {
	return op{fmt.Sprintf("TryConsume(%d)", n), func(b *sluice.Bucket) (any, error) { return b.TryConsume(n) }}
}

func allowN(n int64) op {
	return op{fmt.Sprintf("AllowN(%d)", n), func(b *sluice.Bucket) (any, error) { return b.AllowN(n) }}
}

func peekN(n int64) op {
	return op{fmt.Sprintf("PeekN(%d)", n), func(b *sluice.Bucket) (any, error) { return b.PeekN(n) }}
}

func upTo(n int64) op {
	return op{fmt.Sprintf("TryConsumeUpTo(%d)", n), func(b *sluice.Bucket) (any, error) { return b.TryConsumeUpTo(n) }}
}

var asMuchAsPossible = op{"TryConsumeAsMuchAsPossible()", func(b *sluice.Bucket) (any, error) { return b.TryConsumeAsMuchAsPossible(), nil }}

func ignoring(n int64) op {
	return op{fmt.Sprintf("ConsumeIgnoringRateLimits(%d)", n), func(b *sluice.Bucket) (any, error) { return b.ConsumeIgnoringRateLimits(n) }}
}

func addTokens(n int64) op {
	return op{fmt.Sprintf("AddTokens(%d)", n), func(b *sluice.Bucket) (any, error) { return nil, b.AddTokens(n) }}
}

func forceAddTokens(n int64) op {
	return op{fmt.Sprintf("ForceAddTokens(%d)", n), func(b *sluice.Bucket) (any, error) { return nil, b.ForceAddTokens(n) }}
}

var reset = op{"Reset()", func(b *sluice.Bucket) (any, error) { b.Reset(); return nil, nil }}

// step runs op at t0+at and then expects AvailableTokens to be avail.
type step struct {
	at    time.Duration
	op    op
	want  any
	avail int64
}

func runSteps(t *testing.T, clock *sluicetest.FakeClock, b *sluice.Bucket, steps []step) {
	t.Helper()
	for i, s := range steps {
		clock.Set(t0 + int64(s.at))
		got, err := s.op.do(b)
		if err != nil {
			t.Fatalf("step %d at %v: %s: unexpected error %v", i, s.at, s.op.name, err)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("step %d at %v: %s = %+v, want %+v", i, s.at, s.op.name, got, s.want)
		}
		if avail := b.AvailableTokens(); avail != s.avail {
			t.Errorf("step %d at %v: AvailableTokens() after %s = %d, want %d", i, s.at, s.op.name, avail, s.avail)
		}
	}
}

// TestBucketTimelines runs each operation on a fake clock. Simple(10, 1s)
// refills one token per 100ms; the partial token counts towards waits.
func TestBucketTimelines(t *testing.T) {
	tenPerSecond := sluice.Simple(10, time.Second)
	// res is a Result of a bandwidth of capacity 10.
	type res struct {
		allowed                bool
		remaining              int64
		retryAfter, resetAfter time.Duration
	}
	r := func(v res) sluice.Result {
		return sluice.Result{Allowed: v.allowed, Remaining: v.remaining, RetryAfter: v.retryAfter, ResetAfter: v.resetAfter, Limit: 10}
	}
	tests := []struct {
		name  string
		bws   []sluice.Bandwidth
		steps []step
	}{
		{"try consume", []sluice.Bandwidth{tenPerSecond}, []step{
			{0, tryConsume(10), true, 0},
			{0, tryConsume(1), false, 0},
			{99 * ms, tryConsume(1), false, 0},
			{100 * ms, tryConsume(1), true, 0},
			{350 * ms, tryConsume(3), false, 2},
			{350 * ms, tryConsume(2), true, 0},
			{400 * ms, tryConsume(1), true, 0}, // the half token of 350ms counts
			{10 * time.Second, tryConsume(11), false, 10},
			{10 * time.Second, tryConsume(1), true, 9},
			// The clock goes back 5s: nothing is refilled until it passes 10s.
			{5 * time.Second, tryConsume(9), true, 0},
			{5 * time.Second, tryConsume(1), false, 0},
			{10*time.Second + 99*ms, tryConsume(1), false, 0},
			{10*time.Second + 100*ms, tryConsume(1), true, 0},
		}},
		{"allow n (try consume and return remaining)", []sluice.Bandwidth{tenPerSecond}, []step{
			{0, allowN(3), r(res{true, 7, 0, 300 * ms}), 7},
			{0, allowN(8), r(res{false, 7, 100 * ms, 300 * ms}), 7},
			{0, allowN(11), r(res{false, 7, sluice.Never, 300 * ms}), 7},
			{0, allowN(7), r(res{true, 0, 0, time.Second}), 0},
			// 2.5 tokens: the third in 50ms, full (7.5 more) in 750ms.
			{250 * ms, allowN(3), r(res{false, 2, 50 * ms, 750 * ms}), 2},
			{250 * ms, ignoring(7), 450 * ms, -5},
			// Overdrawn: Remaining is clamped at 0.
			{250 * ms, allowN(1), r(res{false, 0, 550 * ms, 1450 * ms}), -5},
		}},
		// PeekN answers as AllowN would, and takes nothing: Bucket4j's
		// estimate reports the 4 tokens there, Remaining+n when allowed.
		{"peek n (estimate ability to consume)", []sluice.Bandwidth{tenPerSecond.WithInitialTokens(4)}, []step{
			{0, peekN(4), r(res{true, 0, 0, time.Second}), 4},
			{0, peekN(5), r(res{false, 4, 100 * ms, 600 * ms}), 4},
			{0, peekN(11), r(res{false, 4, sluice.Never, 600 * ms}), 4},
			{50 * ms, peekN(5), r(res{false, 4, 50 * ms, 550 * ms}), 4},
			{50 * ms, peekN(1), r(res{true, 3, 0, 650 * ms}), 4},
		}},
		{"consume up to", []sluice.Bandwidth{tenPerSecond.WithInitialTokens(7)}, []step{
			{0, upTo(3), int64(3), 4},
			{0, asMuchAsPossible, int64(4), 0},
			{0, asMuchAsPossible, int64(0), 0},
			{0, upTo(5), int64(0), 0},
			{0, ignoring(5), 500 * ms, -5},
			// Bucket4j 7 (#417) returned -5 here and gave 5 tokens back.
			{0, asMuchAsPossible, int64(0), -5},
			{600 * ms, asMuchAsPossible, int64(1), 0},
		}},
		// ConsumeIgnoringLimitsSpecification: 100 per 100ns, empty, +120ns.
		{"consume ignoring rate limits", []sluice.Bandwidth{sluice.Capacity(100, sluice.Greedy(100, 100)).WithInitialTokens(0)}, []step{
			{120, ignoring(151), 51 * time.Nanosecond, -51},
			{171, asMuchAsPossible, int64(0), 0},
			{172, asMuchAsPossible, int64(1), 0},
			// No capacity check: 1000 of capacity 100 are 10 periods away.
			{172, ignoring(1000), 1000 * time.Nanosecond, -1000},
		}},
		{"add, force add and reset", []sluice.Bandwidth{tenPerSecond.WithInitialTokens(5)}, []step{
			{50 * ms, addTokens(2), nil, 7},
			// 6.5 after taking one: full in 350ms.
			{50 * ms, allowN(1), r(res{true, 6, 0, 350 * ms}), 6},
			{50 * ms, addTokens(4), nil, 10},
			// Reaching capacity dropped the half token: full again in 100ms.
			{50 * ms, allowN(1), r(res{true, 9, 0, 100 * ms}), 9},
			{50 * ms, addTokens(math.MaxInt64 - 1), nil, 10},
			{50 * ms, forceAddTokens(5), nil, 15},
			// Above capacity the surplus neither grows nor is lost, and the
			// refill time moves on: only 100ms count after taking 10.
			{1050 * ms, tryConsume(10), true, 5},
			{1150 * ms, peekN(1), r(res{true, 5, 0, 500 * ms}), 6},
			{1150 * ms, ignoring(20), 1400 * ms, -14},
			{1150 * ms, reset, nil, 10},
			{1150 * ms, forceAddTokens(math.MaxInt64), nil, math.MaxInt64},
			{1150 * ms, addTokens(1), nil, 10},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			runSteps(t, clock, newBucket(t, clock, tt.bws), tt.steps)
		})
	}
}

// TestMultipleBandwidths: 10 a second in bursts, but only 100 a minute.
// After the first burst the minute bandwidth gains 100/60 a second, so 11
// bursts of 10 fit in 11 seconds (100 - 8⅓k ≥ 10 for k ≤ 10).
func TestMultipleBandwidths(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(100, time.Minute), sluice.Simple(10, time.Second)})
	checkAvailable(t, b, 10)
	for k := range 12 {
		clock.Set(t0 + int64(k)*int64(time.Second))
		want := k <= 10
		if got, err := b.TryConsume(10); got != want || err != nil {
			t.Errorf("at %ds: TryConsume(10) = %v, %v, want %v", k, got, err, want)
		}
	}
	// At 11s the minute bandwidth has 8⅓: 2 more take 1s, 92 more 55s.
	p, err := b.AllowN(10)
	if want := (sluice.Result{Remaining: 8, RetryAfter: time.Second, ResetAfter: 55 * time.Second, Limit: 10}); p != want || err != nil {
		t.Errorf("AllowN(10) = %+v, %v, want %+v", p, err, want)
	}
	if s := b.Snapshot(); !reflect.DeepEqual(s.Bandwidths, []int64{8, 10}) {
		t.Errorf("Bandwidths = %v, want [8 10]", s.Bandwidths)
	}
}

func TestTryConsumeAt(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(0)})
	steps := []struct {
		at   time.Duration
		n    int64
		want bool
	}{
		{99 * ms, 1, false},
		{100 * ms, 1, true},
		{300 * ms, 3, false},
		{300 * ms, 2, true},
		{200 * ms, 1, false}, // before the last refill: nothing
	}
	for _, s := range steps {
		at := time.Unix(0, t0+int64(s.at))
		if got, err := b.TryConsumeAt(at, s.n); got != s.want || err != nil {
			t.Errorf("TryConsumeAt(t0+%v, %d) = %v, %v, want %v", s.at, s.n, got, err, s.want)
		}
	}
	if clock.Now() != t0 {
		t.Errorf("clock moved to t0%+d", clock.Now()-t0)
	}
	// The clock reads t0, before the last refill at t0+300ms: nothing new.
	checkAvailable(t, b, 0)
}

// TestTryConsumeAtOutOfRange: time.Time covers more than int64 nanoseconds
// (1678 to 2262). A time outside that range must act as the far past or the
// far future; t.UnixNano() wraps around instead, so year 1600 reads as year
// 2184 (filling the bucket, then freezing its refill for 160 years) and year
// 2300 as year 1716.
func TestTryConsumeAtOutOfRange(t *testing.T) {
	tests := []struct {
		name  string
		at    time.Time
		want  bool
		avail int64 // at t0+1s afterwards
	}{
		{"before 1678 is the past", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), false, 10},
		{"zero time is the past", time.Time{}, false, 10},
		{"after 2262 is the future", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), true, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)})
			if ok, err := b.TryConsume(10); !ok || err != nil {
				t.Fatalf("TryConsume(10) = %v, %v, want true", ok, err)
			}
			if got, err := b.TryConsumeAt(tt.at, 1); got != tt.want || err != nil {
				t.Errorf("TryConsumeAt(%v, 1) = %v, %v, want %v", tt.at, got, err, tt.want)
			}
			clock.Advance(time.Second)
			// In the past: a second of refill. In the future: nothing until then.
			checkAvailable(t, b, tt.avail)
		})
	}
}

// TestArgumentErrors: every bad argument gives an *ArgumentError that
// matches ErrInvalidArgument, and the call changes nothing.
func TestArgumentErrors(t *testing.T) {
	ctx := t.Context()
	tests := []struct {
		name string
		call func(b *sluice.Bucket) error
		want sluice.ArgumentError // Op, Arg, Value
	}{
		{"TryConsume(0)", func(b *sluice.Bucket) error { _, err := b.TryConsume(0); return err }, sluice.ArgumentError{Op: "Bucket.TryConsume", Arg: "tokens", Value: int64(0)}},
		{"TryConsume(-1)", func(b *sluice.Bucket) error { _, err := b.TryConsume(-1); return err }, sluice.ArgumentError{Op: "Bucket.TryConsume", Arg: "tokens", Value: int64(-1)}},
		{"TryConsumeAt(0)", func(b *sluice.Bucket) error { _, err := b.TryConsumeAt(time.Unix(0, t0), 0); return err }, sluice.ArgumentError{Op: "Bucket.TryConsumeAt", Arg: "tokens", Value: int64(0)}},
		{"AllowN(0)", func(b *sluice.Bucket) error { _, err := b.AllowN(0); return err },
			sluice.ArgumentError{Op: "Bucket.AllowN", Arg: "tokens", Value: int64(0)}},
		{"PeekN(-5)", func(b *sluice.Bucket) error { _, err := b.PeekN(-5); return err },
			sluice.ArgumentError{Op: "Bucket.PeekN", Arg: "tokens", Value: int64(-5)}},
		{"TryConsumeUpTo(0)", func(b *sluice.Bucket) error { _, err := b.TryConsumeUpTo(0); return err }, sluice.ArgumentError{Op: "Bucket.TryConsumeUpTo", Arg: "limit", Value: int64(0)}},
		{"ConsumeIgnoringRateLimits(0)", func(b *sluice.Bucket) error { _, err := b.ConsumeIgnoringRateLimits(0); return err },
			sluice.ArgumentError{Op: "Bucket.ConsumeIgnoringRateLimits", Arg: "tokens", Value: int64(0)}},
		{"ConsumeIgnoringRateLimits overflow", func(b *sluice.Bucket) error { _, err := b.ConsumeIgnoringRateLimits(math.MaxInt64); return err },
			sluice.ArgumentError{Op: "Bucket.ConsumeIgnoringRateLimits", Arg: "tokens", Value: int64(math.MaxInt64)}},
		{"AddTokens(0)", func(b *sluice.Bucket) error { return b.AddTokens(0) }, sluice.ArgumentError{Op: "Bucket.AddTokens", Arg: "tokens", Value: int64(0)}},
		{"ForceAddTokens(-1)", func(b *sluice.Bucket) error { return b.ForceAddTokens(-1) }, sluice.ArgumentError{Op: "Bucket.ForceAddTokens", Arg: "tokens", Value: int64(-1)}},
		{"Blocking TryConsume tokens", func(b *sluice.Bucket) error { _, err := block(b).TryConsume(ctx, 0, time.Second); return err },
			sluice.ArgumentError{Op: "Bucket.WaitN", Arg: "tokens", Value: int64(0)}},
		{"Blocking TryConsume zero max wait", func(b *sluice.Bucket) error { _, err := block(b).TryConsume(ctx, 1, 0); return err },
			sluice.ArgumentError{Op: "Bucket.WaitN", Arg: "maxWait", Value: time.Duration(0)}},
		{"Blocking TryConsume negative max wait", func(b *sluice.Bucket) error { _, err := block(b).TryConsume(ctx, 100, -1); return err },
			sluice.ArgumentError{Op: "Bucket.WaitN", Arg: "maxWait", Value: time.Duration(-1)}},
		{"Blocking Consume(0)", func(b *sluice.Bucket) error { return block(b).Consume(ctx, 0) }, sluice.ArgumentError{Op: "Bucket.WaitN", Arg: "tokens", Value: int64(0)}},
		{"Blocking Consume overflow", func(b *sluice.Bucket) error { return block(b).Consume(ctx, math.MaxInt64) },
			sluice.ArgumentError{Op: "Bucket.WaitN", Arg: "tokens", Value: int64(math.MaxInt64)}},
		{"ReserveN(0)", func(b *sluice.Bucket) error { _, err := b.ReserveN(0, time.Second); return err }, sluice.ArgumentError{Op: "Bucket.ReserveN", Arg: "tokens", Value: int64(0)}},
		{"ReserveN negative max wait", func(b *sluice.Bucket) error { _, err := b.ReserveN(1, -1); return err }, sluice.ArgumentError{Op: "Bucket.ReserveN", Arg: "maxWait", Value: time.Duration(-1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			var l sluicetest.Counter
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second).WithInitialTokens(7)}, sluice.WithObserver(&l))
			clock.Advance(50 * ms) // 7.5 tokens: the half token must survive too
			before := stateOf(t, b)

			err := tt.call(b)
			var ae *sluice.ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("%s = %v (%T), want a *sluice.ArgumentError", tt.name, err, err)
			}
			if ae.Op != tt.want.Op || ae.Arg != tt.want.Arg || ae.Value != tt.want.Value || ae.Want == "" {
				t.Errorf("%s = %+v, want Op %q, Arg %q, Value %#v", tt.name, *ae, tt.want.Op, tt.want.Arg, tt.want.Value)
			}
			if !errors.Is(err, sluice.ErrInvalidArgument) || errors.Is(err, sluice.ErrInvalidConfig) || errors.Is(err, sluice.ErrMaxWaitExceeded) {
				t.Errorf("%s: errors.Is matches the wrong sentinels for %v", tt.name, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "sluice: ") || !strings.Contains(msg, fmt.Sprint(tt.want.Value)) || !strings.Contains(msg, tt.want.Op) {
				t.Errorf("Error() = %q, want it to name %s and %v", msg, tt.want.Op, tt.want.Value)
			}
			checkUnchanged(t, b, before)
			if got := countsOf(&l); got != (counts{}) {
				t.Errorf("observer saw %+v, want nothing", got)
			}
			if clock.Slept() != 0 {
				t.Errorf("slept %v, want 0", clock.Slept())
			}
		})
	}
}

// TestListener: each call reports what it did; estimates, additions,
// resets, reads and replacements report nothing.
func TestListener(t *testing.T) {
	ctx := t.Context()
	empty := func(b *sluice.Bucket) { b.TryConsume(10) } // reports 10 consumed
	tests := []struct {
		name string
		call func(b *sluice.Bucket)
		want counts
	}{
		{"try consume", func(b *sluice.Bucket) { b.TryConsume(3) }, counts{consumed: 3}},
		{"try consume rejected", func(b *sluice.Bucket) { b.TryConsume(11) }, counts{rejected: 11}},
		{"allow", func(b *sluice.Bucket) { b.Allow() }, counts{consumed: 1}},
		{"try consume at", func(b *sluice.Bucket) { b.TryConsumeAt(time.Unix(0, t0), 2) }, counts{consumed: 2}},
		{"probe consumed", func(b *sluice.Bucket) { b.AllowN(4) }, counts{consumed: 4}},
		{"probe rejected", func(b *sluice.Bucket) { b.AllowN(20) }, counts{rejected: 20}},
		{"estimate", func(b *sluice.Bucket) { b.PeekN(5); b.PeekN(50) }, counts{}},
		{"consume up to", func(b *sluice.Bucket) { b.TryConsumeUpTo(4) }, counts{consumed: 4}},
		{"as much as possible, then nothing", func(b *sluice.Bucket) { b.TryConsumeAsMuchAsPossible(); b.TryConsumeAsMuchAsPossible() }, counts{consumed: 10}},
		{"ignoring rate limits", func(b *sluice.Bucket) { b.ConsumeIgnoringRateLimits(15) }, counts{consumed: 15}},
		{"add, force add, reset, read, replace", func(b *sluice.Bucket) {
			b.AddTokens(1)
			b.ForceAddTokens(1)
			b.Reset()
			b.AvailableTokens()
			b.ReplaceConfiguration(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(5, time.Second)}}, sluice.InheritAsIs)
			b.Snapshot()
		}, counts{}},
		{"blocking after a wait", func(b *sluice.Bucket) { empty(b); block(b).TryConsume(ctx, 3, time.Second) }, counts{consumed: 13, waited: 300 * ms}},
		{"blocking rejected", func(b *sluice.Bucket) { empty(b); block(b).TryConsume(ctx, 3, 100*ms) }, counts{consumed: 10, rejected: 3}},
		{"blocking rejected, never", func(b *sluice.Bucket) { block(b).TryConsume(ctx, math.MaxInt64, time.Hour) }, counts{rejected: math.MaxInt64}},
		{"blocking consume", func(b *sluice.Bucket) { empty(b); block(b).Consume(ctx, 2) }, counts{consumed: 12, waited: 200 * ms}},
		{"blocking without a wait", func(b *sluice.Bucket) { block(b).Consume(ctx, 2) }, counts{consumed: 2}},
		{"reserve with a delay", func(b *sluice.Bucket) { empty(b); b.ReserveN(4, time.Second) }, counts{consumed: 14, delayed: 400 * ms}},
		{"reserve now", func(b *sluice.Bucket) { b.ReserveN(4, time.Second) }, counts{consumed: 4}},
		{"reserve rejected", func(b *sluice.Bucket) { empty(b); b.ReserveN(4, 100*ms) }, counts{consumed: 10, rejected: 4}},
		{"reservation cancelled", func(b *sluice.Bucket) {
			empty(b)
			r, _ := b.ReserveN(4, time.Second)
			r.Cancel()
		}, counts{consumed: 14, delayed: 400 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			var l sluicetest.Counter
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)}, sluice.WithObserver(&l))
			tt.call(b)
			if got := countsOf(&l); got != tt.want {
				t.Errorf("observer saw %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestConcurrentTryConsume: with the clock stopped, goroutines racing on one
// bucket get exactly its tokens, whichever methods they call.
func TestConcurrentTryConsume(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	var l sluicetest.Counter
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(1000, time.Hour), sluice.Simple(5000, time.Minute)}, sluice.WithObserver(&l))
	calls := []func() (bool, error){
		func() (bool, error) { return b.TryConsume(1) },
		func() (bool, error) { return b.Allow().Allowed, nil },
		func() (bool, error) { r, err := b.ReserveN(1, 0); return r.OK(), err },
		func() (bool, error) { p, err := b.AllowN(1); return p.Allowed, err },
		func() (bool, error) { n, err := b.TryConsumeUpTo(1); return n == 1, err },
		func() (bool, error) { return b.TryConsumeAt(time.Unix(0, t0), 1) },
	}
	const goroutines, perGoroutine = 48, 100
	const upToIndex = 4 // TryConsumeUpTo reports nothing when it takes nothing
	var admitted [6]atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		kind := g % len(calls)
		wg.Go(func() {
			for range perGoroutine {
				ok, err := calls[kind]()
				if err != nil {
					t.Errorf("unexpected error %v", err)
					return
				}
				if ok {
					admitted[kind].Add(1)
				}
				b.AvailableTokens()
			}
		})
	}
	wg.Wait()
	var total, wantRejected int64
	for kind := range admitted {
		n := admitted[kind].Load()
		total += n
		if kind != upToIndex {
			wantRejected += goroutines/int64(len(calls))*perGoroutine - n
		}
	}
	if total != 1000 {
		t.Errorf("admitted %d tokens, want 1000", total)
	}
	checkAvailable(t, b, 0)
	if got := countsOf(&l); got != (counts{consumed: 1000, rejected: wantRejected}) {
		t.Errorf("observer saw %+v, want consumed 1000, rejected %d", got, wantRejected)
	}
}

func TestReplaceConfiguration(t *testing.T) {
	// ConfigurationReplacementSpecification: simple(3, 5ns), empty, +3ns
	// holds 1 token and 0.8 of the next; then simple(60, 1000ns).
	next := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(60, 1000)}}
	tests := []struct {
		strategy sluice.Inheritance
		want     int64
		later    time.Duration // after which
		wantThen int64
	}{
		{sluice.InheritAsIs, 1, 4, 2},
		{sluice.InheritAdditive, 58, 4, 59},
		{sluice.InheritProportionally, 36, 17, 37},
		{sluice.InheritReset, 60, 1000, 60},
	}
	for _, tt := range tests {
		t.Run(tt.strategy.String(), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(3, 5).WithInitialTokens(0)})
			clock.Advance(3)
			if err := b.ReplaceConfiguration(next, tt.strategy); err != nil {
				t.Fatalf("ReplaceConfiguration(%v) = %v", tt.strategy, err)
			}
			checkAvailable(t, b, tt.want)
			clock.Advance(tt.later)
			checkAvailable(t, b, tt.wantThen)
		})
	}
}

// TestReplaceConfigurationErrors: a rejected replacement changes nothing.
func TestReplaceConfigurationErrors(t *testing.T) {
	good := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(5, time.Second)}}
	tests := []struct {
		name     string
		cfg      sluice.BucketConfig
		strategy sluice.Inheritance
		rule     sluice.Rule // "" for an *ArgumentError of the inheritance
	}{
		{"invalid configuration", sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(0, time.Second)}}, sluice.InheritAsIs, sluice.RuleNonPositiveCapacity},
		{"no bandwidths", sluice.BucketConfig{}, sluice.InheritReset, sluice.RuleNoLimits},
		{"zero inheritance", good, 0, ""},
		{"inheritance past the last", good, sluice.InheritAdditive + 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(t0)
			b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Hour).WithInitialTokens(4)})
			clock.Advance(time.Second)
			before := stateOf(t, b)
			err := b.ReplaceConfiguration(tt.cfg, tt.strategy)
			var ce *sluice.ConfigError
			var ae *sluice.ArgumentError
			switch {
			case tt.rule == "" && (!errors.As(err, &ae) || ae.Op != "Bucket.ReplaceConfiguration" || ae.Arg != "inherit"):
				t.Errorf("ReplaceConfiguration() = %v, want an *ArgumentError of inherit", err)
			case tt.rule != "" && (!errors.As(err, &ce) || ce.Rule != tt.rule || !errors.Is(err, sluice.ErrInvalidConfig)):
				t.Errorf("ReplaceConfiguration() = %v, want a *ConfigError with rule %q", err, tt.rule)
			}
			checkUnchanged(t, b, before)
		})
	}
}

// TestReplaceConfigurationAlignedNeedsWallClock: a bucket on a clock that is
// not a wall clock cannot switch to aligned refill, and keeps its
// configuration.
func TestReplaceConfigurationAlignedNeedsWallClock(t *testing.T) {
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Hour)}}
	b, err := sluice.NewBucket(cfg, sluice.WithClock(sluice.MonotonicClock()))
	if err != nil {
		t.Fatalf("NewBucket: %v", err)
	}
	aligned := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(5, sluice.IntervallyAligned(5, time.Hour, time.Unix(0, 0)))}}
	err = b.ReplaceConfiguration(aligned, sluice.InheritAsIs)
	var ce *sluice.ConfigError
	if !errors.As(err, &ce) || ce.Rule != sluice.RuleAlignedNeedsWallClock || ce.Bandwidth != 0 {
		t.Errorf("ReplaceConfiguration() = %v, want a *ConfigError with rule %q", err, sluice.RuleAlignedNeedsWallClock)
	}
	if got := b.Snapshot().Config; !reflect.DeepEqual(got, cfg) {
		t.Errorf("Configuration() = %+v, want %+v", got, cfg)
	}
	checkAvailable(t, b, 10)
}

// TestAlignedRefillOnFakeClock: adaptive initial tokens and the first
// refill exactly at FirstRefill (IntervallyAlignedRefillSpecification).
func TestAlignedRefillOnFakeClock(t *testing.T) {
	first := time.Unix(1_700_000_400, 0)
	clock := sluicetest.NewFakeClock(first.UnixNano() - int64(40*time.Second))
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Capacity(400, sluice.IntervallyAlignedAdaptive(100, time.Minute, first))})
	// 400-100 + 40s·100/60s = 366.
	checkAvailable(t, b, 366)
	if ok, err := b.TryConsume(366); !ok || err != nil {
		t.Fatalf("TryConsume(366) = %v, %v, want true", ok, err)
	}
	clock.Set(first.UnixNano() - 1)
	checkAvailable(t, b, 0)
	clock.Set(first.UnixNano())
	checkAvailable(t, b, 100)
	clock.Set(first.UnixNano() + int64(time.Minute) - 1)
	checkAvailable(t, b, 100)
	// The probe counts from the grid, not from now.
	p, err := b.AllowN(150)
	if want := (sluice.Result{Remaining: 100, RetryAfter: 1, ResetAfter: 2*time.Minute + 1, Limit: 400}); p != want || err != nil {
		t.Errorf("AllowN(150) = %+v, %v, want %+v", p, err, want)
	}
}

// TestConcurrentReplaceConfiguration: replacing the configuration (and with
// it the number of bandwidths) while other goroutines use the bucket is
// safe; run with -race.
func TestConcurrentReplaceConfiguration(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	one := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(100, time.Second)}}
	two := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(100, time.Second), sluice.Simple(1000, time.Minute).WithID("m")}}
	b := newBucket(t, clock, one.Bandwidths)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				b.TryConsume(1)
				b.AllowN(1)
				b.AvailableTokens()
				b.Snapshot()
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			cfg := one
			if i%2 == 0 {
				cfg = two
			}
			if err := b.ReplaceConfiguration(cfg, sluice.Inheritance(1+i%4)); err != nil {
				t.Errorf("ReplaceConfiguration() = %v", err)
			}
			clock.Advance(10 * ms)
		}
	})
	wg.Wait()
	if avail := b.AvailableTokens(); avail < 0 || avail > 100 {
		t.Errorf("AvailableTokens() = %d, want 0 to 100", avail)
	}
}
