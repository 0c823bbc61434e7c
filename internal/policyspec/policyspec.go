// Package policyspec is the one table of the policies a limiter
// description may name, and the one decoder of those descriptions.
//
// A description is a mapping with a policy key and the fields its policy
// takes: {policy: token_bucket, limit: 50, rate: {interval: 1s, amount: 10}}.
// Config files hold them (package config) and so do the conformance
// vectors' LIMITER objects (package conformance); both decode them with a
// Decoder, which walks the table, so that the two cannot disagree on a
// policy, a field or a rule. Options say how the vectors differ.
//
// Adding a policy is its machine package (internal/policy/<name>), its
// constructor and Kind in package sluice, and one entry in table; the
// docs' tables are checked against the table by this package's tests.
package policyspec

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilience"
)

// Type is the type of a field's value.
type Type uint8

// The types of fields.
const (
	Int        Type = iota + 1 // an int64
	Duration                   // a time.Duration
	Rate                       // a mapping {interval: Duration, amount: Int}: a PerInterval
	Bool                       // true or false
	Float                      // a float64: only the compatibility policies, whose originals take doubles
	Members                    // a list of descriptions, or names of other limiters: []sluice.Policy
	Bandwidths                 // a list of a bucket's bandwidths: []sluice.Bandwidth
	String                     // a string
	Zone                       // an IANA time zone name: a *time.Location
	Durations                  // a list of durations: []time.Duration
	Inner                      // one description, or the name of another limiter: a sluice.Policy
)

var typeNames = [...]string{Int: "int", Duration: "duration", Rate: "rate", Bool: "bool",
	Float: "float", Members: "members", Bandwidths: "bandwidths", String: "string", Zone: "zone",
	Durations: "durations", Inner: "inner"}

func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", t)
}

// Field is a field a policy takes besides "policy".
type Field struct {
	Name     string
	Type     Type
	Required bool
}

// Spec is a policy of the table.
type Spec struct {
	// Name is what a description's policy key says, and for the policies
	// of package sluice their Kind.
	Name string
	// Fields are the fields it takes, the required ones first.
	Fields []Field
	// CountsPerWindow says that its limit is a plain count of tokens per
	// its Window, as Envoy's RateLimit units state a limit.
	CountsPerWindow bool
	// Policy builds the policy from its decoded fields; nil for a
	// compatibility policy.
	Policy func(Args) sluice.Policy
	// Check, when set, checks the decoded fields before Policy builds the
	// policy, for the rules between fields that the policy's constructor
	// cannot see (a field valid only beside another's value): it returns
	// the field at fault and what is wrong with it, or "" and "".
	Check func(Args) (field, msg string)
	// Compat builds a compatibility policy, one that copies another
	// library's limiter and that only the conformance vectors describe:
	// its value is the configuration the limiter is made from
	// (resilience.Config, resilience.TimeLimiterConfig, Smooth). Absent
	// optional fields take the original library's defaults.
	Compat func(Args) any
}

// Field returns the field called name, and whether the policy takes it.
func (s *Spec) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// PerInterval is the value of a Rate field: Amount tokens per Interval.
type PerInterval struct {
	Amount   int64
	Interval time.Duration
}

// Smooth is the configuration of Guava's RateLimiter, smooth_bursty or
// smooth_warming_up, as package smooth's constructors take it.
type Smooth struct {
	WarmingUp        bool
	PermitsPerSecond float64
	MaxBurstSeconds  float64 // smooth_bursty
	Warmup           time.Duration
	ColdFactor       float64 // smooth_warming_up
}

// Args are the decoded fields of one description, by name, each of its
// field's type (see Type). A field the description leaves out is absent:
// Has reports false and its getter returns the zero value.
type Args map[string]any

// Has reports whether the description gives the field name.
func (a Args) Has(name string) bool {
	_, ok := a[name]
	return ok
}

// get returns field name as a T, or T's zero value when it is absent. A
// field of another type is a mistake in the table, not in the input: the
// decoder decodes each field as the table says.
func get[T any](a Args, name string) T {
	v, ok := a[name]
	if !ok {
		var zero T
		return zero
	}
	t, ok := v.(T)
	if !ok {
		panic(fmt.Sprintf("policyspec: field %s is a %T, read as a %T", name, v, t))
	}
	return t
}

// Int returns an Int field.
func (a Args) Int(name string) int64 { return get[int64](a, name) }

// Duration returns a Duration field.
func (a Args) Duration(name string) time.Duration { return get[time.Duration](a, name) }

// Rate returns a Rate field.
func (a Args) Rate(name string) PerInterval { return get[PerInterval](a, name) }

// Bool returns a Bool field.
func (a Args) Bool(name string) bool { return get[bool](a, name) }

// Float returns a Float field, or def when it is absent.
func (a Args) Float(name string, def float64) float64 {
	if !a.Has(name) {
		return def
	}
	return get[float64](a, name)
}

// String returns a String field.
func (a Args) String(name string) string { return get[string](a, name) }

// Zone returns a Zone field, or time.UTC when it is absent.
func (a Args) Zone(name string) *time.Location {
	if !a.Has(name) {
		return time.UTC
	}
	return get[*time.Location](a, name)
}

// Durations returns a Durations field.
func (a Args) Durations(name string) []time.Duration { return get[[]time.Duration](a, name) }

// Inner returns an Inner field.
func (a Args) Inner(name string) sluice.Policy { return get[sluice.Policy](a, name) }

// Members returns a Members field.
func (a Args) Members(name string) []sluice.Policy { return get[[]sluice.Policy](a, name) }

// Bandwidths returns a Bandwidths field.
func (a Args) Bandwidths(name string) []sluice.Bandwidth { return get[[]sluice.Bandwidth](a, name) }

// The fields most policies share.
var (
	limit    = Field{"limit", Int, true}
	interval = Field{"interval", Duration, true}
	rate     = Field{"rate", Rate, true}
)

// window builds a policy of a limit per interval.
func window(f func(int64, time.Duration) sluice.Policy) func(Args) sluice.Policy {
	return func(a Args) sluice.Policy { return f(a.Int("limit"), a.Duration("interval")) }
}

// rated builds a policy of a limit and a rate.
func rated(f func(limit, amount int64, interval time.Duration) sluice.Policy) func(Args) sluice.Policy {
	return func(a Args) sluice.Policy {
		r := a.Rate("rate")
		return f(a.Int("limit"), r.Amount, r.Interval)
	}
}

// table is every policy, by name in the order the docs list them.
var table = []Spec{
	{Name: "fixed_window", Fields: []Field{limit, interval, {"aligned", Bool, false}}, CountsPerWindow: true,
		Policy: func(a Args) sluice.Policy {
			if a.Bool("aligned") {
				return sluice.AlignedFixedWindow(a.Int("limit"), a.Duration("interval"))
			}
			return sluice.FixedWindow(a.Int("limit"), a.Duration("interval"))
		}},
	{Name: "sliding_window", Fields: []Field{limit, interval}, CountsPerWindow: true, Policy: window(sluice.SlidingWindow)},
	{Name: "sliding_log", Fields: []Field{limit, interval}, CountsPerWindow: true, Policy: window(sluice.SlidingLog)},
	{Name: "token_bucket", Fields: []Field{limit, rate}, Policy: rated(sluice.TokenBucket)},
	{Name: "leaky_bucket", Fields: []Field{limit, rate}, Policy: rated(sluice.LeakyBucket)},
	{Name: "gcra", Fields: []Field{limit, rate}, Policy: rated(sluice.GCRA)},
	{Name: "shaper", Fields: []Field{rate, {"max_queue", Int, true}},
		Policy: func(a Args) sluice.Policy {
			r := a.Rate("rate")
			return sluice.Shaper(r.Amount, r.Interval, a.Int("max_queue"))
		}},
	{Name: "no_limit", Policy: func(Args) sluice.Policy { return sluice.NoLimit() }},
	{Name: "compound", Fields: []Field{{"limiters", Members, true}},
		Policy: func(a Args) sluice.Policy { return sluice.Compound(a.Members("limiters")...) }},
	{Name: "concurrency", Fields: []Field{limit, {"ttl", Duration, true}},
		Policy: func(a Args) sluice.Policy { return sluice.Concurrency(a.Int("limit"), a.Duration("ttl")) }},
	{Name: "bucket", Fields: []Field{{"limits", Bandwidths, true}},
		Policy: func(a Args) sluice.Policy {
			return sluice.BucketPolicy(sluice.BucketConfig{Bandwidths: a.Bandwidths("limits")})
		}},
	{Name: "calendar", Fields: []Field{limit, {"period", String, true}, {"time_zone", Zone, false},
		{"first_day", String, false}, {"anchor_day", Int, false}},
		Check: checkCalendar, Policy: calendarPolicy},
	{Name: "penalty_box", Fields: []Field{{"limiter", Inner, true}, {"penalties", Durations, true},
		{"forgive_after", Duration, false}},
		Policy: func(a Args) sluice.Policy {
			return sluice.PenaltyBox(a.Inner("limiter"), a.Durations("penalties"), a.Duration("forgive_after"))
		}},

	{Name: "resilience4j", Fields: []Field{
		{"limit_for_period", Int, false}, {"limit_refresh_period", Duration, false}, {"timeout", Duration, false}},
		Compat: func(a Args) any {
			cfg := resilience.DefaultConfig()
			if a.Has("limit_for_period") {
				cfg.LimitForPeriod = a.Int("limit_for_period")
			}
			if a.Has("limit_refresh_period") {
				cfg.LimitRefreshPeriod = a.Duration("limit_refresh_period")
			}
			if a.Has("timeout") {
				cfg.Timeout = a.Duration("timeout")
			}
			return cfg
		}},
	{Name: "time_limiter", Fields: []Field{{"timeout", Duration, false}, {"cancel_running_future", Bool, false}},
		Compat: func(a Args) any {
			cfg := resilience.DefaultTimeLimiterConfig()
			if a.Has("timeout") {
				cfg.Timeout = a.Duration("timeout")
			}
			if a.Has("cancel_running_future") {
				cfg.CancelRunning = a.Bool("cancel_running_future")
			}
			return cfg
		}},
	{Name: "smooth_bursty", Fields: []Field{{"permits_per_second", Float, true}, {"max_burst_seconds", Float, false}},
		Compat: func(a Args) any {
			return Smooth{PermitsPerSecond: a.Float("permits_per_second", 0), MaxBurstSeconds: a.Float("max_burst_seconds", 1)}
		}},
	{Name: "smooth_warming_up", Fields: []Field{
		{"permits_per_second", Float, true}, {"warmup_period", Duration, true}, {"cold_factor", Float, false}},
		Compat: func(a Args) any {
			return Smooth{WarmingUp: true, PermitsPerSecond: a.Float("permits_per_second", 0),
				Warmup: a.Duration("warmup_period"), ColdFactor: a.Float("cold_factor", 3)}
		}},
}

// Lookup returns the policy called name, if the table has it.
func Lookup(name string) (*Spec, bool) {
	for i := range table {
		if table[i].Name == name {
			return &table[i], true
		}
	}
	return nil, false
}

// All returns every policy of the table, compatibility policies included,
// in the table's order. The caller must not change them.
func All() []*Spec {
	out := make([]*Spec, len(table))
	for i := range table {
		out[i] = &table[i]
	}
	return out
}

// names returns the sorted names of the policies, with or without the
// compatibility policies.
func names(compat bool) []string {
	var out []string
	for _, s := range table {
		if s.Compat == nil || compat {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

// The calendar's periods, and its weeks' first days, as a description
// names them.
var (
	periods  = []string{"day", "week", "month"}
	weekdays = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}
)

// checkCalendar checks the rules between a calendar's fields: its period
// is one of periods, first_day goes with a week and anchor_day with a
// month.
func checkCalendar(a Args) (field, msg string) {
	period := a.String("period")
	switch {
	case !slices.Contains(periods, period):
		return "period", fmt.Sprintf("must be one of %s, got %q", strings.Join(periods, ", "), period)
	case a.Has("first_day") && period != "week":
		return "first_day", "is only valid with period week, not " + period
	case a.Has("first_day") && !slices.Contains(weekdays, a.String("first_day")):
		return "first_day", fmt.Sprintf("must be one of %s, got %q", strings.Join(weekdays, ", "), a.String("first_day"))
	case a.Has("anchor_day") && period != "month":
		return "anchor_day", "is only valid with period month, not " + period
	case a.Has("anchor_day") && (a.Int("anchor_day") < 1 || a.Int("anchor_day") > 31):
		return "anchor_day", fmt.Sprintf("must be in [1, 31], got %d", a.Int("anchor_day"))
	}
	return "", ""
}

// calendarPolicy builds a calendar that checkCalendar passed: its periods
// start at midnight in time_zone (UTC by default), a week on first_day
// (Monday by default), a month on anchor_day (the 1st by default; a later
// day than a month has is its last). The anchors are in January 2000,
// whose 31 days hold every anchor_day; January 2, 2000 was a Sunday.
func calendarPolicy(a Args) sluice.Policy {
	loc := a.Zone("time_zone")
	switch a.String("period") {
	case "week":
		first := 1 // Monday
		if a.Has("first_day") {
			first = slices.Index(weekdays, a.String("first_day"))
		}
		return sluice.Calendar(a.Int("limit"), time.Date(2000, 1, 2+first, 0, 0, 0, 0, loc), 0, 7)
	case "month":
		day := int64(1)
		if a.Has("anchor_day") {
			day = a.Int("anchor_day")
		}
		return sluice.Calendar(a.Int("limit"), time.Date(2000, 1, int(day), 0, 0, 0, 0, loc), 1, 0)
	}
	return sluice.Calendar(a.Int("limit"), time.Date(2000, 1, 1, 0, 0, 0, 0, loc), 0, 1)
}
