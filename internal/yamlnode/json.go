package yamlnode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// FromJSON returns the node tree of the JSON value data, so that the
// decoders of this package read JSON as they read YAML: objects are
// mappings (duplicate keys kept, for Mapping to refuse), arrays lists,
// numbers !!int when written without a fraction or an exponent and
// !!float otherwise, both with their text as written, so that integers
// up to 2^63-1 are never rounded through float64.
//
// The JSON is decoded here rather than by the YAML parser, which reads
// some of JSON's string escapes ("\/") as errors. The nodes have no line.
func FromJSON(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := fromJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("yamlnode: more than one JSON value")
	}
	return n, nil
}

// maxJSONDepth bounds the nesting FromJSON follows, as encoding/json does
// for its own decoding.
const maxJSONDepth = 10000

func fromJSON(dec *json.Decoder, depth int) (*yaml.Node, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("yamlnode: JSON nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("yamlnode: %w", err)
	}
	switch v := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		if v == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				key, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("yamlnode: %w", err)
				}
				n.Content = append(n.Content, str(key.(string)))
			}
			item, err := fromJSON(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, item)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, fmt.Errorf("yamlnode: %w", err)
		}
		return n, nil
	case string:
		return str(v), nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(v), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(v)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(v)}, nil
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}
