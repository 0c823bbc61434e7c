package config_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/resilience"
)

// TestLoadResilience4jBad loads every testdata/resilience4j/*.bad.yaml and
// checks the error its first line announces, as TestLoadBad does.
func TestLoadResilience4jBad(t *testing.T) {
	checkBad(t, "testdata/resilience4j/*.bad.yaml", "LoadResilience4jFile", func(file string, _ []byte) (any, error) { return config.LoadResilience4jFile(file) },
		func(t *testing.T, file string, err error, e *config.Error) {
			if e.File != file {
				t.Errorf("LoadResilience4jFile error = %q, want it to name the file %s", err, file)
			}
		})
}

func TestLoadResilience4jGood(t *testing.T) {
	type rate = resilience.Config
	type tl = resilience.TimeLimiterConfig
	tests := []struct {
		file       string
		rateOrder  []string
		rate       map[string]rate
		timeOrder  []string
		time       map[string]tl
		notePrefix []string
	}{
		{
			file:      "application",
			rateOrder: []string{"backendA", "backendB", "backendC", "sms"},
			rate: map[string]rate{
				"backendA": {LimitForPeriod: 10, LimitRefreshPeriod: time.Second, Timeout: 0},
				"backendB": {LimitForPeriod: 6, LimitRefreshPeriod: 500 * time.Millisecond, Timeout: 3 * time.Second},
				"backendC": {LimitForPeriod: 2, LimitRefreshPeriod: time.Minute, Timeout: 500 * time.Millisecond},
				"sms":      {LimitForPeriod: 10, LimitRefreshPeriod: time.Second, Timeout: 250 * time.Millisecond},
			},
			timeOrder: []string{"backendA", "backendB", "reports"},
			time: map[string]tl{
				"backendA": {Timeout: 2 * time.Second, CancelRunning: false},
				"backendB": {Timeout: 500 * time.Millisecond, CancelRunning: false},
				"reports":  {Timeout: 2 * time.Second, CancelRunning: true},
			},
			notePrefix: []string{
				"spring (line 2): not a Resilience4j setting",
				"server (line 5): not a Resilience4j setting",
				"management (line 7): not a Resilience4j setting",
				"resilience4j.circuitbreaker (line 11): not applicable",
				"resilience4j.ratelimiter.configs.default.registerHealthIndicator (line 21): not applicable",
				"resilience4j.ratelimiter.configs.default.eventConsumerBufferSize (line 22): not applicable",
			},
		},
		{
			file:      "dotted",
			rateOrder: []string{"search", "export"},
			rate: map[string]rate{
				"search": {LimitForPeriod: 100, LimitRefreshPeriod: time.Minute, Timeout: 5 * time.Second},
				"export": resilience.DefaultConfig(),
			},
			timeOrder: []string{"slow"},
			time:      map[string]tl{"slow": {Timeout: 10 * time.Second, CancelRunning: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r, err := config.LoadResilience4jFile(filepath.Join("testdata", "resilience4j", tt.file+".good.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.RateLimiterOrder, tt.rateOrder) || !reflect.DeepEqual(r.TimeLimiterOrder, tt.timeOrder) {
				t.Errorf("orders = %v, %v; want %v, %v", r.RateLimiterOrder, r.TimeLimiterOrder, tt.rateOrder, tt.timeOrder)
			}
			for name, want := range tt.rate {
				if got := r.RateLimiters[name].Config; got != want {
					t.Errorf("rate limiter %s = %+v, want %+v", name, got, want)
				}
				if _, err := r.NewRateLimiter(name); err != nil {
					t.Errorf("NewRateLimiter(%s): %v", name, err)
				}
			}
			for name, want := range tt.time {
				if got := r.TimeLimiters[name].Config; got != want {
					t.Errorf("time limiter %s = %+v, want %+v", name, got, want)
				}
				if _, err := r.NewTimeLimiter(name); err != nil {
					t.Errorf("NewTimeLimiter(%s): %v", name, err)
				}
			}
			if len(r.Notes) != len(tt.notePrefix) {
				t.Fatalf("Notes = %v, want %d of them", r.Notes, len(tt.notePrefix))
			}
			for i, n := range r.Notes {
				if !strings.HasPrefix(n.String(), tt.notePrefix[i]) {
					t.Errorf("Notes[%d] = %q, want it to start with %q", i, n, tt.notePrefix[i])
				}
			}
			if _, err := r.NewRateLimiter("nope"); !errors.Is(err, config.ErrNoInstance) {
				t.Errorf("NewRateLimiter(nope) error = %v, want ErrNoInstance", err)
			}
		})
	}
}

func TestParseSpringDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"500", 500 * time.Millisecond},
		{"500ms", 500 * time.Millisecond},
		{"1s", time.Second},
		{"1S", time.Second},
		{"10m", 10 * time.Minute},
		{"2h", 2 * time.Hour},
		{"1d", 24 * time.Hour},
		{"250ns", 250},
		{"7us", 7 * time.Microsecond},
		{"PT1S", time.Second},
		{"pt0.5s", 500 * time.Millisecond},
		{"PT0,25S", 250 * time.Millisecond},
		{"PT1M30S", 90 * time.Second},
		{"P1DT2H", 26 * time.Hour},
		{"PT0.000000001S", 1},
		{"-1s", -time.Second},
	}
	for _, tt := range tests {
		if got, err := config.ParseSpringDuration(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseSpringDuration(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "1sec", "1 s", "1.5s", "P", "PT", "P1Y", "PT1.0000000001S", "9999999999999h", "P200000DT1S", "one second"} {
		if got, err := config.ParseSpringDuration(bad); err == nil {
			t.Errorf("ParseSpringDuration(%q) = %v, nil; want an error", bad, got)
		}
	}
}
