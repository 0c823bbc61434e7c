package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestLoadConfigSymfony: sluice serve reads a Symfony file as it is, with
// every server setting at its default, and its errors are Symfony's paths.
func TestLoadConfigSymfony(t *testing.T) {
	path := filepath.Join("..", "..", "..", "config", "testdata", "symfony", "rate_limiter.good.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := LoadConfigFile(path)
	if err != nil {
		t.Fatalf("LoadConfigFile(%s) = %v", path, err)
	}
	c, err := LoadConfig(data)
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	for _, c := range []*Config{fromFile, c} {
		if c.Store != DefaultStore || c.HTTP != newConfig().HTTP {
			t.Errorf("store %q, http %q: want the defaults %q, %q", c.Store, c.HTTP, DefaultStore, newConfig().HTTP)
		}
		if got := c.Limiters.Limiters["anonymous_api"].Policy.String(); got != "fixed_window(limit=100, interval=1h0m0s)" {
			t.Errorf("anonymous_api = %s, want fixed_window(limit=100, interval=1h0m0s)", got)
		}
		if len(c.Limiters.Notes) == 0 {
			t.Error("no notes for the file's cache_pool, lock_factory and storage_service")
		}
	}

	_, err = LoadConfig([]byte("framework:\n  rate_limiter:\n    api: {policy: fixed_window, limit: 0, interval: '1 minute'}\n"))
	var e *config.Error
	if !errors.As(err, &e) || e.Path != "framework.rate_limiter.api.limit" || e.Line != 3 {
		t.Errorf("LoadConfig of a bad Symfony file = %v, want an error at framework.rate_limiter.api.limit, line 3", err)
	}

	// A file that mixes the two formats is sluice serve's, which refuses
	// the Symfony root.
	_, err = LoadConfig([]byte("store: mem://\nframework:\n  rate_limiter:\n    api: {policy: fixed_window, limit: 1, interval: '1 minute'}\n"))
	if !errors.As(err, &e) || e.Path != "framework" {
		t.Errorf("LoadConfig of a mixed file = %v, want an error at framework", err)
	}
}
