package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// FuzzLoad feeds Load arbitrary documents, seeded with every file of
// testdata. Load must not panic; its errors must be *config.Error values,
// and what it accepts must be whole: every name in Order has a limiter
// whose policy sluice.NewLimiter accepts (but aligned buckets, for
// sluice.NewBucket).
func FuzzLoad(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no testdata/*.yaml: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := config.Load(data)
		if err != nil {
			var e *config.Error
			if !errors.As(err, &e) {
				t.Fatalf("Load error %T (%v) is not a *config.Error", err, err)
			}
			if e.Line < 0 || e.Column < 0 || e.Msg == "" {
				t.Fatalf("Load error %+v: bad position or no message", e)
			}
			return
		}
		if len(file.Order) == 0 || len(file.Order) != len(file.Limiters) {
			t.Fatalf("Load: %d names in Order, %d limiters", len(file.Order), len(file.Limiters))
		}
		for _, name := range file.Order {
			l, ok := file.Limiters[name]
			if !ok || l.Name != name || l.Policy == nil {
				t.Fatalf("Load: limiter %q = %+v, %v", name, l, ok)
			}
			_, err := sluice.NewLimiter(l.Policy)
			var ce *sluice.ConfigError
			if err != nil && (l.Bucket == nil || !errors.As(err, &ce) || ce.Rule != sluice.RuleAlignedNeedsWallClock) {
				t.Fatalf("Load accepted %q, but NewLimiter(%v) = %v", name, l.Policy, err)
			}
		}
	})
}
