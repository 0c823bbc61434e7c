package redisstore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A call's states: queued until the sender takes it (sent) or its caller
// gives up on it (abandoned), whichever comes first.
const (
	queued uint32 = iota
	sent
	abandoned
)

// call is one command waiting for the sender.
type call struct {
	cmd   redis.Cmder
	state atomic.Uint32
	// done gets one value once cmd has its reply or error. It is buffered
	// (capacity 1), so that the sender never waits for a caller that gave
	// up, and a call can be used again once its caller took that value.
	done chan struct{}
}

// calls holds the calls whose callers took their reply, for reuse: a call
// and its channel are two allocations a decision need not make. A call
// whose caller gave up is never put back: the sender may still hold it.
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// batcher sends the commands of many goroutines together: callers queue
// them, and one sender goroutine takes everything queued (up to maxBatch),
// sends it in one pipeline (a lone command by Process) and wakes the
// callers. A command queued while
// nothing is in flight goes out at once; commands queued while a pipeline
// is in flight wait for it and go out together in the next one. There is
// no timer.
type batcher struct {
	client Client

	// live and fill belong to the sender goroutine: the calls of the
	// pipeline being built, and the function that queues them on it,
	// made once so that a pipeline does not allocate a closure.
	live []*call
	fill func(redis.Pipeliner) error

	mu      sync.Mutex
	queue   []*call // guarded by mu
	closing bool    // guarded by mu

	wake    chan struct{} // capacity 1: the queue may have calls
	stopped chan struct{} // closed when the sender has returned
}

// newBatcher starts the sender; close stops it.
func newBatcher(client Client) *batcher {
	b := &batcher{client: client, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	b.fill = func(p redis.Pipeliner) error {
		for _, c := range b.live {
			_ = p.Process(context.Background(), c.cmd) // only queues it
		}
		return nil
	}
	go b.run()
	return b
}

// do queues cmd and waits for its reply. If ctx ends first, it returns
// ctx.Err(), and sent says whether the sender had taken cmd by then.
// Otherwise it returns cmd's error, with sent true.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) (wasSent bool, err error) {
	c := calls.Get().(*call)
	c.cmd = cmd
	c.state.Store(queued)
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		c.cmd = nil
		calls.Put(c) // never queued
		return false, errClosed
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // the sender is already due to look
	}
	select {
	case <-c.done:
		c.cmd = nil
		calls.Put(c) // the sender is done with it
		return true, cmd.Err()
	case <-ctx.Done():
		if c.state.CompareAndSwap(queued, abandoned) {
			return false, ctx.Err()
		}
		return true, ctx.Err()
	}
}

// run is the sender. It returns once close was called and the queue is
// empty.
func (b *batcher) run() {
	defer close(b.stopped)
	var batch []*call
	for range b.wake {
		for {
			b.mu.Lock()
			n := min(len(b.queue), maxBatch)
			batch = append(batch[:0], b.queue[:n]...)
			rest := copy(b.queue, b.queue[n:])
			clear(b.queue[rest:])
			b.queue = b.queue[:rest]
			closing := b.closing
			b.mu.Unlock()
			if n == 0 {
				if closing {
					return
				}
				break
			}
			b.send(batch)
			clear(batch)
		}
	}
}

// send sends the calls of batch that no caller abandoned, and wakes their
// callers: one command on its own, as go-redis sends a command (a
// pipeline of one costs the client more work for the same round trip),
// more in one pipeline.
func (b *batcher) send(batch []*call) {
	live := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(queued, sent) {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	// The context is not any caller's: one caller giving up must not fail
	// the others, nor cut off a command in flight. The client's timeouts
	// bound it.
	if len(live) == 1 {
		cmd := live[0].cmd
		if err := b.client.Process(context.Background(), cmd); err != nil && cmd.Err() == nil {
			cmd.SetErr(err)
		}
	} else {
		b.live = live
		_, err := b.client.Pipelined(context.Background(), b.fill)
		b.live = nil
		if err != nil && !anyErr(live) {
			// The pipeline failed before any command did, as when a new
			// connection cannot be set up (a wrong password, a database
			// index out of range): go-redis leaves the commands without
			// their error.
			for _, c := range live {
				c.cmd.SetErr(err)
			}
		}
	}
	for _, c := range live {
		c.done <- struct{}{} // never blocks: capacity 1, one value per call
	}
}

// anyErr reports whether a command of calls has an error.
func anyErr(calls []*call) bool {
	for _, c := range calls {
		if c.cmd.Err() != nil {
			return true
		}
	}
	return false
}

// close makes later calls fail, lets the sender send what is queued, and
// waits for it to return.
func (b *batcher) close() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	<-b.stopped
}
