package envoyrls

import (
	"math/bits"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// node is one configured descriptor, or a domain's root. Its children are
// found by their final key, as envoyproxy/ratelimit finds them: the key
// alone for a descriptor without a value, else key + "_" + value. So, as
// there, the descriptor key "a" with value "b_c" and the key "a_b" with
// value "c" are the same descriptor, and a configuration that has both is
// refused as a duplicate.
type node struct {
	children  map[string]*node
	wildcards []wildcard // children whose final key has a '*', in load order
	rule      *rule      // nil: the descriptor limits nothing
	// valueToMetric puts the request's value in the stat key where the
	// descriptor has none (value_to_metric).
	valueToMetric bool
	// pattern is the final key of a share_threshold descriptor: every
	// value it matches counts in one window.
	pattern  string
	metadata *structpb.Struct
}

// wildcard is a child whose final key has a '*', split on the stars once
// at load time.
type wildcard struct {
	key   string
	parts []string
}

// rule is what a descriptor that has a rate_limit, a limiter or
// unlimited: true says.
type rule struct {
	requestsPerUnit uint32
	unit            rlsv3.RateLimitResponse_RateLimit_Unit
	multiplier      uint32   // unit_multiplier: the window is this many units; 0 is one
	name            string   // rate_limit.name: current_limit.name, and what replaces names
	replaces        []string // the names of the rules this one replaces
	unlimited       bool
	shadow          bool
	quota           bool
	detailed        bool // detailed_metric
	// limiter is the sluice limiter that decides instead of a fixed
	// window (a descriptor of the envoy: section with limiter:).
	limiter string
	// counted makes the limiter's hits a charge (always_counted): taken
	// whatever is left, the excess owed, so that a cost Envoy reports
	// after the fact (apply_on_stream_done, whose answer it ignores) is
	// never dropped. The answer is the usual one.
	counted bool
	// statKey is the rule's stat key: the domain and the final keys down
	// to it, joined by '.'.
	statKey string
	// ceiling bounds the limit overrides of requests for the descriptor
	// (request_limit_ceiling), nil: none.
	ceiling *rule
}

// above reports whether r allows more than c: more requests per second,
// compared exactly as r.requestsPerUnit·c.window > c.requestsPerUnit·r.window.
func (r *rule) above(c *rule) bool {
	hi1, lo1 := bits.Mul64(uint64(r.requestsPerUnit), uint64(c.window()))
	hi2, lo2 := bits.Mul64(uint64(c.requestsPerUnit), uint64(r.window()))
	return hi1 > hi2 || hi1 == hi2 && lo1 > lo2
}

func newNode() *node { return &node{children: make(map[string]*node)} }

// addChild adds c under the final key fk.
func (n *node) addChild(fk string, c *node) {
	n.children[fk] = c
	if strings.Contains(fk, "*") {
		n.wildcards = append(n.wildcards, wildcard{key: fk, parts: strings.Split(fk, "*")})
	}
}

// finalKey is the key a descriptor entry is looked up by.
func finalKey(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

// matchWildcard reports whether s matches the pattern split on its stars
// into parts: each '*' stands for any run of bytes, the empty one
// included, and the literal parts must appear in order, the first at the
// start and the last at the end.
func matchWildcard(parts []string, s string) bool {
	first, last := parts[0], parts[len(parts)-1]
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(s) < fixed || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// match is what a request descriptor is limited by.
type match struct {
	rule    *rule  // nil: nothing limits the descriptor
	statKey string // where its counts go
	// share holds, for each entry whose value a share_threshold
	// descriptor matched, that descriptor's pattern, which stands for the
	// value in the counter's key; nil when there is none.
	share    []string
	metadata *structpb.Struct
	// ceiled says that the request's limit override was above its
	// descriptor's ceiling, which the rule is instead.
	ceiled bool
}

// lookup finds the rule of descriptor d in the domain whose root is root,
// with envoyproxy/ratelimit's rules: a limit override in the request
// wins when allowOverride (Settings.AllowRequestLimits) says so; else each entry is matched at the level its predecessor reached,
// by key and value, then by the configured wildcards in load order, then
// by key alone, and the rule is that of the node the last entry reached.
// The stat key is built along the way as envoyproxy/ratelimit builds it
// (detailed_metric, value_to_metric, share_threshold).
func lookup(domain string, root *node, d *ratelimitv3.RateLimitDescriptor, allowOverride bool) match {
	entries := d.GetEntries()
	if o := d.GetLimit(); o != nil && allowOverride {
		m := match{
			rule: &rule{
				requestsPerUnit: o.GetRequestsPerUnit(),
				unit:            rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()),
				multiplier:      o.GetUnitMultiplier().GetValue(), // 0 when not given: one unit
			},
			statKey: overrideStatKey(domain, entries),
		}
		// The descriptor's own rule may bound what a request asks for.
		if own := lookup(domain, root, d, false).rule; own != nil && own.ceiling != nil && unitSeconds(m.rule.unit) > 0 && m.rule.above(own.ceiling) {
			m.rule, m.ceiled = own.ceiling, true
		}
		return m
	}
	// The keys are built in buffers on the stack, and made strings only
	// when needed: a lookup that finds the rule's own stat key allocates
	// nothing.
	var byValueBuf, fkBuf [128]byte
	var (
		found   *node
		byValue = append(byValueBuf[:0], domain...) // the key as value_to_metric and wildcards shape it
		share   []string
	)
	level := root
	for i, e := range entries {
		fkb := append(append(append(fkBuf[:0], e.GetKey()...), '_'), e.GetValue()...)
		next := level.children[string(fkb)]
		var viaWildcard string
		if next == nil && len(level.wildcards) > 0 {
			fk := string(fkb)
			for _, w := range level.wildcards {
				if matchWildcard(w.parts, fk) {
					next, viaWildcard = level.children[w.key], w.key
					break
				}
			}
		}
		byKeyValue := next != nil
		if next == nil {
			next = level.children[e.GetKey()]
		}
		shared := ""
		if viaWildcard != "" && next.pattern != "" {
			shared = strings.TrimPrefix(next.pattern, e.GetKey()+"_")
			if share == nil {
				share = make([]string, len(entries))
			}
			share[i] = shared
		}
		byValue = append(append(byValue, '.'), e.GetKey()...)
		if next != nil {
			var v string
			switch {
			case shared != "":
				v = shared
			case viaWildcard != "" && next.valueToMetric:
				v = e.GetValue()
			case viaWildcard != "":
				v = strings.TrimPrefix(viaWildcard, e.GetKey()+"_")
			case byKeyValue, next.valueToMetric:
				v = e.GetValue()
			}
			if v != "" {
				byValue = append(append(byValue, '_'), v...)
			}
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			found = next
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		level = next
	}
	if found == nil {
		return match{}
	}
	m := match{rule: found.rule, statKey: found.rule.statKey, share: share, metadata: found.metadata}
	switch {
	case found.rule.detailed && share != nil:
		m.statKey, m.metadata = sharedStatKey(domain, entries, share), nil
	case found.rule.detailed:
		m.statKey, m.metadata = detailedStatKey(domain, entries), nil
	case string(byValue) != m.statKey:
		// envoyproxy/ratelimit makes a new limit here, which drops the
		// descriptor's metadata.
		m.statKey, m.metadata = string(byValue), nil
	}
	return m
}

// detailedStatKey is the stat key of a detailed_metric rule: the domain
// and every entry as key_value, an empty value included. A rule is found
// only at a request's last entry, so every entry is in it.
func detailedStatKey(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteString(".")
		b.WriteString(e.GetKey())
		b.WriteString("_")
		b.WriteString(e.GetValue())
	}
	return b.String()
}

// overrideStatKey is the stat key of a limit override: the domain and
// every entry as key_value, or key alone when the value is empty.
func overrideStatKey(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteString(".")
	for i, e := range entries {
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(finalKey(e.GetKey(), e.GetValue()))
	}
	return b.String()
}

// sharedStatKey is the detailed stat key of a descriptor some of whose
// values a share_threshold descriptor matched: those values are the
// pattern, the others as they are.
func sharedStatKey(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, share []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteString(".")
		if share[i] != "" {
			b.WriteString(e.GetKey() + "_" + share[i])
		} else {
			b.WriteString(finalKey(e.GetKey(), e.GetValue()))
		}
	}
	return b.String()
}
