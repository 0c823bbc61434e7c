package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

const limiterStart = 1_700_000_000_000_000_000

type limiterStep struct {
	advance time.Duration
	tokens  int64
	want    sluice.Result
}

func runLimiterSteps(t *testing.T, p sluice.Policy, steps []limiterStep) {
	t.Helper()
	clock := sluicetest.NewFakeClock(limiterStart)
	l, err := sluice.NewLimiter(p, sluice.WithClock(clock))
	if err != nil {
		t.Fatalf("NewLimiter(%v): %v", p, err)
	}
	ctx := context.Background()
	for i, s := range steps {
		clock.Advance(s.advance)
		got, err := l.AllowN(ctx, "key", s.tokens)
		if err != nil {
			t.Fatalf("step %d: AllowN(%d): %v", i, s.tokens, err)
		}
		if got != s.want {
			t.Errorf("step %d: AllowN(%d) = %+v, want %+v", i, s.tokens, got, s.want)
		}
	}
}

func TestLimiterPolicies(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name   string
		policy sluice.Policy
		steps  []limiterStep
	}{
		{"fixed window opens at the first hit", sluice.FixedWindow(3, 10*sec), []limiterStep{
			{0, 1, sluice.Result{Allowed: true, Remaining: 2, ResetAfter: 10 * sec, Limit: 3}},
			{0, 2, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec, Limit: 3}},
			{4 * sec, 1, sluice.Result{Remaining: 0, RetryAfter: 6 * sec, ResetAfter: 6 * sec, Limit: 3}},
			{6 * sec, 3, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec, Limit: 3}},
		}},
		{"token bucket refills amount at once per interval from the first use", sluice.TokenBucket(5, 2, 10*sec), []limiterStep{
			{0, 5, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 30 * sec, Limit: 5}},
			{9 * sec, 1, sluice.Result{Remaining: 0, RetryAfter: sec, ResetAfter: 21 * sec, Limit: 5}},
			{sec, 2, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 30 * sec, Limit: 5}},
			{25 * sec, 3, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: 15 * sec, Limit: 5}},
		}},
		{"leaky bucket drains continuously", sluice.LeakyBucket(4, 1, sec), []limiterStep{
			{0, 4, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 4 * sec, Limit: 4}},
			{500 * time.Millisecond, 1, sluice.Result{Remaining: 0, RetryAfter: 500 * time.Millisecond, ResetAfter: 3500 * time.Millisecond, Limit: 4}},
			{2 * sec, 2, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 3500 * time.Millisecond, Limit: 4}},
			{0, 5, sluice.Result{Remaining: 0, RetryAfter: sluice.Never, ResetAfter: 3500 * time.Millisecond, Limit: 4}},
		}},
		{"sliding window weighs the previous window", sluice.SlidingWindow(10, time.Minute), []limiterStep{
			{0, 9, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: 2 * time.Minute, Limit: 10}},
			// 75s: a quarter into the second window, 9·3/4 = 6.75 still count.
			{75 * sec, 4, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 105 * sec, Limit: 10}},
		}},
		{"sliding log counts each hit for one interval", sluice.SlidingLog(2, 10*sec), []limiterStep{
			{0, 1, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: 10 * sec, Limit: 2}},
			{4 * sec, 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec, Limit: 2}},
			{5 * sec, 1, sluice.Result{Remaining: 0, RetryAfter: sec, ResetAfter: 5 * sec, Limit: 2}},
			{sec, 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 10 * sec, Limit: 2}},
		}},
		{"gcra spaces tokens by period/rate", sluice.GCRA(2, 3, sec), []limiterStep{
			{0, 2, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 666666667, Limit: 2}},
			{0, 1, sluice.Result{Remaining: 0, RetryAfter: 333333334, ResetAfter: 666666667, Limit: 2}},
		}},
		{"shaper spaces requests and bounds its queue", sluice.Shaper(2, sec, 1), []limiterStep{
			{0, 1, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: 500 * time.Millisecond, Limit: 2}},
			{100 * time.Millisecond, 1, sluice.Result{Remaining: 1, RetryAfter: 400 * time.Millisecond, ResetAfter: 400 * time.Millisecond, Limit: 2}},
			{400 * time.Millisecond, 1, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: 500 * time.Millisecond, Limit: 2}},
		}},
		{"compound: all or nothing, the strictest member reports", sluice.Compound(sluice.FixedWindow(3, time.Minute), sluice.FixedWindow(1, sec)), []limiterStep{
			{0, 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: time.Minute, Limit: 1}},
			{0, 1, sluice.Result{Remaining: 0, RetryAfter: sec, ResetAfter: time.Minute, Limit: 1}},
			{sec, 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 59 * sec, Limit: 1}},
			// Both have 0 left: on a tie the first member reports.
			{sec, 1, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 58 * sec, Limit: 3}},
			{sec, 1, sluice.Result{Remaining: 0, RetryAfter: 57 * sec, ResetAfter: 57 * sec, Limit: 3}},
		}},
		{"no limit", sluice.NoLimit(), []limiterStep{
			{0, 1 << 40, sluice.Result{Allowed: true, Remaining: 1<<63 - 1, Limit: 1<<63 - 1}},
		}},
		{"bucket policy: every bandwidth must allow", sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Simple(10, time.Minute), sluice.Simple(2, sec)}}), []limiterStep{
			{0, 2, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 12 * sec, Limit: 2}},
			// The minute bandwidth has 8 1/6 tokens, 6 1/6 after this; at 1/6
			// a second it is full 23s later.
			{sec, 2, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 23 * sec, Limit: 2}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runLimiterSteps(t, tt.policy, tt.steps) })
	}
}

func TestLimiterKeysAreIndependent(t *testing.T) {
	l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Minute), sluice.WithClock(sluicetest.NewFakeClock(limiterStart)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"a", "b", "c"} {
		if r, _ := l.Allow(ctx, key); !r.Allowed {
			t.Errorf("Allow(%q) = %+v, want allowed", key, r)
		}
	}
	if r, _ := l.Allow(ctx, "a"); r.Allowed {
		t.Errorf("second Allow(a) = %+v, want rejected", r)
	}
	if err := l.Reset(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Allow(ctx, "a"); !r.Allowed {
		t.Errorf("Allow(a) after Reset = %+v, want allowed", r)
	}
}

func TestLimiterArgumentErrors(t *testing.T) {
	ctx := context.Background()
	l, err := sluice.NewLimiter(sluice.FixedWindow(5, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{0, -1, 6} {
		if _, err := l.AllowN(ctx, "k", n); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("AllowN(%d) error = %v, want ErrInvalidArgument", n, err)
		}
	}
	if l.Len() != 0 {
		t.Errorf("Len() = %d after refused calls, want 0", l.Len())
	}
	if _, err := l.ReserveN(ctx, "k", 1, -time.Second); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("Reserve(maxWait -1s) error = %v, want ErrInvalidArgument", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Allow(cancelled, "k"); err != context.Canceled {
		t.Errorf("Allow(cancelled ctx) error = %v, want context.Canceled", err)
	}
}

// TestNilArguments: a nil required argument is an *ArgumentError matching
// ErrInvalidArgument, not a configuration rule.
func TestNilArguments(t *testing.T) {
	tests := []struct {
		name, op, arg string
		call          func() error
	}{
		{"NewLimiter(nil)", "NewLimiter", "policy", func() error { _, err := sluice.NewLimiter(nil); return err }},
		{"Compound(nil)", "Compound", "members[1]", func() error {
			_, err := sluice.NewLimiter(sluice.Compound(sluice.NoLimit(), nil))
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ae *sluice.ArgumentError
			if !errors.As(err, &ae) || ae.Op != tt.op || ae.Arg != tt.arg || ae.Value != nil ||
				!errors.Is(err, sluice.ErrInvalidArgument) {
				t.Errorf("%s = %#v, want an *ArgumentError of %s's %s", tt.name, err, tt.op, tt.arg)
			}
			if want := "sluice: " + tt.op + ": " + tt.arg + " must not be nil"; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
		})
	}
}

func TestLimiterConfigErrors(t *testing.T) {
	tests := []struct {
		policy sluice.Policy
		rule   sluice.Rule
		field  string // in the words of config files
	}{
		{sluice.FixedWindow(0, time.Second), sluice.RuleNonPositiveLimit, "fixed_window.limit"},
		{sluice.FixedWindow(1, 0), sluice.RuleNonPositivePeriod, "fixed_window.interval"},
		{sluice.TokenBucket(0, 1, time.Second), sluice.RuleNonPositiveLimit, "token_bucket.limit"},
		{sluice.TokenBucket(1, 0, time.Second), sluice.RuleNonPositiveRefillTokens, "token_bucket.rate.amount"},
		{sluice.LeakyBucket(1, 5, 3), sluice.RuleRefillRateTooHigh, "leaky_bucket.rate"},
		{sluice.BucketPolicy(sluice.BucketConfig{}), sluice.RuleNoLimits, ""},
		{sluice.SlidingWindow(0, time.Second), sluice.RuleNonPositiveLimit, "sliding_window.limit"},
		{sluice.SlidingLog(1, -1), sluice.RuleNonPositivePeriod, "sliding_log.interval"},
		{sluice.GCRA(1, 0, time.Second), sluice.RuleNonPositiveRefillTokens, "gcra.rate.amount"},
		{sluice.GCRA(1, 1, 0), sluice.RuleNonPositivePeriod, "gcra.rate.interval"},
		{sluice.Shaper(1, time.Second, -1), sluice.RuleNegativeMaxQueue, "shaper.max_queue"},
		{sluice.Compound(), sluice.RuleNoMembers, "compound.limiters"},
		{sluice.Compound(sluice.NoLimit(), sluice.FixedWindow(0, time.Second)), sluice.RuleNonPositiveLimit, "fixed_window.limit"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.policy), func(t *testing.T) {
			_, err := sluice.NewLimiter(tt.policy)
			var ce *sluice.ConfigError
			if !errors.As(err, &ce) || ce.Rule != tt.rule || ce.Field != tt.field {
				t.Fatalf("NewLimiter(%v) = %v, want a ConfigError with rule %s on %q", tt.policy, err, tt.rule, tt.field)
			}
			if !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
			}
		})
	}
}

func TestLimiterReserve(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, 10*time.Second), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{0, 0, 10 * time.Second, 10 * time.Second, 20 * time.Second} {
		r, err := l.ReserveN(ctx, "k", 1, time.Minute)
		if err != nil || !r.OK() || r.Delay() != want {
			t.Errorf("Reserve #%d = %+v, %v, want OK with delay %v", i, r, err, want)
		}
	}
	// The third window (20s-30s) has one place left, past a 15s bound.
	r, err := l.ReserveN(ctx, "k", 1, 15*time.Second)
	if err != nil || r.OK() || r.Delay() != sluice.Never || r.Result().RetryAfter != 20*time.Second {
		t.Errorf("Reserve past maxWait = %+v, %v, want not OK with RetryAfter 20s", r, err)
	}
	// The debt is repaid window by window: 25s later, the third window
	// still holds one reserved token.
	clock.Advance(25 * time.Second)
	if r, _ := l.Allow(ctx, "k"); !r.Allowed || r.Remaining != 0 {
		t.Errorf("Allow in the third window = %+v, want allowed with 0 remaining", r)
	}
	if err := l.WaitN(ctx, "k", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := clock.Slept(); got != 5*time.Second {
		t.Errorf("Wait slept %v, want 5s (to the fourth window)", got)
	}
}

// TestLimiterConcurrentExact checks that many goroutines on one key are
// admitted exactly the limit, on a fixed clock.
func TestLimiterConcurrentExact(t *testing.T) {
	clock := sluicetest.NewFakeClock(limiterStart)
	for _, p := range []sluice.Policy{sluice.FixedWindow(500, time.Minute), sluice.TokenBucket(500, 1, time.Minute), sluice.LeakyBucket(500, 1, time.Minute)} {
		l, err := sluice.NewLimiter(p, sluice.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for range 8 {
			wg.Go(func() {
				for range 200 {
					if r, _ := l.Allow(context.Background(), "hot"); r.Allowed {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if admitted != 500 {
			t.Errorf("%v: admitted %d of 1600, want exactly 500", p, admitted)
		}
	}
}

func TestLimiterForgetsExpiredKeys(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(limiterStart)
	l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Second), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		if _, err := l.Allow(ctx, fmt.Sprint("old", i)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	for i := range 10_000 {
		if _, err := l.Allow(ctx, fmt.Sprint("new", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Each insertion sweeps up to two expired keys of its shard, so most
	// of the old keys are gone.
	if n := l.Len(); n > 12_000 {
		t.Errorf("Len() = %d after 10000 keys expired and 10000 new ones, want at most 12000", n)
	}
}

func TestLimiterBucket(t *testing.T) {
	for _, store := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", store), func(t *testing.T) { testLimiterBucket(t, store) })
	}
}

func testLimiterBucket(t *testing.T, store bool) {
	ctx := context.Background()
	fw, _ := sluice.NewLimiter(sluice.FixedWindow(1, time.Second))
	if _, err := fw.Bucket("k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Bucket on a fixed window = %v, want ErrUnsupported", err)
	}
	clock := sluicetest.NewFakeClock(limiterStart)
	opts := []sluice.Option{sluice.WithClock(clock)}
	if store {
		opts = append(opts, sluice.WithStore(newMapStore()))
	}
	l, err := sluice.NewLimiter(sluice.TokenBucket(10, 5, time.Second), opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Bucket("alice")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.AvailableTokens(ctx); err != nil || got != 10 {
		t.Errorf("AvailableTokens() of a new key = %d, %v, want 10", got, err)
	}
	probe, err := b.AllowN(ctx, 7)
	if err != nil || !probe.Allowed || probe.Remaining != 3 {
		t.Errorf("AllowN(7) = %+v, %v, want consumed with 3 left", probe, err)
	}
	// The bucket and the limiter share the key's state.
	if r, _ := l.AllowN(ctx, "alice", 3); !r.Allowed || r.Remaining != 0 {
		t.Errorf("AllowN(3) after the bucket took 7 = %+v, want allowed with 0 left", r)
	}
	if ok, err := block(b).TryConsume(ctx, 5, 2*time.Second); err != nil || !ok {
		t.Errorf("blocking TryConsume(5, 2s) = %v, %v, want true", ok, err)
	}
	if got := clock.Slept(); got != time.Second {
		t.Errorf("slept %v, want 1s (the next refill of 5)", got)
	}
	if r, _ := l.Allow(ctx, "bob"); !r.Allowed || r.Remaining != 9 {
		t.Errorf("Allow(bob) = %+v, want an independent key", r)
	}
	err = b.ReplaceConfiguration(ctx, sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(1, time.Second)}}, sluice.InheritAsIs)
	if !store {
		// An in-memory key follows its limiter's policy: its own
		// configuration is WithPolicyFor's.
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithPolicyFor") {
			t.Errorf("ReplaceConfiguration on an in-memory key = %v, want ErrUnsupported pointing to WithPolicyFor", err)
		}
		return
	}
	if err != nil {
		t.Errorf("ReplaceConfiguration on the key's bucket = %v", err)
	}
	if r, _ := l.Allow(ctx, "alice"); r.Limit != 1 {
		t.Errorf("Allow(alice) after ReplaceConfiguration = %+v, want the replaced limit 1", r)
	}
	if r, _ := l.Allow(ctx, "bob"); r.Limit != 10 {
		t.Errorf("Allow(bob) after alice's ReplaceConfiguration = %+v, want the limiter's limit 10", r)
	}
}

func TestLimiterMaxKeys(t *testing.T) {
	ctx := context.Background()
	l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Hour), sluice.WithMaxKeys(640))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		if r, err := l.Allow(ctx, fmt.Sprint("key", i)); err != nil || !r.Allowed {
			t.Fatalf("Allow(key%d) = %+v, %v", i, r, err)
		}
	}
	if n := l.Len(); n > 640 || n < 320 {
		t.Errorf("holding %d keys under WithMaxKeys(640), want at most 640 and most of them", n)
	}
	if _, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Hour), sluice.WithMaxKeys(-1)); err == nil {
		t.Error("WithMaxKeys(-1) accepted")
	}
}

// TestLimiterMaxKeysExact: the bound is what it says, for small bounds
// too (one shard's worth each was 64 keys for WithMaxKeys(1)), and a full
// limiter still takes every new key.
func TestLimiterMaxKeysExact(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 63, 65, 1000, 1025, 70_000} {
		l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Hour), sluice.WithMaxKeys(n))
		if err != nil {
			t.Fatal(err)
		}
		most := 0
		for i := range 2*n + 200 {
			key := fmt.Sprint("key", i)
			if r, err := l.Allow(ctx, key); err != nil || !r.Allowed {
				t.Fatalf("WithMaxKeys(%d): Allow(%s) = %+v, %v, want allowed", n, key, r, err)
			}
			// The key just admitted is held: its second request is refused.
			if r, _ := l.Allow(ctx, key); r.Allowed {
				t.Fatalf("WithMaxKeys(%d): second Allow(%s) allowed; the new key was not kept", n, key)
			}
			most = max(most, l.Len())
		}
		if most != n {
			t.Errorf("WithMaxKeys(%d) held at most %d keys, want exactly %d at its fullest", n, most, n)
		}
	}
}

// TestLimiterInitialTokensBelowRequest: a key whose bucket starts with
// fewer tokens than a request asks is refused with a RetryAfter, and the
// request passes then. The refused request creates the bucket, as in
// Bucket4j; were it not kept, every retry would find a new bucket with the
// same too few tokens.
func TestLimiterInitialTokensBelowRequest(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	for _, p := range []sluice.Policy{
		sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Capacity(4, sluice.Greedy(1, time.Second)).WithInitialTokens(1)}}),
		sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
			sluice.Capacity(4, sluice.Greedy(1, time.Second)).WithInitialTokens(1), sluice.Simple(100, time.Hour)}}),
	} {
		for _, where := range []string{"in memory", "on a store"} {
			opts := []sluice.Option{sluice.WithClock(clock)}
			if where == "on a store" {
				opts = append(opts, sluice.WithStore(newMapStore()))
			}
			l, err := sluice.NewLimiter(p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.AllowN(t.Context(), "k", 2)
			if err != nil || res.Allowed || res.RetryAfter != time.Second {
				t.Fatalf("%v %s: AllowN(2) on a new key = %+v, %v; want refused, RetryAfter 1s", p, where, res, err)
			}
			clock.Advance(res.RetryAfter)
			if res, err := l.AllowN(t.Context(), "k", 2); err != nil || !res.Allowed {
				t.Errorf("%v %s: AllowN(2) after its RetryAfter = %+v, %v; want allowed", p, where, res, err)
			}
		}
	}
}

// TestLimiterListener: a Limiter's listener is told of its decisions, as
// a Bucket's is (it used to hear only of the buckets of Limiter.Bucket),
// in memory and on a store.
func TestLimiterListener(t *testing.T) {
	ctx := context.Background()
	for _, where := range []string{"memory", "store"} {
		t.Run(where, func(t *testing.T) {
			clock := sluicetest.NewFakeClock(limiterStart)
			var l sluicetest.Counter
			opts := []sluice.Option{sluice.WithClock(clock), sluice.WithObserver(&l)}
			if where == "store" {
				opts = append(opts, sluice.WithStore(newMapStore()))
			}
			lim, err := sluice.NewLimiter(sluice.TokenBucket(3, 1, time.Second), opts...)
			if err != nil {
				t.Fatal(err)
			}
			lim.AllowN(ctx, "k", 2)
			lim.AllowN(ctx, "k", 2)                // refused: 1 left
			lim.PeekN(ctx, "k", 1)                 // reads are not reported
			lim.ReserveN(ctx, "k", 2, time.Second) // 1 now, 1 in a second: delayed 1s
			lim.WaitN(ctx, "k", 1, 2*time.Second)  // due in 1s more
			want := counts{consumed: 5, rejected: 2, waited: 2 * time.Second, delayed: time.Second}
			if got := countsOf(&l); got != want {
				t.Errorf("observer saw %+v, want %+v", got, want)
			}
		})
	}
}

// TestStoreOptionsNeedAStore: a store's option given to a Limiter without
// a store is refused, not ignored.
func TestStoreOptionsNeedAStore(t *testing.T) {
	for _, opt := range []sluice.Option{
		sluice.WithStoreTimeout(time.Second), sluice.WithStoreFailure(sluice.FailOpen),
		sluice.WithCircuitBreaker(3), sluice.WithInheritance(sluice.InheritReset),
	} {
		_, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Second), opt)
		var ae *sluice.ArgumentError
		if !errors.As(err, &ae) || ae.Op != "NewLimiter" || !strings.HasPrefix(ae.Arg, "With") {
			t.Errorf("NewLimiter with a store option and no store = %v, want an *ArgumentError naming the option", err)
		}
		if _, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Second), opt, sluice.WithStore(newMapStore())); err != nil {
			t.Errorf("NewLimiter with %s and a store = %v", ae.Arg, err)
		}
	}
}

// TestKeyBucketCreatesAtFirstCall: as Bucket4j's proxy, a KeyBucket's
// first call creates the key's state, even one that only reads, so that
// an intervally refill and initial tokens count from then; Snapshot and
// the Limiter's own reads create nothing. In memory as in a store.
func TestKeyBucketCreatesAtFirstCall(t *testing.T) {
	ctx := context.Background()
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(10, sluice.Intervally(10, time.Minute)).WithInitialTokens(2)}}
	for _, store := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", store), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(limiterStart)
			opts := []sluice.Option{sluice.WithClock(clock)}
			if store {
				opts = append(opts, sluice.WithStore(newMapStore()))
			}
			l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), opts...)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := l.Bucket("k")
			if s, err := b.Snapshot(ctx); err != nil || s.AvailableTokens != 2 {
				t.Fatalf("Snapshot() of a new key = %+v, %v, want 2 tokens", s, err)
			}
			if _, err := l.Peek(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(30 * time.Second)
			// Neither created the key: it is still new, and reading it
			// through the bucket creates it now.
			if n, err := b.AvailableTokens(ctx); err != nil || n != 2 {
				t.Fatalf("AvailableTokens() at 30s = %d, %v, want 2", n, err)
			}
			// Its refill counts from 30s: the bucket is full a minute after
			// that, not a minute after a later call.
			clock.Advance(45 * time.Second)
			if s, err := b.Snapshot(ctx); err != nil || s.AvailableTokens != 2 || s.TimeToFullRefill != 15*time.Second {
				t.Errorf("Snapshot() 45s after the first call = %+v, %v, want 2 tokens, full in 15s", s, err)
			}
		})
	}
}

// TestAlignedBucketPolicy: a keyed limiter given a wall clock takes a
// bucket of aligned refill and decides as a Bucket of it would; on its
// default clock, which is not one, it is a *ConfigError.
func TestAlignedBucketPolicy(t *testing.T) {
	ctx := context.Background()
	first := time.Unix(0, limiterStart).Add(30 * time.Minute)
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(60, sluice.IntervallyAlignedAdaptive(60, time.Hour, first))}}
	var ce *sluice.ConfigError
	if _, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithClock(sluice.MonotonicClock())); !errors.As(err, &ce) || ce.Rule != sluice.RuleAlignedNeedsWallClock {
		t.Errorf("NewLimiter(aligned, monotonic clock) = %v, want a %s error", err, sluice.RuleAlignedNeedsWallClock)
	}
	compound := sluice.Compound(sluice.FixedWindow(5, time.Second), sluice.BucketPolicy(cfg))
	if _, err := sluice.NewLimiter(compound, sluice.WithClock(sluice.MonotonicClock())); !errors.As(err, &ce) || ce.Rule != sluice.RuleAlignedNeedsWallClock {
		t.Errorf("NewLimiter(compound of aligned, monotonic clock) = %v, want a %s error", err, sluice.RuleAlignedNeedsWallClock)
	}
	if _, err := sluice.NewLimiter(sluice.BucketPolicy(cfg)); !errors.As(err, &ce) || ce.Rule != sluice.RuleAlignedNeedsWallClock {
		t.Errorf("NewLimiter(aligned) on its default clock = %v, want a %s error", err, sluice.RuleAlignedNeedsWallClock)
	}
	if _, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), sluice.WithClock(sluice.WallClock())); err != nil {
		t.Errorf("NewLimiter(aligned, WallClock) = %v", err)
	}
	for _, store := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", store), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(limiterStart)
			opts := []sluice.Option{sluice.WithClock(clock)}
			if store {
				opts = append(opts, sluice.WithStore(newMapStore()))
			}
			l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), opts...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := sluice.NewBucket(cfg, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			// Half an hour before the first refill: half the tokens, then
			// the whole hour's at the grid point.
			for _, step := range []time.Duration{0, 10 * time.Minute, 20 * time.Minute, time.Minute} {
				clock.Advance(step)
				got, err := l.AllowN(ctx, "k", 10)
				if want, _ := b.AllowN(10); err != nil || got != want {
					t.Errorf("after %v: Limiter.AllowN(10) = %+v, %v; Bucket.AllowN(10) = %+v", step, got, err, want)
				}
			}
		})
	}
}
