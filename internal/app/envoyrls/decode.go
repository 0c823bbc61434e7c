package envoyrls

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Domains are the decoded domains of the envoy: section of a server config
// file, or of it and envoyproxy/ratelimit's config files (Load), with the
// settings that shape the answers. It is immutable once made and safe for
// simultaneous use. A nil *Domains has no domains and default settings.
type Domains struct {
	roots    map[string]*node
	docs     []domainDoc // as decoded, for Load to merge with files
	settings Settings
}

// domainDoc is one domain as a file or the section writes it.
type domainDoc struct {
	name        string
	at          place
	descriptors []descriptorDoc
}

// descriptorDoc is one decoded descriptor, before the domain's tree is
// built.
type descriptorDoc struct {
	key, value    string
	at            place
	rule          *rule // without statKey
	valueToMetric bool
	share         bool
	metadata      *structpb.Struct
	children      []descriptorDoc
}

// place is where something was written: a file ("" for the envoy:
// section), the YAML path in it and the line.
type place struct {
	file, path string
	line, col  int
}

func (p place) String() string {
	s := fmt.Sprintf("line %d", p.line)
	if p.file != "" {
		s = p.file + " " + s
	}
	return s
}

// descriptorKeys are the keys of a descriptor, as envoyproxy/ratelimit
// documents them.
var descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
	"detailed_metric", "value_to_metric", "share_threshold", "metadata"}

// sectionKeys are the keys only the envoy: section has: a sluice limiter
// of the limiters: section, unlimited: true, always_counted: true, which
// makes a limiter's hits a charge (see rule.counted), and
// request_limit_ceiling.
var sectionKeys = []string{"limiter", "unlimited", "always_counted", "request_limit_ceiling"}

// rateLimitKeys are the keys of a rate_limit: envoyproxy/ratelimit's, and
// unit_multiplier, which Envoy's API is taking up (envoyproxy/envoy PR
// #47307) but envoyproxy/ratelimit does not read yet.
var rateLimitKeys = []string{"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces"}

type decoder struct {
	yamlnode.Decoder
	file    string
	section bool // the envoy: section, with sectionKeys
	// limiter describes the limiters of the limiters: section; nil
	// knows none.
	limiter func(string) (LimiterInfo, bool)
}

// LimiterInfo is what Decode needs to know of a limiter of the limiters:
// section.
type LimiterInfo struct {
	// Owes reports whether its policy can owe tokens, which
	// always_counted needs.
	Owes bool
	// Slots says, when not empty, what in the limiter takes slots (a
	// concurrency policy, as in "its policy is concurrency(limit=5,
	// ttl=30s)"): Envoy's service never gives a slot back.
	Slots string
}

func (d *decoder) at(path string, n *yaml.Node) place {
	p := place{file: d.file, path: path}
	if n != nil {
		p.line, p.col = n.Line, n.Column
	}
	return p
}

// Decode decodes the YAML node of the envoy: section, whose document path
// is path (e.g. "envoy"): a list of domains as envoyproxy/ratelimit's
// config files write them, one per item, whose descriptors may also name
// a limiter of the file's limiters: section (limiter:) or be unlimited
// (unlimited: true). known reports whether a limiter name exists in the
// limiters: section. docs/envoy.md describes the format.
//
// Decoding is strict: unknown, misplaced or duplicate keys, a domain
// twice, two descriptors with the same final key at one level, a
// descriptor with more than one of limiter, rate_limit and unlimited, an
// unknown limiter and values of the wrong type are errors. Every error is
// a *yamlnode.Error, which config.LoadWith turns into a *config.Error,
// with the path of the offending node (e.g.
// "envoy[0].descriptors[1].limiter") and its line.
func Decode(path string, n *yaml.Node, known func(name string) bool) (*Domains, error) {
	return DecodeWith(path, n, func(name string) (LimiterInfo, bool) {
		return LimiterInfo{Owes: true}, known(name) // the limiter refuses a charge it cannot owe when called
	})
}

// DecodeWith is Decode that also checks, with what limiter says of a
// descriptor's limiter, that it can owe tokens when the descriptor has
// always_counted: true (sluice.Limiter.Charge; a sliding window or log,
// a shaper cannot), and that it takes no slots, an error at the
// descriptor's limiter: the slots of a concurrency limit are given back
// by the HTTP API's release, which Envoy never calls, so each request
// would keep its slot until the lease lapses, and the limit would be one
// per lease instead of in flight.
func DecodeWith(path string, n *yaml.Node, limiter func(name string) (LimiterInfo, bool)) (*Domains, error) {
	if n == nil {
		return nil, errorAt(path, nil, "must be a list of domains")
	}
	d := &decoder{section: true, limiter: limiter}
	items, err := d.List(path, n)
	if err != nil {
		return nil, err
	}
	ds := &Domains{settings: DefaultSettings()}
	for i, item := range items {
		doc, err := d.domain(yamlnode.Index(path, i), item)
		if err != nil {
			return nil, err
		}
		ds.docs = append(ds.docs, doc)
	}
	if ds.roots, err = build(ds.docs, false); err != nil {
		return nil, err
	}
	return ds, nil
}

// Limiters returns the names of the limiters of the limiters: section
// that d's descriptors name, each once, in file order.
func (d *Domains) Limiters() []string {
	var names []string
	var walk func([]descriptorDoc)
	walk = func(descs []descriptorDoc) {
		for _, desc := range descs {
			if desc.rule != nil && desc.rule.limiter != "" && !slices.Contains(names, desc.rule.limiter) {
				names = append(names, desc.rule.limiter)
			}
			walk(desc.children)
		}
	}
	if d != nil {
		for _, doc := range d.docs {
			walk(doc.descriptors)
		}
	}
	return names
}

// decodeFile decodes one envoyproxy/ratelimit config file: a domain and
// its descriptors. name is the file's path, for errors.
func decodeFile(name string, data []byte) (domainDoc, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	err := dec.Decode(&root)
	switch {
	case err != nil && err.Error() == "EOF":
		// An empty file: envoyproxy/ratelimit reads it as an empty domain.
		return domainDoc{}, fileError(place{file: name}, "config file cannot have empty domain")
	case err != nil:
		return domainDoc{}, fileError(place{file: name}, "error loading config file: %v", err)
	}
	var more yaml.Node
	if dec.Decode(&more) == nil {
		return domainDoc{}, fileError(place{file: name, line: more.Line}, "holds more than one YAML document; envoyproxy/ratelimit would read only the first")
	}
	d := &decoder{file: name}
	top := &root
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		top = root.Content[0]
	}
	if top.Kind == yaml.ScalarNode && top.ShortTag() == "!!null" {
		return domainDoc{}, fileError(d.at("", top), "config file cannot have empty domain")
	}
	doc, err := d.domain("", top)
	if e, ok := err.(*yamlnode.Error); ok {
		return domainDoc{}, fileError(place{file: name, path: e.Path, line: e.Line, col: e.Column}, "%s", e.Msg)
	}
	return doc, err
}

// domain decodes {domain, descriptors}.
func (d *decoder) domain(path string, n *yaml.Node) (domainDoc, error) {
	m, err := d.mapping(path, n, d.section)
	if err != nil {
		return domainDoc{}, err
	}
	keys := []string{"domain", "descriptors"}
	if err := m.Check(keys, nil, d.unknownKey(keys, "domain")); err != nil {
		return domainDoc{}, err
	}
	doc := domainDoc{at: d.at(path, m.Node)}
	if m.Has("domain") {
		p, v := m.Value("domain")
		if doc.name, err = d.text(p, v); err != nil {
			return domainDoc{}, err
		}
		doc.at = d.at(p, v)
	}
	if doc.name == "" {
		return domainDoc{}, errorAt(yamlnode.Join(path, "domain"), m.Node, "config file cannot have empty domain")
	}
	if m.Has("descriptors") {
		p, v := m.Value("descriptors")
		if doc.descriptors, err = d.descriptors(p, v); err != nil {
			return domainDoc{}, err
		}
	}
	return doc, nil
}

// descriptors decodes a list of descriptors; null is an empty one.
func (d *decoder) descriptors(path string, n *yaml.Node) ([]descriptorDoc, error) {
	n, err := d.Deref(path, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	items, err := d.List(path, n)
	if err != nil {
		return nil, err
	}
	out := make([]descriptorDoc, 0, len(items))
	for i, item := range items {
		desc, err := d.descriptor(yamlnode.Index(path, i), item)
		if err != nil {
			return nil, err
		}
		out = append(out, desc)
	}
	return out, nil
}

func (d *decoder) allowed() []string {
	if d.section {
		return append(slices.Clone(descriptorKeys), sectionKeys...)
	}
	return descriptorKeys
}

// mapping decodes a mapping of the format, whose keys are text, and
// explains a list item that is not a mapping in envoyproxy/ratelimit's
// words.
func (d *decoder) mapping(path string, n *yaml.Node, item bool) (*yamlnode.Mapping, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return nil, err
	}
	if item && n.Kind != yaml.MappingNode {
		return nil, errorAt(path, n, "config error, yaml file contains list of type other than map: %s", yamlnode.Describe(n))
	}
	m, err := d.Mapping(path, n)
	if err != nil {
		return nil, err
	}
	for _, k := range m.Keys {
		if tag := k.ShortTag(); tag != "!!str" {
			return nil, errorAt(yamlnode.Join(path, k.Value), k, "config error, key is not of type string: %s", k.Value)
		}
	}
	return m, nil
}

// descriptor decodes one descriptor.
func (d *decoder) descriptor(path string, n *yaml.Node) (descriptorDoc, error) {
	m, err := d.mapping(path, n, true)
	if err != nil {
		return descriptorDoc{}, err
	}
	allowed := d.allowed()
	if err := m.Check(allowed, nil, d.unknownKey(allowed, "descriptor")); err != nil {
		return descriptorDoc{}, err
	}
	desc := descriptorDoc{at: d.at(path, m.Node)}
	if m.Has("key") {
		p, v := m.Value("key")
		if desc.key, err = d.text(p, v); err != nil {
			return descriptorDoc{}, err
		}
	}
	if desc.key == "" {
		return descriptorDoc{}, errorAt(yamlnode.Join(path, "key"), m.Node, "descriptor has empty key")
	}
	if m.Has("value") {
		p, v := m.Value("value")
		if desc.value, err = d.text(p, v); err != nil {
			return descriptorDoc{}, err
		}
	}
	var shadow, quota, detailed bool
	for _, f := range []struct {
		key string
		dst *bool
	}{
		{"shadow_mode", &shadow}, {"quota_mode", &quota}, {"detailed_metric", &detailed},
		{"value_to_metric", &desc.valueToMetric}, {"share_threshold", &desc.share},
	} {
		if m.Has(f.key) {
			p, v := m.Value(f.key)
			if *f.dst, err = d.boolean(p, v); err != nil {
				return descriptorDoc{}, err
			}
		}
	}
	fk := finalKey(desc.key, desc.value)
	if desc.share && !strings.Contains(fk, "*") {
		p, v := m.Value("share_threshold")
		return descriptorDoc{}, errorAt(p, v, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", fk)
	}
	if desc.rule, err = d.rule(path, m); err != nil {
		return descriptorDoc{}, err
	}
	if desc.rule != nil {
		desc.rule.shadow, desc.rule.quota, desc.rule.detailed = shadow, quota, detailed
	}
	if m.Has("request_limit_ceiling") {
		p, v := m.Value("request_limit_ceiling")
		if desc.rule == nil || desc.rule.unlimited {
			return descriptorDoc{}, errorAt(p, v, "a ceiling bounds the limit overrides of a limited descriptor: give it a rate_limit or a limiter")
		}
		c, err := d.rateLimit(p, v)
		if err != nil {
			return descriptorDoc{}, err
		}
		if c.unlimited || c.name != "" || c.replaces != nil {
			return descriptorDoc{}, errorAt(p, v, "a ceiling is a rate: unit, requests_per_unit and unit_multiplier only")
		}
		desc.rule.ceiling = &rule{requestsPerUnit: c.requestsPerUnit, unit: c.unit, multiplier: c.multiplier}
	}
	if err := d.alwaysCounted(m, desc.rule); err != nil {
		return descriptorDoc{}, err
	}
	if m.Has("metadata") {
		p, v := m.Value("metadata")
		if desc.metadata, err = d.metadata(p, v); err != nil {
			return descriptorDoc{}, err
		}
	}
	if m.Has("descriptors") {
		p, v := m.Value("descriptors")
		if desc.children, err = d.descriptors(p, v); err != nil {
			return descriptorDoc{}, err
		}
	}
	return desc, nil
}

// unknownKey explains a key that is not allowed in a mapping of the
// given kind, naming the place where it belongs when it has one: a key in
// the wrong place, which envoyproxy/ratelimit accepts and then ignores,
// would not do what it says.
func (d *decoder) unknownKey(allowed []string, kind string) func(string) string {
	return func(k string) string {
		switch {
		case slices.Contains(rateLimitKeys, k) && kind == "descriptor":
			return fmt.Sprintf("%q belongs in the descriptor's rate_limit; envoyproxy/ratelimit would ignore it here", k)
		case slices.Contains(descriptorKeys, k) && kind == "rate_limit":
			return fmt.Sprintf("%q belongs to the descriptor, beside rate_limit; envoyproxy/ratelimit would ignore it here", k)
		case !d.section && slices.Contains(sectionKeys, k) && kind == "descriptor":
			return fmt.Sprintf("unknown key %q: a limiter of sluice's limiters: section can only be named in the envoy: section of the server's config file", k)
		}
		return fmt.Sprintf("config error, unknown key '%s'; valid keys: %s", k, strings.Join(allowed, ", "))
	}
}

// units are the rate_limit units, as envoyproxy/ratelimit reads them (in
// any case).
var units = map[string]rlsv3.RateLimitResponse_RateLimit_Unit{
	"SECOND": rlsv3.RateLimitResponse_RateLimit_SECOND,
	"MINUTE": rlsv3.RateLimitResponse_RateLimit_MINUTE,
	"HOUR":   rlsv3.RateLimitResponse_RateLimit_HOUR,
	"DAY":    rlsv3.RateLimitResponse_RateLimit_DAY,
	"WEEK":   rlsv3.RateLimitResponse_RateLimit_WEEK,
	"MONTH":  rlsv3.RateLimitResponse_RateLimit_MONTH,
	"YEAR":   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// rule decodes the descriptor's rate_limit, limiter or unlimited, or
// returns nil when it has none.
func (d *decoder) rule(path string, m *yamlnode.Mapping) (*rule, error) {
	var r *rule
	given := 0
	if m.Has("rate_limit") {
		p, v := m.Value("rate_limit")
		v, err := d.Deref(p, v)
		if err != nil {
			return nil, err
		}
		if !isNull(v) { // envoyproxy/ratelimit reads a null rate_limit as none
			if r, err = d.rateLimit(p, v); err != nil {
				return nil, err
			}
			given++
		}
	}
	if m.Has("limiter") {
		p, v := m.Value("limiter")
		name, err := d.String(p, v)
		if err != nil {
			return nil, err
		}
		var info LimiterInfo
		ok := false
		if d.limiter != nil {
			info, ok = d.limiter(name)
		}
		switch {
		case !ok:
			return nil, errorAt(p, v, "unknown limiter %q; it must be a limiter of the limiters: section", name)
		case info.Slots != "":
			return nil, errorAt(p, v, "limiter %q takes slots (%s), which Envoy's rate limit service never gives back: "+
				"each request would hold its slot until the ttl lapses, a limit per ttl instead of in flight; "+
				"hold slots with the HTTP API's /api/v1/acquire and /api/v1/release, or httplimit or grpclimit", name, info.Slots)
		}
		r = &rule{limiter: name}
		given++
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
		r = &rule{unlimited: true}
		given++
	}
	if given > 1 {
		return nil, errorAt(path, m.Node, "has more than one of limiter, rate_limit and unlimited; give one")
	}
	return r, nil
}

// owes reports whether the limiter called name, which exists, can owe
// tokens.
func (d *decoder) owes(name string) bool {
	info, _ := d.limiter(name)
	return info.Owes
}

// alwaysCounted decodes a descriptor's always_counted into r: allowed
// only beside a limiter whose policy can owe tokens, and true when given.
func (d *decoder) alwaysCounted(m *yamlnode.Mapping, r *rule) error {
	if !m.Has("always_counted") {
		return nil
	}
	p, v := m.Value("always_counted")
	counted, err := d.Bool(p, v)
	switch {
	case err != nil:
		return err
	case !counted:
		return errorAt(p, v, "must be true when given; leave it out for hits counted only when allowed")
	case r == nil || r.limiter == "":
		return errorAt(p, v, "needs a limiter: on the same descriptor; a rate_limit counts only the hits it allows")
	case !d.owes(r.limiter):
		return errorAt(p, v, "limiter %q cannot owe tokens, so its hits cannot always be counted: its policy must be a token bucket, leaky bucket, bucket, GCRA, fixed window or a compound of those", r.limiter)
	}
	r.counted = true
	return nil
}

// rateLimit decodes a rate_limit: {unit, requests_per_unit,
// unit_multiplier, unlimited, name, replaces}, as envoyproxy/ratelimit
// does: an unlimited one may not have a valid unit; any other one must.
// An unlimited one may not have a unit_multiplier either.
func (d *decoder) rateLimit(path string, n *yaml.Node) (*rule, error) {
	m, err := d.mapping(path, n, false)
	if err != nil {
		return nil, err
	}
	if err := m.Check(rateLimitKeys, nil, d.unknownKey(rateLimitKeys, "rate_limit")); err != nil {
		return nil, err
	}
	r := &rule{}
	if m.Has("unlimited") {
		p, v := m.Value("unlimited")
		if r.unlimited, err = d.boolean(p, v); err != nil {
			return nil, err
		}
	}
	var unitText string
	up, un := yamlnode.Join(path, "unit"), m.Node
	if m.Has("unit") {
		up, un = m.Value("unit")
		if unitText, err = d.text(up, un); err != nil {
			return nil, err
		}
	}
	u, valid := units[strings.ToUpper(unitText)]
	switch {
	case r.unlimited && valid:
		return nil, errorAt(up, un, "should not specify rate limit unit when unlimited")
	case !r.unlimited && !valid:
		return nil, errorAt(up, un, "invalid rate limit unit '%s'; valid units: second, minute, hour, day, week, month, year", unitText)
	}
	r.unit = u
	if r.multiplier, err = d.multiplier(m, r); err != nil {
		return nil, err
	}
	if m.Has("requests_per_unit") {
		p, v := m.Value("requests_per_unit")
		v, err := d.Deref(p, v)
		if err != nil {
			return nil, err
		}
		if !isNull(v) {
			n, err := d.Int64(p, v)
			if err != nil {
				return nil, err
			}
			// Envoy's response carries the limit as a uint32.
			if n < 0 || n > math.MaxUint32 {
				return nil, errorAt(p, v, "must be from 0 to %d, got %d", uint32(math.MaxUint32), n)
			}
			r.requestsPerUnit = uint32(n)
		}
	}
	if m.Has("name") {
		p, v := m.Value("name")
		if r.name, err = d.text(p, v); err != nil {
			return nil, err
		}
	}
	if m.Has("replaces") {
		p, v := m.Value("replaces")
		items, err := d.List(p, v)
		if err != nil {
			return nil, err
		}
		for i, item := range items {
			ip := yamlnode.Index(p, i)
			rm, err := d.mapping(ip, item, true)
			if err != nil {
				return nil, err
			}
			if err := rm.Check([]string{"name"}, nil, d.unknownKey([]string{"name"}, "replaces")); err != nil {
				return nil, err
			}
			var name string
			if rm.Has("name") {
				np, nv := rm.Value("name")
				if name, err = d.text(np, nv); err != nil {
					return nil, err
				}
			}
			switch {
			case name == "":
				return nil, errorAt(ip, rm.Node, "should not have an empty replaces entry")
			case name == r.name:
				return nil, errorAt(ip, rm.Node, "replaces should not contain name of same descriptor")
			}
			r.replaces = append(r.replaces, name)
		}
	}
	return r, nil
}

// multiplier decodes the unit_multiplier of rate_limit m, whose unit and
// unlimited r holds: 0 when it has none (or null), else a count from 1
// that fits Envoy's uint32 field and makes a window of at most maxWindow.
func (d *decoder) multiplier(m *yamlnode.Mapping, r *rule) (uint32, error) {
	if !m.Has("unit_multiplier") {
		return 0, nil
	}
	p, v := m.Value("unit_multiplier")
	v, err := d.Deref(p, v)
	if err != nil || isNull(v) {
		return 0, err
	}
	if r.unlimited {
		return 0, errorAt(p, v, "should not specify rate limit unit_multiplier when unlimited")
	}
	n, err := d.Int64(p, v)
	if err != nil {
		return 0, err
	}
	most := min(math.MaxUint32, maxWindow/unitSeconds(r.unit))
	if n < 1 || n > most {
		return 0, errorAt(p, v, "must be from 1 to %d for unit %s, got %d", most, strings.ToLower(r.unit.String()), n)
	}
	return uint32(n), nil
}

// metadata decodes a descriptor's metadata, any mapping, into the struct
// sent back in the response's dynamic metadata.
func (d *decoder) metadata(path string, n *yaml.Node) (*structpb.Struct, error) {
	n, err := d.Deref(path, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	v, err := d.anyValue(path, n)
	if err != nil {
		return nil, err
	}
	fields, ok := v.(map[string]any)
	if !ok {
		return nil, errorAt(path, n, "must be a mapping, got %s", yamlnode.Describe(n))
	}
	if len(fields) == 0 {
		return nil, nil
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, errorAt(path, n, "error parsing metadata: %v", err)
	}
	return s, nil
}

// anyValue decodes any YAML value into what structpb takes.
func (d *decoder) anyValue(path string, n *yaml.Node) (any, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		m, err := d.Mapping(path, n)
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, len(m.Keys))
		for i, k := range m.Keys {
			if out[k.Value], err = d.anyValue(yamlnode.Join(path, k.Value), m.Vals[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, item := range n.Content {
			if out[i], err = d.anyValue(yamlnode.Index(path, i), item); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		return strconv.ParseBool(n.Value)
	case "!!int":
		if v, err := d.Int64(path, n); err == nil {
			return v, nil
		}
	case "!!float":
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return v, nil
		}
	}
	return n.Value, nil
}

// errorAt locates an error at node n.
var errorAt = yamlnode.Errorf

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// text decodes a key, value, domain or name as envoyproxy/ratelimit reads
// it: any scalar as written, so that an unquoted 429 or true is the text
// "429" or "true", and null is the empty text. A float is refused, as
// there: 1.10 would not be the text it looks like.
func (d *decoder) text(path string, n *yaml.Node) (string, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return "", err
	}
	switch {
	case n.Kind != yaml.ScalarNode:
		return "", errorAt(path, n, "must be text, got %s", yamlnode.Describe(n))
	case n.ShortTag() == "!!null":
		return "", nil
	case n.ShortTag() == "!!float":
		return "", errorAt(path, n, "must be text, got %s; quote it", yamlnode.Describe(n))
	}
	return n.Value, nil
}

// boolean decodes a flag as envoyproxy/ratelimit's YAML 1.1 reads it:
// true, false, yes, no, on, off, y, n in their usual cases, or null for
// false.
func (d *decoder) boolean(path string, n *yaml.Node) (bool, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return false, err
	}
	const quoted = yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
	if n.Kind == yaml.ScalarNode && n.Style&quoted == 0 {
		switch n.Value {
		case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
			return true, nil
		case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null", "NULL":
			return false, nil
		}
	}
	return false, errorAt(path, n, "must be true or false, got %s", yamlnode.Describe(n))
}
