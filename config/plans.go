package config

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Override is a limiter's policy for some of its keys: one key, or every
// key that starts with a prefix. See Limiter.PolicyFor for which wins.
type Override struct {
	// Key is the key, or the prefix when Prefix is set.
	Key    string
	Prefix bool
	// Policy is the policy of the keys, ready for sluice.NewLimiter.
	Policy sluice.Policy
	// Line and Column locate the override's key or prefix in the file.
	Line, Column int
}

// PolicyFor is the policy of key: the override of exactly key, else that
// of the longest prefix of key, else the limiter's Policy.
func (l Limiter) PolicyFor(key string) sluice.Policy {
	var best *Override
	for i := range l.Overrides {
		o := &l.Overrides[i]
		switch {
		case !o.Prefix && o.Key == key:
			return o.Policy
		case o.Prefix && strings.HasPrefix(key, o.Key) && (best == nil || len(o.Key) > len(best.Key)):
			best = o
		}
	}
	if best != nil {
		return best.Policy
	}
	return l.Policy
}

// PolicyFunc is PolicyFor as a sluice.PolicyFunc, for sluice.WithPolicyFor;
// nil when the limiter has no overrides.
func (l Limiter) PolicyFunc() sluice.PolicyFunc {
	if len(l.Overrides) == 0 {
		return nil
	}
	return func(_ context.Context, key string) (sluice.Policy, error) { return l.PolicyFor(key), nil }
}

// planKeys are the keys of a limiter's mapping that are the limiter's
// rather than its policy's.
var planKeys = [...]string{"version", "overrides"}

// plan is what a limiter's mapping says besides its policy.
type plan struct {
	version   uint64
	overrides []overrideNode
}

// overrideNode is an override as read, its policy decoded but not yet
// resolved (a compound's members may name other limiters).
type overrideNode struct {
	o    Override
	desc *policyspec.Desc
}

// splitPlan separates the version and overrides keys of a limiter's
// mapping n, at path, from its policy's keys. It returns the mapping of
// the policy alone (n itself when it has neither key) and the plan.
func splitPlan(d *policyspec.Decoder, path string, n *yaml.Node) (*yaml.Node, plan, error) {
	m, err := d.Mapping(path, n)
	if err != nil || (!m.Has("version") && !m.Has("overrides")) {
		return n, plan{}, err // a mapping's error is the policy decoder's to report
	}
	var p plan
	if m.Has("version") {
		vpath, v := m.Value("version")
		n, err := d.Int64(vpath, v)
		if err != nil {
			return nil, plan{}, err
		}
		if n < 0 {
			return nil, plan{}, errorAt(vpath, deref(v), "must not be negative, got %d", n)
		}
		p.version = uint64(n)
	}
	if m.Has("overrides") {
		if p.overrides, err = overrides(d, m); err != nil {
			return nil, plan{}, err
		}
	}
	return without(m.Node, planKeys[:]...), p, nil
}

// overrides decodes the overrides list of m: each item a policy mapping
// with a key or a prefix.
func overrides(d *policyspec.Decoder, m *yamlnode.Mapping) ([]overrideNode, error) {
	path, v := m.Value("overrides")
	items, err := d.List(path, v)
	if err != nil {
		return nil, err
	}
	var out []overrideNode
	seen := map[Override]int{} // Key and Prefix only: the line of the first
	for i, item := range items {
		ipath := yamlnode.Index(path, i)
		im, err := d.Mapping(ipath, item)
		if err != nil {
			return nil, err
		}
		var o Override
		switch {
		case im.Has("key") && im.Has("prefix"):
			kpath, _ := im.Value("prefix")
			return nil, errorAt(kpath, im.Keys[keyIndex(im, "prefix")], "an override has a key or a prefix, not both")
		case im.Has("key"):
			kpath, kv := im.Value("key")
			if o.Key, err = d.String(kpath, kv); err != nil {
				return nil, err
			}
			o.Line, o.Column = deref(kv).Line, deref(kv).Column
		case im.Has("prefix"):
			kpath, kv := im.Value("prefix")
			if o.Key, err = d.String(kpath, kv); err != nil {
				return nil, err
			}
			if o.Key == "" {
				return nil, errorAt(kpath, deref(kv), "must not be empty: the limiter's own policy is that of every key")
			}
			o.Prefix = true
			o.Line, o.Column = deref(kv).Line, deref(kv).Column
		default:
			return nil, errorAt(ipath, im.Node, "an override needs a key or a prefix")
		}
		what := "key"
		if o.Prefix {
			what = "prefix"
		}
		if line, dup := seen[Override{Key: o.Key, Prefix: o.Prefix}]; dup {
			return nil, errorAt(yamlnode.Join(ipath, what), nodeOf(im, what), "duplicate override of %s %q, first at line %d", what, o.Key, line)
		}
		seen[Override{Key: o.Key, Prefix: o.Prefix}] = o.Line
		desc, err := d.Decode(ipath, without(im.Node, "key", "prefix"))
		if err != nil {
			return nil, err
		}
		out = append(out, overrideNode{o: o, desc: desc})
	}
	return out, nil
}

// keyIndex is the index of key k in m, which has it.
func keyIndex(m *yamlnode.Mapping, k string) int {
	for i, kn := range m.Keys {
		if kn.Value == k {
			return i
		}
	}
	return 0
}

// nodeOf is the value node of key k in m, which has it.
func nodeOf(m *yamlnode.Mapping, k string) *yaml.Node {
	_, v := m.Value(k)
	return deref(v)
}

// without is a copy of the mapping node n without the keys drop.
func without(n *yaml.Node, drop ...string) *yaml.Node {
	n = deref(n)
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if k.Kind == yaml.ScalarNode && contains(drop, k.Value) {
			continue
		}
		c.Content = append(c.Content, n.Content[i], n.Content[i+1])
	}
	return &c
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// deref follows an alias.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// plan resolves the overrides of p, whose compounds may name limiters of
// the file, and checks that a keyed limiter takes each policy.
func (r *resolver) plan(p plan) (uint64, []Override, error) {
	var out []Override
	for _, on := range p.overrides {
		if err := r.d.Resolve(on.desc, r.member); err != nil {
			return 0, nil, err
		}
		o := on.o
		o.Policy = on.desc.Policy
		if _, err := sluice.NewLimiter(o.Policy); err != nil {
			e := errorAt(on.desc.Path, on.desc.M.Node, "%v", err)
			e.Err = err
			return 0, nil, e
		}
		out = append(out, o)
	}
	return p.version, out, nil
}
