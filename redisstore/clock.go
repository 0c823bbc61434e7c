package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// DefaultResyncInterval is how often a Clock re-reads the server's TIME,
// unless WithResyncInterval says otherwise.
const DefaultResyncInterval = time.Minute

// resyncTimeout bounds the TIME command a Clock sends from Now.
const resyncTimeout = time.Second

// ClockOption configures a Clock.
type ClockOption func(*clockOptions)

type clockOptions struct {
	resync time.Duration
}

// WithResyncInterval sets how often, at most, a Clock re-reads the
// server's TIME; d ≤ 0 reads it only once. The default is
// DefaultResyncInterval.
func WithResyncInterval(d time.Duration) ClockOption {
	return func(o *clockOptions) { o.resync = d }
}

// Clock is a sluice.Clock that follows the Redis server's TIME, as an
// option against client clock skew: processes whose own clocks disagree
// still make their decisions on one timeline, the server's.
//
// It reads TIME once in ServerClock and then adds the local monotonic
// time elapsed since, so a reading costs no round trip. Every resync
// interval, the Now call that finds the interval passed reads TIME again
// in its own goroutine (one round trip, at most a second; there is no
// background goroutine); if that fails, the Clock keeps its old reading
// and tries again an interval later. The server's time is taken as of the
// middle of the round trip. Now never goes backwards, even when a resync
// finds the server behind the Clock's estimate: it then stands still until
// the server catches up.
//
// With a cluster client, each read asks an arbitrary node, so the nodes'
// clocks should agree. A Clock is safe for concurrent use by multiple
// goroutines.
type Clock struct {
	client Client
	resync time.Duration // ≤ 0: never

	base    atomic.Pointer[clockBase]
	syncing atomic.Bool  // a Now call is re-reading TIME
	last    atomic.Int64 // the largest reading returned
}

// clockBase is one reading of the server's TIME.
type clockBase struct {
	local  time.Time     // when it was read, with a monotonic reading
	server int64         // the server's Unix time then, in nanoseconds
	next   time.Duration // when to read again, measured from local
}

var _ sluice.Clock = (*Clock)(nil)

// ServerClock reads the server's TIME through client and returns a Clock
// that follows it. Its error wraps driver.ErrUnavailable when the server
// did not answer, or is ctx.Err().
func ServerClock(ctx context.Context, client Client, opts ...ClockOption) (*Clock, error) {
	if client == nil {
		return nil, errors.New("redisstore: client is nil")
	}
	o := clockOptions{resync: DefaultResyncInterval}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Clock{client: client, resync: o.resync}
	b, err := c.read(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("redisstore: read server time: %w", err)
	}
	c.base.Store(b)
	return c, nil
}

// read sends TIME and returns the reading.
func (c *Clock) read(ctx context.Context) (*clockBase, error) {
	cmd := redis.NewTimeCmd(ctx, "time")
	t0 := time.Now()
	if err := c.client.Process(ctx, cmd); err != nil {
		return nil, unavailable(err)
	}
	rtt := time.Since(t0)
	server := cmd.Val()
	if server.IsZero() {
		return nil, unavailable(errors.New("TIME replied no time"))
	}
	return &clockBase{local: t0.Add(rtt / 2), server: server.UnixNano(), next: c.resync}, nil
}

// Now returns the server's Unix time in nanoseconds, as estimated from its
// last reading.
func (c *Clock) Now() int64 {
	b := c.base.Load()
	elapsed := time.Since(b.local)
	if c.resync > 0 && elapsed >= b.next && c.syncing.CompareAndSwap(false, true) {
		b = c.resyncFrom(b, elapsed)
		c.syncing.Store(false)
		elapsed = time.Since(b.local)
	}
	t := b.server + int64(elapsed)
	for {
		last := c.last.Load()
		if t <= last {
			return last
		}
		if c.last.CompareAndSwap(last, t) {
			return t
		}
	}
}

// resyncFrom re-reads TIME, elapsed after b was read, and stores and
// returns the new base: the new reading, or b due again an interval
// later when the read fails. It requires that c.syncing is held.
func (c *Clock) resyncFrom(b *clockBase, elapsed time.Duration) *clockBase {
	ctx, cancel := context.WithTimeout(context.Background(), resyncTimeout)
	defer cancel()
	nb, err := c.read(ctx)
	if err != nil {
		retry := *b
		retry.next = elapsed + c.resync
		nb = &retry
	}
	c.base.Store(nb)
	return nb
}

// unavailable wraps err with driver.ErrUnavailable.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// IsWallClock reports true: the server's TIME counts from the Unix epoch.
func (*Clock) IsWallClock() bool { return true }
