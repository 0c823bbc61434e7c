package yamlnode

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		// Go syntax.
		{"1h30m", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"1.5s", 1500 * time.Millisecond},
		{"0", 0},
		{"-5m", -5 * time.Minute},
		{"1µs", time.Microsecond},
		{"2562047h47m16.854775807s", math.MaxInt64},
		// A count and a word.
		{"1 second", time.Second},
		{"60 minutes", time.Hour},
		{"1 minute", time.Minute},
		{"15 min", 15 * time.Minute},
		{"2 mins", 2 * time.Minute},
		{"90sec", 90 * time.Second},
		{"3 secs", 3 * time.Second},
		{"1 hour", time.Hour},
		{"24 hours", 24 * time.Hour},
		{"2 hrs", 2 * time.Hour},
		{"1 day", 24 * time.Hour},
		{"7 days", 7 * 24 * time.Hour},
		{"1d", 24 * time.Hour},
		{"2 weeks", 14 * 24 * time.Hour},
		{"1w", 7 * 24 * time.Hour},
		{"5 milliseconds", 5 * time.Millisecond},
		{"1 millisecond", time.Millisecond},
		{"5 msec", 5 * time.Millisecond},
		{"3 microseconds", 3 * time.Microsecond},
		{"7 nanoseconds", 7},
		{"1 nanosecond", 1},
		{"10 Seconds", 10 * time.Second},
		{"10 MINUTES", 10 * time.Minute},
		{"0 seconds", 0},
		{"9223372036854775807 ns", math.MaxInt64},
		{"15250 weeks", 15250 * 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseDurationErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // a substring of the error
	}{
		{"", "must be a duration"},
		{"soon", "must be a duration"},
		{"one minute", "must be a duration"},
		{"1.5 hours", "must be a duration"},
		{"1h 30m", "must be a duration"},
		{"60", "must be a duration"},
		{"3 fortnights", `unknown unit "fortnights"`},
		{"1 M", `unknown unit "M"`},
		{"1 S", `unknown unit "S"`},
		{"1 month", "months have no fixed length"},
		{"6 months", "months have no fixed length"},
		{"1mo", "months have no fixed length"},
		{"1 year", "years have no fixed length"},
		{"2y", "years have no fixed length"},
		{"1 Year", "years have no fixed length"},
		{"15251 weeks", "overflows"},
		{"106752 days", "overflows"},
		{"9223372036854775808 ns", "overflows"},
		{"99999999999999999999 seconds", "overflows"},
		{"2562048h", "overflows"},
		{"9223372036854775808ns", "overflows"},
		{"-2562048h", "overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseDuration(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.want)
			}
		})
	}
}
