package server

import (
	"log/slog"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/config"
)

// isSymfony reports whether data is a Symfony rate limiter file
// (framework: rate_limiter:) rather than sluice serve's own: its top level
// has framework and none of sluice serve's sections, so that a file that
// mixes the two is refused by sluice serve's strict decoding rather than
// have its sluice sections ignored.
func isSymfony(data []byte) bool {
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	if _, ok := top["framework"]; !ok {
		return false
	}
	if _, ok := top["limiters"]; ok {
		return false
	}
	for section := range newConfig().sections(new(bool)) {
		if _, ok := top[section]; ok {
			return false
		}
	}
	return true
}

// symfonyConfig is the server config of a Symfony file's limiters: every
// server setting at its default, on the in-memory store. The settings the
// file has that sluice does not apply are logged, one line each.
func symfonyConfig(f *config.File, err error) (*Config, error) {
	if err != nil {
		return nil, err
	}
	for _, n := range f.Notes {
		slog.Info("symfony rate limiter file: " + n.String())
	}
	c := newConfig()
	c.Limiters = f
	return c, c.rateLimitFromEnv(false)
}
