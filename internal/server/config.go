package server

import (
	_ "embed"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/envoyrls"
)

// Config is a server config file: the limiters of package config plus the
// store, server and envoy sections. docs/deploy.md is its reference.
type Config struct {
	// Limiters are the file's limiters.
	Limiters *config.File
	// Store is the store's URL, for storeurl.Open; "mem://" by default.
	Store string
	// HTTP and GRPC are the listen addresses; "" leaves the choice to the
	// command line and its defaults. GRPC "off" turns gRPC off.
	HTTP, GRPC string
	// Tokens are the bearer tokens the API accepts, with those of
	// TokenFile (one per line) read when the server starts or reloads.
	// With neither, the API is open.
	Tokens    []string
	TokenFile string
	// AuthMetrics puts /metrics behind the tokens too.
	AuthMetrics bool
	// TLSCert and TLSKey are the PEM files of the certificate served on
	// HTTP and gRPC; both or neither.
	TLSCert, TLSKey string
	// DrainTimeout bounds the wait for requests in flight at shutdown.
	DrainTimeout time.Duration
	// HealthWindow, HealthThreshold and HealthMinRequests say when a
	// limiter is degraded: over the last HealthWindow it decided at least
	// HealthMinRequests requests and rejected more than HealthThreshold
	// (a fraction in (0, 1]) of them.
	HealthWindow      time.Duration
	HealthThreshold   float64
	HealthMinRequests int64
	// StoreTimeout, StoreFailure and Inheritance configure every limiter
	// (sluice.WithStoreTimeout, WithStoreFailure, WithInheritance).
	StoreTimeout time.Duration
	StoreFailure sluice.StoreFailure
	Inheritance  sluice.TokensInheritance
	// Envoy is the envoy section, or nil when the file has none.
	Envoy *envoyrls.Domains
}

// The defaults of a Config's fields.
const (
	DefaultHTTP              = "127.0.0.1:8080"
	DefaultGRPC              = "127.0.0.1:8081"
	DefaultStore             = "mem://"
	DefaultDrainTimeout      = 10 * time.Second
	DefaultHealthWindow      = time.Minute
	DefaultHealthThreshold   = 0.9
	DefaultHealthMinRequests = 10
)

//go:embed example.yaml
var exampleYAML []byte

// Example returns the built-in example config that sluice serve runs
// without --config.
func Example() []byte { return exampleYAML }

// LoadConfig decodes and validates a server config file. Its errors are
// *config.Error values with the YAML path and line.
func LoadConfig(data []byte) (*Config, error) {
	c := newConfig()
	f, err := config.LoadWith(data, c.sections())
	if err != nil {
		return nil, err
	}
	c.Limiters = f
	return c, nil
}

// LoadConfigFile reads the file at path and loads it with LoadConfig.
func LoadConfigFile(path string) (*Config, error) {
	c := newConfig()
	f, err := config.LoadFileWith(path, c.sections())
	if err != nil {
		return nil, err
	}
	c.Limiters = f
	return c, nil
}

func newConfig() *Config {
	return &Config{
		Store:             DefaultStore,
		DrainTimeout:      DefaultDrainTimeout,
		HealthWindow:      DefaultHealthWindow,
		HealthThreshold:   DefaultHealthThreshold,
		HealthMinRequests: DefaultHealthMinRequests,
		StoreTimeout:      sluice.DefaultStoreTimeout,
		Inheritance:       sluice.Proportionally,
	}
}

func (c *Config) sections() map[string]config.Section {
	return map[string]config.Section{
		"store": func(path string, n *yaml.Node, _ *config.File) error {
			return str(&c.Store)(path, n)
		},
		"server": func(path string, n *yaml.Node, _ *config.File) error {
			if err := decodeMapping(path, n, c.serverFields()); err != nil {
				return err
			}
			if (c.TLSCert == "") != (c.TLSKey == "") {
				return config.NodeError(path+".tls", nil, "cert and key go together, got only one")
			}
			return nil
		},
		"envoy": func(path string, n *yaml.Node, f *config.File) error {
			d, err := envoyrls.Decode(path, n, func(name string) bool {
				_, ok := f.Limiters[name]
				return ok
			})
			c.Envoy = d
			return err
		},
	}
}

// serverFields are the keys of the server section.
func (c *Config) serverFields() fields {
	return fields{
		"http":          str(&c.HTTP),
		"grpc":          str(&c.GRPC),
		"drain_timeout": positiveDuration(&c.DrainTimeout),
		"store_timeout": positiveDuration(&c.StoreTimeout),
		"store_failure": enum(&c.StoreFailure, map[string]sluice.StoreFailure{
			"fail_closed": sluice.FailClosed, "fail_open": sluice.FailOpen, "fail_local": sluice.FailLocal}),
		"inheritance": enum(&c.Inheritance, map[string]sluice.TokensInheritance{
			"proportionally": sluice.Proportionally, "as_is": sluice.AsIs, "reset": sluice.Reset, "additive": sluice.Additive}),
		"auth": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{
				"tokens":     strList(&c.Tokens),
				"token_file": str(&c.TokenFile),
				"metrics":    boolean(&c.AuthMetrics),
			})
		},
		"tls": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{"cert": str(&c.TLSCert), "key": str(&c.TLSKey)})
		},
		"health": func(path string, n *yaml.Node) error {
			return decodeMapping(path, n, fields{
				"window":       positiveDuration(&c.HealthWindow),
				"threshold":    fraction(&c.HealthThreshold),
				"min_requests": positiveInt(&c.HealthMinRequests),
			})
		},
	}
}

// fields decodes the keys of a mapping, each by its function.
type fields map[string]func(path string, n *yaml.Node) error

// deref follows an alias to its value.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// decodeMapping decodes n, which must be a mapping, strictly: a key that
// fs does not have, or a duplicate key, is an error.
func decodeMapping(path string, n *yaml.Node, fs fields) error {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return config.NodeError(path, n, "must be a mapping")
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		p := path + "." + k.Value
		decode, ok := fs[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode:
			return config.NodeError(path, k, "keys must be strings")
		case seen[k.Value] > 0:
			return config.NodeError(p, k, "duplicate key %q, first at line %d", k.Value, seen[k.Value])
		case !ok:
			return config.NodeError(p, k, "unknown key %q; valid keys: %s", k.Value, keyList(fs))
		}
		seen[k.Value] = k.Line
		if err := decode(p, n.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func keyList(fs fields) string {
	keys := make([]string, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// scalar returns n as a scalar of tag, or an error that says it should be
// want.
func scalar(path string, n *yaml.Node, tag, want string) (*yaml.Node, error) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		return nil, config.NodeError(path, n, "must be %s", want)
	}
	return n, nil
}

func str(dst *string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n, err := scalar(path, n, "!!str", "a string (quote numbers)")
		if err == nil {
			*dst = n.Value
		}
		return err
	}
}

func boolean(dst *bool) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n, err := scalar(path, n, "!!bool", "true or false")
		if err == nil {
			*dst, err = strconv.ParseBool(n.Value)
		}
		if err != nil {
			return config.NodeError(path, n, "must be true or false")
		}
		return nil
	}
}

func strList(dst *[]string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n = deref(n)
		if n.Kind != yaml.SequenceNode {
			return config.NodeError(path, n, "must be a list of strings")
		}
		*dst = nil
		for i, item := range n.Content {
			var s string
			if err := str(&s)(path+"["+strconv.Itoa(i)+"]", item); err != nil {
				return err
			}
			*dst = append(*dst, s)
		}
		return nil
	}
}

func positiveDuration(dst *time.Duration) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n = deref(n)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			return config.NodeError(path, n, "must be a duration with a unit, as in 10s or 1 minute")
		}
		d, err := config.ParseDuration(n.Value)
		if err != nil {
			return config.NodeError(path, n, "%v, got %q", err, n.Value)
		}
		if d <= 0 {
			return config.NodeError(path, n, "must be positive, got %s", n.Value)
		}
		*dst = d
		return nil
	}
}

func positiveInt(dst *int64) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n, err := scalar(path, n, "!!int", "an integer")
		if err != nil {
			return err
		}
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil || v <= 0 {
			return config.NodeError(path, n, "must be a positive integer, got %s", n.Value)
		}
		*dst = v
		return nil
	}
}

func fraction(dst *float64) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n = deref(n)
		v, err := strconv.ParseFloat(n.Value, 64)
		if tag := n.ShortTag(); n.Kind != yaml.ScalarNode || (tag != "!!float" && tag != "!!int") ||
			err != nil || math.IsNaN(v) || v <= 0 || v > 1 {
			return config.NodeError(path, n, "must be a number above 0 and at most 1, got %s", n.Value)
		}
		*dst = v
		return nil
	}
}

func enum[T any](dst *T, values map[string]T) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		n = deref(n)
		v, ok := values[n.Value]
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" || !ok {
			names := make([]string, 0, len(values))
			for k := range values {
				names = append(names, k)
			}
			slices.Sort(names)
			return config.NodeError(path, n, "must be one of %s, got %q", strings.Join(names, ", "), n.Value)
		}
		*dst = v
		return nil
	}
}
