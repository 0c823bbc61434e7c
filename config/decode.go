package config

import (
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// errorAt returns an *Error for node n (which may be nil) at path.
func errorAt(path string, n *yaml.Node, format string, args ...any) *Error {
	return fromNode(yamlnode.Errorf(path, n, format, args...))
}

// fromNode turns yamlnode's error into the public *Error.
func fromNode(e *yamlnode.Error) *Error {
	return &Error{Path: e.Path, Line: e.Line, Column: e.Column, Value: e.Value, Msg: e.Msg, Err: e.Err}
}
