package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestErrorMessages: errors read as a person would write them: durations
// as durations, one token in the singular, and a huge key cut short.
func TestErrorMessages(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&sluice.MaxWaitError{Tokens: 1, Wait: 3599999999809, MaxWait: time.Millisecond},
			"sluice: max wait exceeded: 1 token needs 59m59.999999809s, at most 1ms allowed"},
		{&sluice.MaxWaitError{Tokens: 3, Wait: 2 * time.Second, MaxWait: 1500 * time.Millisecond},
			"sluice: max wait exceeded: 3 tokens need 2s, at most 1.5s allowed"},
		{&sluice.MaxWaitError{Tokens: 2, Wait: time.Second, MaxWait: 300 * time.Millisecond, Deadline: true},
			"sluice: 2 tokens need 1s, past the context's deadline in 300ms"},
		{&sluice.MaxWaitError{Tokens: 1, Wait: sluice.Never, MaxWait: time.Second},
			"sluice: max wait exceeded: 1 token can never be had"},
		{&sluice.ArgumentError{Op: "Limiter.ReserveN", Arg: "maxWait", Value: -time.Second, Want: "must not be negative"},
			"sluice: Limiter.ReserveN: maxWait must not be negative, got -1s"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// TestStoreErrorQuotesKeyShort: a store error about a megabyte key names
// the key by its start and its length, not in full.
func TestStoreErrorQuotesKeyShort(t *testing.T) {
	store := newMapStore()
	store.setFail(fmt.Errorf("test: %w", driver.ErrUnavailable))
	l, err := sluice.NewLimiter(sluice.FixedWindow(1, time.Second), sluice.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("k", 1<<20)
	_, err = l.Allow(context.Background(), key)
	var se *sluice.StoreError
	if !errors.As(err, &se) || se.Key != key {
		t.Fatalf("Allow on a failed store = %v, want a *StoreError with the whole key", err)
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "(1048576 bytes)") {
		t.Errorf("Error() is %d bytes, %.120q..., want the key cut short with its length", len(msg), msg)
	}
}

// TestArgumentErrorOps: every ArgumentError names its method with its
// type.
func TestArgumentErrorOps(t *testing.T) {
	ctx := context.Background()
	l, _ := sluice.NewLimiter(sluice.FixedWindow(5, time.Second))
	kb := keyBuckets(t, sluicetest.NewFakeClock(t0))["memory"]
	tests := []struct {
		op   string
		call func() error
	}{
		{"Limiter.AllowN", func() error { _, err := l.AllowN(ctx, "k", 0); return err }},
		{"Limiter.PeekN", func() error { _, err := l.PeekN(ctx, "k", 0); return err }},
		{"Limiter.ReserveN", func() error { _, err := l.ReserveN(ctx, "k", 1, -1); return err }},
		{"Limiter.WaitN", func() error { return l.WaitN(ctx, "k", 0, time.Second) }},
		{"KeyBucket.AllowN", func() error { _, err := kb.AllowN(ctx, 0); return err }},
		{"KeyBucket.PeekN", func() error { _, err := kb.PeekN(ctx, -1); return err }},
		{"KeyBucket.ReserveN", func() error { _, err := kb.ReserveN(ctx, 0, time.Second); return err }},
		{"KeyBucket.WaitN", func() error { return kb.WaitN(ctx, 0, time.Second) }},
		{"KeyBucket.TryConsumeUpTo", func() error { _, err := kb.TryConsumeUpTo(ctx, 0); return err }},
		{"KeyBucket.AddTokens", func() error { return kb.AddTokens(ctx, 0) }},
		{"KeyBucket.WaitN", func() error { return kb.WaitN(ctx, 1, 0) }},
		{"NewLimiter", func() error { _, err := sluice.NewLimiter(sluice.NoLimit(), sluice.WithMaxKeys(-1)); return err }},
	}
	for _, tt := range tests {
		var ae *sluice.ArgumentError
		if err := tt.call(); !errors.As(err, &ae) || ae.Op != tt.op {
			t.Errorf("%s: error = %v, want an *ArgumentError of Op %q", tt.op, err, tt.op)
		}
	}
}

// TestTokensAboveLimit: a policy that refuses more tokens than its limit
// as an argument error says so with ErrTokensAboveLimit; the others
// reject with RetryAfter Never.
func TestTokensAboveLimit(t *testing.T) {
	ctx := context.Background()
	for _, p := range []sluice.Policy{sluice.FixedWindow(3, time.Second), sluice.TokenBucket(3, 1, time.Second)} {
		l, _ := sluice.NewLimiter(p)
		if _, err := l.AllowN(ctx, "k", 4); !errors.Is(err, sluice.ErrTokensAboveLimit) || !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("%v: AllowN(4) = %v, want ErrTokensAboveLimit", p, err)
		}
		if _, err := l.AllowN(ctx, "k", 0); errors.Is(err, sluice.ErrTokensAboveLimit) {
			t.Errorf("%v: AllowN(0) = %v, matches ErrTokensAboveLimit", p, err)
		}
	}
	l, _ := sluice.NewLimiter(sluice.SlidingWindow(3, time.Second))
	if r, err := l.AllowN(ctx, "k", 4); err != nil || r.Allowed || r.RetryAfter != sluice.Never {
		t.Errorf("sliding window: AllowN(4) = %+v, %v, want rejected with RetryAfter Never", r, err)
	}
}

// TestTokensAboveLimitQuotesTheMember: a compound's error names the limit
// of the member that refused the tokens as an argument error, not the
// smallest member's, which rejects them as a result: 200 tokens are above
// the fixed window's 100, and 6 would be allowed by it.
func TestTokensAboveLimitQuotesTheMember(t *testing.T) {
	ctx := context.Background()
	for _, store := range []struct {
		name string
		opts []sluice.Option
	}{{"memory", nil}, {"store", []sluice.Option{sluice.WithStore(memstore.New())}}} {
		l, err := sluice.NewLimiter(sluice.Compound(sluice.GCRA(5, 5, time.Second), sluice.FixedWindow(100, time.Second)), store.opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.AllowN(ctx, "k", 200)
		var ae *sluice.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, sluice.ErrTokensAboveLimit) || !strings.Contains(ae.Want, "limit 100") {
			t.Errorf("%s: AllowN(200) = %v, want ErrTokensAboveLimit quoting the limit 100", store.name, err)
		}
	}
}

// TestTokensAboveLimitQuotesTheKeysLimit: the error names the limit that
// refused the tokens, a key's own bucket or plan, not the default policy's.
func TestTokensAboveLimitQuotesTheKeysLimit(t *testing.T) {
	ctx := context.Background()
	want := func(t *testing.T, err error, limit string) {
		t.Helper()
		var ae *sluice.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, sluice.ErrTokensAboveLimit) || ae.Want != "must not exceed the limit "+limit {
			t.Errorf("got %v, want tokens above the limit %s", err, limit)
		}
	}
	l, _ := sluice.NewLimiter(sluice.TokenBucket(10, 1, time.Second), sluice.WithStore(newMapStore()))
	b, err := l.Bucket("k")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReplaceConfiguration(ctx, sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Capacity(5, sluice.Intervally(1, time.Second))}}, sluice.InheritAsIs); err != nil {
		t.Fatal(err)
	}
	_, err = l.AllowN(ctx, "k", 6)
	want(t, err, "5")
	_, err = l.ReserveN(ctx, "k", 6, time.Second)
	want(t, err, "5")

	plans, _ := sluice.NewLimiter(sluice.FixedWindow(10, time.Second), sluice.WithPolicyFor(func(context.Context, string) (sluice.Policy, error) {
		return sluice.FixedWindow(3, time.Second), nil
	}))
	_, err = plans.AllowN(ctx, "k", 4)
	want(t, err, "3")
}
