package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// seed adds every file matching pattern to f.
func seed(f *testing.F, pattern string) {
	f.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		f.Fatalf("no %s: %v", pattern, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// checkError fails unless err is a *config.Error with a message and a
// position that is not negative.
func checkError(t *testing.T, op string, err error) {
	t.Helper()
	var e *config.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s error %T (%v) is not a *config.Error", op, err, err)
	}
	if e.Line < 0 || e.Column < 0 || e.Msg == "" {
		t.Fatalf("%s error %+v: bad position or no message", op, e)
	}
}

// FuzzLoadSymfony feeds LoadSymfony arbitrary documents, seeded with its
// testdata: it must not panic, its errors must be *config.Error values,
// and every limiter it accepts must be one sluice.NewLimiter accepts.
func FuzzLoadSymfony(f *testing.F) {
	seed(f, "testdata/symfony/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := config.LoadSymfony(data)
		if err != nil {
			checkError(t, "LoadSymfony", err)
			return
		}
		if len(file.Order) == 0 || len(file.Order) != len(file.Limiters) {
			t.Fatalf("LoadSymfony: %d names in Order, %d limiters", len(file.Order), len(file.Limiters))
		}
		for _, name := range file.Order {
			if _, err := sluice.NewLimiter(file.Limiters[name].Policy); err != nil {
				t.Fatalf("LoadSymfony accepted %q, but NewLimiter = %v", name, err)
			}
		}
	})
}

// FuzzLoadResilience4j feeds LoadResilience4j arbitrary documents, seeded
// with its testdata: it must not panic, its errors must be *config.Error
// values, and every instance it accepts must build.
func FuzzLoadResilience4j(f *testing.F) {
	seed(f, "testdata/resilience4j/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := config.LoadResilience4j(data)
		if err != nil {
			checkError(t, "LoadResilience4j", err)
			return
		}
		if len(r.RateLimiterOrder)+len(r.TimeLimiterOrder) == 0 {
			t.Fatal("LoadResilience4j accepted a file without instances")
		}
		for _, name := range r.RateLimiterOrder {
			if _, err := r.NewRateLimiter(name); err != nil {
				t.Fatalf("LoadResilience4j accepted rate limiter %q, but NewRateLimiter = %v", name, err)
			}
		}
		for _, name := range r.TimeLimiterOrder {
			if _, err := r.NewTimeLimiter(name); err != nil {
				t.Fatalf("LoadResilience4j accepted time limiter %q, but NewTimeLimiter = %v", name, err)
			}
		}
	})
}
