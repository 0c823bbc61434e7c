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
	done  chan struct{} // closed once cmd has its reply or error
}

// batcher sends the commands of many goroutines together: callers queue
// them, and one sender goroutine takes everything queued (up to maxBatch),
// sends it in one pipeline and wakes the callers. A command queued while
// nothing is in flight goes out at once; commands queued while a pipeline
// is in flight wait for it and go out together in the next one. There is
// no timer.
type batcher struct {
	client Client

	mu      sync.Mutex
	queue   []*call // guarded by mu
	closing bool    // guarded by mu

	wake    chan struct{} // capacity 1: the queue may have calls
	stopped chan struct{} // closed when the sender has returned
}

// newBatcher starts the sender; close stops it.
func newBatcher(client Client) *batcher {
	b := &batcher{client: client, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go b.run()
	return b
}

// do queues cmd and waits for its reply. If ctx ends first, it returns
// ctx.Err(), and sent says whether the sender had taken cmd by then.
// Otherwise it returns cmd's error, with sent true.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) (wasSent bool, err error) {
	c := &call{cmd: cmd, done: make(chan struct{})}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
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

// send sends the calls of batch that no caller abandoned in one pipeline,
// and wakes their callers.
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
	// The pipeline's context is not any caller's: one caller giving up
	// must not fail the others. The client's timeouts bound it.
	_, err := b.client.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for _, c := range live {
			_ = p.Process(context.Background(), c.cmd) // only queues it
		}
		return nil
	})
	if err != nil && !anyErr(live) {
		// The pipeline failed before any command did, as when a new
		// connection cannot be set up (a wrong password, a database index
		// out of range): go-redis leaves the commands without their error.
		for _, c := range live {
			c.cmd.SetErr(err)
		}
	}
	for _, c := range live {
		close(c.done)
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
