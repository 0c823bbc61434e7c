// Package simulate runs a rate limiter against a traffic pattern on a fake
// clock and reports what it let through: per time slice, in the worst
// window, and how long waiting callers were held. It backs the sluice
// simulate command and the server's charts.
//
// A simulation is deterministic and instant: the limiter is a real
// sluice.Limiter on a clock that jumps from one arrival to the next, with
// every request on one key, or on its own key when a replayed file names
// keys.
package simulate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/memstore"
)

// Options are the settings of one simulation.
type Options struct {
	// Duration is the simulated span; arrivals at or after it are dropped.
	Duration time.Duration
	// Slice is the length of the time slices reported; 0 picks a round
	// length that makes about 60 slices.
	Slice time.Duration
	// Window is the length of the window in which the worst admitted
	// count is measured, normally the limit's own period; 0 picks the
	// policy's (Window).
	Window time.Duration
	// MaxWait, when positive, makes every request wait for its turn up
	// to MaxWait (Limiter.ReserveN) instead of being refused at once
	// (Limiter.Allow); a policy that cannot reserve then fails to run.
	MaxWait time.Duration
	// Processes, with a limiter that has a lease (Lease), is how many
	// processes share its limit through one in-memory store, each
	// deciding from its own leases (sluice.WithLease); the requests are
	// dealt to them in turn. 0 means 1. Without a lease it changes
	// nothing: the limiter is exact.
	Processes int
	// Lease is the limiter's quota leasing, nil for an exact limiter;
	// Limiters takes it from the config.
	Lease *sluice.Lease
	// Shadow runs the limiter in shadow mode (sluice.WithShadow): every
	// request is accepted, and those its policy refused are counted as
	// ShadowRejected. Limiters takes it from the config's shadow: key.
	Shadow bool
}

// Report is the outcome of one limiter under one traffic pattern.
type Report struct {
	Name   string // the limiter's name
	Policy string // the policy, as sluice.Policy's String writes it
	Limit  int64  // the policy's limit, as Result.Limit reports it
	// Duration, Slice and Window are those of Options, with the defaults
	// filled in.
	Duration, Slice, Window time.Duration

	Requests, Accepted, Rejected int64
	// Keys is the number of keys the requests were on; LevelKey is the
	// one with the most requests, whose level the slices report, or ""
	// when there is one key.
	Keys     int
	LevelKey string
	// Late counts admitted requests that wait past the end of the
	// simulation; the slices leave them out.
	Late   int64
	Slices []Slice
	// Worst is the window of length Window that admitted the most.
	Worst Worst
	// Waits describes the delays of admitted requests when MaxWait is
	// set; it is the zero value otherwise.
	Waits Waits
	// Processes is how many processes decided from leases, and Lease
	// their lease; 0 and nil for an exact limiter. Levels are then the
	// shared state's, without the tokens the processes hold.
	Processes int
	Lease     *sluice.Lease
	// Shadow says the limiter ran in shadow mode, and ShadowRejected how
	// many of its Accepted requests its policy refused: those it would
	// have rejected without shadow mode.
	Shadow         bool
	ShadowRejected int64
}

// Slice is what happened in [Start, Start+Report.Slice): the requests
// refused on arrival in it, and those admitted that left in it (on arrival,
// unless they waited).
type Slice struct {
	Start              time.Duration
	Accepted, Rejected int64
	// ShadowRejected is, in shadow mode, how many of the requests that
	// arrived in the slice the policy refused (and Accepted counts).
	ShadowRejected int64
	// Level is the tokens a request could still take at the end of the
	// slice (one more than Result.Remaining of an admitted probe of 1):
	// the bucket's level or the window's room.
	Level int64
}

// Worst is the busiest window: Count requests were admitted in
// [Start, Start+Report.Window).
type Worst struct {
	Start time.Duration
	Count int64
	Key   string // the key it was on, when there are several
}

// Waits summarises the delays of admitted requests: the mean and
// percentiles are over all of them, including those that did not wait.
type Waits struct {
	Waited              int64 // admitted requests that had to wait
	Mean, P50, P99, Max time.Duration
}

// clock is a sluice.Clock that the simulation sets: a plain field, since
// one goroutine runs a simulation.
type clock struct{ now int64 }

func (c *clock) Now() int64        { return c.now }
func (c *clock) IsWallClock() bool { return false }

// oneKey is the key of requests that name none.
const oneKey = "k"

// key is the key index of request i: 0 when there is one key.
func (rq *Requests) key(i int) uint32 {
	if rq.Keys == nil {
		return 0
	}
	return rq.Keys[i]
}

// name is the limiter key of key index k.
func (rq *Requests) name(k uint32) string {
	if int(k) >= len(rq.Names) || rq.Names[k] == "" {
		return oneKey
	}
	return rq.Names[k]
}

// Run runs p against the requests, whose times are sorted nanoseconds from
// the start, as Traffic.Requests returns them.
func Run(name string, p sluice.Policy, rq *Requests, o Options) (*Report, error) {
	o, err := o.resolve(p)
	if err != nil {
		return nil, err
	}
	c := &clock{}
	l, procs, err := limiters(p, c, o)
	if err != nil {
		return nil, err
	}
	s := &run{
		name: name, o: o, rq: rq, c: c, l: procs[0], procs: procs, levels: l,
		r:        newReport(name, p, o),
		admitted: make(map[uint32][]int64),
	}
	if o.Lease != nil {
		s.r.Processes, s.r.Lease = len(procs), o.Lease
	}
	s.r.Shadow = o.Shadow
	s.levelKey = s.r.countKeys(rq)
	ctx := context.Background()
	for i, t := range rq.Times {
		if t < 0 || t >= int64(o.Duration) {
			continue
		}
		s.l = s.procs[i%len(s.procs)]
		if err := s.arrive(ctx, t, rq.key(i)); err != nil {
			return nil, err
		}
	}
	if err := s.level(ctx, len(s.r.Slices)); err != nil {
		return nil, err
	}
	s.r.Worst = s.worst()
	s.r.Waits = summarise(s.delays)
	return s.r, nil
}

// limiters returns the limiter that reads the levels and those that
// decide, in turn: one in memory for an exact limiter, or with a lease
// the processes on one in-memory store and an exact limiter on it.
func limiters(p sluice.Policy, c *clock, o Options) (level *sluice.Limiter, procs []*sluice.Limiter, err error) {
	if o.Lease == nil {
		l, err := sluice.NewLimiter(p, sluice.WithClock(c), sluice.WithShadow(o.Shadow))
		return l, []*sluice.Limiter{l}, err
	}
	store := memstore.New()
	if level, err = sluice.NewLimiter(p, sluice.WithClock(c), sluice.WithStore(store)); err != nil {
		return nil, nil, err
	}
	procs = make([]*sluice.Limiter, max(o.Processes, 1))
	for i := range procs {
		if procs[i], err = sluice.NewLimiter(p, sluice.WithClock(c), sluice.WithStore(store), sluice.WithLease(*o.Lease), sluice.WithShadow(o.Shadow)); err != nil {
			return nil, nil, err
		}
	}
	return level, procs, nil
}

// MaxProcesses bounds Processes: each is a limiter of its own, so a
// number given by mistake (a rate, say) would otherwise run the machine
// out of memory before the first request.
const MaxProcesses = 1000

// maxSlices bounds a report's slices, so that a slice too short for the
// duration fails rather than running out of memory.
const maxSlices = 100_000

// resolve checks o and fills in its defaults for p.
func (o Options) resolve(p sluice.Policy) (Options, error) {
	if o.Duration <= 0 {
		return o, fmt.Errorf("simulate: the duration must be positive, got %v", o.Duration)
	}
	if o.Processes < 0 || o.Processes > MaxProcesses {
		return o, fmt.Errorf("simulate: processes must be 0 to %d, got %d", MaxProcesses, o.Processes)
	}
	if o.Slice < 0 || o.Window < 0 || o.MaxWait < 0 {
		return o, fmt.Errorf("simulate: slice, window and max wait must not be negative, got %v, %v and %v", o.Slice, o.Window, o.MaxWait)
	}
	if o.Slice == 0 {
		o.Slice = NiceSlice(o.Duration, 60)
	}
	if o.Window == 0 {
		o.Window = p.Window()
	}
	if n := o.nslices(); n > maxSlices {
		return o, fmt.Errorf("simulate: %v in slices of %v makes %d slices, more than %d; choose a longer slice", o.Duration, o.Slice, n, maxSlices)
	}
	return o, nil
}

// nslices is the number of slices of the duration; the last may be short.
func (o Options) nslices() time.Duration { return (o.Duration + o.Slice - 1) / o.Slice }

// newReport returns the empty report of p under the resolved options o.
func newReport(name string, p sluice.Policy, o Options) *Report {
	r := &Report{
		Name: name, Policy: p.String(),
		Duration: o.Duration, Slice: o.Slice, Window: o.Window,
		Slices: make([]Slice, o.nslices()),
	}
	for i := range r.Slices {
		r.Slices[i].Start = time.Duration(i) * o.Slice
	}
	return r
}

// countKeys sets r.Keys and r.LevelKey from the requests within r's
// duration, and returns the key whose level the slices report: the
// busiest one.
func (r *Report) countKeys(rq *Requests) string {
	if rq.Keys == nil {
		if len(rq.Times) > 0 {
			r.Keys = 1
		}
		return oneKey
	}
	counts := make([]int64, len(rq.Names))
	for i, t := range rq.Times {
		if t >= 0 && t < int64(r.Duration) {
			counts[rq.Keys[i]]++
		}
	}
	busiest := 0
	for k, n := range counts {
		if n > 0 {
			r.Keys++
		}
		if n > counts[busiest] {
			busiest = k
		}
	}
	levelKey := rq.name(uint32(busiest))
	if r.Keys > 1 {
		r.LevelKey = levelKey
	}
	return levelKey
}

// run is one simulation under way: the limiter on its clock, the report
// it fills in, and what the report's worst window and waits are worked
// out from at the end.
type run struct {
	name     string
	o        Options // resolved
	rq       *Requests
	c        *clock
	l        *sluice.Limiter // the limiter of the call at hand
	procs    []*sluice.Limiter
	levels   *sluice.Limiter // reads the levels
	r        *Report
	levelKey string // the key whose level the slices report
	// The worst window is the worst of any key's, so departures are kept
	// by key.
	admitted map[uint32][]int64
	delays   []int64 // of admitted requests, when MaxWait is set
	next     int     // the next slice whose level is still to be read
}

// level reads the level of every slice before upto whose level is still
// to be read, at the last instant of each.
func (s *run) level(ctx context.Context, upto int) error {
	for ; s.next < upto; s.next++ {
		sl := &s.r.Slices[s.next]
		s.c.now = min(int64(sl.Start+s.o.Slice), int64(s.o.Duration)) - 1
		res, err := s.levels.Peek(ctx, s.levelKey)
		if err != nil {
			return err
		}
		// Remaining is what the probe's request would leave; the level
		// is what there was before it took its 1.
		sl.Level = res.Remaining
		if res.Allowed && !res.ShadowRejected {
			sl.Level = policy.SatAdd(res.Remaining, 1) // no_limit's is MaxInt64
		}
		s.r.Limit = res.Limit
	}
	return nil
}

// arrive decides the request that arrives at t on key index k, and counts
// it in the slice it is refused in or leaves in.
func (s *run) arrive(ctx context.Context, t int64, k uint32) error {
	slice := int(t / int64(s.o.Slice))
	if err := s.level(ctx, slice); err != nil {
		return err
	}
	s.c.now = t
	s.r.Requests++
	ok, delay, shadowRejected, err := s.decide(ctx, s.rq.name(k))
	if err != nil {
		return fmt.Errorf("simulate: %s at %v: %w", s.name, time.Duration(t), err)
	}
	if shadowRejected {
		s.r.ShadowRejected++
		s.r.Slices[slice].ShadowRejected++
	}
	if !ok {
		s.r.Rejected++
		s.r.Slices[slice].Rejected++
		return nil
	}
	s.r.Accepted++
	leave := t + int64(delay)
	if leave >= int64(s.o.Duration) {
		s.r.Late++
	} else {
		s.r.Slices[leave/int64(s.o.Slice)].Accepted++
	}
	s.admitted[k] = append(s.admitted[k], leave)
	if s.o.MaxWait > 0 {
		s.delays = append(s.delays, int64(delay))
	}
	return nil
}

// decide asks the limiter for one request on key at the clock's time:
// with MaxWait, it may be admitted after a delay. shadowRejected is a
// request that a limiter in shadow mode admitted although its policy
// refused it.
func (s *run) decide(ctx context.Context, key string) (ok bool, delay time.Duration, shadowRejected bool, err error) {
	if s.o.MaxWait > 0 {
		rv, err := s.l.Reserve(ctx, key, s.o.MaxWait)
		if err != nil {
			return false, 0, false, err
		}
		return rv.OK(), rv.Delay(), rv.Result().ShadowRejected, nil
	}
	res, err := s.l.Allow(ctx, key)
	return res.Allowed, 0, res.ShadowRejected, err
}

// worst is the window that admitted the most on any one key. Ties go to
// the earliest window, then the first key by name, so that a report does
// not depend on the map's order.
func (s *run) worst() Worst {
	var best Worst
	for k, times := range s.admitted {
		w := worst(times, int64(s.o.Window))
		if s.r.Keys > 1 {
			w.Key = s.rq.name(k)
		}
		if w.Count > best.Count || w.Count == best.Count &&
			(w.Start < best.Start || w.Start == best.Start && w.Key < best.Key) {
			best = w
		}
	}
	return best
}

// worst finds the window [t, t+w) that holds the most of the times, which
// it sorts. Some busiest window starts at an admission, so only those are
// tried.
func worst(times []int64, w int64) Worst {
	slices.Sort(times) // departures of waiting requests may be out of order
	var best Worst
	j := 0
	for i, t := range times {
		for j < len(times) && times[j]-t < w {
			j++
		}
		if n := int64(j - i); n > best.Count {
			best = Worst{Start: time.Duration(t), Count: n}
		}
	}
	return best
}

func summarise(delays []int64) Waits {
	if len(delays) == 0 {
		return Waits{}
	}
	slices.Sort(delays)
	var sum float64
	var waited int64
	for _, d := range delays {
		sum += float64(d)
		if d > 0 {
			waited++
		}
	}
	n := len(delays)
	return Waits{
		Waited: waited,
		Mean:   time.Duration(sum / float64(n)),
		P50:    time.Duration(delays[(n-1)*50/100]),
		P99:    time.Duration(delays[(n-1)*99/100]),
		Max:    time.Duration(delays[n-1]),
	}
}

// NiceSlice returns a round length (1, 2 or 5 times a power of ten below
// a second; 1, 2, 5, 10, 15, 20 or 30 seconds or minutes; 1, 2, 3, 6 or 12
// hours; then whole days) that cuts d into about n slices.
func NiceSlice(d time.Duration, n int) time.Duration {
	target := d / time.Duration(n)
	for _, s := range niceSteps {
		if s >= target {
			return s
		}
	}
	const day = 24 * time.Hour
	return (target + day - 1) / day * day
}

var niceSteps = func() []time.Duration {
	var steps []time.Duration
	for p := time.Nanosecond; p < time.Second; p *= 10 {
		steps = append(steps, p, 2*p, 5*p)
	}
	for _, u := range []time.Duration{time.Second, time.Minute} {
		for _, m := range []time.Duration{1, 2, 5, 10, 15, 20, 30} {
			steps = append(steps, m*u)
		}
	}
	for _, m := range []time.Duration{1, 2, 3, 6, 12} {
		steps = append(steps, m*time.Hour)
	}
	return steps
}()

// DefaultDuration is the span to simulate when none is given: 10 seconds,
// or longer to take in every instant the traffic names, rounded up.
func DefaultDuration(t *Traffic) time.Duration {
	const least = 10 * time.Second
	if end := t.End(); end > least {
		return NiceSlice(end, 1)
	}
	return least
}

// UnknownLimiterError reports a limiter name that the config file does
// not have.
type UnknownLimiterError struct {
	Name  string
	Known []string
}

func (e *UnknownLimiterError) Error() string {
	return fmt.Sprintf("simulate: no limiter %q; the config names %s", e.Name, strings.Join(e.Known, ", "))
}

// Limiters runs the named limiters of f on the same traffic.
func Limiters(f *config.File, names []string, t *Traffic, o Options) ([]*Report, error) {
	if o.Duration == 0 {
		o.Duration = DefaultDuration(t)
	}
	rq, err := t.Requests(o.Duration)
	if err != nil {
		return nil, err
	}
	reports := make([]*Report, 0, len(names))
	for _, name := range names {
		l, ok := f.Limiters[name]
		if !ok {
			return nil, &UnknownLimiterError{Name: name, Known: f.Order}
		}
		lo := o
		lo.Lease, lo.Shadow = l.Lease, l.Shadow || o.Shadow
		r, err := Run(name, l.Policy, rq, lo)
		if err != nil {
			return nil, err
		}
		reports = append(reports, r)
	}
	return reports, nil
}
