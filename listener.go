package sluice

import (
	"sync/atomic"
	"time"
)

// Listener is told what a bucket did. Its methods are called after the
// bucket's lock is released, on the goroutine that made the call, so they
// must be quick and safe for concurrent use. Embed NopListener to implement
// only some of them.
//
// Reading (AvailableTokens, Peek, PeekN), adding tokens,
// resetting and replacing the configuration are not reported.
type Listener interface {
	// OnConsumed reports tokens taken, including by a blocking call or a
	// reservation before it waits.
	OnConsumed(tokens int64)
	// OnRejected reports tokens asked for and refused.
	OnRejected(tokens int64)
	// OnWaited reports the time a blocking call slept for its tokens.
	OnWaited(d time.Duration)
	// OnCancelled reports a blocking call whose context ended while it
	// waited; its tokens were given back.
	OnCancelled(tokens int64)
	// OnDelayed reports a reservation whose caller must wait d itself.
	OnDelayed(d time.Duration)
}

// NopListener implements Listener and does nothing.
type NopListener struct{}

func (NopListener) OnConsumed(int64)        {}
func (NopListener) OnRejected(int64)        {}
func (NopListener) OnWaited(time.Duration)  {}
func (NopListener) OnCancelled(int64)       {}
func (NopListener) OnDelayed(time.Duration) {}

// CountingListener is a Listener that keeps totals. Its zero value is ready,
// and it is safe for concurrent use; one may serve many buckets.
type CountingListener struct {
	consumed, rejected, waited, cancelled, delayed atomic.Int64
	storeFailures                                  [FailLocal + 1]atomic.Int64
	circuitOpened                                  atomic.Int64
}

var _ StoreListener = (*CountingListener)(nil)

func (c *CountingListener) OnConsumed(tokens int64)   { c.consumed.Add(tokens) }
func (c *CountingListener) OnRejected(tokens int64)   { c.rejected.Add(tokens) }
func (c *CountingListener) OnWaited(d time.Duration)  { c.waited.Add(int64(d)) }
func (c *CountingListener) OnCancelled(tokens int64)  { c.cancelled.Add(tokens) }
func (c *CountingListener) OnDelayed(d time.Duration) { c.delayed.Add(int64(d)) }

// OnStoreFailure counts a store failure under the policy applied.
func (c *CountingListener) OnStoreFailure(_ error, f StoreFailure) {
	if int(f) < len(c.storeFailures) {
		c.storeFailures[f].Add(1)
	}
}

// OnCircuit counts the circuit's openings (moves to CircuitOpen).
func (c *CountingListener) OnCircuit(s CircuitState) {
	if s == CircuitOpen {
		c.circuitOpened.Add(1)
	}
}

// CircuitOpened is the number of times the circuit opened.
func (c *CountingListener) CircuitOpened() int64 { return c.circuitOpened.Load() }

// StoreFailures is the number of store failures met with f.
func (c *CountingListener) StoreFailures(f StoreFailure) int64 {
	if int(f) >= len(c.storeFailures) {
		return 0
	}
	return c.storeFailures[f].Load()
}

// Consumed is the total of tokens consumed.
func (c *CountingListener) Consumed() int64 { return c.consumed.Load() }

// Rejected is the total of tokens refused.
func (c *CountingListener) Rejected() int64 { return c.rejected.Load() }

// Waited is the total time blocking calls slept.
func (c *CountingListener) Waited() time.Duration { return time.Duration(c.waited.Load()) }

// Cancelled is the total of tokens given back by cancelled waits.
func (c *CountingListener) Cancelled() int64 { return c.cancelled.Load() }

// Delayed is the total delay handed to reservations.
func (c *CountingListener) Delayed() time.Duration { return time.Duration(c.delayed.Load()) }
