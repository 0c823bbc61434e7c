package policyspec

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

// Options are how a Decoder's input differs from a config file, whose
// descriptions it decodes by default.
type Options struct {
	// Compat admits the compatibility policies (Spec.Compat), which only
	// the conformance vectors describe.
	Compat bool
	// VectorValues reads durations and times as the conformance vectors
	// write them: a duration is Go's syntax ("1.5s") or an integer of
	// nanoseconds, a time RFC 3339 or an integer of nanoseconds since the
	// Unix epoch. By default a duration is yamlnode.ParseDuration's and a
	// bare number is an error.
	VectorValues bool
	// IgnoreUnknown lets a mapping have keys that no policy takes in it,
	// so that vectors written for a later format still load; a key of
	// another policy, or misplaced, is still an error.
	IgnoreUnknown bool
	// Unchecked builds each policy without validating it, so that values
	// sluice refuses reach the limiter that refuses them, as the vectors'
	// want_config_error cases need. By default an invalid policy is an
	// error at the offending node, wrapping the *sluice.ConfigError.
	Unchecked bool
}

// Decoder decodes limiter descriptions from parsed YAML (or JSON, through
// yamlnode.FromJSON) by the table. Its errors are *yamlnode.Error values.
// It embeds the yamlnode.Decoder that counts the nodes of the whole
// document, so that a file's other sections share the bound.
type Decoder struct {
	yamlnode.Decoder
	opts Options
	// open holds the descriptions being decoded, so that an alias to a
	// description that contains it is caught.
	open map[*yaml.Node]bool
	// descs holds the descriptions decoded, by mapping node, so that an
	// alias to one is decoded once: nested aliases would otherwise take
	// time exponential in the document's length.
	descs map[*yaml.Node]*Desc
}

// NewDecoder returns a Decoder of descriptions written as opts says.
func NewDecoder(opts Options) *Decoder {
	return &Decoder{opts: opts, open: make(map[*yaml.Node]bool), descs: make(map[*yaml.Node]*Desc)}
}

// Desc is a decoded limiter description.
type Desc struct {
	Path string
	M    *yamlnode.Mapping
	Spec *Spec
	// Policy is the policy built; for a compound it is nil until Resolve
	// has built its members, and for a compatibility policy it is nil.
	Policy sluice.Policy
	// Compat is a compatibility policy's Spec.Compat value, else nil.
	Compat any
	// Bucket is the configuration of a policy of bandwidths (a bucket),
	// for a single sluice.NewBucket; nil for every other policy.
	Bucket *sluice.BucketConfig
	// Aligned reports a bucket with intervally_aligned refill, which
	// keyed limiters cannot run.
	Aligned bool
	// Members are a compound's members, decoded, not yet built.
	Members []Member
	// Leaves is how many policies other than compounds it expands to.
	Leaves int

	args Args
	// sub are the nested mappings by key ("rate"), and bandwidths those
	// of a bucket, so that a sluice.ConfigError can be traced to its node.
	sub        map[string]*yamlnode.Mapping
	bandwidths []bandwidth
}

// Member is a member of a compound: the name of another limiter, or a
// description written in place.
type Member struct {
	Path   string
	Node   *yaml.Node
	Name   string // "" for a description in place
	Inline *Desc
}

// bandwidth is the decoded mappings of one bucket bandwidth.
type bandwidth struct {
	m, refill *yamlnode.Mapping
	kind      string // the refill kind's key: "greedy", ...
}

// admits reports whether the decoder takes s.
func (d *Decoder) admits(s *Spec) bool { return s.Compat == nil || d.opts.Compat }

// check is m.Check, except that with IgnoreUnknown the keys outside known
// are let through.
func (d *Decoder) check(m *yamlnode.Mapping, allowed, required, known []string, unknown func(string) string) error {
	if d.opts.IgnoreUnknown {
		for _, k := range m.Keys {
			if !slices.Contains(known, k.Value) {
				allowed = append(slices.Clip(allowed), k.Value)
			}
		}
	}
	return m.Check(allowed, required, unknown)
}

// Decode decodes the description at n and builds its policy, except that
// a compound's members are only decoded: Resolve builds it.
func (d *Decoder) Decode(path string, n *yaml.Node) (*Desc, error) {
	m, err := d.Mapping(path, n)
	if err != nil {
		return nil, err
	}
	if s, ok := d.descs[m.Node]; ok { // an alias of a description decoded already
		return s, nil
	}
	if d.open[m.Node] {
		return nil, yamlnode.Errorf(path, n, "alias *%s names a limiter that contains it", n.Value)
	}
	d.open[m.Node] = true
	defer delete(d.open, m.Node)

	known := names(d.opts.Compat)
	if !m.Has("policy") {
		return nil, yamlnode.Errorf(path, m.Node, "missing required key \"policy\"; one of %s", strings.Join(known, ", "))
	}
	ppath, pv := m.Value("policy")
	name, err := d.String(ppath, pv)
	if err != nil {
		return nil, err
	}
	spec, ok := Lookup(name)
	if !ok || !d.admits(spec) {
		return nil, yamlnode.Errorf(ppath, deref(pv), "unknown policy %q; known policies: %s", name, strings.Join(known, ", "))
	}
	if err := d.checkFields(m, spec); err != nil {
		return nil, err
	}
	s := &Desc{Path: path, M: m, Spec: spec, Leaves: 1, args: Args{}, sub: make(map[string]*yamlnode.Mapping)}
	for _, f := range spec.Fields {
		if m.Has(f.Name) {
			if err := d.field(s, f); err != nil {
				return nil, err
			}
		}
	}
	if spec.Check != nil {
		if field, msg := spec.Check(s.args); msg != "" {
			path, n := m.Value(field)
			return nil, yamlnode.Errorf(path, deref(n), "%s", msg)
		}
	}
	switch {
	case hasType(spec, Members) || hasType(spec, Inner):
		s.Leaves = 0 // Resolve counts the members'
	case spec.Compat != nil:
		s.Compat = spec.Compat(s.args)
	default:
		s.Policy = spec.Policy(s.args)
		if err := d.validate(s); err != nil {
			return nil, err
		}
	}
	d.descs[m.Node] = s
	return s, nil
}

// hasType reports whether spec has a field of type t.
func hasType(spec *Spec, t Type) bool {
	return slices.ContainsFunc(spec.Fields, func(f Field) bool { return f.Type == t })
}

// checkFields checks the keys of m against the fields of spec: every
// required one, and no other key, with a message naming the policy that
// takes a key given to the wrong one.
func (d *Decoder) checkFields(m *yamlnode.Mapping, spec *Spec) error {
	required, optional := []string{"policy"}, []string(nil)
	for _, f := range spec.Fields {
		if f.Required {
			required = append(required, f.Name)
		} else {
			optional = append(optional, f.Name)
		}
	}
	takes := "no other key"
	if len(required) > 1 {
		takes = strings.Join(required[1:], ", ")
	}
	if len(optional) > 0 {
		takes += " (and optionally " + strings.Join(optional, ", ") + ")"
	}
	known := []string{"policy"}
	for _, other := range table {
		if d.admits(&other) {
			for _, f := range other.Fields {
				known = append(known, f.Name)
			}
		}
	}
	unknown := func(key string) string {
		if slices.Contains(known, key) {
			return fmt.Sprintf("key %q is not valid for policy %s, which takes %s", key, spec.Name, takes)
		}
		return fmt.Sprintf("unknown key %q; policy %s takes %s", key, spec.Name, takes)
	}
	return d.check(m, append(required, optional...), required, known, unknown)
}

// field decodes the field f of s, which s has, into s.args.
func (d *Decoder) field(s *Desc, f Field) error {
	path, v := s.M.Value(f.Name)
	var (
		val any
		err error
	)
	switch f.Type {
	case Int:
		val, err = d.Int64(path, v)
	case Duration:
		val, err = d.duration(path, v)
	case Rate:
		val, err = d.rate(s, f.Name)
	case Bool:
		val, err = d.Bool(path, v)
	case Float:
		val, err = d.Float64(path, v)
	case Members:
		err = d.members(s, path, v)
	case Inner:
		err = d.member(s, path, v)
	case String:
		val, err = d.String(path, v)
	case Zone:
		val, err = d.zone(path, v)
	case Durations:
		val, err = d.durations(path, v)
	case Bandwidths:
		val, err = d.bandwidths(s, path, v)
	default:
		err = yamlnode.Errorf(path, v, "field %s of policy %s has no type", f.Name, s.Spec.Name)
	}
	if err != nil {
		return err
	}
	if val != nil {
		s.args[f.Name] = val
	}
	return nil
}

// duration decodes a duration as Options.VectorValues says.
func (d *Decoder) duration(path string, n *yaml.Node) (time.Duration, error) {
	if !d.opts.VectorValues {
		return d.Duration(path, n)
	}
	n, err := d.Scalar(path, n, "a duration")
	if err != nil {
		return 0, err
	}
	if n.ShortTag() == "!!int" {
		ns, err := d.Int64(path, n)
		return time.Duration(ns), err
	}
	v, err := time.ParseDuration(n.Value)
	if n.ShortTag() != "!!str" || err != nil {
		return 0, yamlnode.Errorf(path, n, "must be a Go duration string or an integer of nanoseconds, got %s", yamlnode.Describe(n))
	}
	return v, nil
}

// time decodes a time as Options.VectorValues says.
func (d *Decoder) time(path string, n *yaml.Node) (time.Time, error) {
	if v := deref(n); d.opts.VectorValues && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
		ns, err := d.Int64(path, n)
		return time.Unix(0, ns), err
	}
	return d.Time(path, n)
}

// rate decodes the Rate field key of s: {interval: D, amount: N}.
func (d *Decoder) rate(s *Desc, key string) (PerInterval, error) {
	path, v := s.M.Value(key)
	m, err := d.Mapping(path, v)
	if err != nil {
		return PerInterval{}, err
	}
	keys := []string{"interval", "amount"}
	if err := d.check(m, keys, keys, keys, yamlnode.PlainUnknown(keys)); err != nil {
		return PerInterval{}, err
	}
	s.sub[key] = m
	var r PerInterval
	if r.Interval, err = d.duration(m.Value("interval")); err != nil {
		return PerInterval{}, err
	}
	if r.Amount, err = d.Int64(m.Value("amount")); err != nil {
		return PerInterval{}, err
	}
	return r, nil
}

// members decodes the members of a compound; Resolve builds it.
func (d *Decoder) members(s *Desc, path string, v *yaml.Node) error {
	items, err := d.List(path, v)
	if err != nil {
		return err
	}
	for i, item := range items {
		if err := d.member(s, yamlnode.Index(path, i), item); err != nil {
			return err
		}
	}
	return nil
}

// member decodes one member, at path, of the compound or wrapper s.
func (d *Decoder) member(s *Desc, path string, item *yaml.Node) error {
	n, err := d.Deref(path, item)
	if err != nil {
		return err
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		s.Members = append(s.Members, Member{Path: path, Node: n, Name: n.Value})
	case n.Kind == yaml.MappingNode:
		inline, err := d.Decode(path, item)
		if err != nil {
			return err
		}
		s.Members = append(s.Members, Member{Path: path, Node: n, Inline: inline})
	default:
		return yamlnode.Errorf(path, n, "must be the name of a limiter or a limiter mapping, got %s", yamlnode.Describe(n))
	}
	return nil
}

// zone decodes an IANA time zone name ("Europe/Paris", "UTC").
func (d *Decoder) zone(path string, n *yaml.Node) (*time.Location, error) {
	name, err := d.String(path, n)
	if err != nil {
		return nil, err
	}
	// LoadLocation takes "" and "Local" too, which are not zones a file
	// can mean the same by on every machine.
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return nil, yamlnode.Errorf(path, deref(n), "unknown time zone %q: want an IANA name such as Europe/Paris or UTC", name)
	}
	return loc, nil
}

// durations decodes a list of durations.
func (d *Decoder) durations(path string, v *yaml.Node) ([]time.Duration, error) {
	items, err := d.List(path, v)
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, len(items))
	for i, item := range items {
		dur, err := d.duration(yamlnode.Index(path, i), item)
		if err != nil {
			return nil, err
		}
		out = append(out, dur)
	}
	return out, nil
}

// maxLeaves bounds the policies a compound expands to, counting a limiter
// each time it is named: compounds of compounds that each name the one
// below twice grow exponentially.
const maxLeaves = 1000

// Resolve builds the policy of a compound from its members, decoding
// those that name other limiters with named (which resolves them in turn,
// and catches cycles). It does nothing to a description built already.
func (d *Decoder) Resolve(s *Desc, named func(m Member) (*Desc, error)) error {
	if s.Policy != nil || s.Compat != nil {
		return nil
	}
	members := make([]sluice.Policy, 0, len(s.Members))
	for _, m := range s.Members {
		ms := m.Inline
		if ms != nil {
			if err := d.Resolve(ms, named); err != nil {
				return err
			}
		} else {
			var err error
			if ms, err = named(m); err != nil {
				return err
			}
		}
		switch {
		case ms.Policy == nil:
			return yamlnode.Errorf(m.Path, m.Node, "policy %s cannot be a member of a %s", ms.Spec.Name, s.Spec.Name)
		case ms.Aligned:
			return yamlnode.Errorf(m.Path, m.Node,
				"a bucket with intervally_aligned refill cannot be a member: keyed limiters cannot refill on a wall-clock grid")
		}
		s.Leaves += ms.Leaves
		if s.Leaves > maxLeaves {
			return yamlnode.Errorf(s.Path, s.M.Node, "expands to more than %d policies", maxLeaves)
		}
		members = append(members, ms.Policy)
	}
	for _, f := range s.Spec.Fields {
		switch f.Type {
		case Members:
			s.args[f.Name] = members
		case Inner:
			s.args[f.Name] = members[0]
		}
	}
	s.Policy = s.Spec.Policy(s.args)
	return d.validate(s)
}

// The refill kinds of a bandwidth, by key.
var refillKinds = []string{"greedy", "intervally", "intervally_aligned"}

// bandwidths decodes the bandwidths of a bucket.
func (d *Decoder) bandwidths(s *Desc, path string, v *yaml.Node) ([]sluice.Bandwidth, error) {
	items, err := d.List(path, v)
	if err != nil {
		return nil, err
	}
	bws := make([]sluice.Bandwidth, 0, len(items))
	for i, item := range items {
		bw, nodes, err := d.bandwidth(yamlnode.Index(path, i), item)
		if err != nil {
			return nil, err
		}
		if nodes.kind == "intervally_aligned" {
			s.Aligned = true
		}
		bws = append(bws, bw)
		s.bandwidths = append(s.bandwidths, nodes)
	}
	s.Bucket = &sluice.BucketConfig{Bandwidths: slices.Clone(bws)}
	return bws, nil
}

// bandwidth decodes one bandwidth of a bucket:
// {capacity: N, refill: {...}, initial: N, id: S}.
func (d *Decoder) bandwidth(path string, n *yaml.Node) (sluice.Bandwidth, bandwidth, error) {
	var nodes bandwidth
	m, err := d.Mapping(path, n)
	if err != nil {
		return sluice.Bandwidth{}, nodes, err
	}
	nodes.m = m
	allowed := []string{"capacity", "refill", "initial", "id"}
	if err := d.check(m, allowed, allowed[:2], allowed, yamlnode.PlainUnknown(allowed)); err != nil {
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
	bw := sluice.Capacity(capacity, refill)
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
func (d *Decoder) refill(nodes *bandwidth) (sluice.Refill, error) {
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
			return sluice.Refill{}, yamlnode.Errorf(yamlnode.Join(path, k.Value), k,
				"a refill is one of %s, got both %s and %s", strings.Join(refillKinds, ", "), nodes.kind, k.Value)
		}
		nodes.kind = k.Value
	}
	known := append([]string{"per", "first_refill", "adaptive_initial"}, refillKinds...)
	if nodes.kind == "" {
		if err := d.check(m, known, nil, known, yamlnode.PlainUnknown(append(refillKinds, "per"))); err != nil {
			return sluice.Refill{}, err
		}
		return sluice.Refill{}, yamlnode.Errorf(path, m.Node, "missing the refill kind: one of %s", strings.Join(refillKinds, ", "))
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
	if err := d.check(m, allowed, required, known, unknown); err != nil {
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
	first, err := d.time(m.Value("first_refill"))
	if err != nil {
		return sluice.Refill{}, err
	}
	adaptive := false
	if m.Has("adaptive_initial") {
		if adaptive, err = d.Bool(m.Value("adaptive_initial")); err != nil {
			return sluice.Refill{}, err
		}
	}
	if adaptive {
		return sluice.IntervallyAlignedAdaptive(tokens, per, first), nil
	}
	return sluice.IntervallyAligned(tokens, per, first), nil
}

// validate builds a throwaway sluice.Limiter of the policy to surface the
// sluice.ConfigError of an invalid one, traced to its node. A bucket with
// aligned refill is accepted although keyed limiters reject it: see
// Desc.Bucket. With Options.Unchecked it does nothing.
func (d *Decoder) validate(s *Desc) error {
	if d.opts.Unchecked {
		return nil
	}
	_, err := sluice.NewLimiter(s.Policy)
	if err == nil {
		return nil
	}
	var ce *sluice.ConfigError
	if !errors.As(err, &ce) {
		return &yamlnode.Error{Path: s.Path, Line: s.M.Node.Line, Column: s.M.Node.Column, Msg: err.Error(), Err: err}
	}
	if ce.Rule == sluice.RuleAlignedNeedsWallClock && s.Aligned {
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
	e := yamlnode.Errorf(path, n, "%s", msg)
	e.Err = err
	return e
}

// locate finds the node a sluice.ConfigError of s is about, and reports
// whether it found the field itself rather than falling back to the
// nearest enclosing node.
func (s *Desc) locate(ce *sluice.ConfigError) (string, *yaml.Node, bool) {
	for _, f := range s.Spec.Fields {
		switch {
		case f.Type == Bandwidths:
			return s.locateBandwidth(ce, f.Name)
		case f.Type == Members && ce.Rule == sluice.RuleNoMembers && s.M.Has(f.Name):
			path, n := s.M.Value(f.Name)
			return path, n, true
		}
	}
	field := strings.TrimPrefix(ce.Field, s.Spec.Name+".")
	if path, n, ok := s.lookup(field); ok {
		return path, n, true
	}
	return s.Path, s.M.Node, false
}

// lookup finds the value of a dotted key path ("rate.amount") in s.
func (s *Desc) lookup(field string) (string, *yaml.Node, bool) {
	head, rest, nested := strings.Cut(field, ".")
	m := s.M
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

// locateBandwidth finds the node a sluice.ConfigError of a bucket, whose
// bandwidths are its field key, is about.
func (s *Desc) locateBandwidth(ce *sluice.ConfigError, key string) (string, *yaml.Node, bool) {
	if ce.Bandwidth < 0 || ce.Bandwidth >= len(s.bandwidths) {
		path, n := s.M.Value(key)
		return path, deref(n), ce.Field == ""
	}
	bw := s.bandwidths[ce.Bandwidth]
	var m *yamlnode.Mapping
	key = ""
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
