package server

import (
	_ "embed"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/storeurl"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Config is a server config file: the limiters of package config plus the
// store, server and envoy sections. docs/deploy.md is its reference.
type Config struct {
	// Limiters are the file's limiters.
	Limiters *config.File
	// Store is the store's URL, for storeurl.Open; "mem://" by default.
	// LoadConfig refuses a URL whose scheme storeurl does not know.
	Store string
	// StartWithoutStore says what New does when the store does not answer
	// its check at start: true starts the server anyway, not ready, and
	// Serve checks again in the background; false refuses to start. A
	// store that answers with an error (a bad database, a wrong password)
	// always stops the start.
	StartWithoutStore bool
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
	// RateLimit are envoyproxy/ratelimit's settings: the ratelimit
	// section's keys over its environment variables, which say where its
	// config files are and shape the answers of Envoy's service.
	RateLimit envoyrls.Settings
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

// DefaultConfig is the config sluice serve runs without --config: the
// built-in example, or, when envoyproxy/ratelimit's environment variables
// name its config files (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, ...), those
// files alone on the in-memory store, as envoyproxy/ratelimit would serve
// them.
func DefaultConfig() (*Config, error) {
	s, err := envoyrls.SettingsFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if s.Files {
		return LoadConfig([]byte("store: " + DefaultStore + "\n"))
	}
	return LoadConfig(Example())
}

// Example returns the built-in example config that sluice serve runs
// without --config.
func Example() []byte { return exampleYAML }

// LoadConfig decodes and validates a server config file. Its errors are
// *config.Error values with the YAML path and line.
func LoadConfig(data []byte) (*Config, error) {
	c := newConfig()
	var section bool
	f, err := config.LoadWith(data, c.sections(&section))
	if err != nil {
		return nil, err
	}
	c.Limiters = f
	return c, c.rateLimitFromEnv(section)
}

// LoadConfigFile reads the file at path and loads it with LoadConfig.
func LoadConfigFile(path string) (*Config, error) {
	c := newConfig()
	var section bool
	f, err := config.LoadFileWith(path, c.sections(&section))
	if err != nil {
		return nil, err
	}
	c.Limiters = f
	return c, c.rateLimitFromEnv(section)
}

// rateLimitFromEnv reads envoyproxy/ratelimit's settings from the
// environment when the file has no ratelimit section.
func (c *Config) rateLimitFromEnv(section bool) (err error) {
	if !section {
		c.RateLimit, err = envoyrls.SettingsFromEnv(os.LookupEnv)
	}
	return err
}

func newConfig() *Config {
	return &Config{
		Store:             DefaultStore,
		StartWithoutStore: true,
		DrainTimeout:      DefaultDrainTimeout,
		HealthWindow:      DefaultHealthWindow,
		HealthThreshold:   DefaultHealthThreshold,
		HealthMinRequests: DefaultHealthMinRequests,
		StoreTimeout:      sluice.DefaultStoreTimeout,
		Inheritance:       sluice.Proportionally,
	}
}

// sections are the decoders of the file's sections; the ratelimit one
// sets *rateLimit.
func (c *Config) sections(rateLimit *bool) map[string]config.Section {
	return map[string]config.Section{
		"store": func(path string, n *yaml.Node, _ *config.File) error {
			if err := str(&c.Store)(path, n); err != nil {
				return err
			}
			// The rest of the URL is checked when the store is opened.
			if _, err := storeurl.Parse(c.Store); err != nil {
				return yamlnode.Errorf(path, n, "%v", err)
			}
			return nil
		},
		"server": func(path string, n *yaml.Node, _ *config.File) error {
			if err := decodeMapping(path, n, c.serverFields()); err != nil {
				return err
			}
			if (c.TLSCert == "") != (c.TLSKey == "") {
				return yamlnode.Errorf(path+".tls", nil, "cert and key go together, got only one")
			}
			return nil
		},
		"ratelimit": func(path string, n *yaml.Node, _ *config.File) (err error) {
			*rateLimit = true
			c.RateLimit, err = envoyrls.DecodeSettings(path, n, os.LookupEnv)
			return err
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
		"http":                str(&c.HTTP),
		"grpc":                str(&c.GRPC),
		"drain_timeout":       positiveDuration(&c.DrainTimeout),
		"start_without_store": boolean(&c.StartWithoutStore),
		"store_timeout":       positiveDuration(&c.StoreTimeout),
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

// The server section is small and has no nested lists to expand, so each
// helper walks its node with a decoder of its own.

// decodeMapping decodes n, which must be a mapping, strictly: a key that
// fs does not have, or a duplicate key, is an error.
func decodeMapping(path string, n *yaml.Node, fs fields) error {
	var d yamlnode.Decoder
	m, err := d.Mapping(path, n)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(fs))
	if err := m.Check(keys, nil, yamlnode.PlainUnknown(keys)); err != nil {
		return err
	}
	for i, k := range m.Keys {
		if err := fs[k.Value](yamlnode.Join(path, k.Value), m.Vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func str(dst *string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) (err error) {
		var d yamlnode.Decoder
		*dst, err = d.String(path, n)
		return err
	}
}

func boolean(dst *bool) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) (err error) {
		var d yamlnode.Decoder
		*dst, err = d.Bool(path, n)
		return err
	}
}

func strList(dst *[]string) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		items, err := d.List(path, n)
		if err != nil {
			return err
		}
		*dst = nil
		for i, item := range items {
			s, err := d.String(yamlnode.Index(path, i), item)
			if err != nil {
				return err
			}
			*dst = append(*dst, s)
		}
		return nil
	}
}

func positiveDuration(dst *time.Duration) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		n, err := d.Scalar(path, n, "a duration")
		if err != nil {
			return err
		}
		if n.ShortTag() != "!!str" {
			return yamlnode.Errorf(path, n, "must be a duration with a unit, as in 10s or 1 minute, got %s", yamlnode.Describe(n))
		}
		v, err := config.ParseDuration(n.Value)
		if err != nil {
			return yamlnode.Errorf(path, n, "%v, got %q", err, n.Value)
		}
		if v <= 0 {
			return yamlnode.Errorf(path, n, "must be positive, got %s", n.Value)
		}
		*dst = v
		return nil
	}
}

func positiveInt(dst *int64) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		v, err := d.Int64(path, n)
		if err != nil {
			return err
		}
		if v <= 0 {
			return yamlnode.Errorf(path, n, "must be positive, got %d", v)
		}
		*dst = v
		return nil
	}
}

func fraction(dst *float64) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		n, err := d.Scalar(path, n, "a number above 0 and at most 1")
		if err != nil {
			return err
		}
		v, err := strconv.ParseFloat(n.Value, 64)
		if tag := n.ShortTag(); (tag != "!!float" && tag != "!!int") || err != nil || math.IsNaN(v) || v <= 0 || v > 1 {
			return yamlnode.Errorf(path, n, "must be a number above 0 and at most 1, got %s", n.Value)
		}
		*dst = v
		return nil
	}
}

func enum[T any](dst *T, values map[string]T) func(string, *yaml.Node) error {
	return func(path string, n *yaml.Node) error {
		var d yamlnode.Decoder
		name, err := d.String(path, n)
		v, ok := values[name]
		if err != nil || !ok {
			names := slices.Sorted(maps.Keys(values))
			return yamlnode.Errorf(path, n, "must be one of %s, got %q", strings.Join(names, ", "), n.Value)
		}
		*dst = v
		return nil
	}
}
