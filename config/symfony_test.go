package config_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// TestLoadSymfonyBad loads every testdata/symfony/*.bad.yaml and checks
// the error its first line announces, as TestLoadBad does.
func TestLoadSymfonyBad(t *testing.T) {
	checkBad(t, "testdata/symfony/*.bad.yaml", "LoadSymfonyFile", func(file string, _ []byte) (any, error) { return config.LoadSymfonyFile(file) },
		func(t *testing.T, file string, err error, e *config.Error) {
			if e.File != file || !strings.HasPrefix(err.Error(), "config: "+file+": ") {
				t.Errorf("LoadSymfonyFile error = %q, want it to name the file %s", err, file)
			}
		})
}

func TestLoadSymfonyGood(t *testing.T) {
	tests := []struct {
		file  string
		order []string
		want  map[string]string
		notes []string
	}{
		{
			file:  "rate_limiter",
			order: []string{"anonymous_api", "authenticated_api", "contact_form", "newsletter", "login", "api"},
			want: map[string]string{
				"anonymous_api":     "fixed_window(limit=100, interval=1h0m0s)",
				"authenticated_api": "token_bucket(limit=5000, rate=500 per 15m0s)",
				"contact_form":      "sliding_window(limit=3, interval=1h30m0s)",
				"newsletter":        "token_bucket(limit=10000, rate=1 per 730h29m6s)",
				"login":             "no_limit",
				"api":               "compound(fixed_window(limit=100, interval=1h0m0s), sliding_window(limit=3, interval=1h30m0s))",
			},
			notes: []string{
				"framework.rate_limiter.anonymous_api.cache_pool (line 9): not applicable",
				"framework.rate_limiter.authenticated_api.lock_factory (line 14): not applicable",
				"framework.rate_limiter.contact_form.storage_service (line 19): not applicable",
				`framework.rate_limiter.newsletter.rate.interval (line 23): "1 month" taken as 730h29m6s`,
				"framework.rate_limiter.login.limit (line 26): not used by policy no_limit",
			},
		},
		{
			file:  "normalized",
			order: []string{"uploads"},
			want:  map[string]string{"uploads": "fixed_window(limit=20, interval=24h0m0s)"},
			notes: []string{
				"parameters (line 3): not a rate limiter setting",
				"framework.secret (line 6): not a rate limiter setting",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := config.LoadSymfonyFile(filepath.Join("testdata", "symfony", tt.file+".good.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.Order, tt.order) {
				t.Errorf("Order = %v, want %v", f.Order, tt.order)
			}
			for name, want := range tt.want {
				if got := f.Limiters[name].Policy.String(); got != want {
					t.Errorf("limiter %s = %s, want %s", name, got, want)
				}
			}
			if len(f.Notes) != len(tt.notes) {
				t.Fatalf("Notes = %v, want %d of them", f.Notes, len(tt.notes))
			}
			for i, n := range f.Notes {
				if !strings.HasPrefix(n.String(), tt.notes[i]) {
					t.Errorf("Notes[%d] = %q, want it to start with %q", i, n, tt.notes[i])
				}
			}
		})
	}
}

func TestParseSymfonyInterval(t *testing.T) {
	tests := []struct {
		in       string
		want     time.Duration
		calendar bool
	}{
		{"60 minutes", time.Hour, false},
		{"1 hour 30 minutes", 90 * time.Minute, false},
		{"3 seconds", 3 * time.Second, false},
		{"10 secs", 10 * time.Second, false},
		{"1day", 24 * time.Hour, false},
		{"2 Weeks", 14 * 24 * time.Hour, false},
		{"1 fortnight", 14 * 24 * time.Hour, false},
		{"500 msec", 500 * time.Millisecond, false},
		{"1 month", 2_629_746 * time.Second, true},
		{"1 year", 31_556_952 * time.Second, true},
		{"12 months", 31_556_952 * time.Second, true},
	}
	for _, tt := range tests {
		d, calendar, err := config.ParseSymfonyInterval(tt.in)
		if err != nil || d != tt.want || calendar != tt.calendar {
			t.Errorf("ParseSymfonyInterval(%q) = %v, %v, %v; want %v, %v, nil", tt.in, d, calendar, err, tt.want, tt.calendar)
		}
	}
	for _, bad := range []string{"", "60", "minutes", "1.5 hours", "-1 hour", "1 weekday", "an hour", "PT1H", "1h", "300 years"} {
		if d, _, err := config.ParseSymfonyInterval(bad); err == nil {
			t.Errorf("ParseSymfonyInterval(%q) = %v, nil; want an error", bad, d)
		}
	}
}
