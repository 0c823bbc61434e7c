package envoyrls

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/batch"
	"github.com/sluicehq/sluice/memstore"
)

// The counters of rate_limit descriptors are envoyproxy/ratelimit's fixed
// windows: a window of the unit's length opens at each multiple of it
// since the Unix epoch (a month is 30 days, a year 365, a week starts on
// a Thursday), and the count of a key in a window goes up by every hit,
// allowed or not, so that a window once over its limit stays over. Time
// is in whole seconds, as there. A unit_multiplier of n makes the window
// n units long, opening at each multiple of that length since the epoch.

// unitSeconds is the length of unit, or 0 for UNKNOWN or a value Envoy
// does not define.
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 60 * 60
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 24 * 60 * 60
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * 60 * 60
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * 60 * 60
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * 60 * 60
	}
	return 0
}

// maxWindow is the longest window, in seconds, that a unit and its
// unit_multiplier may make: a counter's TTL, the window and keep, must fit
// a time.Duration (about 292 years).
const maxWindow = (math.MaxInt64 - int64(keep)) / int64(time.Second)

// window is the length of r's window in seconds: its unit times its
// unit_multiplier, or 0 when the unit has no length. Decoding bounds it
// by maxWindow.
func (r *rule) window() int64 {
	return unitSeconds(r.unit) * int64(max(r.multiplier, 1))
}

// windowStart is the start of the window of length unit that holds now.
func windowStart(now, unit int64) int64 {
	start := now - now%unit
	if now < 0 && now%unit != 0 {
		start -= unit
	}
	return start
}

// untilReset is envoyproxy/ratelimit's duration_until_reset: the whole
// seconds from now to the end of the window, 1 to unit.
func untilReset(now, unit int64) int64 { return windowStart(now, unit) + unit - now }

// counterState is a key's stored window: its start (Unix seconds) and the
// hits counted in it. 16 bytes, big endian.
type counterState struct {
	start int64
	count uint64
}

const counterStateLen = 16

func decodeCounter(b []byte) (counterState, bool) {
	if len(b) != counterStateLen {
		return counterState{}, false
	}
	return counterState{int64(binary.BigEndian.Uint64(b)), binary.BigEndian.Uint64(b[8:])}, true
}

func (s counterState) encode() []byte {
	var b [counterStateLen]byte
	binary.BigEndian.PutUint64(b[:], uint64(s.start))
	binary.BigEndian.PutUint64(b[8:], s.count)
	return b[:]
}

// keep is how long past its window's end a counter stays in the store,
// so that a request that reads it late, or a clock a little behind,
// still finds it.
const keep = time.Minute

// counters are the windows of the rate_limit descriptors in a store.
// The calls on one key are batched (internal/batch): while a key has an
// update in flight, the calls that come for it queue, and the next update
// counts them all, as if one after the other. A hot key (a route's
// generic_key, say) then costs one compare-and-set per batch, where a
// compare-and-set per call lost most of its races and queued behind
// backoffs until calls timed out. A store in this process's memory
// neither loses races nor waits, and is counted call by call: a batch's
// own deadline would cost it more than the count.
type counters struct {
	store   driver.Store
	batcher *batch.Batcher[*hit] // nil for memstore
}

// hit is one call's hits on a key's window.
type hit struct {
	start, unit, now int64 // the window (Unix seconds, its length), the call's clock
	n                uint64
	deadline         time.Time
	after            uint64 // the window's count after these hits, once counted
}

func newCounters(s driver.Store) *counters {
	c := &counters{store: s}
	if _, local := s.(*memstore.Store); !local {
		c.batcher = batch.New(c.run, batch.Options{})
	}
	return c
}

// add adds n hits to key's window that starts at start, of length unit
// seconds, at now, and returns the count after, by deadline at the
// latest. n may be 0, which reads the count without writing.
func (c *counters) add(ctx context.Context, key string, start, unit, now int64, n uint64, deadline time.Time) (uint64, error) {
	h := &hit{start: start, unit: unit, now: now, n: n, deadline: deadline}
	if c.batcher == nil {
		one := []*hit{h}
		err := c.store.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) { return tally(state, one) })
		return h.after, err
	}
	err := c.batcher.Add(ctx, key, h, deadline)
	if errors.Is(err, batch.ErrExpired) {
		err = context.DeadlineExceeded
	}
	return h.after, err
}

// run counts a batch of hits on key: the calls queued as it starts. The
// batch serves every one of them, so it runs to the latest of their
// deadlines, even if its leader's call ends: the callers' deadlines differ
// (Envoy's own timeout, or none and the store timeout), and a call must not
// fail at another's, a hostile client's 1 ms say. A call may so wait past
// its own deadline, by at most the store timeout. Calls that come while
// the batch runs wait for the next one rather than join it under a
// deadline not theirs.
func (c *counters) run(ctx context.Context, key string, b *batch.Batch[*hit]) error {
	hits := b.Join() // the leader's among them
	var deadline time.Time
	for _, h := range hits {
		if h.deadline.After(deadline) {
			deadline = h.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	return c.store.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) { return tally(state, hits) })
}

// tally counts hits, in order, on a key's stored state, setting each
// one's count after, and returns the state to store.
func tally(state []byte, hits []*hit) ([]byte, time.Duration, bool) {
	cur, ok := decodeCounter(state)
	var ttl time.Duration
	for _, h := range hits {
		// A stored window that started earlier, or a state that is not a
		// counter's, counts as empty. A stored window that started later
		// takes the hits: the call read its clock before another call
		// opened that window (it waited behind others, or its process's
		// clock is behind), and opening its own window afresh would throw
		// the later window's count away, which under contention admits
		// many times the limit. The policy machines treat a time before
		// their window in the same way.
		if !ok || cur.start < h.start {
			cur, ok = counterState{start: h.start}, true
		}
		h.after = cur.count + h.n
		if h.after < cur.count {
			h.after = math.MaxUint64 // saturate rather than wrap to zero
		}
		if h.n > 0 {
			cur.count = h.after
			ttl = max(ttl, time.Duration(cur.start+h.unit-h.now)*time.Second+keep)
		}
	}
	if ttl == 0 { // nothing to write: only reads
		return nil, 0, false
	}
	return cur.encode(), ttl, true
}

// overLimitCache is envoyproxy/ratelimit's local cache: the keys of
// windows that went over their limit, remembered in this process for a
// unit's length so that they are not counted in the store again. Its size
// bounds the bytes of the keys it holds, with an overhead per key; when
// full, expired keys make room, and failing that a new key is not
// remembered. It is safe for simultaneous use.
type overLimitCache struct {
	mu      sync.Mutex
	size    int
	used    int
	expires map[string]int64 // key → Unix second it is forgotten at
}

// overLimitOverhead is the bytes counted for a remembered key besides its
// own.
const overLimitOverhead = 48

func newOverLimitCache(size int) *overLimitCache {
	if size <= 0 {
		return nil
	}
	return &overLimitCache{size: size, expires: make(map[string]int64)}
}

// has reports whether key is remembered at now. A nil cache has nothing.
func (c *overLimitCache) has(key string, now int64) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.expires[key]
	if ok && now >= exp {
		c.forget(key)
		return false
	}
	return ok
}

// set remembers key from now for ttl seconds.
func (c *overLimitCache) set(key string, now, ttl int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.expires[key]; ok {
		c.expires[key] = now + ttl
		return
	}
	cost := len(key) + overLimitOverhead
	if c.used+cost > c.size {
		for k, exp := range c.expires {
			if now >= exp {
				c.forget(k)
			}
		}
		if c.used+cost > c.size {
			return
		}
	}
	c.expires[key] = now + ttl
	c.used += cost
}

// forget requires that c.mu is held.
func (c *overLimitCache) forget(key string) {
	delete(c.expires, key)
	c.used -= len(key) + overLimitOverhead
}
