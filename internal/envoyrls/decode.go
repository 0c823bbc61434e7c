package envoyrls

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
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

// maxNodes bounds the nodes Decode visits, counting those reached through
// an alias each time, so that aliases of aliases cannot make a small file
// expand without end (the bound of package config).
const maxNodes = 1_000_000

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
	nodes  int
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
// errors. Every error is a *config.Error with the path of the offending
// node (e.g. "envoy[0].descriptors[1].limiter") and its line.
func Decode(path string, n *yaml.Node, known func(name string) bool) (*Domains, error) {
	if n == nil {
		return nil, &config.Error{Path: path, Msg: "must be a list of domains"}
	}
	d := &decoder{known: known, inline: make(map[string]sluice.Policy)}
	items, err := d.list(path, n)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errorAt(path, n, "must list at least one domain")
	}
	ds := &Domains{domains: make(map[string]*level, len(items)), inline: d.inline}
	lines := make(map[string]int, len(items))
	for i, item := range items {
		p := index(path, i)
		m, err := d.mapping(p, item, []string{"domain", "descriptors"}, []string{"domain", "descriptors"})
		if err != nil {
			return nil, err
		}
		dp, dn := m.value("domain")
		name, err := d.text(dp, dn)
		if err != nil {
			return nil, err
		}
		if line, dup := lines[name]; dup {
			return nil, errorAt(dp, dn, "duplicate domain %q, first at line %d", name, line)
		}
		lines[name] = dn.Line
		lp, ln := m.value("descriptors")
		if ds.domains[name], err = d.level(lp, ln, escape(name)); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// level decodes a list of descriptors. prefix is the key of the place
// above it, for the names of inline limiters.
func (d *decoder) level(path string, n *yaml.Node, prefix string) (*level, error) {
	items, err := d.list(path, n)
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
		p := index(path, i)
		m, err := d.mapping(p, item, []string{"key", "value", "limiter", "rate_limit", "unlimited", "shadow_mode", "descriptors"}, []string{"key"})
		if err != nil {
			return nil, err
		}
		kp, kn := m.value("key")
		key, err := d.text(kp, kn)
		if err != nil {
			return nil, err
		}
		s, name := seen{key: key}, prefix+"|"+escape(key)
		if m.has("value") {
			vp, vn := m.value("value")
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
			return nil, errorAt(p, m.node, "duplicate descriptor: %s, first at line %d", what, line)
		}
		lines[s] = m.node.Line
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
func (d *decoder) node(path string, m *mapping, name string) (*node, error) {
	nd := &node{}
	limits := 0
	if m.has("limiter") {
		p, v := m.value("limiter")
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
	if m.has("rate_limit") {
		p, v := m.value("rate_limit")
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
	if m.has("unlimited") {
		p, v := m.value("unlimited")
		u, err := d.bool(p, v)
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
		return nil, errorAt(path, m.node, "has more than one of limiter, rate_limit and unlimited; give one")
	}
	if m.has("shadow_mode") {
		p, v := m.value("shadow_mode")
		s, err := d.bool(p, v)
		if err != nil {
			return nil, err
		}
		if s && nd.limiter == "" {
			return nil, errorAt(p, v, "needs a limiter or a rate_limit to shadow")
		}
		nd.shadow = s
	}
	if m.has("descriptors") {
		p, v := m.value("descriptors")
		var err error
		if nd.next, err = d.level(p, v, name); err != nil {
			return nil, err
		}
	}
	if limits == 0 && nd.next == nil {
		return nil, errorAt(path, m.node, "needs a limiter, a rate_limit, unlimited: true or nested descriptors")
	}
	return nd, nil
}

// rateLimit decodes an envoyproxy/ratelimit rate_limit: {unit,
// requests_per_unit} or {unlimited: true}.
func (d *decoder) rateLimit(path string, n *yaml.Node) (sluice.Policy, bool, error) {
	m, err := d.mapping(path, n, []string{"unit", "requests_per_unit", "unlimited"}, nil)
	if err != nil {
		return nil, false, err
	}
	if m.has("unlimited") {
		p, v := m.value("unlimited")
		u, err := d.bool(p, v)
		if err != nil {
			return nil, false, err
		}
		if !u {
			return nil, false, errorAt(p, v, "must be true when given; leave it out for a limited descriptor")
		}
		if m.has("unit") || m.has("requests_per_unit") {
			return nil, false, errorAt(path, m.node, "unlimited excludes unit and requests_per_unit")
		}
		return nil, true, nil
	}
	for _, k := range []string{"unit", "requests_per_unit"} {
		if !m.has(k) {
			return nil, false, errorAt(path, m.node, "missing required key %q", k)
		}
	}
	up, un := m.value("unit")
	u, err := d.text(up, un)
	if err != nil {
		return nil, false, err
	}
	per, ok := units[strings.ToLower(u)]
	if !ok {
		return nil, false, errorAt(up, un, "unit must be second, minute, hour, day or week, got %q", u)
	}
	rp, rn := m.value("requests_per_unit")
	rpu, err := d.int64(rp, rn)
	if err != nil {
		return nil, false, err
	}
	// Envoy's response carries the limit as a uint32.
	if rpu < 1 || rpu > math.MaxUint32 {
		return nil, false, errorAt(rp, rn, "must be from 1 to %d, got %d", uint32(math.MaxUint32), rpu)
	}
	return sluice.FixedWindow(rpu, per), false, nil
}

// errorAt locates an error at node n, as config's own errors are.
var errorAt = config.NodeError

// deref follows an alias to the node it names and counts the node.
func (d *decoder) deref(path string, n *yaml.Node) (*yaml.Node, error) {
	d.nodes++
	if d.nodes > maxNodes {
		return nil, errorAt(path, n, "document too large: more than %d nodes once aliases are expanded", maxNodes)
	}
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	if n.Kind == yaml.AliasNode {
		return nil, errorAt(path, n, "alias *%s does not lead to a value", n.Value)
	}
	return n, nil
}

// mapping is a decoded YAML mapping with unique string keys.
type mapping struct {
	path string
	node *yaml.Node
	vals map[string]*yaml.Node
}

func (m *mapping) has(k string) bool { _, ok := m.vals[k]; return ok }

// value returns the path and value of key k, which must be there.
func (m *mapping) value(k string) (string, *yaml.Node) { return m.path + "." + k, m.vals[k] }

// mapping decodes n as a mapping whose keys are all in allowed and which
// has every key of required.
func (d *decoder) mapping(path string, n *yaml.Node, allowed, required []string) (*mapping, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, errorAt(path, n, "must be a mapping, got %s", describe(n))
	}
	m := &mapping{path: path, node: n, vals: make(map[string]*yaml.Node, len(n.Content)/2)}
	lines := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := d.deref(path, n.Content[i])
		if err != nil {
			return nil, err
		}
		kp := path + "." + k.Value
		first, dup := lines[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode:
			return nil, errorAt(path, k, "keys must be strings, got %s", describe(k))
		case k.ShortTag() == "!!merge":
			return nil, errorAt(kp, k, "merge keys (<<) are not supported")
		case dup:
			return nil, errorAt(kp, k, "duplicate key %q, first at line %d", k.Value, first)
		case !contains(allowed, k.Value):
			return nil, errorAt(kp, k, "unknown key %q; valid keys: %s", k.Value, strings.Join(allowed, ", "))
		}
		lines[k.Value] = k.Line
		m.vals[k.Value] = n.Content[i+1]
	}
	for _, k := range required {
		if !m.has(k) {
			return nil, errorAt(path, n, "missing required key %q", k)
		}
	}
	return m, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// list decodes a sequence and returns its items, not yet dereferenced.
func (d *decoder) list(path string, n *yaml.Node) ([]*yaml.Node, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, errorAt(path, n, "must be a list, got %s", describe(n))
	}
	return n.Content, nil
}

// text decodes a non-empty scalar as written: descriptor keys and values
// are text that Envoy sends, so an unquoted 429 or true is the text "429"
// or "true", not a number or a bool.
func (d *decoder) text(path string, n *yaml.Node) (string, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return "", errorAt(path, n, "must be a string, got %s", describe(n))
	}
	if n.Value == "" {
		return "", errorAt(path, n, "must not be empty")
	}
	return n.Value, nil
}

// bool decodes true or false.
func (d *decoder) bool(path string, n *yaml.Node) (bool, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return false, err
	}
	v, perr := strconv.ParseBool(n.Value)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || perr != nil {
		return false, errorAt(path, n, "must be true or false, got %s", describe(n))
	}
	return v, nil
}

// int64 decodes a decimal integer.
func (d *decoder) int64(path string, n *yaml.Node) (int64, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return 0, err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, errorAt(path, n, "must be an integer, got %s", describe(n))
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, 64)
	if err != nil {
		return 0, errorAt(path, n, "must be a decimal integer within int64, got %s", n.Value)
	}
	return v, nil
}

// describe names what a node is, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return strings.TrimPrefix(n.ShortTag(), "!!") + " " + strconv.Quote(n.Value)
	}
	return "an unexpected node"
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
