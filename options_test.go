package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestOptionScopes: a constructor refuses, with an *ArgumentError naming
// it, every option that does not apply to it, rather than ignore it: the
// options of a limiter on NewBucket, a store's without WithStore (a lease
// included), a policy cache without a policy per key.
func TestOptionScopes(t *testing.T) {
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second)}}
	policyFor := sluice.WithPolicyFor(func(context.Context, string) (sluice.Policy, error) { return nil, nil })
	lease := sluice.WithLease(sluice.Lease{Min: 1, Max: 10, TTL: time.Second})
	limiterOnly := map[string]sluice.Option{
		"WithStore":          sluice.WithStore(newMapStore()),
		"WithMaxKeys":        sluice.WithMaxKeys(10),
		"WithPolicyFor":      policyFor,
		"WithPolicyCache":    sluice.WithPolicyCache(10, time.Second),
		"WithStoreTimeout":   sluice.WithStoreTimeout(time.Second),
		"WithStoreFailure":   sluice.WithStoreFailure(sluice.FailOpen),
		"WithCircuitBreaker": sluice.WithCircuitBreaker(3),
		"WithConfigVersion":  sluice.WithConfigVersion(2),
		"WithInheritance":    sluice.WithInheritance(sluice.InheritAsIs),
		"WithLease":          lease,
	}
	for name, opt := range limiterOnly {
		_, err := sluice.NewBucket(cfg, opt)
		var ae *sluice.ArgumentError
		if !errors.As(err, &ae) || ae.Op != "NewBucket" || ae.Arg != name || !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("NewBucket(%s) = %v, want an *ArgumentError naming %s", name, err, name)
		}
	}
	p := sluice.TokenBucket(10, 10, time.Second)
	tests := []struct {
		name string
		opts []sluice.Option
		want string // the option refused, "" for none
	}{
		{"store timeout without a store", []sluice.Option{sluice.WithStoreTimeout(time.Second)}, "WithStoreTimeout"},
		{"store failure without a store", []sluice.Option{sluice.WithStoreFailure(sluice.FailLocal)}, "WithStoreFailure"},
		{"circuit breaker without a store", []sluice.Option{sluice.WithCircuitBreaker(2)}, "WithCircuitBreaker"},
		{"config version without a store", []sluice.Option{sluice.WithConfigVersion(3)}, "WithConfigVersion"},
		{"lease without a store", []sluice.Option{lease}, "WithLease"},
		{"lease without a store, with a policy per key", []sluice.Option{lease, policyFor}, "WithLease"},
		{"inheritance without a store", []sluice.Option{sluice.WithInheritance(sluice.InheritAsIs)}, "WithInheritance"},
		{"inheritance with a policy per key", []sluice.Option{sluice.WithInheritance(sluice.InheritAsIs), policyFor}, ""},
		{"policy cache without a policy per key", []sluice.Option{sluice.WithPolicyCache(10, time.Second)}, "WithPolicyCache"},
		{"policy cache with a policy per key", []sluice.Option{sluice.WithPolicyCache(10, time.Second), policyFor}, ""},
		{"store options with a store, given first", []sluice.Option{sluice.WithStoreTimeout(time.Second), lease, sluice.WithStore(newMapStore())}, ""},
		{"the zero Option", []sluice.Option{{}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluice.NewLimiter(p, tt.opts...)
			var ae *sluice.ArgumentError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("NewLimiter = %v, want a limiter", err)
			case tt.want != "" && (!errors.As(err, &ae) || ae.Op != "NewLimiter" || ae.Arg != tt.want):
				t.Errorf("NewLimiter = %v, want an *ArgumentError naming %s", err, tt.want)
			}
		})
	}
	// An option's value out of its bounds is an *ArgumentError of the
	// option, in memory as in a store.
	for name, opts := range map[string][]sluice.Option{
		"WithInheritance":  {sluice.WithInheritance(sluice.InheritAdditive + 1), sluice.WithStore(newMapStore())},
		"WithStoreFailure": {sluice.WithStoreFailure(sluice.FailShare + 1), sluice.WithStore(newMapStore())},
	} {
		for _, extra := range [][]sluice.Option{nil, {policyFor}} {
			_, err := sluice.NewLimiter(p, append(opts, extra...)...)
			var ae *sluice.ArgumentError
			if !errors.As(err, &ae) || ae.Arg != name {
				t.Errorf("NewLimiter(%s out of bounds) = %v, want an *ArgumentError of %s", name, err, name)
			}
		}
	}
	_, err := sluice.NewLimiter(p, sluice.WithInheritance(sluice.InheritAdditive+1), policyFor)
	if ae := (*sluice.ArgumentError)(nil); !errors.As(err, &ae) || ae.Arg != "WithInheritance" {
		t.Errorf("NewLimiter(WithInheritance out of bounds, WithPolicyFor) in memory = %v, want an *ArgumentError of WithInheritance", err)
	}
	for name, opt := range map[string]sluice.Option{"WithStore": sluice.WithStore(nil), "WithPolicyFor": sluice.WithPolicyFor(nil)} {
		var ae *sluice.ArgumentError
		if _, err := sluice.NewLimiter(p, opt); !errors.As(err, &ae) || ae.Arg != name || ae.Want != "must not be nil" {
			t.Errorf("NewLimiter(%s(nil)) = %v, want an *ArgumentError of %s, nil", name, err, name)
		}
	}
}
