package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlnode"
	"github.com/sluicehq/sluice/resilience"
)

// Resilience4j is a loaded Resilience4j configuration: the rate limiters
// and time limiters of its instances, each with the numbers Resilience4j
// would build it with.
type Resilience4j struct {
	// RateLimiters are the instances of resilience4j.ratelimiter, by name.
	RateLimiters map[string]RateLimiterInstance
	// TimeLimiters are the instances of resilience4j.timelimiter, by name.
	TimeLimiters map[string]TimeLimiterInstance
	// RateLimiterOrder and TimeLimiterOrder are their names in file
	// order.
	RateLimiterOrder, TimeLimiterOrder []string
	// Notes are the settings accepted but not applied, in file order.
	Notes []Note
}

// RateLimiterInstance is one instance of resilience4j.ratelimiter.
type RateLimiterInstance struct {
	Name   string
	Config resilience.Config
	// Line and Column locate the instance's name in the file.
	Line, Column int
}

// TimeLimiterInstance is one instance of resilience4j.timelimiter.
type TimeLimiterInstance struct {
	Name   string
	Config resilience.TimeLimiterConfig
	// Line and Column locate the instance's name in the file.
	Line, Column int
}

// NewRateLimiter returns a rate limiter of the instance called name, or an
// error matching ErrNoInstance when the file has none.
func (r *Resilience4j) NewRateLimiter(name string, opts ...resilience.Option) (*resilience.RateLimiter, error) {
	inst, ok := r.RateLimiters[name]
	if !ok {
		return nil, fmt.Errorf("config: resilience4j.ratelimiter has no instance %q: %w", name, ErrNoInstance)
	}
	return resilience.New(inst.Config, opts...)
}

// NewTimeLimiter returns a time limiter of the instance called name, or an
// error matching ErrNoInstance when the file has none.
func (r *Resilience4j) NewTimeLimiter(name string, opts ...resilience.TimeLimiterOption) (*resilience.TimeLimiter, error) {
	inst, ok := r.TimeLimiters[name]
	if !ok {
		return nil, fmt.Errorf("config: resilience4j.timelimiter has no instance %q: %w", name, ErrNoInstance)
	}
	return resilience.NewTimeLimiter(inst.Config, opts...)
}

// ErrNoInstance is the error of NewRateLimiter and NewTimeLimiter for a
// name the file does not give an instance.
var ErrNoInstance = errors.New("no such instance")

// LoadResilience4j decodes the Resilience4j sections of a Spring Boot
// application.yml, as it is:
//
//	resilience4j:
//	  ratelimiter:
//	    configs:
//	      default: {limitForPeriod: 10, limitRefreshPeriod: 1s, timeoutDuration: 0}
//	    instances:
//	      backendA: {baseConfig: default}
//	      backendB: {limitForPeriod: 6, limitRefreshPeriod: 500ms, timeoutDuration: 3s}
//	  timelimiter:
//	    instances:
//	      backendA: {timeoutDuration: 2s, cancelRunningFuture: true}
//
// It builds each instance as Resilience4j's Spring Boot binding does: an
// instance with baseConfig starts from that config (which may itself have
// a baseConfig), one without it from the config called default when there
// is one, and otherwise from Resilience4j's defaults (resilience.DefaultConfig,
// resilience.DefaultTimeLimiterConfig); its own properties override
// those. limiters is read as instances, as Resilience4j does for older
// files.
//
// Keys are read with Spring's relaxed binding: limit-for-period,
// limitForPeriod and limit_for_period are one key, and a key with dots
// (resilience4j.ratelimiter.instances.backendA.limitForPeriod: 5) is the
// nesting it spells. Durations are Spring's: a whole number of
// milliseconds (0, 500), a number with a unit (ns, us, ms, s, m, h, d:
// 1s, 500ms) or ISO-8601 (PT1S, PT0.5S, P1DT2H).
//
// Settings with no meaning in sluice are accepted and reported in Notes:
// the health indicator, event buffer and stack trace properties, the
// other Resilience4j modules (circuitbreaker, retry, bulkhead, ...) and
// the file's other top-level keys (spring, server, ...). A key that
// Resilience4j does not define for a limiter is an error, as is a
// baseConfig that names no config or that forms a cycle. Errors are
// *Error values with the path and line.
func LoadResilience4j(data []byte) (*Resilience4j, error) {
	r, err := loadResilience4j(data)
	if ne, ok := err.(*yamlnode.Error); ok {
		return nil, fromNode(ne)
	}
	return r, err
}

// LoadResilience4jFile reads the file at path and loads it with
// LoadResilience4j. Its *Error values have File set to path.
func LoadResilience4jFile(path string) (*Resilience4j, error) {
	return loadFile(path, LoadResilience4j)
}

// r4jTree is a YAML mapping with Spring's dotted keys expanded: each
// node is a branch (kids) or a leaf (val).
type r4jTree struct {
	path string
	key  *yaml.Node // the key that names it; nil at the root
	node *yaml.Node // the mapping of a branch
	val  *yaml.Node // a leaf's value, nil for a branch
	kids []*r4jTree
}

// canon is a key in Spring's uniform form: lower case, without dashes and
// underscores.
func canon(k string) string {
	return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(k))
}

// kid returns the child whose key is seg, compared in uniform form when
// uniform is set.
func (t *r4jTree) kid(seg string, uniform bool) *r4jTree {
	for _, k := range t.kids {
		if k.seg() == seg || uniform && canon(k.seg()) == canon(seg) {
			return k
		}
	}
	return nil
}

// seg is the last segment of t's path.
func (t *r4jTree) seg() string { return t.path[strings.LastIndex(t.path, ".")+1:] }

// r4jBuild builds the tree of n at path.
func r4jBuild(d *yamlnode.Decoder, path string, key, n *yaml.Node) (*r4jTree, error) {
	v, err := d.Deref(path, n)
	if err != nil {
		return nil, err
	}
	if v.Kind != yaml.MappingNode {
		return &r4jTree{path: path, key: key, val: v}, nil
	}
	m, err := d.Mapping(path, v)
	if err != nil {
		return nil, err
	}
	t := &r4jTree{path: path, key: key, node: v}
	for i, k := range m.Keys {
		segs := strings.Split(k.Value, ".")
		if slices.Contains(segs, "") {
			return nil, errorAt(yamlnode.Join(path, k.Value), k, "a key with dots must not have an empty part")
		}
		parent := t
		for _, seg := range segs[:len(segs)-1] {
			next := parent.kid(seg, false)
			if next == nil {
				next = &r4jTree{path: yamlnode.Join(parent.path, seg), key: k, node: k}
				parent.kids = append(parent.kids, next)
			} else if next.val != nil {
				return nil, errorAt(next.path, k, "is both a value (line %d) and a mapping", next.key.Line)
			}
			parent = next
		}
		last := segs[len(segs)-1]
		sub, err := r4jBuild(d, yamlnode.Join(parent.path, last), k, m.Vals[i])
		if err != nil {
			return nil, err
		}
		if err := r4jMerge(parent, sub); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// r4jMerge adds sub to parent's kids, merging it into a branch of the same
// key that dotted keys made.
func r4jMerge(parent, sub *r4jTree) error {
	have := parent.kid(sub.seg(), false)
	if have == nil {
		parent.kids = append(parent.kids, sub)
		return nil
	}
	if have.val != nil || sub.val != nil {
		return errorAt(sub.path, sub.key, "set twice, first at line %d", have.key.Line)
	}
	for _, k := range sub.kids {
		if err := r4jMerge(have, k); err != nil {
			return err
		}
	}
	return nil
}

// r4jKind is what tells the two modules apart.
type r4jKind struct {
	name  string   // ratelimiter, timelimiter
	props []string // the properties applied, in uniform form
	noted []string // the properties accepted and not applied
}

var (
	r4jRate = r4jKind{name: "ratelimiter",
		props: []string{"limitforperiod", "limitrefreshperiod", "timeoutduration", "baseconfig"},
		noted: []string{"registerhealthindicator", "allowhealthindicatortofail", "subscribeforevents", "eventconsumerbuffersize", "writablestacktraceenabled"}}
	r4jTime = r4jKind{name: "timelimiter",
		props: []string{"timeoutduration", "cancelrunningfuture", "baseconfig"},
		noted: []string{"eventconsumerbuffersize"}}
)

// r4jProps are one instance's or config's properties, by uniform name.
type r4jProps struct {
	name  string
	tree  *r4jTree
	props map[string]*r4jTree
}

// r4jSection is a module's configs and instances.
type r4jSection struct {
	kind      r4jKind
	configs   map[string]*r4jProps
	instances []*r4jProps
}

type r4jLoader struct {
	d     yamlnode.Decoder
	notes []Note
}

func (l *r4jLoader) note(t *r4jTree, format string, args ...any) {
	n := Note{Path: t.path, Msg: fmt.Sprintf(format, args...)}
	if t.key != nil {
		n.Line, n.Column = t.key.Line, t.key.Column
	}
	l.notes = append(l.notes, n)
}

func loadResilience4j(data []byte) (*Resilience4j, error) {
	root, err := parse(data, format{
		empty:  "the file is empty; it must have resilience4j.ratelimiter or resilience4j.timelimiter instances",
		second: "a second YAML document (a Spring profile?): which profiles are active is the application's choice; load a file of one document",
	})
	if err != nil {
		return nil, err
	}
	l := &r4jLoader{}
	top, err := r4jBuild(&l.d, "", nil, root)
	if err != nil {
		return nil, err
	}
	if top.val != nil {
		return nil, errorAt("", root, "must be a mapping, got %s", yamlnode.Describe(root))
	}
	var r4j *r4jTree
	for _, k := range top.kids {
		if canon(k.seg()) == "resilience4j" {
			r4j = k
			continue
		}
		l.note(k, "not a Resilience4j setting; ignored")
	}
	if r4j == nil || r4j.val != nil {
		return nil, errorAt("", root, `missing resilience4j.ratelimiter or resilience4j.timelimiter`)
	}
	out := &Resilience4j{RateLimiters: map[string]RateLimiterInstance{}, TimeLimiters: map[string]TimeLimiterInstance{}}
	var rate, tl *r4jSection
	for _, k := range r4j.kids {
		switch canon(k.seg()) {
		case "ratelimiter":
			if rate, err = l.section(k, r4jRate); err != nil {
				return nil, err
			}
		case "timelimiter":
			if tl, err = l.section(k, r4jTime); err != nil {
				return nil, err
			}
		default:
			l.note(k, "not applicable: sluice has Resilience4j's RateLimiter and TimeLimiter only")
		}
	}
	if (rate == nil || len(rate.instances) == 0) && (tl == nil || len(tl.instances) == 0) {
		return nil, errorAt(r4j.path, r4j.key, "no instances: the file must have resilience4j.ratelimiter.instances or resilience4j.timelimiter.instances")
	}
	if rate != nil {
		for _, inst := range rate.instances {
			cfg, err := l.rateConfig(rate, inst, nil)
			if err != nil {
				return nil, err
			}
			out.RateLimiters[inst.name] = RateLimiterInstance{Name: inst.name, Config: cfg.cfg, Line: inst.tree.key.Line, Column: inst.tree.key.Column}
			out.RateLimiterOrder = append(out.RateLimiterOrder, inst.name)
		}
	}
	if tl != nil {
		for _, inst := range tl.instances {
			cfg, err := l.timeConfig(tl, inst, nil)
			if err != nil {
				return nil, err
			}
			out.TimeLimiters[inst.name] = TimeLimiterInstance{Name: inst.name, Config: cfg.cfg, Line: inst.tree.key.Line, Column: inst.tree.key.Column}
			out.TimeLimiterOrder = append(out.TimeLimiterOrder, inst.name)
		}
	}
	out.Notes = l.notes
	return out, nil
}

// section reads a module's configs and instances.
func (l *r4jLoader) section(t *r4jTree, kind r4jKind) (*r4jSection, error) {
	if t.val != nil {
		return nil, errorAt(t.path, t.val, "must be a mapping, got %s", yamlnode.Describe(t.val))
	}
	s := &r4jSection{kind: kind, configs: map[string]*r4jProps{}}
	for _, k := range t.kids {
		switch canon(k.seg()) {
		case "configs":
			ps, err := l.propsList(k, kind)
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				s.configs[p.name] = p
			}
		case "instances", "limiters":
			ps, err := l.propsList(k, kind)
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if slices.ContainsFunc(s.instances, func(q *r4jProps) bool { return q.name == p.name }) {
					return nil, errorAt(p.tree.path, p.tree.key, "instance %q is given twice (instances and limiters)", p.name)
				}
				s.instances = append(s.instances, p)
			}
		case "metrics", "tags":
			l.note(k, "not applicable: export sluice's metrics with sluiceprom or sluiceotel")
		default:
			return nil, errorAt(k.path, k.key, "unknown key %q; valid keys: configs, instances", k.seg())
		}
	}
	return s, nil
}

// propsList reads the named property sets under t.
func (l *r4jLoader) propsList(t *r4jTree, kind r4jKind) ([]*r4jProps, error) {
	if t.val != nil {
		if t.val.ShortTag() == "!!null" {
			return nil, nil
		}
		return nil, errorAt(t.path, t.val, "must be a mapping of names, got %s", yamlnode.Describe(t.val))
	}
	var out []*r4jProps
	for _, k := range t.kids {
		p := &r4jProps{name: k.seg(), tree: k, props: map[string]*r4jTree{}}
		if k.val != nil && k.val.ShortTag() != "!!null" {
			return nil, errorAt(k.path, k.val, "must be a mapping of properties, got %s", yamlnode.Describe(k.val))
		}
		for _, prop := range k.kids {
			c := canon(prop.seg())
			switch {
			case slices.Contains(kind.noted, c):
				l.note(prop, "not applicable in sluice; ignored")
			case slices.Contains(kind.props, c):
				if have, ok := p.props[c]; ok {
					return nil, errorAt(prop.path, prop.key, "set twice, first at line %d as %s", have.key.Line, have.seg())
				}
				if prop.val == nil {
					return nil, errorAt(prop.path, prop.key, "must be a value, got a mapping")
				}
				p.props[c] = prop
			default:
				return nil, errorAt(prop.path, prop.key, "unknown key %q; a %s's keys are %s", prop.seg(), kind.name, r4jKeyList(kind))
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// r4jKeyList names kind's keys as Resilience4j's documentation writes
// them.
func r4jKeyList(kind r4jKind) string {
	if kind.name == "ratelimiter" {
		return "limitForPeriod, limitRefreshPeriod, timeoutDuration, baseConfig, registerHealthIndicator, allowHealthIndicatorToFail, subscribeForEvents, eventConsumerBufferSize, writableStackTraceEnabled"
	}
	return "timeoutDuration, cancelRunningFuture, baseConfig, eventConsumerBufferSize"
}

// base returns the property set p starts from: its baseConfig, else the
// config called default (unless p is it), else none. stack holds the
// configs being resolved, for cycles.
func (s *r4jSection) base(p *r4jProps, stack []string) (*r4jProps, []string, error) {
	if b, ok := p.props["baseconfig"]; ok {
		name := b.val.Value
		if b.val.Kind != yaml.ScalarNode || b.val.ShortTag() == "!!null" || name == "" {
			return nil, nil, errorAt(b.path, b.val, "must be the name of a config, got %s", yamlnode.Describe(b.val))
		}
		bp, ok := s.configs[name]
		if !ok {
			return nil, nil, errorAt(b.path, b.val, "unknown config %q; resilience4j.%s.configs names %s", name, s.kind.name, nameList(s.configNames()))
		}
		if slices.Contains(stack, name) {
			return nil, nil, errorAt(b.path, b.val, "baseConfig forms a cycle: %s -> %s", strings.Join(stack, " -> "), name)
		}
		return bp, append(stack, name), nil
	}
	// As in Resilience4j, only an instance or config called default does
	// not start from the config called default.
	if def, ok := s.configs["default"]; ok && p.name != "default" {
		if slices.Contains(stack, "default") {
			return nil, nil, errorAt(p.tree.path, p.tree.key, "baseConfig forms a cycle through the config default")
		}
		return def, append(stack, "default"), nil
	}
	return nil, nil, nil
}

func (s *r4jSection) configNames() []string {
	names := make([]string, 0, len(s.configs))
	for n := range s.configs {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

// r4jValues are a limiter's configuration, a resilience.Config or
// TimeLimiterConfig, and where each field was set, for errors.
type r4jValues[C any] struct {
	cfg  C
	from map[string]*r4jTree // by sluice.ConfigError.Field
}

// inherit returns the values that p starts from: those of its base config
// (see base), which build computes, or else defaults.
func inherit[C any](s *r4jSection, p *r4jProps, stack []string, defaults C, build func(base *r4jProps, stack []string) (r4jValues[C], error)) (r4jValues[C], error) {
	bp, stack, err := s.base(p, stack)
	if err != nil || bp == nil {
		return r4jValues[C]{cfg: defaults, from: map[string]*r4jTree{}}, err
	}
	return build(bp, stack)
}

func (l *r4jLoader) rateConfig(s *r4jSection, p *r4jProps, stack []string) (r4jValues[resilience.Config], error) {
	v, err := inherit(s, p, stack, resilience.DefaultConfig(), func(bp *r4jProps, stack []string) (r4jValues[resilience.Config], error) {
		return l.rateConfig(s, bp, stack)
	})
	if err != nil {
		return v, err
	}
	if t, ok := p.props["limitforperiod"]; ok {
		n, err := l.d.Int64(t.path, t.val)
		if err != nil {
			return v, err
		}
		v.cfg.LimitForPeriod, v.from["LimitForPeriod"] = n, t
	}
	for _, f := range []struct {
		key, field string
		dst        *time.Duration
	}{{"limitrefreshperiod", "LimitRefreshPeriod", &v.cfg.LimitRefreshPeriod}, {"timeoutduration", "Timeout", &v.cfg.Timeout}} {
		if t, ok := p.props[f.key]; ok {
			d, err := springDuration(t)
			if err != nil {
				return v, err
			}
			*f.dst, v.from[f.field] = d, t
		}
	}
	if _, err := resilience.New(v.cfg); err != nil {
		return v, configErrorAt(err, v.from, p)
	}
	return v, nil
}

func (l *r4jLoader) timeConfig(s *r4jSection, p *r4jProps, stack []string) (r4jValues[resilience.TimeLimiterConfig], error) {
	v, err := inherit(s, p, stack, resilience.DefaultTimeLimiterConfig(), func(bp *r4jProps, stack []string) (r4jValues[resilience.TimeLimiterConfig], error) {
		return l.timeConfig(s, bp, stack)
	})
	if err != nil {
		return v, err
	}
	if t, ok := p.props["timeoutduration"]; ok {
		d, err := springDuration(t)
		if err != nil {
			return v, err
		}
		v.cfg.Timeout, v.from["Timeout"] = d, t
	}
	if t, ok := p.props["cancelrunningfuture"]; ok {
		b, err := l.d.Bool(t.path, t.val)
		if err != nil {
			return v, err
		}
		v.cfg.CancelRunning = b
	}
	if _, err := resilience.NewTimeLimiter(v.cfg); err != nil {
		return v, configErrorAt(err, v.from, p)
	}
	return v, nil
}

// configErrorAt places a constructor's *sluice.ConfigError at the property
// that set its field, or at the instance when a default is at fault.
func configErrorAt(err error, from map[string]*r4jTree, p *r4jProps) error {
	var ce *sluice.ConfigError
	if errors.As(err, &ce) {
		if t, ok := from[ce.Field]; ok {
			e := errorAt(t.path, t.val, "%s", ce.Msg)
			e.Err = err
			return e
		}
	}
	e := errorAt(p.tree.path, p.tree.key, "%v", err)
	e.Err = err
	return e
}

var (
	// springSimple is Spring's simple duration: a count and an optional
	// unit, milliseconds by default.
	springSimple = regexp.MustCompile(`^([+-]?[0-9]+)([a-zA-Z]*)$`)
	// springISO is ISO-8601's duration as java.time.Duration.parse reads
	// it, for the positive parts sluice takes: days, hours, minutes and
	// seconds with up to nine decimals.
	springISO = regexp.MustCompile(`(?i)^P(?:([0-9]+)D)?(?:T(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+)(?:[.,]([0-9]{1,9}))?S)?)?$`)
)

var springUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "ms": time.Millisecond, "": time.Millisecond,
	"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour,
}

// springDuration decodes a duration as Spring Boot binds one.
func springDuration(t *r4jTree) (time.Duration, error) {
	d, err := ParseSpringDuration(t.val.Value)
	if err != nil || t.val.Kind != yaml.ScalarNode || t.val.ShortTag() == "!!null" {
		if err == nil {
			err = fmt.Errorf("must be a duration, got %s", yamlnode.Describe(t.val))
		}
		return 0, errorAt(t.path, t.val, "%v", err)
	}
	return d, nil
}

// ParseSpringDuration parses a duration as Spring Boot binds one to a
// java.time.Duration: a whole count with an optional unit, ns, us, ms, s,
// m, h or d (milliseconds without one: "500" is 500ms), or ISO-8601 as
// Duration.parse reads it ("PT1S", "PT0.5S", "P1DT2H"; positive parts
// only). A duration beyond time.Duration is an error.
func ParseSpringDuration(s string) (time.Duration, error) {
	if m := springSimple.FindStringSubmatch(s); m != nil {
		unit, ok := springUnits[strings.ToLower(m[2])]
		if !ok {
			return 0, fmt.Errorf("unknown unit %q in %q; Spring's units are ns, us, ms, s, m, h and d", m[2], s)
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > math.MaxInt64/int64(unit) || n < math.MinInt64/int64(unit) {
			return 0, fmt.Errorf("%q overflows: a duration must be under about 292 years", s)
		}
		return time.Duration(n) * unit, nil
	}
	m := springISO.FindStringSubmatch(s)
	if m == nil || s == "P" || strings.HasSuffix(strings.ToUpper(s), "T") {
		return 0, fmt.Errorf("must be a duration such as 500ms, 1s, PT1S or a number of milliseconds, got %q", s)
	}
	// Summed exactly, then checked against the range.
	total := new(big.Int)
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		n, _ := new(big.Int).SetString(m[i+1], 10)
		total.Add(total, n.Mul(n, big.NewInt(int64(unit))))
	}
	if frac := m[5]; frac != "" {
		n, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		total.Add(total, big.NewInt(n))
	}
	if !total.IsInt64() {
		return 0, fmt.Errorf("%q overflows: a duration must be under about 292 years", s)
	}
	return time.Duration(total.Int64()), nil
}
