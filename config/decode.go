package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the nodes Load visits, counting those reached through an
// alias each time, so that a document whose aliases each repeat a long
// list cannot make it run for hours. (Limiter specifications reached
// through aliases are decoded once; see decoder.specs.)
const maxNodes = 1_000_000

// decoder walks a parsed document. It counts the nodes it visits against
// maxNodes.
type decoder struct {
	nodes int
	// open holds the limiter specifications being decoded, so that an
	// alias to a specification that contains it is caught.
	open map[*yaml.Node]bool
	// specs holds the specifications decoded, by mapping node, so that
	// an alias to one is decoded once: nested aliases would otherwise
	// take time exponential in the document's length.
	specs map[*yaml.Node]*spec
}

// errorAt returns an *Error for node n (which may be nil) at path.
func errorAt(path string, n *yaml.Node, format string, args ...any) *Error {
	e := &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
		if n.Kind == yaml.ScalarNode {
			e.Value = n.Value
		}
	}
	return e
}

// deref follows an alias to the node it names and counts the node.
func (d *decoder) deref(path string, n *yaml.Node) (*yaml.Node, error) {
	d.nodes++
	if d.nodes > maxNodes {
		return nil, errorAt(path, n, "document too large: more than %d nodes once aliases are expanded", maxNodes)
	}
	// The parser never makes an alias of an alias; the bound is defensive.
	for i := 0; n.Kind == yaml.AliasNode && i < 8; i++ {
		if n.Alias == nil {
			return nil, errorAt(path, n, "alias *%s names no anchor", n.Value)
		}
		n = n.Alias
	}
	if n.Kind == yaml.AliasNode {
		return nil, errorAt(path, n, "alias *%s does not lead to a value", n.Value)
	}
	return n, nil
}

// describe names what a node is, for messages: `string "abc"`, `float 1.5`,
// "a mapping".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!str":
			return "string " + strconv.Quote(n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "float " + n.Value
		case "!!bool":
			return "bool " + n.Value
		case "!!timestamp":
			return "timestamp " + n.Value
		}
		return strconv.Quote(n.Value) + " tagged " + n.Tag
	}
	return "an unexpected node"
}

// mapping is a decoded YAML mapping whose keys are unique strings.
type mapping struct {
	path  string
	node  *yaml.Node
	keys  []*yaml.Node // in document order
	vals  []*yaml.Node // not yet dereferenced
	index map[string]int
}

// join appends key to path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping decodes n as a mapping with scalar, unique keys.
func (d *decoder) mapping(path string, n *yaml.Node) (*mapping, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, errorAt(path, n, "must be a mapping, got %s", describe(n))
	}
	m := &mapping{path: path, node: n, index: make(map[string]int, len(n.Content)/2)}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := d.deref(path, n.Content[i])
		if err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode {
			return nil, errorAt(path, k, "keys must be strings, got %s", describe(k))
		}
		if k.ShortTag() == "!!merge" {
			return nil, errorAt(join(path, k.Value), k, "merge keys (<<) are not supported")
		}
		if j, ok := m.index[k.Value]; ok {
			return nil, errorAt(join(path, k.Value), k, "duplicate key %q, first at line %d", k.Value, m.keys[j].Line)
		}
		m.index[k.Value] = len(m.keys)
		m.keys = append(m.keys, k)
		m.vals = append(m.vals, n.Content[i+1])
	}
	return m, nil
}

// has reports whether the mapping has key k.
func (m *mapping) has(k string) bool {
	_, ok := m.index[k]
	return ok
}

// value returns the path and the value of key k, which must be there.
func (m *mapping) value(k string) (string, *yaml.Node) {
	return join(m.path, k), m.vals[m.index[k]]
}

// check reports the first key, in document order, that is not in allowed,
// and then the first of required that is missing. unknown makes the
// message for a key not allowed.
func (m *mapping) check(allowed, required []string, unknown func(key string) string) error {
	for _, k := range m.keys {
		if !contains(allowed, k.Value) {
			return errorAt(join(m.path, k.Value), k, "%s", unknown(k.Value))
		}
	}
	for _, k := range required {
		if !m.has(k) {
			return errorAt(m.path, m.node, "missing required key %q", k)
		}
	}
	return nil
}

// plainUnknown is the message for a key not allowed in a mapping with
// fixed keys.
func plainUnknown(allowed []string) func(string) string {
	return func(k string) string {
		return fmt.Sprintf("unknown key %q; valid keys: %s", k, strings.Join(allowed, ", "))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scalar dereferences n and checks that it is a scalar with a value.
func (d *decoder) scalar(path string, n *yaml.Node, want string) (*yaml.Node, error) {
	n, err := d.deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return nil, errorAt(path, n, "must be %s, got %s", want, describe(n))
	}
	return n, nil
}

// int64 decodes an integer. It takes decimal, 0x, 0o and 0b forms with
// optional underscores (1_000_000); it rejects fractions, exponents,
// quoted numbers, values beyond int64, and decimals with a leading zero,
// which YAML 1.1 reads as octal.
func (d *decoder) int64(path string, n *yaml.Node) (int64, error) {
	n, err := d.scalar(path, n, "an integer")
	if err != nil {
		return 0, err
	}
	tag := n.ShortTag()
	if tag != "!!int" && tag != "!!float" {
		return 0, errorAt(path, n, "must be an integer, got %s", describe(n))
	}
	digits := strings.ReplaceAll(n.Value, "_", "")
	unsigned := strings.TrimLeft(digits, "+-")
	if len(unsigned) > 1 && unsigned[0] == '0' && unsigned[1] >= '0' && unsigned[1] <= '9' {
		return 0, errorAt(path, n, "must not have a leading zero (octal is written 0o%s), got %s", unsigned[1:], n.Value)
	}
	v, err := strconv.ParseInt(digits, 0, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, errorAt(path, n, "overflows int64 (at most %d), got %s", int64(math.MaxInt64), n.Value)
	case err != nil:
		return 0, errorAt(path, n, "must be an integer, got %s", describe(n))
	}
	return v, nil
}

// duration decodes a duration; see ParseDuration.
func (d *decoder) duration(path string, n *yaml.Node) (time.Duration, error) {
	n, err := d.scalar(path, n, "a duration")
	if err != nil {
		return 0, err
	}
	if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
		return 0, errorAt(path, n, "needs a unit, as in %[1]ss or %[1]s seconds, got %[1]s", n.Value)
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return 0, errorAt(path, n, "%v, got %q", err, n.Value)
	}
	return v, nil
}

// string decodes a string. Numbers and booleans must be quoted.
func (d *decoder) string(path string, n *yaml.Node) (string, error) {
	n, err := d.scalar(path, n, "a string")
	if err != nil {
		return "", err
	}
	if n.ShortTag() != "!!str" {
		return "", errorAt(path, n, "must be a string, got %s (quote it)", describe(n))
	}
	return n.Value, nil
}

// bool decodes true or false.
func (d *decoder) bool(path string, n *yaml.Node) (bool, error) {
	n, err := d.scalar(path, n, "true or false")
	if err != nil {
		return false, err
	}
	v, err := strconv.ParseBool(n.Value)
	if n.ShortTag() != "!!bool" || err != nil {
		return false, errorAt(path, n, "must be true or false, got %s", describe(n))
	}
	return v, nil
}

// time decodes an RFC 3339 time such as 2024-01-01T00:00:00Z.
func (d *decoder) time(path string, n *yaml.Node) (time.Time, error) {
	n, err := d.scalar(path, n, "an RFC 3339 time")
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, n.Value)
	if tag := n.ShortTag(); (tag != "!!timestamp" && tag != "!!str") || err != nil {
		return time.Time{}, errorAt(path, n, "must be an RFC 3339 time such as 2024-01-01T00:00:00Z, got %s", describe(n))
	}
	return t, nil
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

// index appends a list index to path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
