// Package tokenbucket is Bucket4j's token-bucket model as a pure state
// machine in exact integer arithmetic.
//
// Every function takes the time as a value (nanoseconds) and mutates only the
// state it is given; there is no clock, lock or I/O here. The local bucket,
// the stores and the simulator all run these functions, so one set of
// conformance vectors proves them all.
//
// Where Bucket4j falls back to float64 when a product overflows int64, this
// package computes exactly with 128-bit intermediates (math/bits), so its
// answers can differ from Bucket4j's in those (astronomical) cases.
package tokenbucket

import "github.com/sluicehq/sluice/internal/policy"

// Bandwidth is one validated limit of a bucket. The root package validates
// it; this package assumes 0 < RefillTokens ≤ Period, Capacity > 0,
// Initial ≥ 0 and, when Aligned, FirstRefill ≥ 0.
type Bandwidth struct {
	Capacity     int64
	RefillTokens int64
	Period       int64 // nanoseconds
	Intervally   bool  // whole periods only (also set when Aligned)
	Aligned      bool  // intervally aligned: the grid passes FirstRefill
	FirstRefill  int64 // nanoseconds since the Unix epoch
	Adaptive     bool  // adaptive initial tokens (aligned only)
	Initial      int64 // initial tokens when HasInitial, else Capacity
	HasInitial   bool
	ID           string // "" means no ID
}

// Config is the validated, immutable list of a bucket's bandwidths. Make it
// with NewConfig; a Config literal works too, only with slower refills.
type Config struct {
	Bandwidths []Bandwidth
	periods    []Divisor // by each bandwidth's period; empty if not prepared
}

// NewConfig returns a Config of bws, prepared for fast refills unless a
// period is 1ns (which needs no division, and the fast path cannot do).
func NewConfig(bws ...Bandwidth) *Config {
	c := &Config{Bandwidths: bws}
	periods := make([]Divisor, len(bws))
	for i, bw := range bws {
		if bw.Period < 2 {
			return c
		}
		periods[i] = NewDivisor(uint64(bw.Period))
	}
	c.periods = periods
	return c
}

// Window is the time the bandwidth of smallest capacity, the one a
// result's limit reports, takes to refill from empty; 0 without
// bandwidths.
func (c *Config) Window() int64 {
	var best *Bandwidth
	for i := range c.Bandwidths {
		if bw := &c.Bandwidths[i]; best == nil || bw.Capacity < best.Capacity {
			best = bw
		}
	}
	if best == nil {
		return 0
	}
	return policy.TimeToEarn(best.Capacity, best.RefillTokens, best.Period, best.Intervally)
}

// divisor returns the prepared divisor by bandwidth i's period, or nil.
func (c *Config) divisor(i int) *Divisor {
	if i < len(c.periods) {
		return &c.periods[i]
	}
	return nil
}

// divmod returns n / d and n % d, by dv when it is prepared for d.
func divmod(dv *Divisor, n, d uint64) (q, r uint64) {
	if dv != nil {
		return dv.Div(n)
	}
	return n / d, n % d
}

// BandwidthState is the mutable part of one bandwidth.
//
// Invariant: 0 ≤ Err < Period of its bandwidth. Size may be negative
// (overdraft) or above capacity (forced additions, initial tokens).
type BandwidthState struct {
	LastRefill int64 // nanoseconds, the time refill last ran to
	Size       int64 // whole tokens
	Err        int64 // the refilled part of the next token, in token·ns
}

// State holds one BandwidthState per bandwidth of its Config, in order.
type State []BandwidthState

// Init sets st, which must have one element per bandwidth, to the initial
// state of a bucket created at now.
func Init(cfg *Config, st State, now int64) {
	for i := range cfg.Bandwidths {
		st[i] = initial(&cfg.Bandwidths[i], now)
	}
}

// New returns the initial state of a bucket created at now.
func New(cfg *Config, now int64) State {
	st := make(State, len(cfg.Bandwidths))
	Init(cfg, st, now)
	return st
}

func initial(bw *Bandwidth, now int64) BandwidthState {
	s := BandwidthState{LastRefill: now, Size: bw.Capacity}
	if bw.HasInitial {
		s.Size = bw.Initial
	}
	if bw.Aligned {
		// The first refill lands exactly on FirstRefill. FirstRefill ≥ 0 and
		// Period > 0, so this cannot overflow.
		s.LastRefill = bw.FirstRefill - bw.Period
		if bw.Adaptive && now < bw.FirstRefill {
			s.Size = adaptiveInitial(bw, now)
		}
	}
	return s
}

// Refill brings every bandwidth of st up to now.
func Refill(cfg *Config, st State, now int64) {
	for i := range cfg.Bandwidths {
		refill(cfg, i, &st[i], now)
	}
}

// Available is the number of tokens that can be consumed: the minimum over
// the bandwidths. It may be negative.
func Available(st State) int64 {
	a := st[0].Size
	for _, s := range st[1:] {
		a = min(a, s.Size)
	}
	return a
}

// Delay is the time from now until n tokens can be consumed from every
// bandwidth, or Never. See delay for check.
func Delay(cfg *Config, st State, n, now int64, check bool) int64 {
	var d int64
	for i := range cfg.Bandwidths {
		d = max(d, delay(&cfg.Bandwidths[i], &st[i], n, now, check))
		if d == Never {
			break
		}
	}
	return d
}

// TimeToFull is the time from now until every bandwidth is at capacity.
func TimeToFull(cfg *Config, st State, now int64) int64 {
	var d int64
	for i := range cfg.Bandwidths {
		d = max(d, timeToFull(&cfg.Bandwidths[i], &st[i], now))
	}
	return d
}

// TryConsume is OpTryConsume for the hot path: it refills st at now and
// takes n > 0 tokens from every bandwidth if they all have them, and then
// stores the result in st. When it reports false, st is unchanged (the
// refill is not stored, as Apply would not store it). scratch, of the same
// length as st, is used only for more than four bandwidths; up to four
// work on the stack.
func TryConsume(cfg *Config, st, scratch State, now, n int64) bool {
	if len(st) == 1 {
		s := st[0]
		refill(cfg, 0, &s, now)
		if n > s.Size {
			return false
		}
		s.Size -= n
		st[0] = s
		return true
	}
	var buf [4]BandwidthState
	tmp := buf[:]
	if len(st) > len(buf) {
		tmp = scratch
	}
	tmp = tmp[:len(st)]
	avail := int64(Never)
	for i := range tmp {
		tmp[i] = st[i]
		refill(cfg, i, &tmp[i], now)
		avail = min(avail, tmp[i].Size)
	}
	if n > avail {
		return false
	}
	for i := range tmp {
		tmp[i].Size -= n
	}
	copy(st, tmp)
	return true
}

// Consume takes n tokens from every bandwidth. The caller ensures the result
// cannot overflow: n ≤ Available, or Delay(n) was finite.
func Consume(st State, n int64) {
	for i := range st {
		st[i].Size -= n
	}
}

// AddTokens adds n > 0 tokens to every bandwidth, never above capacity; a
// bandwidth already above capacity is brought down to it, as in Bucket4j.
func AddTokens(cfg *Config, st State, n int64) {
	for i := range st {
		bw, s := &cfg.Bandwidths[i], &st[i]
		next, overflow := addInt64(s.Size, n)
		if overflow || next >= bw.Capacity {
			fill(bw, s)
			continue
		}
		s.Size = next
	}
}

// ForceAddTokens adds n > 0 tokens to every bandwidth with no capacity limit,
// saturating at MaxInt64.
func ForceAddTokens(st State, n int64) {
	for i := range st {
		st[i].Size = satAdd(st[i].Size, n)
	}
}

// Reset fills every bandwidth to capacity.
func Reset(cfg *Config, st State) {
	for i := range st {
		fill(&cfg.Bandwidths[i], &st[i])
	}
}
