package config

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// decoder walks a parsed document with yamlnode's strict decoding, which
// also bounds the nodes it visits.
type decoder struct {
	yamlnode.Decoder
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
	return fromNode(yamlnode.Errorf(path, n, format, args...))
}

// fromNode turns yamlnode's error into the public *Error.
func fromNode(e *yamlnode.Error) *Error {
	return &Error{Path: e.Path, Line: e.Line, Column: e.Column, Value: e.Value, Msg: e.Msg}
}

// duration decodes a duration; see ParseDuration.
func (d *decoder) duration(path string, n *yaml.Node) (time.Duration, error) {
	n, err := d.Scalar(path, n, "a duration")
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
