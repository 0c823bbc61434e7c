package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
)

// Traffic is a parsed traffic pattern: parts whose arrivals are merged.
// Times are offsets from the start of the simulation.
type Traffic struct {
	spec  string
	parts []part
}

// String returns the spec the traffic was parsed from.
func (t *Traffic) String() string { return t.spec }

// part is one clause of a spec. end is the last instant it asks for
// (0 when it runs for the whole simulation); count is the number of its
// arrivals within [0, duration), worked out without making them: exact,
// or for random arrivals their mean; arrivals appends those arrivals to
// dst, failing when dst would pass limit.
type part interface {
	end() time.Duration
	count(duration time.Duration) float64
	arrivals(dst []int64, duration time.Duration, limit int) ([]int64, error)
}

// SpecError reports a traffic spec that does not parse: which clause,
// and what is wrong with it.
type SpecError struct {
	Clause string // the clause as written, or "" for the spec as a whole
	Msg    string
	Err    error
}

func (e *SpecError) Error() string {
	if e.Clause == "" {
		return "traffic: " + e.Msg
	}
	return fmt.Sprintf("traffic: %q: %s", e.Clause, e.Msg)
}

func (e *SpecError) Unwrap() error { return e.Err }

// MaxRequests bounds the arrivals of one simulation, so that a typo
// ("steady 1000000/ms") fails with an error rather than running out of
// memory.
const MaxRequests = 50_000_000

// ParseTraffic parses a traffic spec: clauses separated by ";", each one of
//
//	steady RATE [from T to T]         evenly spaced arrivals
//	burst N at T                      N arrivals at the same instant
//	ramp RATE to RATE [from T to T]   a rate changing linearly
//	poisson RATE [seed N] [from T to T]   random arrivals at a mean rate
//	replay FILE [column C]            one timestamp or access log line per line, or column C of a CSV file
//
// A RATE is a count per duration: "20/s", "100/1m", "5 per 100ms". Times are
// offsets from the start ("2s", "1m30s", "90 seconds"). Without from and to,
// a clause runs for the whole simulation. A replayed file holds offsets
// ("1.5s"), Unix times in seconds with an optional fraction
// ("1700000000.25") or RFC 3339 times; they are taken relative to the
// earliest one. A line that is not a timestamp may be an access log line
// in Common Log Format (nginx's and Apache's default): its time, in whole
// seconds, is read from the brackets, and the requests of one second are
// spread evenly over it. C is a 1-based column number or the name of a
// column in the file's header line.
func ParseTraffic(spec string) (*Traffic, error) {
	return parseTraffic(spec, true)
}

// errNoReplay refuses replay where the files are not the caller's.
var errNoReplay = errors.New("replay reads the server's files and is only for sluice simulate")

func parseTraffic(spec string, replayFiles bool) (*Traffic, error) {
	t := &Traffic{spec: strings.TrimSpace(spec)}
	for clause := range strings.SplitSeq(spec, ";") {
		clause = strings.TrimSpace(clause)
		if clause == "" {
			continue
		}
		f := strings.Fields(clause)
		if f[0] == "replay" && !replayFiles {
			return nil, &SpecError{Clause: clause, Msg: errNoReplay.Error(), Err: errNoReplay}
		}
		p, err := parseClause(f)
		if err != nil {
			return nil, &SpecError{Clause: clause, Msg: err.Error(), Err: err}
		}
		t.parts = append(t.parts, p)
	}
	if len(t.parts) == 0 {
		return nil, &SpecError{Msg: "empty spec; try \"steady 20/s\" or \"burst 50 at 2s; steady 5/s\""}
	}
	return t, nil
}

func parseClause(f []string) (part, error) {
	switch f[0] {
	case "steady":
		r, rest, err := parseRate(f[1:])
		if err != nil {
			return nil, err
		}
		s := &steady{rated{rate: r}}
		return s, parseRange(rest, &s.span)
	case "burst":
		if len(f) != 4 || f[2] != "at" {
			return nil, errors.New("want: burst N at T")
		}
		n, err := parseCount(f[1])
		if err != nil {
			return nil, err
		}
		at, err := parseTime(f[3])
		if err != nil {
			return nil, err
		}
		return &burst{n: n, at: at}, nil
	case "ramp":
		from, rest, err := parseRate(f[1:])
		if err != nil {
			return nil, err
		}
		if len(rest) == 0 || rest[0] != "to" {
			return nil, errors.New("want: ramp RATE to RATE [from T to T]")
		}
		to, rest, err := parseRate(rest[1:])
		if err != nil {
			return nil, err
		}
		r := &ramp{from: from, to: to}
		return r, parseRange(rest, &r.span)
	case "poisson":
		r, rest, err := parseRate(f[1:])
		if err != nil {
			return nil, err
		}
		p := &poisson{rated: rated{rate: r}, seed: 1}
		if len(rest) >= 2 && rest[0] == "seed" {
			if p.seed, err = strconv.ParseUint(rest[1], 10, 64); err != nil {
				return nil, fmt.Errorf("seed must be a whole number, got %q", rest[1])
			}
			rest = rest[2:]
		}
		return p, parseRange(rest, &p.span)
	case "replay":
		return parseReplay(f[1:])
	}
	return nil, fmt.Errorf("unknown pattern %q; use steady, burst, ramp, poisson or replay", f[0])
}

// rate is count arrivals per period.
type rate struct {
	count  int64
	period time.Duration
}

func (r rate) String() string { return fmt.Sprintf("%d/%v", r.count, r.period) }

// parseRate reads "N/PERIOD", "N / PERIOD" or "N per PERIOD" from the
// front of f, where PERIOD is a duration or a bare unit ("s", "minute").
func parseRate(f []string) (rate, []string, error) {
	const want = "want a rate such as 20/s, 100/1m or 5 per 100ms"
	if len(f) == 0 {
		return rate{}, nil, errors.New(want)
	}
	var count, period string
	switch {
	case strings.Contains(f[0], "/"):
		count, period, _ = strings.Cut(f[0], "/")
		f = f[1:]
		if period == "" && len(f) > 0 { // "20/ s"
			period, f = f[0], f[1:]
		}
	case len(f) >= 3 && (f[1] == "/" || f[1] == "per"):
		count, period, f = f[0], f[2], f[3:]
	default:
		return rate{}, nil, fmt.Errorf("%s, got %q", want, f[0])
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil || n < 0 {
		return rate{}, nil, fmt.Errorf("%s: the count must be a whole number, not negative, got %q", want, count)
	}
	d, err := config.ParseDuration(period)
	if err != nil && period != "" && (period[0] < '0' || period[0] > '9') {
		d, err = config.ParseDuration("1" + period) // a bare unit: "s", "minute"
	}
	if err != nil {
		return rate{}, nil, fmt.Errorf("%s: bad period %q: %w", want, period, err)
	}
	if d <= 0 {
		return rate{}, nil, fmt.Errorf("%s: the period must be positive, got %q", want, period)
	}
	return rate{count: n, period: d}, f, nil
}

func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > MaxRequests {
		return 0, fmt.Errorf("count must be a whole number from 0 to %d, got %q", MaxRequests, s)
	}
	return n, nil
}

func parseTime(s string) (time.Duration, error) {
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad time %q: %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("a time is an offset from the start and must not be negative, got %q", s)
	}
	return d, nil
}

// span is an optional [from, to) range of a clause; to is 0 when unset.
type span struct{ from, to time.Duration }

func parseRange(f []string, s *span) error {
	if len(f) == 0 {
		return nil
	}
	if len(f) != 4 || f[0] != "from" || f[2] != "to" {
		return fmt.Errorf("unexpected %q; want nothing or: from T to T", strings.Join(f, " "))
	}
	var err error
	if s.from, err = parseTime(f[1]); err != nil {
		return err
	}
	if s.to, err = parseTime(f[3]); err != nil {
		return err
	}
	if s.to <= s.from {
		return fmt.Errorf("from %v to %v is empty; to must be after from", s.from, s.to)
	}
	return nil
}

func (s span) end() time.Duration { return s.to }

// within clips the span to the simulation.
func (s span) within(duration time.Duration) (from, to int64) {
	to = int64(duration)
	if s.to != 0 && int64(s.to) < to {
		to = int64(s.to)
	}
	return int64(s.from), to
}

// tooMany is the error for a pattern that makes more than limit
// requests: about n, or at least n when atLeast.
func tooMany(n float64, atLeast bool, limit int) error {
	about := "about"
	if atLeast {
		about = "at least"
	}
	return fmt.Errorf("the spec makes %s %.0f requests; a simulation may have at most %d", about, n, limit)
}

// rated is a clause of rate's arrivals over its span: steady or poisson.
type rated struct {
	rate rate
	span
}

// active clips the span to the simulation: the clause's arrivals are in
// [from, to), and it has none when ok is false.
func (r *rated) active(duration time.Duration) (from, to int64, ok bool) {
	from, to = r.within(duration)
	return from, to, r.rate.count > 0 && to > from
}

type steady struct{ rated }

// count is the number of i ≥ 0 with from + ⌊i·period/count⌋ < to, which
// is i·period < (to-from)·count: ⌈(to-from)·count/period⌉.
func (s *steady) count(duration time.Duration) float64 {
	from, to, ok := s.active(duration)
	if !ok {
		return 0
	}
	hi, lo := bits.Mul64(uint64(to-from), uint64(s.rate.count))
	p := uint64(s.rate.period)
	if hi >= p {
		return math.Inf(1) // more than 2^64 arrivals
	}
	q, r := bits.Div64(hi, lo, p)
	if r > 0 {
		return float64(q) + 1
	}
	return float64(q)
}

// arrivals spaces count arrivals per period exactly: the i-th is at
// from + i*period/count, rounded down to the nanosecond.
func (s *steady) arrivals(dst []int64, duration time.Duration, _ int) ([]int64, error) {
	from, to, ok := s.active(duration)
	if !ok {
		return dst, nil
	}
	for i := int64(0); ; i++ {
		hi, lo := bits.Mul64(uint64(i), uint64(s.rate.period))
		q, _ := bits.Div64(hi, lo, uint64(s.rate.count)) // hi < count: i*period/count fits, as it is below to
		t := from + int64(q)
		if t >= to {
			return dst, nil
		}
		dst = append(dst, t)
	}
}

type burst struct {
	n  int64
	at time.Duration
}

func (b *burst) end() time.Duration { return b.at + 1 }

func (b *burst) count(duration time.Duration) float64 {
	if b.at >= duration {
		return 0
	}
	return float64(b.n)
}

func (b *burst) arrivals(dst []int64, duration time.Duration, _ int) ([]int64, error) {
	if b.at >= duration {
		return dst, nil
	}
	for range b.n {
		dst = append(dst, int64(b.at))
	}
	return dst, nil
}

type ramp struct {
	from, to rate
	span
}

// count is the cumulative count at the end of the span, rounded up: the
// loop of arrivals makes at most that many.
func (r *ramp) count(duration time.Duration) float64 {
	from, to := r.within(duration)
	if to <= from {
		return 0
	}
	r0 := float64(r.from.count) / float64(r.from.period)
	r1 := float64(r.to.count) / float64(r.to.period)
	return math.Ceil((r0 + r1) / 2 * float64(to-from))
}

// arrivals places the k-th arrival where the cumulative count of a rate
// going linearly from r0 to r1 over the span reaches k: solving
// r0*x + (r1-r0)*x²/(2L) = k for x. Traffic is the input, not a decision,
// so floating point is fine here; the results are rounded to nanoseconds.
func (r *ramp) arrivals(dst []int64, duration time.Duration, _ int) ([]int64, error) {
	from, to := r.within(duration)
	if to <= from {
		return dst, nil
	}
	length := float64(to - from)
	r0 := float64(r.from.count) / float64(r.from.period)
	r1 := float64(r.to.count) / float64(r.to.period)
	total := (r0 + r1) / 2 * length
	a := (r1 - r0) / (2 * length)
	for k := 0.0; k < total; k++ {
		var x float64
		switch {
		case k == 0:
		case a == 0:
			x = k / r0
		default: // the root that lies in [0, length]; this form avoids cancellation
			x = 2 * k / (r0 + math.Sqrt(r0*r0+4*a*k))
		}
		t := from + int64(math.Round(x))
		if t >= to {
			break
		}
		dst = append(dst, t)
	}
	return dst, nil
}

type poisson struct {
	rated
	seed uint64
}

// count is the mean number of arrivals; the actual number is random.
func (p *poisson) count(duration time.Duration) float64 {
	from, to, ok := p.active(duration)
	if !ok {
		return 0
	}
	return float64(to-from) / float64(p.rate.period) * float64(p.rate.count)
}

// arrivals draws exponential gaps with mean period/count from a PCG
// generator seeded with seed, so a seed always gives the same arrivals.
// Their number is random, so it is checked against limit as they come.
func (p *poisson) arrivals(dst []int64, duration time.Duration, limit int) ([]int64, error) {
	from, to, ok := p.active(duration)
	if !ok {
		return dst, nil
	}
	mean := float64(p.rate.period) / float64(p.rate.count)
	rng := rand.New(rand.NewPCG(p.seed, 0x5eed))
	t := float64(from)
	for {
		t += rng.ExpFloat64() * mean
		if t >= float64(to) {
			return dst, nil
		}
		if len(dst) >= limit {
			return nil, tooMany(float64(len(dst)+1), true, limit)
		}
		dst = append(dst, int64(t))
	}
}

// End is the latest instant any clause names explicitly (a range's end,
// a burst, the last replayed arrival), or 0 if none does.
func (t *Traffic) End() time.Duration {
	var end time.Duration
	for _, p := range t.parts {
		end = max(end, p.end())
	}
	return end
}

// Count returns the number of arrivals within [0, duration), worked out
// from the spec without making them: exact, except that a poisson
// clause counts its mean. It is +Inf past 2^64.
func (t *Traffic) Count(duration time.Duration) float64 {
	var n float64
	for _, p := range t.parts {
		n += p.count(duration)
	}
	return n
}

// Arrivals returns the sorted arrival times, in nanoseconds from the
// start, of every clause within [0, duration).
func (t *Traffic) Arrivals(duration time.Duration) ([]int64, error) {
	rq, err := t.Requests(duration)
	if err != nil {
		return nil, err
	}
	return rq.Times, nil
}

// Requests are a traffic pattern's arrivals within a duration, sorted,
// with each one's key when the pattern names keys.
type Requests struct {
	Times []int64
	// Keys[i] is the key of Times[i], as an index into Names. Keys is nil
	// when every request is on one key. Names[0] is "", the key of the
	// clauses that name none.
	Keys  []uint32
	Names []string
}

// Requests returns the arrivals of every clause within [0, duration),
// sorted, with their keys: those of a replayed file with key K, and ""
// for the other clauses. There may be at most MaxRequests.
func (t *Traffic) Requests(duration time.Duration) (*Requests, error) {
	return t.requests(duration, MaxRequests)
}

// requests is Requests with at most limit arrivals. A spec whose count
// passes limit is refused before any arrival is made, so that refusing a
// typo costs nothing.
func (t *Traffic) requests(duration time.Duration, limit int) (*Requests, error) {
	n := t.Count(duration)
	if n > float64(limit) {
		err := tooMany(n, false, limit)
		return nil, &SpecError{Msg: err.Error(), Err: err}
	}
	rq := &Requests{Times: make([]int64, 0, int(n))}
	var index map[string]uint32 // Names' indexes, once a clause names keys
	for _, p := range t.parts {
		n := len(rq.Times)
		var err error
		if rq.Times, err = p.arrivals(rq.Times, duration, limit); err != nil {
			return nil, &SpecError{Msg: err.Error(), Err: err}
		}
		if len(rq.Times) > limit { // a bug in a part's count, not the caller's
			err := tooMany(float64(len(rq.Times)), true, limit)
			return nil, &SpecError{Msg: err.Error(), Err: err}
		}
		r, _ := p.(*replay)
		if r == nil || r.keys == nil {
			if rq.Keys != nil {
				rq.Keys = append(rq.Keys, make([]uint32, len(rq.Times)-n)...)
			}
			continue
		}
		if rq.Keys == nil { // the earlier clauses' requests are on ""
			rq.Keys, rq.Names, index = make([]uint32, n, len(rq.Times)), []string{""}, map[string]uint32{"": 0}
		}
		global := make([]uint32, len(r.names)) // the file's key indexes in Names
		for j, name := range r.names {
			k, ok := index[name]
			if !ok {
				k = uint32(len(rq.Names))
				index[name] = k
				rq.Names = append(rq.Names, name)
			}
			global[j] = k
		}
		// A replay's arrivals are a prefix of its sorted times.
		for _, k := range r.keys[:len(rq.Times)-n] {
			rq.Keys = append(rq.Keys, global[k])
		}
	}
	if rq.Keys == nil {
		slices.Sort(rq.Times)
	} else {
		rq.Times, rq.Keys = sortByTime(rq.Times, rq.Keys)
	}
	return rq, nil
}

// sortByTime returns times sorted, and keys in the same order; equal
// times keep their order.
func sortByTime(times []int64, keys []uint32) ([]int64, []uint32) {
	order := make([]int, len(times))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(times[a], times[b]) })
	st, sk := make([]int64, len(order)), make([]uint32, len(order))
	for i, j := range order {
		st[i], sk[i] = times[j], keys[j]
	}
	return st, sk
}
