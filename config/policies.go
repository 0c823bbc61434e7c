package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// kinds are the policies of the format, by name, with the keys each
// takes besides "policy", all of them required (optional has the others).
// build builds them.
var kinds = map[string][]string{
	"fixed_window":   {"limit", "interval"},
	"sliding_window": {"limit", "interval"},
	"sliding_log":    {"limit", "interval"},
	"token_bucket":   {"limit", "rate"},
	"leaky_bucket":   {"limit", "rate"},
	"gcra":           {"limit", "rate"},
	"shaper":         {"rate", "max_queue"},
	"no_limit":       nil,
	"compound":       {"limiters"},
	"bucket":         {"limits"},
}

// optional are the keys a kind may have besides those of kinds.
var optional = map[string][]string{
	"fixed_window": {"aligned"},
}

// build decodes the keys of s, whose kind is known and whose keys have
// been checked, and builds its policy; for a compound it only decodes the
// members, which the resolver then builds.
func (d *decoder) build(s *spec) error {
	switch s.kind {
	case "fixed_window":
		policy := sluice.FixedWindow
		if s.m.Has("aligned") {
			aligned, err := d.Bool(s.m.Value("aligned"))
			if err != nil {
				return err
			}
			if aligned {
				policy = sluice.AlignedFixedWindow
			}
		}
		return d.window(s, policy)
	case "sliding_window":
		return d.window(s, sluice.SlidingWindow)
	case "sliding_log":
		return d.window(s, sluice.SlidingLog)
	case "token_bucket":
		return d.rated(s, sluice.TokenBucket)
	case "leaky_bucket":
		return d.rated(s, sluice.LeakyBucket)
	case "gcra":
		return d.rated(s, sluice.GCRA)
	case "shaper":
		return d.shaper(s)
	case "no_limit":
		s.policy = sluice.NoLimit()
		return nil
	case "compound":
		return d.compound(s)
	case "bucket":
		return d.bucket(s)
	}
	// Unreachable while kinds and build agree.
	return errorAt(s.path, s.m.Node, "policy %s cannot be built", s.kind)
}

// kindNames are the names of kinds, sorted.
var kindNames = func() []string {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}()

// spec is a decoded limiter specification, at the top level or inline in a
// compound.
type spec struct {
	path string
	m    *yamlnode.Mapping
	kind string
	// policy is the policy; for a compound it stays nil until the
	// resolver has built the members.
	policy  sluice.Policy
	bucket  *sluice.Config
	aligned bool // a bucket with intervally_aligned refill
	members []member
	leaves  int // how many non-compound policies it expands to
	// sub are the nested mappings by key ("rate"), and bandwidths those of
	// a bucket, so that a sluice.ConfigError can be traced to its node.
	sub        map[string]*yamlnode.Mapping
	bandwidths []bandwidth
}

// member is a member of a compound: the name of another limiter or an
// inline specification.
type member struct {
	path   string
	node   *yaml.Node
	name   string
	inline *spec
}

// bandwidth is the decoded mappings of one bucket bandwidth.
type bandwidth struct {
	m, refill *yamlnode.Mapping
	kind      string // the refill kind's key: "greedy", ...
}

// spec decodes a limiter specification and builds its policy, except that
// a compound's members are only decoded: see resolver.
func (d *decoder) spec(path string, n *yaml.Node) (*spec, error) {
	m, err := d.Mapping(path, n)
	if err != nil {
		return nil, err
	}
	if s, ok := d.specs[m.Node]; ok { // an alias of a specification decoded already
		return s, nil
	}
	if d.open[m.Node] {
		return nil, errorAt(path, n, "alias *%s names a limiter that contains it", n.Value)
	}
	d.open[m.Node] = true
	defer delete(d.open, m.Node)

	if !m.Has("policy") {
		return nil, errorAt(path, m.Node, "missing required key \"policy\"; one of %s", strings.Join(kindNames, ", "))
	}
	ppath, pv := m.Value("policy")
	pv = deref(pv)
	name, err := d.String(ppath, pv)
	if err != nil {
		return nil, err
	}
	keys, ok := kinds[name]
	if !ok {
		return nil, errorAt(ppath, pv, "unknown policy %q; known policies: %s", name, strings.Join(kindNames, ", "))
	}
	required := append([]string{"policy"}, keys...)
	allowed := append(slices.Clone(required), optional[name]...)
	takes := "no other key"
	if len(keys) > 0 {
		takes = strings.Join(keys, ", ")
	}
	if len(optional[name]) > 0 {
		takes += " (and optionally " + strings.Join(optional[name], ", ") + ")"
	}
	unknown := func(key string) string {
		for kind, other := range kinds {
			if slices.Contains(other, key) || slices.Contains(optional[kind], key) {
				return fmt.Sprintf("key %q is not valid for policy %s, which takes %s", key, name, takes)
			}
		}
		return fmt.Sprintf("unknown key %q; policy %s takes %s", key, name, takes)
	}
	if err := m.Check(allowed, required, unknown); err != nil {
		return nil, err
	}
	s := &spec{path: path, m: m, kind: name, leaves: 1, sub: make(map[string]*yamlnode.Mapping)}
	if err := d.build(s); err != nil {
		return nil, err
	}
	if s.policy != nil { // not a compound, which the resolver builds
		if err := s.validate(); err != nil {
			return nil, err
		}
	}
	d.specs[m.Node] = s
	return s, nil
}

// window builds a policy of a limit per interval.
func (d *decoder) window(s *spec, policy func(limit int64, interval time.Duration) sluice.Policy) error {
	limit, err := d.Int64(s.m.Value("limit"))
	if err != nil {
		return err
	}
	interval, err := d.duration(s.m.Value("interval"))
	if err != nil {
		return err
	}
	s.policy = policy(limit, interval)
	return nil
}

// rated builds a policy of a limit and a rate.
func (d *decoder) rated(s *spec, policy func(limit, amount int64, interval time.Duration) sluice.Policy) error {
	limit, err := d.Int64(s.m.Value("limit"))
	if err != nil {
		return err
	}
	amount, interval, err := d.rate(s)
	if err != nil {
		return err
	}
	s.policy = policy(limit, amount, interval)
	return nil
}

// rate decodes the rate mapping of s: {interval: D, amount: N}.
func (d *decoder) rate(s *spec) (amount int64, interval time.Duration, err error) {
	path, v := s.m.Value("rate")
	m, err := d.Mapping(path, v)
	if err != nil {
		return 0, 0, err
	}
	keys := []string{"interval", "amount"}
	if err := m.Check(keys, keys, yamlnode.PlainUnknown(keys)); err != nil {
		return 0, 0, err
	}
	s.sub["rate"] = m
	if interval, err = d.duration(m.Value("interval")); err != nil {
		return 0, 0, err
	}
	if amount, err = d.Int64(m.Value("amount")); err != nil {
		return 0, 0, err
	}
	return amount, interval, nil
}

// shaper builds a shaper: a rate and a queue bound.
func (d *decoder) shaper(s *spec) error {
	amount, interval, err := d.rate(s)
	if err != nil {
		return err
	}
	maxQueue, err := d.Int64(s.m.Value("max_queue"))
	if err != nil {
		return err
	}
	s.policy = sluice.Shaper(amount, interval, maxQueue)
	return nil
}

// compound decodes the members of a compound; the resolver builds its
// policy.
func (d *decoder) compound(s *spec) error {
	path, v := s.m.Value("limiters")
	items, err := d.List(path, v)
	if err != nil {
		return err
	}
	s.leaves = 0
	for i, item := range items {
		ipath := yamlnode.Index(path, i)
		n, err := d.Deref(ipath, item)
		if err != nil {
			return err
		}
		switch {
		case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
			s.members = append(s.members, member{path: ipath, node: n, name: n.Value})
		case n.Kind == yaml.MappingNode:
			inline, err := d.spec(ipath, item)
			if err != nil {
				return err
			}
			s.members = append(s.members, member{path: ipath, node: n, inline: inline})
		default:
			return errorAt(ipath, n, "must be the name of a limiter or a limiter mapping, got %s", yamlnode.Describe(n))
		}
	}
	return nil
}

// The refill kinds of a bandwidth, by key.
var refillKinds = []string{"greedy", "intervally", "intervally_aligned"}

// bucket builds a bucket policy of one or more bandwidths.
func (d *decoder) bucket(s *spec) error {
	path, v := s.m.Value("limits")
	items, err := d.List(path, v)
	if err != nil {
		return err
	}
	cfg := sluice.Config{Bandwidths: make([]sluice.Bandwidth, 0, len(items))}
	for i, item := range items {
		bw, bwNodes, err := d.bandwidth(yamlnode.Index(path, i), item)
		if err != nil {
			return err
		}
		if bwNodes.kind == "intervally_aligned" {
			s.aligned = true
		}
		cfg.Bandwidths = append(cfg.Bandwidths, bw)
		s.bandwidths = append(s.bandwidths, bwNodes)
	}
	s.policy = sluice.BucketPolicy(cfg)
	s.bucket = &cfg
	return nil
}

// bandwidth decodes one bandwidth of a bucket:
// {capacity: N, refill: {...}, initial: N, id: S}.
func (d *decoder) bandwidth(path string, n *yaml.Node) (sluice.Bandwidth, bandwidth, error) {
	var nodes bandwidth
	m, err := d.Mapping(path, n)
	if err != nil {
		return sluice.Bandwidth{}, nodes, err
	}
	nodes.m = m
	allowed := []string{"capacity", "refill", "initial", "id"}
	if err := m.Check(allowed, allowed[:2], yamlnode.PlainUnknown(allowed)); err != nil {
		return sluice.Bandwidth{}, nodes, err
	}
	capacity, err := d.Int64(m.Value("capacity"))
	if err != nil {
		return sluice.Bandwidth{}, nodes, err
	}
	refill, err := d.refill(&nodes)
	if err != nil {
		return sluice.Bandwidth{}, nodes, err
	}
	bw := sluice.Limit(capacity, refill)
	if m.Has("initial") {
		initial, err := d.Int64(m.Value("initial"))
		if err != nil {
			return sluice.Bandwidth{}, nodes, err
		}
		bw = bw.WithInitialTokens(initial)
	}
	if m.Has("id") {
		id, err := d.String(m.Value("id"))
		if err != nil {
			return sluice.Bandwidth{}, nodes, err
		}
		bw = bw.WithID(id)
	}
	return bw, nodes, nil
}

// refill decodes the refill of a bandwidth: exactly one of greedy,
// intervally and intervally_aligned, with per, and with first_refill and
// adaptive_initial for intervally_aligned.
func (d *decoder) refill(nodes *bandwidth) (sluice.Refill, error) {
	path, v := nodes.m.Value("refill")
	m, err := d.Mapping(path, v)
	if err != nil {
		return sluice.Refill{}, err
	}
	nodes.refill = m
	for _, k := range m.Keys {
		if !slices.Contains(refillKinds, k.Value) {
			continue
		}
		if nodes.kind != "" {
			return sluice.Refill{}, errorAt(yamlnode.Join(path, k.Value), k,
				"a refill is one of %s, got both %s and %s", strings.Join(refillKinds, ", "), nodes.kind, k.Value)
		}
		nodes.kind = k.Value
	}
	if nodes.kind == "" {
		if err := m.Check(append([]string{"per", "first_refill", "adaptive_initial"}, refillKinds...), nil,
			yamlnode.PlainUnknown(append(refillKinds, "per"))); err != nil {
			return sluice.Refill{}, err
		}
		return sluice.Refill{}, errorAt(path, m.Node, "missing the refill kind: one of %s", strings.Join(refillKinds, ", "))
	}
	allowed := []string{nodes.kind, "per"}
	if nodes.kind == "intervally_aligned" {
		allowed = append(allowed, "first_refill", "adaptive_initial")
	}
	unknown := func(key string) string {
		if key == "first_refill" || key == "adaptive_initial" {
			return fmt.Sprintf("key %q is only valid with intervally_aligned, not %s", key, nodes.kind)
		}
		return fmt.Sprintf("unknown key %q; a %s refill takes %s", key, nodes.kind, strings.Join(allowed, ", "))
	}
	required := allowed[:2]
	if nodes.kind == "intervally_aligned" {
		required = allowed[:3]
	}
	if err := m.Check(allowed, required, unknown); err != nil {
		return sluice.Refill{}, err
	}
	tokens, err := d.Int64(m.Value(nodes.kind))
	if err != nil {
		return sluice.Refill{}, err
	}
	per, err := d.duration(m.Value("per"))
	if err != nil {
		return sluice.Refill{}, err
	}
	switch nodes.kind {
	case "greedy":
		return sluice.Greedy(tokens, per), nil
	case "intervally":
		return sluice.Intervally(tokens, per), nil
	}
	first, err := d.Time(m.Value("first_refill"))
	if err != nil {
		return sluice.Refill{}, err
	}
	adaptive := false
	if m.Has("adaptive_initial") {
		if adaptive, err = d.Bool(m.Value("adaptive_initial")); err != nil {
			return sluice.Refill{}, err
		}
	}
	return sluice.IntervallyAligned(tokens, per, first, adaptive), nil
}

// validate builds a throwaway sluice.Limiter of the policy to surface the
// sluice.ConfigError of an invalid one, traced to its node. A bucket with
// aligned refill is accepted although keyed limiters reject it: see
// Limiter.Policy.
func (s *spec) validate() error {
	_, err := sluice.NewLimiter(s.policy)
	if err == nil {
		return nil
	}
	var ce *sluice.ConfigError
	if !errors.As(err, &ce) {
		return &Error{Path: s.path, Line: s.m.Node.Line, Column: s.m.Node.Column, Msg: err.Error(), Err: err}
	}
	if ce.Rule == sluice.RuleAlignedNeedsWallClock && s.aligned {
		return nil
	}
	path, n, exact := s.locate(ce)
	msg := ce.Msg
	if ce.Field != "" {
		got := ce.Value
		if n != nil && n.Kind == yaml.ScalarNode && exact {
			got = n.Value
		}
		msg = fmt.Sprintf("%s, got %s", ce.Msg, got)
		if !exact {
			msg = ce.Field + " " + msg
		}
	}
	e := errorAt(path, n, "%s", msg)
	e.Err = err
	return e
}

// fieldAliases translate the field names of sluice.ConfigError that are
// not the keys of the format: a token or leaky bucket's refill rate that
// is too high is reported on its "refill".
var fieldAliases = map[string]string{
	"refill": "rate",
}

// locate finds the node a sluice.ConfigError of s is about, and reports
// whether it found the field itself rather than falling back to the
// nearest enclosing node.
func (s *spec) locate(ce *sluice.ConfigError) (string, *yaml.Node, bool) {
	if s.kind == "bucket" {
		return s.locateBandwidth(ce)
	}
	if ce.Rule == sluice.RuleNoMembers && s.m.Has("limiters") {
		path, n := s.m.Value("limiters")
		return path, n, true
	}
	field := strings.TrimPrefix(ce.Field, s.kind+".")
	if path, n, ok := s.lookup(field); ok {
		return path, n, true
	}
	if alias, ok := fieldAliases[field]; ok {
		if path, n, ok := s.lookup(alias); ok {
			return path, n, true
		}
	}
	return s.path, s.m.Node, false
}

// lookup finds the value of a dotted key path ("rate.amount") in s.
func (s *spec) lookup(field string) (string, *yaml.Node, bool) {
	head, rest, nested := strings.Cut(field, ".")
	m := s.m
	if nested {
		if m = s.sub[head]; m == nil {
			return "", nil, false
		}
		head = rest
	}
	if !m.Has(head) {
		return "", nil, false
	}
	path, n := m.Value(head)
	return path, deref(n), true
}

// locateBandwidth finds the node a sluice.ConfigError of a bucket is about.
func (s *spec) locateBandwidth(ce *sluice.ConfigError) (string, *yaml.Node, bool) {
	if ce.Bandwidth < 0 || ce.Bandwidth >= len(s.bandwidths) {
		path, n := s.m.Value("limits")
		return path, deref(n), ce.Field == ""
	}
	bw := s.bandwidths[ce.Bandwidth]
	var m *yamlnode.Mapping
	key := ""
	switch ce.Field {
	case "capacity":
		m, key = bw.m, "capacity"
	case "initial tokens":
		m, key = bw.m, "initial"
	case "id":
		m, key = bw.m, "id"
	case "refill":
		m, key = bw.m, "refill"
	case "refill.tokens":
		m, key = bw.refill, bw.kind
	case "refill.period":
		m, key = bw.refill, "per"
	case "refill.first_refill":
		m, key = bw.refill, "first_refill"
	}
	if m == nil || !m.Has(key) {
		return bw.m.Path, bw.m.Node, ce.Field == ""
	}
	path, n := m.Value(key)
	return path, deref(n), true
}

// deref follows an alias without counting it; for locating errors.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}
