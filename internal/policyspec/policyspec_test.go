package policyspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlnode"
	"github.com/sluicehq/sluice/resilience"
)

// sample is a valid value of each type, for building every policy.
var sample = map[Type]any{
	Int:        int64(3),
	Duration:   time.Second,
	Rate:       PerInterval{Amount: 3, Interval: time.Second},
	Bool:       true,
	Float:      2.0,
	Members:    []sluice.Policy{sluice.FixedWindow(5, time.Minute)},
	Bandwidths: []sluice.Bandwidth{sluice.Simple(3, time.Second)},
	String:     "day",
	Zone:       time.UTC,
	Durations:  []time.Duration{time.Second},
	Inner:      sluice.FixedWindow(5, time.Minute),
}

// TestTable checks each entry: a unique name, the required fields first,
// one constructor, and that the constructor reads every field as the
// table types it (get panics otherwise) and builds a valid policy of the
// entry's Kind.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range All() {
		t.Run(s.Name, func(t *testing.T) {
			if seen[s.Name] {
				t.Fatalf("%s is in the table twice", s.Name)
			}
			seen[s.Name] = true
			if (s.Policy == nil) == (s.Compat == nil) {
				t.Fatalf("%s has Policy %v and Compat %v, want exactly one", s.Name, s.Policy != nil, s.Compat != nil)
			}
			args := Args{}
			for i, f := range s.Fields {
				if i > 0 && f.Required && !s.Fields[i-1].Required {
					t.Errorf("field %s is required after an optional one", f.Name)
				}
				if _, ok := sample[f.Type]; !ok || f.Name == "" || f.Name == "policy" {
					t.Errorf("field %+v: no name or no type", f)
				}
				args[f.Name] = sample[f.Type]
			}
			if s.Compat != nil {
				if s.CountsPerWindow {
					t.Errorf("compatibility policy %s counts per window", s.Name)
				}
				if v := s.Compat(args); v == nil {
					t.Errorf("Compat(%v) = nil", args)
				}
				return
			}
			p := s.Policy(args)
			if got := p.Kind(); got != s.Name {
				t.Errorf("Policy(%v).Kind() = %q, want %q", args, got, s.Name)
			}
			if _, err := sluice.NewLimiter(p); err != nil {
				t.Errorf("NewLimiter(%v) = %v", p, err)
			}
			// A policy that counts per window has the interval for its
			// window: Envoy's units say so of it.
			if s.CountsPerWindow && p.Window() != time.Second {
				t.Errorf("%v.Window() = %v, want its interval 1s", p, p.Window())
			}
		})
	}
}

// TestCompatDefaults: absent optional fields take the original library's
// defaults.
func TestCompatDefaults(t *testing.T) {
	tests := []struct {
		name string
		want any
	}{
		{"resilience4j", resilience.DefaultConfig()},
		{"time_limiter", resilience.DefaultTimeLimiterConfig()},
		{"smooth_bursty", Smooth{PermitsPerSecond: 0, MaxBurstSeconds: 1}},
		{"smooth_warming_up", Smooth{WarmingUp: true, ColdFactor: 3}},
	}
	for _, tt := range tests {
		s, ok := Lookup(tt.name)
		if !ok {
			t.Fatalf("Lookup(%q) found nothing", tt.name)
		}
		if got := s.Compat(Args{}); got != tt.want {
			t.Errorf("%s: Compat of no field = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func decodeJSON(t *testing.T, opts Options, src string) (*Desc, error) {
	t.Helper()
	n, err := yamlnode.FromJSON([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(opts)
	desc, err := d.Decode("limiter", n)
	if err != nil {
		return nil, err
	}
	return desc, d.Resolve(desc, func(m Member) (*Desc, error) {
		return nil, yamlnode.Errorf(m.Path, m.Node, "no names")
	})
}

// TestOptions: each option changes one thing, and a config file's
// description is refused without it.
func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		src     string
		wantErr string // "" when it must decode
	}{
		{"integer nanoseconds", Options{VectorValues: true},
			`{"policy": "sliding_log", "limit": 1, "interval": 1000}`, ""},
		{"integer nanoseconds in a config file", Options{},
			`{"policy": "sliding_log", "limit": 1, "interval": 1000}`, "needs a unit"},
		{"a unit word in a vector", Options{VectorValues: true},
			`{"policy": "sliding_log", "limit": 1, "interval": "1 second"}`, "must be a Go duration string"},
		{"an integer first_refill", Options{VectorValues: true},
			`{"policy": "bucket", "limits": [{"capacity": 1, "refill": {"intervally_aligned": 1, "per": "1s", "first_refill": 5}}]}`, ""},
		{"unknown keys ignored", Options{IgnoreUnknown: true},
			`{"policy": "gcra", "note": 1, "limit": 1, "rate": {"interval": "1s", "amount": 1, "note": 2}}`, ""},
		{"unknown keys refused", Options{},
			`{"policy": "gcra", "note": 1, "limit": 1, "rate": {"interval": "1s", "amount": 1}}`, `unknown key "note"`},
		{"another policy's key, ignoring unknown ones", Options{IgnoreUnknown: true},
			`{"policy": "gcra", "max_queue": 1, "limit": 1, "rate": {"interval": "1s", "amount": 1}}`, `key "max_queue" is not valid for policy gcra`},
		{"compatibility policy", Options{Compat: true}, `{"policy": "time_limiter"}`, ""},
		{"compatibility policy in a config file", Options{}, `{"policy": "time_limiter"}`, `unknown policy "time_limiter"`},
		{"compatibility member", Options{Compat: true},
			`{"policy": "compound", "limiters": [{"policy": "time_limiter"}]}`, "cannot be a member of a compound"},
		{"an invalid policy", Options{}, `{"policy": "gcra", "limit": 0, "rate": {"interval": "1s", "amount": 1}}`, "must be positive, got 0"},
		{"an invalid policy, unchecked", Options{Unchecked: true}, `{"policy": "gcra", "limit": 0, "rate": {"interval": "1s", "amount": 1}}`, ""},
		{"a float limit", Options{}, `{"policy": "fixed_window", "limit": 1.0, "interval": "1s"}`, "must be an integer, got float 1.0"},
		{"2^63-1", Options{}, `{"policy": "fixed_window", "limit": 9223372036854775807, "interval": "1s"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeJSON(t, tt.opts, tt.src)
			var ye *yamlnode.Error
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Decode(%s) = %v, want no error", tt.src, err)
			case tt.wantErr != "" && (!errors.As(err, &ye) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Decode(%s) = %v, want a *yamlnode.Error containing %q", tt.src, err, tt.wantErr)
			}
		})
	}
}

// TestInvalidWrapsConfigError: the error of a policy sluice refuses is at
// its field and wraps the *sluice.ConfigError.
func TestInvalidWrapsConfigError(t *testing.T) {
	_, err := decodeJSON(t, Options{}, `{"policy": "shaper", "rate": {"interval": "1s", "amount": 1}, "max_queue": -1}`)
	var ce *sluice.ConfigError
	if !errors.As(err, &ce) || ce.Rule != sluice.RuleNegativeMaxQueue || !strings.HasPrefix(err.Error(), "limiter.max_queue: ") {
		t.Errorf("Decode = %v, want an error at limiter.max_queue wrapping the ConfigError", err)
	}
}

// TestNames: the messages list the policies a decoder admits.
func TestNames(t *testing.T) {
	all, files := names(true), names(false)
	if !slices.Contains(all, "resilience4j") || slices.Contains(files, "resilience4j") || !slices.Contains(files, "bucket") {
		t.Errorf("names(true) = %v, names(false) = %v", all, files)
	}
}

// TestCalendarAndPenaltyBox: the calendar's fields that go with one
// period only, its zone, and the penalty box's inner limiter and
// penalties, each refused at its node with what is wrong.
func TestCalendarAndPenaltyBox(t *testing.T) {
	tests := []struct {
		name, src, wantErr string // wantErr "" when it must decode
		wantPolicy         string
	}{
		{"a month on the 31st in Paris", `{"policy": "calendar", "limit": 5, "period": "month", "anchor_day": 31, "time_zone": "Europe/Paris"}`,
			"", "calendar(limit=5, months=1, days=0, anchor=2000-01-31T00:00:00 Europe/Paris)"},
		{"a week from Sunday", `{"policy": "calendar", "limit": 5, "period": "week", "first_day": "sunday"}`,
			"", "calendar(limit=5, months=0, days=7, anchor=2000-01-02T00:00:00 UTC)"},
		{"a day", `{"policy": "calendar", "limit": 5, "period": "day"}`,
			"", "calendar(limit=5, months=0, days=1, anchor=2000-01-01T00:00:00 UTC)"},
		{"an unknown period", `{"policy": "calendar", "limit": 5, "period": "fortnight"}`,
			`limiter.period: must be one of day, week, month, got "fortnight"`, ""},
		{"first_day of a month", `{"policy": "calendar", "limit": 5, "period": "month", "first_day": "monday"}`,
			"limiter.first_day: is only valid with period week, not month", ""},
		{"a misspelt day", `{"policy": "calendar", "limit": 5, "period": "week", "first_day": "Monday"}`,
			`limiter.first_day: must be one of sunday`, ""},
		{"anchor_day of a day", `{"policy": "calendar", "limit": 5, "period": "day", "anchor_day": 3}`,
			"limiter.anchor_day: is only valid with period month, not day", ""},
		{"anchor_day 32", `{"policy": "calendar", "limit": 5, "period": "month", "anchor_day": 32}`,
			"limiter.anchor_day: must be in [1, 31], got 32", ""},
		{"an unknown zone", `{"policy": "calendar", "limit": 5, "period": "day", "time_zone": "Mars/Olympus"}`,
			`limiter.time_zone: unknown time zone "Mars/Olympus"`, ""},
		{"the local zone", `{"policy": "calendar", "limit": 5, "period": "day", "time_zone": "Local"}`,
			`limiter.time_zone: unknown time zone "Local"`, ""},
		{"a zero limit", `{"policy": "calendar", "limit": 0, "period": "day"}`, "limiter.limit: must be positive, got 0", ""},
		{"a penalty box", `{"policy": "penalty_box", "limiter": {"policy": "fixed_window", "limit": 5, "interval": "1m"}, "penalties": ["1m", "10m"], "forgive_after": "1h"}`,
			"", "penalty_box(fixed_window(limit=5, interval=1m0s), penalties=[1m0s 10m0s], forgive_after=1h0m0s)"},
		{"no penalty", `{"policy": "penalty_box", "limiter": {"policy": "no_limit"}, "penalties": []}`,
			"limiter.penalties: must hold 1 to 64 penalties, got []", ""},
		{"a negative penalty", `{"policy": "penalty_box", "limiter": {"policy": "no_limit"}, "penalties": ["1m", "-1s"]}`,
			"limiter.penalties: must each be positive, got -1s at 1", ""},
		{"escalation never forgiven", `{"policy": "penalty_box", "limiter": {"policy": "no_limit"}, "penalties": ["1m", "2m"]}`,
			"limiter: penalty_box.forgive_after must be positive with several penalties", ""},
		{"an invalid inner limiter", `{"policy": "penalty_box", "limiter": {"policy": "gcra", "limit": 0, "rate": {"interval": "1s", "amount": 1}}, "penalties": ["1m"]}`,
			"limiter.limiter.limit: must be positive, got 0", ""},
		{"a list for the limiter", `{"policy": "penalty_box", "limiter": [], "penalties": ["1m"]}`,
			"limiter.limiter: must be the name of a limiter or a limiter mapping", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desc, err := decodeJSON(t, Options{}, tt.src)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Decode(%s) = %v, want no error", tt.src, err)
			case tt.wantErr == "" && desc.Policy.String() != tt.wantPolicy:
				t.Errorf("Decode(%s) = %v, want %s", tt.src, desc.Policy, tt.wantPolicy)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Decode(%s) = %v, want an error containing %q", tt.src, err, tt.wantErr)
			}
		})
	}
}
