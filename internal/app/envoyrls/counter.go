package envoyrls

import (
	"context"
	"encoding/binary"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/driver"
)

// The counters of rate_limit descriptors are envoyproxy/ratelimit's fixed
// windows: a window of the unit's length opens at each multiple of it
// since the Unix epoch (a month is 30 days, a year 365, a week starts on
// a Thursday), and the count of a key in a window goes up by every hit,
// allowed or not, so that a window once over its limit stays over. Time
// is in whole seconds, as there.

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

// add adds n hits to key's window that starts at start, of length unit
// seconds, at now, and returns the count after. A stored window that
// started earlier, or a state that is not a counter's, counts as empty.
// n may be 0, which reads the count without writing.
func add(ctx context.Context, s driver.Store, key string, start, unit, now int64, n uint64) (uint64, error) {
	var after uint64
	err := s.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) {
		cur, ok := decodeCounter(state)
		if !ok || cur.start != start {
			cur = counterState{start: start}
		}
		after = cur.count + n
		if after < cur.count {
			after = math.MaxUint64 // saturate rather than wrap to zero
		}
		if n == 0 {
			return nil, 0, false
		}
		cur.count = after
		return cur.encode(), time.Duration(start+unit-now)*time.Second + keep, true
	})
	return after, err
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
