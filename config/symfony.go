package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// LoadSymfony decodes a Symfony rate limiter file as Symfony reads it,
// unchanged: its root framework.rate_limiter, in either of Symfony's forms
// (the limiters directly under rate_limiter, or under its limiters key
// beside enabled), each limiter with Symfony's keys and policies:
//
//	framework:
//	  rate_limiter:
//	    anonymous_api:
//	      policy: 'fixed_window'
//	      limit: 100
//	      interval: '60 minutes'
//	      cache_pool: 'cache.rate_limiter'
//	    authenticated_api:
//	      policy: 'token_bucket'
//	      limit: 5000
//	      rate: { interval: '15 minutes', amount: 500 }
//
// The policies are fixed_window, sliding_window, token_bucket, no_limit and
// compound (limiters: a list of names), and become the sluice policies of
// the same names. A rate's amount defaults to 1, as in Symfony. Intervals
// are PHP's relative formats, one or more counts with a unit: "60
// minutes", "1 hour 30 minutes", "1 day", "2 weeks", "1 fortnight", "3
// secs". A month is 30.436875 days and a year 365.2425 days (the Gregorian
// averages): Symfony measures them from each call's date instead, 28 to
// 31 days, which a limit of fixed numbers cannot do; each such interval
// is reported in File.Notes.
//
// Keys that have no meaning in sluice are accepted and reported in
// File.Notes: storage_service, lock_factory and cache_pool (a
// driver.Store given to sluice.WithStore takes their place), a key the
// limiter's policy does not use (Symfony ignores it too), and the
// framework's other keys and the file's other top-level keys, which
// configure other parts of Symfony. Environment blocks (when@prod) are an
// error: which one applies is the application's choice, not the file's.
//
// Errors are *Error values, with the path in Symfony's terms
// ("framework.rate_limiter.anonymous_api.limit") and the line. The File
// returned is Load's, its names the Symfony limiters'.
func LoadSymfony(data []byte) (*File, error) {
	f, err := loadSymfony(data)
	if ne, ok := err.(*yamlnode.Error); ok {
		return nil, fromNode(ne)
	}
	return f, err
}

// LoadSymfonyFile reads the file at path and loads it with LoadSymfony. Its
// *Error values have File set to path, as LoadFile's do.
func LoadSymfonyFile(path string) (*File, error) { return loadFile(path, LoadSymfony) }

// symfonyPolicies are the policies a Symfony file may name, and the keys
// each uses.
var symfonyPolicies = map[string][]string{
	"fixed_window":   {"limit", "interval"},
	"sliding_window": {"limit", "interval"},
	"token_bucket":   {"limit", "rate"},
	"no_limit":       nil,
	"compound":       {"limiters"},
}

// symfonyKeys are the keys of a Symfony limiter.
var symfonyKeys = []string{"policy", "limit", "interval", "rate", "limiters", "lock_factory", "cache_pool", "storage_service"}

// symfonyNotApplicable says why each of Symfony's storage keys has no use.
var symfonyNotApplicable = map[string]string{
	"storage_service": "not applicable: sluice keeps a limiter's state in memory, or in the driver.Store given to sluice.WithStore (sluice serve: the store section)",
	"cache_pool":      "not applicable: sluice keeps a limiter's state in memory, or in the driver.Store given to sluice.WithStore, not in a cache pool",
	"lock_factory":    "not applicable: sluice makes each update atomic itself (in memory, or by the store's atomic update), without a lock",
}

func loadSymfony(data []byte) (*File, error) {
	d, top, err := parseTop(data, format{
		empty:  "the file is empty; a Symfony rate limiter file is framework: rate_limiter: and the limiters",
		second: sluiceFormat.second,
	})
	if err != nil {
		return nil, err
	}
	var notes []Note
	note := func(path string, n *yaml.Node, format string, args ...any) {
		notes = append(notes, Note{Path: path, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
	}
	for _, k := range top.Keys {
		switch {
		case k.Value == "framework":
		case strings.HasPrefix(k.Value, "when@"):
			return nil, errorAt(k.Value, k, "environment blocks are not supported: which environment applies is the application's choice; load a file without them")
		default:
			note(k.Value, k, "not a rate limiter setting; ignored")
		}
	}
	if !top.Has("framework") {
		return nil, errorAt("", top.Node, `missing required key "framework": a Symfony rate limiter file is framework: rate_limiter: and the limiters`)
	}
	fw, err := d.Mapping(top.Value("framework"))
	if err != nil {
		return nil, err
	}
	for _, k := range fw.Keys {
		if k.Value != "rate_limiter" {
			note(yamlnode.Join("framework", k.Value), k, "not a rate limiter setting; ignored")
		}
	}
	if !fw.Has("rate_limiter") {
		return nil, errorAt("framework", fw.Node, `missing required key "rate_limiter"`)
	}
	rl, err := d.Mapping(fw.Value("rate_limiter"))
	if err != nil {
		return nil, err
	}
	// Symfony's two forms: {enabled, limiters: {...}}, or the limiters
	// themselves, with enabled among them.
	lims, shorthand := rl, true
	if rl.Has("limiters") {
		if err := rl.Check([]string{"enabled", "limiters"}, nil, yamlnode.PlainUnknown([]string{"enabled", "limiters"})); err != nil {
			return nil, err
		}
		if lims, err = d.Mapping(rl.Value("limiters")); err != nil {
			return nil, err
		}
		shorthand = false
	}
	if rl.Has("enabled") {
		path, v := rl.Value("enabled")
		on, err := d.Bool(path, v)
		if err != nil {
			return nil, err
		}
		if !on {
			return nil, errorAt(path, v, "rate limiting is disabled: the file configures no limiter")
		}
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: lims.Node.Line, Column: lims.Node.Column}
	for i, k := range lims.Keys {
		if shorthand && k.Value == "enabled" {
			continue
		}
		v, err := symfonyLimiter(d, yamlnode.Join(lims.Path, k.Value), lims.Vals[i], note)
		if err != nil {
			return nil, err
		}
		out.Content = append(out.Content, k, v)
	}
	if len(out.Content) == 0 {
		return nil, errorAt(lims.Path, lims.Node, "must name at least one limiter")
	}
	f, err := limiters(d, lims.Path, out)
	if err != nil {
		return nil, err
	}
	f.Notes = notes
	return f, nil
}

// symfonyLimiter checks the Symfony limiter at n and returns it as a
// limiter of sluice's format, for policyspec's decoder: its keys that
// sluice does not apply left out (and noted), its intervals in Go's
// syntax. Nodes keep their lines, so that the decoder's errors point
// into the file.
func symfonyLimiter(d *policyspec.Decoder, path string, n *yaml.Node, note func(string, *yaml.Node, string, ...any)) (*yaml.Node, error) {
	m, err := d.Mapping(path, n)
	if err != nil {
		return nil, err
	}
	if err := m.Check(symfonyKeys, []string{"policy"}, yamlnode.PlainUnknown(symfonyKeys)); err != nil {
		return nil, err
	}
	ppath, pnode := m.Value("policy")
	policy, err := d.String(ppath, pnode)
	if err != nil {
		return nil, err
	}
	uses, ok := symfonyPolicies[policy]
	if !ok {
		msg := "unknown policy %q; Symfony's policies are compound, fixed_window, no_limit, sliding_window and token_bucket"
		if _, sluiceOwn := policyspec.Lookup(policy); sluiceOwn {
			msg += "; write sluice's own policies in a sluice limiter file (config.Load)"
		}
		return nil, errorAt(ppath, pnode, msg, policy)
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: m.Node.Line, Column: m.Node.Column}
	for i, k := range m.Keys {
		kpath, v := yamlnode.Join(path, k.Value), m.Vals[i]
		switch {
		case symfonyNotApplicable[k.Value] != "":
			note(kpath, k, "%s", symfonyNotApplicable[k.Value])
			continue
		case k.Value != "policy" && !slices.Contains(uses, k.Value):
			note(kpath, k, "not used by policy %s; ignored, as Symfony ignores it", policy)
			continue
		case k.Value == "interval":
			if v, err = symfonyInterval(d, kpath, v, note); err != nil {
				return nil, err
			}
		case k.Value == "rate":
			if v, err = symfonyRate(d, kpath, v, note); err != nil {
				return nil, err
			}
		}
		out.Content = append(out.Content, k, v)
	}
	return out, nil
}

// symfonyRate returns the rate at n with its interval in Go's syntax and
// its amount, 1 by default as in Symfony.
func symfonyRate(d *policyspec.Decoder, path string, n *yaml.Node, note func(string, *yaml.Node, string, ...any)) (*yaml.Node, error) {
	m, err := d.Strict(path, n, []string{"interval", "amount"}, []string{"interval"})
	if err != nil {
		return nil, err
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: m.Node.Line, Column: m.Node.Column}
	for i, k := range m.Keys {
		v := m.Vals[i]
		if k.Value == "interval" {
			if v, err = symfonyInterval(d, yamlnode.Join(path, "interval"), v, note); err != nil {
				return nil, err
			}
		}
		out.Content = append(out.Content, k, v)
	}
	if !m.Has("amount") {
		out.Content = append(out.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "amount", Line: m.Node.Line, Column: m.Node.Column},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1", Line: m.Node.Line, Column: m.Node.Column})
	}
	return out, nil
}

// symfonyInterval returns the interval at n as a scalar of Go's syntax at
// n's place, noting the months and years it took as their averages.
func symfonyInterval(d *policyspec.Decoder, path string, n *yaml.Node, note func(string, *yaml.Node, string, ...any)) (*yaml.Node, error) {
	s, err := d.Scalar(path, n, `an interval such as "60 minutes"`)
	if err != nil {
		return nil, err
	}
	if s.ShortTag() != "!!str" {
		return nil, errorAt(path, s, `must be an interval such as "60 minutes" or "1 day", got %s: Symfony's intervals have a unit`, yamlnode.Describe(s))
	}
	dur, calendar, err := ParseSymfonyInterval(s.Value)
	if err != nil {
		return nil, errorAt(path, s, "%v", err)
	}
	if calendar {
		note(path, s, "%q taken as %s: a month as 30.436875 days and a year as 365.2425 days, where Symfony counts from each call's date", s.Value, dur)
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: dur.String(), Line: s.Line, Column: s.Column}, nil
}

const (
	// month and year are the Gregorian calendar's averages, as
	// java.time's ChronoUnit estimates them.
	month = 2_629_746 * time.Second
	year  = 31_556_952 * time.Second
)

// symfonyUnits are the units of PHP's relative time formats that have a
// length, by lower-case name.
var symfonyUnits = map[string]time.Duration{
	"usec": time.Microsecond, "usecs": time.Microsecond, "µsec": time.Microsecond, "µsecs": time.Microsecond,
	"microsecond": time.Microsecond, "microseconds": time.Microsecond,
	"msec": time.Millisecond, "msecs": time.Millisecond, "millisecond": time.Millisecond, "milliseconds": time.Millisecond, "ms": time.Millisecond,
	"sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"hour": time.Hour, "hours": time.Hour,
	"day": 24 * time.Hour, "days": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
	"fortnight": 14 * 24 * time.Hour, "fortnights": 14 * 24 * time.Hour, "forthnight": 14 * 24 * time.Hour, "forthnights": 14 * 24 * time.Hour,
	"month": month, "months": month,
	"year": year, "years": year,
}

// symfonyTerm is one count and unit of an interval; an interval is one or
// more, separated by spaces.
var (
	symfonyTerm           = regexp.MustCompile(`([0-9]+) *([A-Za-zµ]+)`)
	symfonyIntervalSyntax = regexp.MustCompile(`^ *(?:\+? *[0-9]+ *[A-Za-zµ]+ *)+$`)
)

// ParseSymfonyInterval parses an interval as Symfony's rate limiter
// configuration writes it, in PHP's relative time formats: one or more
// whole counts with a unit, singular or plural, in any case ("60
// minutes", "1 hour 30 minutes", "1day", "2 weeks", "1 fortnight", "10
// secs"). calendar reports months or years, which it takes as 30.436875
// and 365.2425 days. Units without a fixed length other than those
// (weekday) and intervals beyond time.Duration are errors.
func ParseSymfonyInterval(s string) (d time.Duration, calendar bool, err error) {
	if !symfonyIntervalSyntax.MatchString(s) {
		return 0, false, fmt.Errorf(`must be an interval such as "60 minutes", "1 hour 30 minutes" or "1 day", got %q`, s)
	}
	for _, m := range symfonyTerm.FindAllStringSubmatch(s, -1) {
		word := strings.ToLower(m[2])
		unit, ok := symfonyUnits[word]
		if !ok {
			return 0, false, fmt.Errorf("unknown unit %q in %q; use sec, min, hour, day, week, fortnight, month or year (singular or plural)", m[2], s)
		}
		calendar = calendar || unit == month || unit == year
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > math.MaxInt64/int64(unit) || d > math.MaxInt64-time.Duration(n)*unit {
			return 0, false, fmt.Errorf("%q overflows: an interval must be under about 292 years", s)
		}
		d += time.Duration(n) * unit
	}
	return d, calendar, nil
}
