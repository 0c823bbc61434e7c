package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/config"
)

// storeSection decodes "store: URL" into *url, checking that the limiters
// were decoded first.
func storeSection(url *string) config.Section {
	return func(path string, n *yaml.Node, f *config.File) error {
		if len(f.Order) == 0 {
			return config.NodeError(path, n, "limiters not decoded before the section")
		}
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			return config.NodeError(path, n, "must be a URL string")
		}
		*url = n.Value
		return nil
	}
}

func TestLoadWith(t *testing.T) {
	var url string
	data := []byte("store: redis://x:6379\nlimiters:\n  api: {policy: fixed_window, limit: 10, interval: 1s}\n")
	f, err := config.LoadWith(data, map[string]config.Section{"store": storeSection(&url)})
	if err != nil {
		t.Fatalf("LoadWith = %v, want nil", err)
	}
	if got, want := url, "redis://x:6379"; got != want {
		t.Errorf("store section decoded %q, want %q", got, want)
	}
	if _, ok := f.Limiters["api"]; !ok || len(f.Order) != 1 {
		t.Errorf("LoadWith limiters = %v, want api", f.Order)
	}
}

func TestLoadWithErrors(t *testing.T) {
	var url string
	sections := map[string]config.Section{"store": storeSection(&url)}
	tests := []struct {
		name, data, want string
	}{
		{"unknown top-level key", "limiters:\n  a: {policy: no_limit}\nsotre: mem://\n",
			`config: sotre (line 3): unknown key "sotre"; valid keys: limiters, store`},
		{"section error has its line", "limiters:\n  a: {policy: no_limit}\nstore: 3\n",
			`config: store (line 3): must be a URL string`},
		{"limiter error first", "store: 3\nlimiters:\n  a: {policy: fixed_window, limit: 0, interval: 1s}\n",
			`config: limiters.a.limit (line 3): must be positive, got 0`},
		{"limiters required in an empty mapping", "{}\n",
			`config: line 1: missing required key "limiters"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadWith([]byte(tt.data), sections)
			var e *config.Error
			if !errors.As(err, &e) || err.Error() != tt.want {
				t.Errorf("LoadWith = %v, want *Error %q", err, tt.want)
			}
		})
	}
}

// TestLoadWithoutLimiters: a file may leave limiters out when it has
// another section, and then has none.
func TestLoadWithoutLimiters(t *testing.T) {
	var url string
	f, err := config.LoadWith([]byte("store: redis://x:6379\n"), map[string]config.Section{
		"store": func(path string, n *yaml.Node, _ *config.File) error { url = n.Value; return nil },
	})
	if err != nil || url != "redis://x:6379" || len(f.Limiters) != 0 || len(f.Order) != 0 {
		t.Errorf("LoadWith(store alone) = %+v, %v (store %q); want no limiters and the store", f, err, url)
	}
}

// TestLoadUnchanged checks that Load still rejects the sections LoadWith
// accepts.
func TestLoadUnchanged(t *testing.T) {
	_, err := config.Load([]byte("store: mem://\nlimiters:\n  a: {policy: no_limit}\n"))
	if err == nil {
		t.Error("Load of a file with a store section = nil, want an unknown-key error")
	}
}

func TestLoadFileWith(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("limiters:\n  a: {policy: no_limit}\nstore: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var url string
	_, err := config.LoadFileWith(path, map[string]config.Section{"store": storeSection(&url)})
	if want := "config: " + path + ": store (line 3): must be a URL string"; err == nil || err.Error() != want {
		t.Errorf("LoadFileWith = %v, want %q", err, want)
	}
	_, err = config.LoadFileWith(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadFileWith of a missing file = %v, want one matching os.ErrNotExist", err)
	}
}
