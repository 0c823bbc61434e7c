package server

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// TestStrListAlias: a list given as a YAML alias is checked item by item
// like any other, and its bad item reported at the anchored list.
func TestStrListAlias(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: &t [ok, \"a b\"]\nb: *t\n"), &doc); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	err := tokenList(&tokens)("b", doc.Content[0].Content[3])
	const want = "b[1] (line 1): a token must not be empty nor hold whitespace"
	if err == nil || err.Error() != want {
		t.Errorf("tokenList of an alias = %v, want %s", err, want)
	}
}
