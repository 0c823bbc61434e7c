package yamlnode

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// units maps the unit words of a duration to their length. Words of more
// than one letter match in any case; single letters only in lower case, so
// that "M" is neither a minute nor a month.
var units = map[string]time.Duration{
	"ns": time.Nanosecond, "nsec": time.Nanosecond, "nsecs": time.Nanosecond,
	"nanosecond": time.Nanosecond, "nanoseconds": time.Nanosecond,
	"us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"usec": time.Microsecond, "usecs": time.Microsecond,
	"microsecond": time.Microsecond, "microseconds": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond, "msecs": time.Millisecond,
	"millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"s": time.Second, "sec": time.Second, "secs": time.Second,
	"second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute,
	"minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour,
	"hour": time.Hour, "hours": time.Hour,
	"d": day, "day": day, "days": day,
	"w": week, "wk": week, "wks": week, "week": week, "weeks": week,
}

// variable are the calendar units, whose length varies, that a duration
// may not use.
var variable = map[string]string{
	"mo": "months", "mon": "months", "mons": "months", "month": "months", "months": "months",
	"y": "years", "yr": "years", "yrs": "years", "year": "years", "years": "years",
}

var (
	// countUnit is one count and one unit: "60 minutes", "1h", "250ms".
	countUnit = regexp.MustCompile(`^([-+]?[0-9]+) *([A-Za-zµμ]+)$`)
	// goSyntax is what time.ParseDuration accepts, short of the range
	// check: when it matches and ParseDuration fails, the value overflows.
	goSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)
)

var (
	errDurationSyntax   = errors.New("must be a duration such as 1h30m, 250ms, 60 minutes or 1 day")
	errDurationOverflow = errors.New("overflows: a duration must be under about 292 years")
)

// ParseDuration parses a duration as config files write it: either Go syntax
// (time.ParseDuration: "1h30m", "1.5s", "250ms") or a whole count and a
// unit word, singular or plural, with or without a space ("1 second",
// "60 minutes", "2 weeks", "1day"). A day is 24 hours and a week 7 days;
// months and years, whose length varies, are rejected. A duration that
// does not fit time.Duration is an error, never a wrapped value. The sign
// is kept: whether a negative or zero duration is allowed is for the
// policy to say.
func ParseDuration(s string) (time.Duration, error) {
	if m := countUnit.FindStringSubmatch(s); m != nil {
		unit, ok := lookupUnit(m[2])
		if !ok {
			if name, ok := variable[strings.ToLower(m[2])]; ok && (len(m[2]) > 1 || m[2] == "y") {
				return 0, errors.New(name + " have no fixed length; write days or weeks (30 days, 52 weeks)")
			}
			return 0, errors.New("unknown unit " + strconv.Quote(m[2]) +
				"; use ns, us, ms, s, m, h, d, w or nanoseconds, microseconds, milliseconds, seconds, minutes, hours, days, weeks")
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > math.MaxInt64/int64(unit) || n < math.MinInt64/int64(unit) {
			return 0, errDurationOverflow
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if goSyntax.MatchString(s) {
		return 0, errDurationOverflow
	}
	return 0, errDurationSyntax
}

// lookupUnit returns the length of a unit word.
func lookupUnit(w string) (time.Duration, bool) {
	if u, ok := units[w]; ok {
		return u, true
	}
	if len(w) < 2 {
		return 0, false
	}
	u, ok := units[strings.ToLower(w)]
	return u, ok
}
