package config

import (
	"context"
	"errors"
	"slices"

	"github.com/sluicehq/sluice"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// leaseSpec is a limiter's lease key, decoded, with its nodes for errors.
type leaseSpec struct {
	lease sluice.Lease
	path  string
	key   *yaml.Node // the lease key, where the lease as a whole is at fault
	m     *yamlnode.Mapping
}

// splitLease takes the lease key out of the limiter description n: it
// returns the description without it, for the policy decoder, and the
// lease decoded, or nil when n has none. The lease is a limiter's key,
// not a policy's, so a compound's members cannot have one.
func splitLease(d *policyspec.Decoder, path string, n *yaml.Node) (*yaml.Node, *leaseSpec, error) {
	m, err := d.Mapping(path, n)
	if err != nil || !m.Has("lease") {
		return n, nil, nil // the policy decoder reports what is wrong
	}
	lpath, lv := m.Value("lease")
	lm, err := d.Strict(lpath, lv, []string{"min", "max", "ttl"}, []string{"min", "max", "ttl"})
	if err != nil {
		return nil, nil, err
	}
	ls := &leaseSpec{path: lpath, m: lm}
	for _, k := range m.Keys {
		if k.Value == "lease" {
			ls.key = k
		}
	}
	for _, f := range []struct {
		key string
		to  *int64
	}{{"min", &ls.lease.Min}, {"max", &ls.lease.Max}} {
		p, v := lm.Value(f.key)
		if *f.to, err = d.Int64(p, v); err != nil {
			return nil, nil, err
		}
	}
	p, v := lm.Value("ttl")
	if ls.lease.TTL, err = d.Duration(p, v); err != nil {
		return nil, nil, err
	}
	// A copy of the mapping without the lease pair: the document's own
	// nodes are left as they are, for aliases to them.
	without := *m.Node
	without.Content = slices.Clone(m.Node.Content)
	for i := 0; i+1 < len(without.Content); i += 2 {
		if k := without.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "lease" {
			without.Content = slices.Delete(without.Content, i, i+2)
			break
		}
	}
	return &without, ls, nil
}

// check checks the lease against the limiter's policy, as
// sluice.NewLimiter would, and locates the field at fault.
func (ls *leaseSpec) check(p sluice.Policy) error {
	at := func(key string) (string, *yaml.Node) { return ls.m.Value(key) }
	switch l := ls.lease; {
	case l.Min < 1:
		path, n := at("min")
		return errorAt(path, n, "must be at least 1, got %d", l.Min)
	case l.Max < l.Min:
		path, n := at("max")
		return errorAt(path, n, "must be at least min %d, got %d", l.Min, l.Max)
	case l.TTL <= 0:
		path, n := at("ttl")
		return errorAt(path, n, "must be positive, got %v", l.TTL)
	}
	if p == nil {
		return nil
	}
	// A lease applies only with a store; NewLimiter calls none, so a store
	// that answers nothing serves to ask whether p can be leased.
	if _, err := sluice.NewLimiter(p, sluice.WithStore(noStore{}), sluice.WithLease(ls.lease)); errors.Is(err, errors.ErrUnsupported) {
		e := errorAt(ls.path, ls.key, "policy %s cannot be leased: a lease needs a policy whose state it can debit by many tokens at once (see sluice.WithLease)", p.Kind())
		e.Err = err
		return e
	}
	return nil
}

// noStore is a driver.Store that is never called: see leaseSpec.check.
type noStore struct{}

func (noStore) Update(context.Context, string, driver.UpdateFunc) error { return driver.ErrUnavailable }
