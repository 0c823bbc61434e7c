package rlqs

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Defaults of a domain's settings.
const (
	// DefaultAssignmentTTL is how long an assignment lives: longer than
	// a few of Envoy's reporting intervals (500ms in docs/envoy.md's
	// example), so that one lost report does not let it expire.
	DefaultAssignmentTTL = 2 * time.Second
	// DefaultAbandonAfter is how long a bucket of a stream may go
	// without a report, or with reports of no requests, before sluice
	// abandons it and releases its share.
	DefaultAbandonAfter = time.Minute
	// MinAssignmentTTL is the shortest assignment_ttl: Envoy reads only
	// the seconds of assignment_time_to_live, so it must be whole seconds,
	// and outlive the interval between two reports.
	MinAssignmentTTL = time.Second
)

// Any is the bucket-id value of a rule that matches any value.
const Any = "*"

// Bounds of the config, which bound the work of matching a bucket id.
const (
	// MaxRules is the most rules a domain may have.
	MaxRules = 1000
	// MaxIDEntries is the most entries of a bucket id, in a rule and in a
	// report.
	MaxIDEntries = 16
)

// Action is what a rule answers instead of a limiter's share.
type Action int

// The actions of a rule.
const (
	// Limit assigns each Envoy its share of the rule's limiter.
	Limit Action = iota
	// AllowAll assigns ALLOW_ALL: the bucket is not limited.
	AllowAll
	// DenyAll assigns DENY_ALL: every request of the bucket is denied.
	DenyAll
)

// Config is the rlqs section of a server config file: the domains whose
// bucket ids map to limiters. Decode makes it; it is immutable.
type Config struct {
	domains map[string]*Domain
	order   []string
}

// Domain is one domain of the section.
type Domain struct {
	// Name is the domain, as Envoy's filter sends it.
	Name string
	// AssignmentTTL is the assignments' time to live, AbandonAfter how
	// long a bucket may go without requests before it is abandoned.
	AssignmentTTL, AbandonAfter time.Duration
	// Unmatched is what a bucket id that no rule matches gets: AllowAll
	// (the default) or DenyAll.
	Unmatched Action
	// Rules are the rules, in file order: the first that matches a
	// bucket id decides it.
	Rules []Rule
}

// Rule maps bucket ids to a limiter or an action.
type Rule struct {
	// Match is the entries a bucket id must have: each key with the
	// value given, or with any value where it is Any. The id may have
	// other entries too; each different id is a different key of the
	// limiter, so that its limit applies per id.
	Match map[string]string
	// Limiter names the limiter of the file's limiters: section, when
	// Action is Limit.
	Limiter string
	Action  Action
	// Path is the rule's place in the file, for logs.
	Path string
}

// Domain returns the domain named name, or nil. A nil Config has none.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the domains' names in file order.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.order)
}

// Match returns the first rule of d that matches id, or nil.
func (d *Domain) Match(id map[string]string) *Rule {
	if d == nil {
		return nil
	}
	for i := range d.Rules {
		if d.Rules[i].matches(id) {
			return &d.Rules[i]
		}
	}
	return nil
}

func (r *Rule) matches(id map[string]string) bool {
	for k, want := range r.Match {
		got, ok := id[k]
		if !ok || (want != Any && got != want) {
			return false
		}
	}
	return true
}

// LimiterInfo is what Decode needs to know of a limiter of the file.
type LimiterInfo struct {
	// Window is its policy's Window: the span its limit applies to.
	Window time.Duration
	// Slots says, when not empty, what in the limiter takes slots (a
	// concurrency policy, as in "its policy is concurrency(limit=5,
	// ttl=30s)"): the quota service never gives a slot back.
	Slots string
}

// Decode decodes the rlqs section at path: a list of domains, each with
// its rules. limiter reports the limiters of the file's limiters:
// section. Its errors are *yamlnode.Error values, with the path and line.
func Decode(path string, n *yaml.Node, limiter func(name string) (LimiterInfo, bool)) (*Config, error) {
	var d yamlnode.Decoder
	items, err := d.List(path, n)
	if err != nil {
		return nil, err
	}
	c := &Config{domains: map[string]*Domain{}}
	for i, item := range items {
		p := yamlnode.Index(path, i)
		dom, err := decodeDomain(&d, p, item, limiter)
		if err != nil {
			return nil, err
		}
		if _, dup := c.domains[dom.Name]; dup {
			return nil, yamlnode.Errorf(yamlnode.Join(p, "domain"), item, "domain %q is listed twice", dom.Name)
		}
		c.domains[dom.Name] = dom
		c.order = append(c.order, dom.Name)
	}
	return c, nil
}

var domainKeys = []string{"abandon_after", "assignment_ttl", "buckets", "domain", "unmatched"}

func decodeDomain(d *yamlnode.Decoder, path string, n *yaml.Node, limiter func(string) (LimiterInfo, bool)) (*Domain, error) {
	m, err := d.Strict(path, n, domainKeys, []string{"buckets", "domain"})
	if err != nil {
		return nil, err
	}
	dom := &Domain{AssignmentTTL: DefaultAssignmentTTL, AbandonAfter: DefaultAbandonAfter, Unmatched: AllowAll}
	p, v := m.Value("domain")
	if dom.Name, err = d.String(p, v); err != nil {
		return nil, err
	}
	if dom.Name == "" {
		return nil, yamlnode.Errorf(p, v, "must not be empty: Envoy's filter always sends a domain")
	}
	if m.Has("assignment_ttl") {
		p, v := m.Value("assignment_ttl")
		if dom.AssignmentTTL, err = d.Duration(p, v); err != nil {
			return nil, err
		}
		if dom.AssignmentTTL < MinAssignmentTTL || dom.AssignmentTTL%time.Second != 0 {
			return nil, yamlnode.Errorf(p, v, "must be a whole number of seconds, at least 1s: Envoy reads only the seconds of assignment_time_to_live")
		}
	}
	if m.Has("abandon_after") {
		p, v := m.Value("abandon_after")
		if dom.AbandonAfter, err = d.Duration(p, v); err != nil {
			return nil, err
		}
		if dom.AbandonAfter < dom.AssignmentTTL {
			return nil, yamlnode.Errorf(p, v, "must be at least assignment_ttl (%v): a bucket is abandoned only once its assignment has run out", dom.AssignmentTTL)
		}
	}
	if m.Has("unmatched") {
		p, v := m.Value("unmatched")
		a, err := decodeAction(d, p, v)
		if err != nil {
			return nil, err
		}
		dom.Unmatched = a
	}
	p, v = m.Value("buckets")
	rules, err := d.List(p, v)
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, yamlnode.Errorf(p, v, "must list at least one bucket rule")
	}
	if len(rules) > MaxRules {
		return nil, yamlnode.Errorf(p, v, "must list at most %d bucket rules, got %d", MaxRules, len(rules))
	}
	for i, item := range rules {
		r, err := decodeRule(d, yamlnode.Index(p, i), item, dom.AssignmentTTL, limiter)
		if err != nil {
			return nil, err
		}
		dom.Rules = append(dom.Rules, r)
	}
	return dom, nil
}

func decodeAction(d *yamlnode.Decoder, path string, n *yaml.Node) (Action, error) {
	s, err := d.String(path, n)
	switch {
	case err != nil:
		return 0, err
	case s == "allow_all":
		return AllowAll, nil
	case s == "deny_all":
		return DenyAll, nil
	}
	return 0, yamlnode.Errorf(path, n, "must be allow_all or deny_all, got %q", s)
}

func decodeRule(d *yamlnode.Decoder, path string, n *yaml.Node, ttl time.Duration, limiter func(string) (LimiterInfo, bool)) (Rule, error) {
	m, err := d.Strict(path, n, []string{"action", "bucket", "limiter"}, []string{"bucket"})
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Path: path, Match: map[string]string{}}
	p, v := m.Value("bucket")
	id, err := d.Mapping(p, v)
	if err != nil {
		return Rule{}, err
	}
	if len(id.Keys) == 0 {
		return Rule{}, yamlnode.Errorf(p, v, "must name at least one entry of the bucket id, as in {name: api}")
	}
	if len(id.Keys) > MaxIDEntries {
		return Rule{}, yamlnode.Errorf(p, v, "must name at most %d entries, got %d", MaxIDEntries, len(id.Keys))
	}
	for i, k := range id.Keys {
		val, err := d.String(yamlnode.Join(p, k.Value), id.Vals[i])
		if err != nil {
			return Rule{}, err
		}
		if val == "" {
			return Rule{}, yamlnode.Errorf(yamlnode.Join(p, k.Value), id.Vals[i], "must not be empty; %q matches any value", Any)
		}
		r.Match[k.Value] = val
	}
	switch {
	case m.Has("limiter") == m.Has("action"):
		return Rule{}, yamlnode.Errorf(path, n, "must have either limiter or action (allow_all, deny_all)")
	case m.Has("action"):
		p, v := m.Value("action")
		if r.Action, err = decodeAction(d, p, v); err != nil {
			return Rule{}, err
		}
		return r, nil
	}
	p, v = m.Value("limiter")
	if r.Limiter, err = d.String(p, v); err != nil {
		return Rule{}, err
	}
	info, ok := limiter(r.Limiter)
	switch {
	case !ok:
		return Rule{}, yamlnode.Errorf(p, v, "names no limiter of the limiters: section")
	case info.Slots != "":
		return Rule{}, yamlnode.Errorf(p, v, "limiter %q takes slots (%s), which Envoy's rate limit quota service never gives back: "+
			"each assignment's tokens would be a slot held until the ttl lapses, a limit per ttl instead of in flight; "+
			"hold slots with the HTTP API's /api/v1/acquire and /api/v1/release, or httplimit or grpclimit", r.Limiter, info.Slots)
	case info.Window <= 0:
		return Rule{}, yamlnode.Errorf(p, v, "limiter %q has no window (no_limit?): use action: allow_all", r.Limiter)
	case ttl > info.Window/2:
		// An assignment's tokens are charged when it is sent: the refill of
		// a whole TTL, and the burst, must fit in the limit at once.
		return Rule{}, yamlnode.Errorf(p, v, "limiter %q's window is %v: assignment_ttl (%v) must be at most half of it, so that an assignment's tokens fit in the limit", r.Limiter, info.Window, ttl)
	}
	return r, nil
}

// String describes the rule, for logs: "{name=api} → limiter api".
func (r *Rule) String() string {
	keys := make([]string, 0, len(r.Match))
	for k := range r.Match {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%s", k, r.Match[k])
	}
	b.WriteByte('}')
	switch r.Action {
	case AllowAll:
		b.WriteString(" → allow_all")
	case DenyAll:
		b.WriteString(" → deny_all")
	default:
		b.WriteString(" → limiter " + r.Limiter)
	}
	return b.String()
}
