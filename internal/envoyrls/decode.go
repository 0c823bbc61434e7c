package envoyrls

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Domains is the decoded envoy: section of a server config file: for each
// domain, the tree of descriptors that maps a request's descriptor to a
// limiter. It is immutable once Decode returns it and safe for
// simultaneous use. A nil *Domains has no domains.
type Domains struct {
	domains map[string]*level
	inline  map[string]sluice.Policy
}

// level is one level of a descriptor tree: the nodes that the next entry
// of a request's descriptor is matched against, in the order of
// envoyproxy/ratelimit: an exact key and value, then a value prefix (a
// configured value ending in '*', in file order), then the key alone.
type level struct {
	exact  map[entry]*node
	prefix []prefixNode
	any    map[string]*node
}

type entry struct{ key, value string }

type prefixNode struct {
	key, prefix string
	node        *node
}

// node is one configured descriptor. At most one of limiter and unlimited
// is set; a node with neither only leads to its nested level.
type node struct {
	limiter   string // a limiter of the file, or the synthetic name of an inline rate_limit
	unlimited bool
	shadow    bool
	next      *level // nil without nested descriptors
}

// find returns the node that the entry key=value matches, or nil.
func (lv *level) find(key, value string) *node {
	if n := lv.exact[entry{key, value}]; n != nil {
		return n
	}
	for _, p := range lv.prefix {
		if p.key == key && strings.HasPrefix(value, p.prefix) {
			return p.node
		}
	}
	return lv.any[key]
}

// match returns the node that a request descriptor of domain matches, or
// nil. As in envoyproxy/ratelimit, every entry must be consumed: the first
// entry is matched against the domain's descriptors, each next one against
// the nested descriptors of the node before, and the node of the last
// entry decides. A descriptor with more entries than the tree is deep
// matches nothing.
func (d *Domains) match(domain string, entries []entryRef) *node {
	if d == nil {
		return nil
	}
	lv := d.domains[domain]
	var n *node
	for _, e := range entries {
		if lv == nil {
			return nil
		}
		if n = lv.find(e.key, e.value); n == nil {
			return nil
		}
		lv = n.next
	}
	return n
}

// entryRef is a request's descriptor entry.
type entryRef struct{ key, value string }

// Inline returns the limiters that descriptors define in place with
// rate_limit: {unit, requests_per_unit}, each a sluice.FixedWindow of
// requests_per_unit per unit, by the synthetic names that descriptors
// refer to: "envoy:" and the descriptor's place in its domain in the key
// format of the limiter keys, as in "envoy:edge|path=/login|user". The
// names cannot clash with those of a limiters: section, which are letters,
// digits, '_' and '-'. The server creates these limiters alongside the
// file's own, with the same store and options. The map is a copy.
func (d *Domains) Inline() map[string]sluice.Policy {
	if d == nil {
		return nil
	}
	m := make(map[string]sluice.Policy, len(d.inline))
	for k, v := range d.inline {
		m[k] = v
	}
	return m
}

// inlinePrefix starts the synthetic name of every inline limiter.
const inlinePrefix = "envoy:"

// units are the rate_limit units, as envoyproxy/ratelimit spells them
// (in any case). Months and years are left out: their length varies, and
// a sluice window has one fixed length.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
}

type decoder struct {
	yamlnode.Decoder
	known  func(string) bool
	inline map[string]sluice.Policy
}

// Decode decodes the YAML node of the envoy: section, whose document path
// is path (e.g. "envoy"): a list of domains, each with a tree of
// descriptors, as envoyproxy/ratelimit writes them; see docs/envoy.md.
// known reports whether a limiter name exists in the file's limiters:
// section.
//
// Decoding is strict: unknown or duplicate keys, a missing or duplicate
// domain, two descriptors with the same key and value at one level, a
// descriptor with more than one of limiter, rate_limit and unlimited, one
// with none of them and no nested descriptors, and an unknown limiter are
// errors. Every error is a *yamlnode.Error, which config.LoadWith turns into a
// *config.Error, with the path of the offending
// node (e.g. "envoy[0].descriptors[1].limiter") and its line.
func Decode(path string, n *yaml.Node, known func(name string) bool) (*Domains, error) {
	if n == nil {
		return nil, errorAt(path, nil, "must be a list of domains")
	}
	d := &decoder{known: known, inline: make(map[string]sluice.Policy)}
	items, err := d.List(path, n)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errorAt(path, n, "must list at least one domain")
	}
	ds := &Domains{domains: make(map[string]*level, len(items)), inline: d.inline}
	lines := make(map[string]int, len(items))
	for i, item := range items {
		p := yamlnode.Index(path, i)
		m, err := d.Strict(p, item, []string{"domain", "descriptors"}, []string{"domain", "descriptors"})
		if err != nil {
			return nil, err
		}
		dp, dn := m.Value("domain")
		name, err := d.text(dp, dn)
		if err != nil {
			return nil, err
		}
		if line, dup := lines[name]; dup {
			return nil, errorAt(dp, dn, "duplicate domain %q, first at line %d", name, line)
		}
		lines[name] = dn.Line
		lp, ln := m.Value("descriptors")
		if ds.domains[name], err = d.level(lp, ln, escape(name)); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// level decodes a list of descriptors. prefix is the key of the place
// above it, for the names of inline limiters.
func (d *decoder) level(path string, n *yaml.Node, prefix string) (*level, error) {
	items, err := d.List(path, n)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errorAt(path, n, "must list at least one descriptor")
	}
	lv := &level{exact: make(map[entry]*node), any: make(map[string]*node)}
	type seen struct {
		key, value string
		hasValue   bool
	}
	lines := make(map[seen]int, len(items))
	for i, item := range items {
		p := yamlnode.Index(path, i)
		m, err := d.Strict(p, item, []string{"key", "value", "limiter", "rate_limit", "unlimited", "shadow_mode", "descriptors"}, []string{"key"})
		if err != nil {
			return nil, err
		}
		kp, kn := m.Value("key")
		key, err := d.text(kp, kn)
		if err != nil {
			return nil, err
		}
		s, name := seen{key: key}, prefix+"|"+escape(key)
		if m.Has("value") {
			vp, vn := m.Value("value")
			if s.value, err = d.text(vp, vn); err != nil {
				return nil, err
			}
			s.hasValue = true
			name += "=" + escape(s.value)
		}
		if line, dup := lines[s]; dup {
			what := fmt.Sprintf("key %q", key)
			if s.hasValue {
				what += fmt.Sprintf(" with value %q", s.value)
			}
			return nil, errorAt(p, m.Node, "duplicate descriptor: %s, first at line %d", what, line)
		}
		lines[s] = m.Node.Line
		nd, err := d.node(p, m, name)
		if err != nil {
			return nil, err
		}
		switch {
		case !s.hasValue:
			lv.any[key] = nd
		case strings.HasSuffix(s.value, "*"):
			lv.prefix = append(lv.prefix, prefixNode{key: key, prefix: strings.TrimSuffix(s.value, "*"), node: nd})
		default:
			lv.exact[entry{key, s.value}] = nd
		}
	}
	return lv, nil
}

// node decodes the limit and the nested descriptors of the descriptor m.
func (d *decoder) node(path string, m *yamlnode.Mapping, name string) (*node, error) {
	nd := &node{}
	limits := 0
	if m.Has("limiter") {
		p, v := m.Value("limiter")
		lim, err := d.text(p, v)
		if err != nil {
			return nil, err
		}
		if d.known == nil || !d.known(lim) {
			return nil, errorAt(p, v, "unknown limiter %q; it must be a limiter of the limiters: section", lim)
		}
		nd.limiter = lim
		limits++
	}
	if m.Has("rate_limit") {
		p, v := m.Value("rate_limit")
		pol, unlimited, err := d.rateLimit(p, v)
		if err != nil {
			return nil, err
		}
		if unlimited {
			nd.unlimited = true
		} else {
			nd.limiter = inlinePrefix + name
			d.inline[nd.limiter] = pol
		}
		limits++
	}
	if m.Has("unlimited") {
		p, v := m.Value("unlimited")
		u, err := d.Bool(p, v)
		if err != nil {
			return nil, err
		}
		if !u {
			return nil, errorAt(p, v, "must be true when given; leave it out for a limited descriptor")
		}
		nd.unlimited = true
		limits++
	}
	if limits > 1 {
		return nil, errorAt(path, m.Node, "has more than one of limiter, rate_limit and unlimited; give one")
	}
	if m.Has("shadow_mode") {
		p, v := m.Value("shadow_mode")
		s, err := d.Bool(p, v)
		if err != nil {
			return nil, err
		}
		if s && nd.limiter == "" {
			return nil, errorAt(p, v, "needs a limiter or a rate_limit to shadow")
		}
		nd.shadow = s
	}
	if m.Has("descriptors") {
		p, v := m.Value("descriptors")
		var err error
		if nd.next, err = d.level(p, v, name); err != nil {
			return nil, err
		}
	}
	if limits == 0 && nd.next == nil {
		return nil, errorAt(path, m.Node, "needs a limiter, a rate_limit, unlimited: true or nested descriptors")
	}
	return nd, nil
}

// rateLimit decodes an envoyproxy/ratelimit rate_limit: {unit,
// requests_per_unit} or {unlimited: true}.
func (d *decoder) rateLimit(path string, n *yaml.Node) (sluice.Policy, bool, error) {
	m, err := d.Strict(path, n, []string{"unit", "requests_per_unit", "unlimited"}, nil)
	if err != nil {
		return nil, false, err
	}
	if m.Has("unlimited") {
		p, v := m.Value("unlimited")
		u, err := d.Bool(p, v)
		if err != nil {
			return nil, false, err
		}
		if !u {
			return nil, false, errorAt(p, v, "must be true when given; leave it out for a limited descriptor")
		}
		if m.Has("unit") || m.Has("requests_per_unit") {
			return nil, false, errorAt(path, m.Node, "unlimited excludes unit and requests_per_unit")
		}
		return nil, true, nil
	}
	for _, k := range []string{"unit", "requests_per_unit"} {
		if !m.Has(k) {
			return nil, false, errorAt(path, m.Node, "missing required key %q", k)
		}
	}
	up, un := m.Value("unit")
	u, err := d.text(up, un)
	if err != nil {
		return nil, false, err
	}
	per, ok := units[strings.ToLower(u)]
	if !ok {
		return nil, false, errorAt(up, un, "unit must be second, minute, hour, day or week, got %q", u)
	}
	rp, rn := m.Value("requests_per_unit")
	rpu, err := d.Int64(rp, rn)
	if err != nil {
		return nil, false, err
	}
	// Envoy's response carries the limit as a uint32.
	if rpu < 1 || rpu > math.MaxUint32 {
		return nil, false, errorAt(rp, rn, "must be from 1 to %d, got %d", uint32(math.MaxUint32), rpu)
	}
	return sluice.AlignedFixedWindow(rpu, per), false, nil
}

// errorAt locates an error at node n.
var errorAt = yamlnode.Errorf

// text decodes a non-empty scalar as written: descriptor keys and values
// are text that Envoy sends, so an unquoted 429 or true is the text "429"
// or "true", not a number or a bool.
func (d *decoder) text(path string, n *yaml.Node) (string, error) {
	n, err := d.Scalar(path, n, "a string")
	if err != nil {
		return "", err
	}
	if n.Value == "" {
		return "", errorAt(path, n, "must not be empty")
	}
	return n.Value, nil
}
