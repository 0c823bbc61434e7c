package tokenbucket

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/policy"
)

// Single is a keyed policy of one bandwidth whose state is one fixed-size
// BandwidthState: Symfony's token_bucket (intervally refill) and the leaky
// bucket as a meter (greedy drain) are both this. Make it with NewSingle.
type Single struct {
	cfg *Config
	// strict makes asking for more than the capacity an argument error
	// (Symfony's token bucket) instead of a rejection that never succeeds.
	strict bool
}

// NewSingle returns the policy of the validated bandwidth bw.
func NewSingle(bw Bandwidth, strict bool) Single {
	return Single{cfg: NewConfig(bw), strict: strict}
}

var _ policy.Machine[BandwidthState] = Single{}

// load returns the state to work on: *s, or a new bucket's.
func (m Single) load(s *BandwidthState, exists bool, now int64) State {
	if !exists {
		return State{initial(&m.cfg.Bandwidths[0], now)}
	}
	return State{*s}
}

// Consume takes n tokens if they are there, as TryConsumeAndReturnRemaining.
func (m Single) Consume(s *BandwidthState, exists bool, now, n int64) (policy.Decision, bool) {
	bw := &m.cfg.Bandwidths[0]
	if code := policy.CheckTokens(n, bw.Capacity, m.strict); code != policy.OK {
		return policy.Decision{Verdict: policy.Verdict{Code: code}}, false
	}
	var b BandwidthState
	if exists {
		b = *s
	} else {
		b = initial(bw, now)
	}
	refill(m.cfg, 0, &b, now)
	allowed := n <= b.Size
	if allowed {
		b.Size -= n
	}
	changed := allowed || keepNew(m.cfg, State{b}, exists)
	if changed {
		*s = b
	}
	return decision1(bw, &b, now, allowed, n), changed
}

// keepNew reports whether a refused request on a new key keeps the bucket
// it made, st: when it holds fewer tokens than a full one (initial tokens
// below the capacity). Its refill then runs from the key's first use, as a
// Bucket4j bucket exists from its first request; were it dropped, every
// retry would find a new bucket with the same too few tokens, and a
// request for more of them would never pass, whatever RetryAfter said. A
// full new bucket is worth no more than no state, and is not kept.
func keepNew(cfg *Config, st State, exists bool) bool {
	if exists {
		return false
	}
	for i := range st {
		if st[i].Size < cfg.Bandwidths[i].Capacity {
			return true
		}
	}
	return false
}

// Peek answers as Consume would, taking nothing.
func (m Single) Peek(s *BandwidthState, exists bool, now, n int64) policy.Result {
	next := *s
	d, _ := m.Consume(&next, exists, now, n)
	return d.Result(m.Quota())
}

// Reserve takes n tokens now that will be there within maxWait, overdrawing.
// More than the capacity is refused (RetryAfter Never), as Consume refuses
// it.
func (m Single) Reserve(s *BandwidthState, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	capacity := m.cfg.Bandwidths[0].Capacity
	if code := policy.CheckTokens(n, capacity, m.strict); code != policy.OK {
		return policy.Refusal(code, capacity), false
	}
	st := m.load(s, exists, now)
	if n > capacity {
		// A meter cannot hold more than its size, now or later.
		Refill(m.cfg, st, now)
		res := result(m.cfg, st, now, false, n)
		if keepNew(m.cfg, st, exists) {
			*s = st[0]
			return res, true
		}
		return res, false
	}
	res, changed := reserve(m.cfg, st, now, n, maxWait, policy.OK)
	changed = changed || res.Code == policy.OK && keepNew(m.cfg, st, exists)
	if changed {
		*s = st[0]
	}
	return res, changed
}

// ExpiresAt is when the bandwidth is full again, counted from its last
// refill: from then on a new bucket would do as well (or be stricter, if
// it starts with fewer initial tokens). An intervally bandwidth also keeps
// its refill grid, anchored at the key's first use, for the time Symfony
// keeps a token bucket, the time to refill it from empty, counted from
// its last refill (Symfony counts from its last save, which may lie up to
// a period later: a key used then again only after that time starts a
// grid of its own, a refill up to a period later, never earlier). For a
// bucket that refills whole in one period, one period.
func (m Single) ExpiresAt(s *BandwidthState) int64 {
	return expiresAt(m.cfg, State{*s})
}

// Config is the policy's configuration.
func (m Single) Config() *Config { return m.cfg }

// Quota is the capacity.
func (m Single) Quota() int64 { return m.cfg.Bandwidths[0].Capacity }

// Leasing is policy.Leases: a lease is tokens taken from the bucket at
// once, as one request of that many tokens would take them.
func (Single) Leasing() policy.Leasing { return policy.Leases }

// Window is the time the bandwidth takes to refill from empty.
func (m Single) Window() int64 { return m.cfg.Window() }

// AppendState appends the encoding of *s to dst.
func (m Single) AppendState(dst []byte, s *BandwidthState) []byte {
	return appendState(dst, State{*s})
}

// DecodeState decodes a state written by AppendState.
func (m Single) DecodeState(src []byte, s *BandwidthState) error {
	var buf [1]BandwidthState
	if err := decodeState(src, m.cfg, buf[:]); err != nil {
		return err
	}
	*s = buf[0]
	return nil
}

// Multi is the keyed policy of a whole Bucket4j configuration, several
// bandwidths. Its state is a State of one element per bandwidth.
type Multi struct {
	cfg *Config
}

// NewMulti returns the policy of the validated configuration cfg.
func NewMulti(cfg *Config) Multi { return Multi{cfg: cfg} }

var _ policy.Machine[State] = Multi{}

// scratch returns a copy of *s (or a new bucket's state) to work on, in buf
// when it is large enough, so a decision on an existing key allocates
// nothing for up to len(buf) bandwidths.
func (m Multi) scratch(buf []BandwidthState, s *State, exists bool, now int64) State {
	n := len(m.cfg.Bandwidths)
	var st State
	if n <= len(buf) {
		st = buf[:n]
	} else {
		st = make(State, n)
	}
	if exists && len(*s) == n {
		copy(st, *s)
	} else {
		Init(m.cfg, st, now)
	}
	return st
}

// store copies st into *s, allocating only for a new key.
func store(s *State, st State) {
	if len(*s) != len(st) {
		*s = make(State, len(st))
	}
	copy(*s, st)
}

// Consume takes n tokens from every bandwidth if they all have them.
func (m Multi) Consume(s *State, exists bool, now, n int64) (policy.Decision, bool) {
	if n <= 0 {
		return policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens}}, false
	}
	var buf [4]BandwidthState
	st := m.scratch(buf[:], s, exists, now)
	var scratch State
	if len(st) > 4 {
		scratch = make(State, len(st))
	}
	if !TryConsume(m.cfg, st, scratch, now, n) {
		Refill(m.cfg, st, now) // to describe the refilled state
		d := decision(m.cfg, st, now, false, n)
		if keepNew(m.cfg, st, exists) {
			store(s, st)
			return d, true
		}
		return d, false
	}
	store(s, st)
	return decision(m.cfg, st, now, true, n), true
}

// Peek answers as Consume would, taking nothing.
func (m Multi) Peek(s *State, exists bool, now, n int64) policy.Result {
	if n <= 0 {
		return policy.Result{Code: policy.NonPositiveTokens}
	}
	var buf [4]BandwidthState
	st := m.scratch(buf[:], s, exists, now)
	Refill(m.cfg, st, now)
	avail := Available(st)
	if n > avail {
		return result(m.cfg, st, now, false, n)
	}
	Consume(st, n)
	return result(m.cfg, st, now, true, n)
}

// Reserve takes n tokens now that will be there within maxWait, overdrawing.
func (m Multi) Reserve(s *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	var code policy.Code
	if n <= 0 {
		code = policy.NonPositiveTokens
	}
	var buf [4]BandwidthState
	st := m.scratch(buf[:], s, exists, now)
	res, changed := reserve(m.cfg, st, now, n, maxWait, code)
	changed = changed || res.Code == policy.OK && keepNew(m.cfg, st, exists)
	if changed {
		store(s, st)
	}
	return res, changed
}

// ExpiresAt is when every bandwidth is full again.
func (m Multi) ExpiresAt(s *State) int64 {
	if len(*s) != len(m.cfg.Bandwidths) {
		return 0
	}
	return expiresAt(m.cfg, *s)
}

// Config is the policy's configuration.
func (m Multi) Config() *Config { return m.cfg }

// Leasing is policy.Leases, as a single bandwidth's: every bandwidth
// gives a lease's tokens at once.
func (Multi) Leasing() policy.Leasing { return policy.Leases }

// Quota is the smallest capacity.
func (m Multi) Quota() int64 { return quota(m.cfg) }

// Window is the time the bandwidth of smallest capacity, the one Quota
// reports, takes to refill from empty.
func (m Multi) Window() int64 { return m.cfg.Window() }

// Strict is false: asking a bucket of several bandwidths for more than a
// capacity is a rejection, as in Bucket4j.
func (m Multi) Strict() bool { return false }

// AppendState appends the encoding of *s to dst.
func (m Multi) AppendState(dst []byte, s *State) []byte { return appendState(dst, *s) }

// DecodeState decodes a state written by AppendState.
func (m Multi) DecodeState(src []byte, s *State) error {
	st := make(State, len(m.cfg.Bandwidths))
	if err := decodeState(src, m.cfg, st); err != nil {
		return err
	}
	*s = st
	return nil
}

// result describes st, after a decision for n tokens, as a policy result:
// the numbers of TryConsumeAndReturnRemaining.
func result(cfg *Config, st State, now int64, allowed bool, n int64) policy.Result {
	return decision(cfg, st, now, allowed, n).Result(quota(cfg))
}

// decision is result as Consume answers it.
func decision(cfg *Config, st State, now int64, allowed bool, n int64) policy.Decision {
	if len(st) == 1 {
		return decision1(&cfg.Bandwidths[0], &st[0], now, allowed, n)
	}
	d := policy.Decision{
		Verdict:    policy.Verdict{Allowed: allowed},
		Remaining:  max(Available(st), 0),
		ResetAfter: TimeToFull(cfg, st, now),
	}
	if !allowed {
		d.RetryAfter = Delay(cfg, st, n, now, true)
	}
	return d
}

// decision1 is decision for one bandwidth, without the folds over several.
func decision1(bw *Bandwidth, s *BandwidthState, now int64, allowed bool, n int64) policy.Decision {
	var retryAfter int64
	if !allowed {
		retryAfter = max(delay(bw, s, n, now, true), 0)
	}
	return policy.Decision{
		Verdict:    policy.Verdict{Allowed: allowed},
		Remaining:  max(s.Size, 0),
		RetryAfter: retryAfter,
		ResetAfter: max(timeToFull(bw, s, now), 0),
	}
}

// quota is the smallest capacity of cfg, the limit its results report.
func quota(cfg *Config) int64 {
	q := cfg.Bandwidths[0].Capacity
	for _, bw := range cfg.Bandwidths[1:] {
		q = min(q, bw.Capacity)
	}
	return q
}

// Reserve refills st in place and takes n tokens from every bandwidth if
// they will be there within maxWait (Never: no bound), overdrawing: the
// reservation of Multi.Reserve on a state that exists, for a bucket of any
// configuration. n ≤ 0 and maxWait < 0 are argument errors. Tokens that can
// never be had are refused with RetryAfter Never. changed means st must be
// stored.
func Reserve(cfg *Config, st State, now, n, maxWait int64) (policy.Result, bool) {
	var code policy.Code
	if n <= 0 {
		code = policy.NonPositiveTokens
	}
	return reserve(cfg, st, now, n, maxWait, code)
}

// reserve refills st in place and takes n tokens from it if they will be
// there within maxWait (Never: no bound), overdrawing; changed means st must
// be stored.
func reserve(cfg *Config, st State, now, n, maxWait int64, code policy.Code) (policy.Result, bool) {
	if code != policy.OK {
		return policy.Result{Code: code}, false
	}
	if maxWait < 0 {
		return policy.Result{Code: policy.NonPositiveMaxWait}, false
	}
	Refill(cfg, st, now)
	d := Delay(cfg, st, n, now, false)
	ok := d <= maxWait && d != Never
	if ok {
		Consume(st, n)
	}
	res := result(cfg, st, now, true, n)
	res.Allowed = ok
	if ok {
		res.Wait = d
	} else {
		res.RetryAfter = d
	}
	return res, ok
}

// expiresAt is the time every bandwidth of st is full, measured from each
// bandwidth's last refill, and for intervally bandwidths no earlier than
// their grid is worth keeping (see Single.ExpiresAt).
func expiresAt(cfg *Config, st State) int64 {
	var at int64 = -Never - 1
	for i := range cfg.Bandwidths {
		at = max(at, expiresAt1(&cfg.Bandwidths[i], st[i]))
	}
	return at
}

// expiresAt1 is expiresAt of one bandwidth.
func expiresAt1(bw *Bandwidth, s BandwidthState) int64 {
	if s.Size > bw.Capacity {
		return Never // tokens forced in above the capacity are worth keeping
	}
	at := satAdd(s.LastRefill, timeToFull(bw, &s, s.LastRefill))
	if bw.Intervally {
		at = max(at, satAdd(s.LastRefill, intervallyKeep(bw)))
	}
	return at
}

// intervallyKeep is how long after its last refill an intervally
// bandwidth's state is kept: ⌈Capacity/r⌉ periods, the time it takes to
// refill from empty, and so no earlier than it is full again from any
// size of 0 to Capacity.
func intervallyKeep(bw *Bandwidth) int64 {
	return policy.SatMul((bw.Capacity-1)/bw.RefillTokens+1, bw.Period)
}

func appendState(dst []byte, st State) []byte {
	dst = policy.AppendHeader(dst, policy.TagTokenBucket)
	dst = policy.AppendInt(dst, int64(len(st)))
	for _, s := range st {
		dst = policy.AppendInt(policy.AppendInt(policy.AppendInt(dst, s.LastRefill), s.Size), s.Err)
	}
	return dst
}

// decodeState decodes src into st, which has one element per bandwidth of
// cfg, and checks the invariants the math relies on.
func decodeState(src []byte, cfg *Config, st State) error {
	rest, err := policy.ReadHeader(src, policy.TagTokenBucket)
	if err != nil {
		return err
	}
	var n int64
	if n, rest, err = policy.ReadInt(rest); err != nil {
		return err
	}
	if n != int64(len(st)) {
		return fmt.Errorf("%w: %d bandwidths, want %d", policy.ErrBadState, n, len(st))
	}
	for i := range st {
		s := &st[i]
		for _, p := range []*int64{&s.LastRefill, &s.Size, &s.Err} {
			if *p, rest, err = policy.ReadInt(rest); err != nil {
				return err
			}
		}
		if s.Err < 0 || s.Err >= cfg.Bandwidths[i].Period {
			return fmt.Errorf("%w: bandwidth %d rounding error %d outside [0, %d)", policy.ErrBadState, i, s.Err, cfg.Bandwidths[i].Period)
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", policy.ErrBadState, len(rest))
	}
	return nil
}
