package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policy"
)

// backend answers every call with err, or with res when err is nil, and
// counts the calls.
type backend struct {
	res   policy.Result
	err   error
	calls int
}

func (b *backend) Consume(context.Context, string, int64) (policy.Result, error) {
	b.calls++
	return b.res, b.err
}

func (b *backend) Peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return b.Consume(ctx, key, n)
}

func (b *backend) Reserve(ctx context.Context, key string, n, _ int64) (policy.Result, int64, func(int64), error) {
	res, err := b.Consume(ctx, key, n)
	return res, 0, nil, err
}

func (b *backend) Reset(context.Context, string) error {
	b.calls++
	return b.err
}

// TestFailover: each failure policy's answer to a store that fails, the
// observer told once per failure, the caller's own context ending not a
// store failure, and a reset failing whatever the policy.
func TestFailover(t *testing.T) {
	down := fmt.Errorf("test: %w", driver.ErrUnavailable)
	local := policy.Result{Allowed: true, Remaining: 7, Limit: 10}
	for _, tt := range []struct {
		name     string
		failure  Failure
		wantRes  policy.Result
		wantErr  bool // a *StoreFailed
		wantOpen bool
		local    int // calls of the local fallback
	}{
		{name: "closed", failure: FailClosed, wantErr: true},
		{name: "open", failure: FailOpen, wantRes: policy.Result{Allowed: true, Limit: 10}},
		{name: "local", failure: FailLocal, wantRes: local, local: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var told []error
			store, fallback := &backend{err: down}, &backend{res: local}
			f := &Failover{Policy: FailurePolicy{Failure: tt.failure, OnFailure: func(err error) { told = append(told, err) }},
				Store: store, Local: fallback, Limit: 10}
			res, err := f.Consume(context.Background(), "k", 1)
			var sf *StoreFailed
			if got := errors.As(err, &sf); got != tt.wantErr {
				t.Fatalf("Consume = %+v, %v; want a *StoreFailed: %v", res, err, tt.wantErr)
			}
			if err == nil && res != tt.wantRes {
				t.Errorf("Consume = %+v, want %+v", res, tt.wantRes)
			}
			if err != nil && (!errors.Is(err, driver.ErrUnavailable) || sf.Open) {
				t.Errorf("Consume's error %v (open %v), want the store's, not open", err, sf.Open)
			}
			if len(told) != 1 || !errors.Is(told[0], down) {
				t.Errorf("OnFailure told %v, want the store's error once", told)
			}
			if fallback.calls != tt.local {
				t.Errorf("the local fallback was called %d times, want %d", fallback.calls, tt.local)
			}

			// A reset needs the store, whatever the policy.
			if err := f.Reset(context.Background(), "k"); !errors.As(err, &sf) || sf.Open {
				t.Errorf("Reset on a failed store = %v, want a *StoreFailed that is not open", err)
			}

			// The caller's context ending is its own error, not a store
			// failure, and nobody is told.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			store.err = fmt.Errorf("test: %w", context.Canceled)
			told = nil
			if _, err := f.Consume(ctx, "k", 1); !errors.Is(err, context.Canceled) || errors.As(err, &sf) {
				t.Errorf("Consume with the caller's context ended = %v, want context.Canceled alone", err)
			}
			if len(told) != 0 {
				t.Errorf("OnFailure told %v for the caller's own context", told)
			}
		})
	}
}
