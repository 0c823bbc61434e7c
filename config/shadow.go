package config

import (
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policyspec"
)

// splitShadow takes the shadow key out of a limiter's mapping n, at path:
// like lease, it is the limiter's, not its policy's, so a compound's
// members and overrides cannot have one. It returns the mapping without
// it (n itself when it has none) and its value.
func splitShadow(d *policyspec.Decoder, path string, n *yaml.Node) (*yaml.Node, bool, error) {
	m, err := d.Mapping(path, n)
	if err != nil || !m.Has("shadow") {
		return n, false, nil // the policy decoder reports what is wrong
	}
	spath, v := m.Value("shadow")
	on, err := d.Bool(spath, v)
	if err != nil {
		return nil, false, err
	}
	return without(m.Node, "shadow"), on, nil
}
