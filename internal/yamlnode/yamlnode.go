// Package yamlnode decodes parsed YAML strictly and says where it went
// wrong: the limiter descriptions of internal/policyspec (in package
// config's files and the conformance vectors, whose JSON FromJSON turns
// into nodes), and the server's and Envoy's sections of sluice serve's
// file, walk their nodes with it, so that every part of one file rejects
// the same mistakes in the same words. Durations are written as
// ParseDuration reads them.
//
// Its errors are *Error values; package config turns them into its public
// *config.Error at the edge of Load.
package yamlnode

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxNodes bounds the nodes one Decoder visits, counting those reached
// through an alias each time, so that a document whose aliases each repeat
// a long list cannot make it run for hours.
const MaxNodes = 1_000_000

// Error is a decoding error at a node.
type Error struct {
	// Path is where the node is, as keys and list indexes:
	// "limiters.api.limits[1].refill.per".
	Path string
	// Line and Column locate the node from 1; 0 without a node.
	Line, Column int
	// Value is the node's text when it is a scalar, else "".
	Value string
	Msg   string
	// Err is the cause, or nil: the *sluice.ConfigError of a policy
	// constructor that refused a value.
	Err error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	return e.Path + ": " + e.Msg
}

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error at path for node n, which may be nil.
func Errorf(path string, n *yaml.Node, format string, args ...any) *Error {
	e := &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
		if n.Kind == yaml.ScalarNode {
			e.Value = n.Value
		}
	}
	return e
}

// Decoder walks one document and counts the nodes it visits against
// MaxNodes. Its zero value is ready to use.
type Decoder struct {
	nodes int
}

// Deref follows an alias to the node it names and counts the node.
func (d *Decoder) Deref(path string, n *yaml.Node) (*yaml.Node, error) {
	d.nodes++
	if d.nodes > MaxNodes {
		return nil, Errorf(path, n, "document too large: more than %d nodes once aliases are expanded", MaxNodes)
	}
	// The parser never makes an alias of an alias; the bound is defensive.
	for i := 0; n.Kind == yaml.AliasNode && i < 8; i++ {
		if n.Alias == nil {
			return nil, Errorf(path, n, "alias *%s names no anchor", n.Value)
		}
		n = n.Alias
	}
	if n.Kind == yaml.AliasNode {
		return nil, Errorf(path, n, "alias *%s does not lead to a value", n.Value)
	}
	return n, nil
}

// Describe names what a node is, for messages: `string "abc"`,
// "float 1.5", "a mapping".
func Describe(n *yaml.Node) string {
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

// Join appends key to path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index appends a list index to path.
func Index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// Mapping is a decoded YAML mapping whose keys are unique strings.
type Mapping struct {
	Path string
	Node *yaml.Node
	Keys []*yaml.Node // in document order
	Vals []*yaml.Node // Keys[i]'s value, not yet dereferenced
	// index maps a key to its position in Keys.
	index map[string]int
}

// Mapping decodes n as a mapping with scalar, unique keys. Merge keys
// (<<) are refused: what they bring in is easy to misread.
func (d *Decoder) Mapping(path string, n *yaml.Node) (*Mapping, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, Errorf(path, n, "must be a mapping, got %s", Describe(n))
	}
	m := &Mapping{Path: path, Node: n, index: make(map[string]int, len(n.Content)/2)}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := d.Deref(path, n.Content[i])
		if err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode {
			return nil, Errorf(path, k, "keys must be strings, got %s", Describe(k))
		}
		if k.ShortTag() == "!!merge" {
			return nil, Errorf(Join(path, k.Value), k, "merge keys (<<) are not supported")
		}
		if j, ok := m.index[k.Value]; ok {
			return nil, Errorf(Join(path, k.Value), k, "duplicate key %q, first at line %d", k.Value, m.Keys[j].Line)
		}
		m.index[k.Value] = len(m.Keys)
		m.Keys = append(m.Keys, k)
		m.Vals = append(m.Vals, n.Content[i+1])
	}
	return m, nil
}

// Strict decodes n as a mapping whose keys are all in allowed and which
// has every key of required.
func (d *Decoder) Strict(path string, n *yaml.Node, allowed, required []string) (*Mapping, error) {
	m, err := d.Mapping(path, n)
	if err != nil {
		return nil, err
	}
	return m, m.Check(allowed, required, PlainUnknown(allowed))
}

// Has reports whether the mapping has key k.
func (m *Mapping) Has(k string) bool {
	_, ok := m.index[k]
	return ok
}

// Value returns the path and the value of key k, which must be there.
func (m *Mapping) Value(k string) (string, *yaml.Node) {
	return Join(m.Path, k), m.Vals[m.index[k]]
}

// Check reports the first key, in document order, that is not in allowed,
// and then the first of required that is missing. unknown makes the
// message for a key not allowed.
func (m *Mapping) Check(allowed, required []string, unknown func(key string) string) error {
	for _, k := range m.Keys {
		if !slices.Contains(allowed, k.Value) {
			return Errorf(Join(m.Path, k.Value), k, "%s", unknown(k.Value))
		}
	}
	for _, k := range required {
		if !m.Has(k) {
			return Errorf(m.Path, m.Node, "missing required key %q", k)
		}
	}
	return nil
}

// PlainUnknown is the message for a key not allowed in a mapping with
// fixed keys.
func PlainUnknown(allowed []string) func(string) string {
	return func(k string) string {
		return fmt.Sprintf("unknown key %q; valid keys: %s", k, strings.Join(allowed, ", "))
	}
}

// Scalar dereferences n and checks that it is a scalar with a value; want
// names what it should be, for the message.
func (d *Decoder) Scalar(path string, n *yaml.Node, want string) (*yaml.Node, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return nil, Errorf(path, n, "must be %s, got %s", want, Describe(n))
	}
	return n, nil
}

// Int64 decodes an integer. It takes decimal, 0x, 0o and 0b forms with
// optional underscores (1_000_000); it rejects fractions, exponents,
// quoted numbers, values beyond int64, and decimals with a leading zero,
// which YAML 1.1 reads as octal.
func (d *Decoder) Int64(path string, n *yaml.Node) (int64, error) {
	n, err := d.Scalar(path, n, "an integer")
	if err != nil {
		return 0, err
	}
	tag := n.ShortTag()
	if tag != "!!int" && tag != "!!float" {
		return 0, Errorf(path, n, "must be an integer, got %s", Describe(n))
	}
	digits := strings.ReplaceAll(n.Value, "_", "")
	unsigned := strings.TrimLeft(digits, "+-")
	if len(unsigned) > 1 && unsigned[0] == '0' && unsigned[1] >= '0' && unsigned[1] <= '9' {
		return 0, Errorf(path, n, "must not have a leading zero (octal is written 0o%s), got %s", unsigned[1:], n.Value)
	}
	v, err := strconv.ParseInt(digits, 0, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, Errorf(path, n, "overflows int64 (at most %d), got %s", int64(math.MaxInt64), n.Value)
	case err != nil:
		return 0, Errorf(path, n, "must be an integer, got %s", Describe(n))
	}
	return v, nil
}

// Float64 decodes a finite number, with or without a fraction.
func (d *Decoder) Float64(path string, n *yaml.Node) (float64, error) {
	n, err := d.Scalar(path, n, "a number")
	if err != nil {
		return 0, err
	}
	tag := n.ShortTag()
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if (tag != "!!int" && tag != "!!float") || err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, Errorf(path, n, "must be a finite number, got %s", Describe(n))
	}
	return v, nil
}

// Duration decodes a duration as config files write it; see
// ParseDuration. A bare number has no unit and is an error.
func (d *Decoder) Duration(path string, n *yaml.Node) (time.Duration, error) {
	n, err := d.Scalar(path, n, "a duration")
	if err != nil {
		return 0, err
	}
	if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
		return 0, Errorf(path, n, "needs a unit, as in %[1]ss or %[1]s seconds, got %[1]s", n.Value)
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return 0, Errorf(path, n, "%v, got %q", err, n.Value)
	}
	return v, nil
}

// String decodes a string. Numbers and booleans must be quoted.
func (d *Decoder) String(path string, n *yaml.Node) (string, error) {
	n, err := d.Scalar(path, n, "a string")
	if err != nil {
		return "", err
	}
	if n.ShortTag() != "!!str" {
		return "", Errorf(path, n, "must be a string, got %s (quote it)", Describe(n))
	}
	return n.Value, nil
}

// Bool decodes true or false.
func (d *Decoder) Bool(path string, n *yaml.Node) (bool, error) {
	n, err := d.Scalar(path, n, "true or false")
	if err != nil {
		return false, err
	}
	v, err := strconv.ParseBool(n.Value)
	if n.ShortTag() != "!!bool" || err != nil {
		return false, Errorf(path, n, "must be true or false, got %s", Describe(n))
	}
	return v, nil
}

// Time decodes an RFC 3339 time such as 2024-01-01T00:00:00Z.
func (d *Decoder) Time(path string, n *yaml.Node) (time.Time, error) {
	n, err := d.Scalar(path, n, "an RFC 3339 time")
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, n.Value)
	if tag := n.ShortTag(); (tag != "!!timestamp" && tag != "!!str") || err != nil {
		return time.Time{}, Errorf(path, n, "must be an RFC 3339 time such as 2024-01-01T00:00:00Z, got %s", Describe(n))
	}
	return t, nil
}

// List decodes a sequence and returns its items, not yet dereferenced.
func (d *Decoder) List(path string, n *yaml.Node) ([]*yaml.Node, error) {
	n, err := d.Deref(path, n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, Errorf(path, n, "must be a list, got %s", Describe(n))
	}
	return n.Content, nil
}
