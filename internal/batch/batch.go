// Package batch runs the operations on a key in batches: while a key has
// a batch in flight, the operations added for it queue, and one of them
// then runs the whole queue in the next batch, so that a hot key costs one
// round trip per batch rather than one per operation (Bucket4j's
// batching, shaped as gocloud's pubsub batcher: a small type with Add and
// a handler that runs a batch).
//
// Each operation has a deadline, which bounds both its wait in the queue
// and the batch that runs it; a batch's deadline is that of its first
// operation, the earliest. Operations queued while a batch runs may join
// it (Batch.Join), so that a handler that retries after a lost race takes
// the latecomers along rather than leaving them queued.
package batch

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxBatch is the most operations one batch runs unless
// Options.MaxBatch says otherwise.
const DefaultMaxBatch = 256

// ErrExpired is the error of an operation whose deadline passed while it
// waited in its key's queue: it was never handed to the handler.
var ErrExpired = errors.New("batch: deadline passed while queued")

// Handler runs a batch for key, with ctx (the context of the operation
// that leads the batch) and returns the error every operation of the
// batch gets. It must return by the batch's deadline, or soon after.
type Handler[T any] func(ctx context.Context, key string, b *Batch[T]) error

// Options configure a Batcher.
type Options struct {
	// MaxBatch bounds the operations of one batch; 0 is DefaultMaxBatch.
	MaxBatch int
	// Refuse, when not nil, is asked once a batch of key has run whether
	// the operations queued behind it may still be sent: when it returns
	// an error (a circuit breaker that opened), the operations then
	// waiting get that error at once, and none is handed to the handler.
	Refuse func(key string) error
}

// Batcher batches the operations of type T on each key. It is safe for
// simultaneous use by multiple goroutines; its zero value is not usable.
type Batcher[T any] struct {
	handler  Handler[T]
	maxBatch int
	refuse   func(key string) error
	seed     maphash.Seed
	shards   [shardCount]shard[T]
}

const shardCount = 64 // a power of two, enough to keep 2-8 cores off each other's locks

type shard[T any] struct {
	mu sync.Mutex
	// inflight holds, for each key with a batch in flight, the operations
	// waiting behind it. Guarded by mu.
	inflight map[string]*[]*call[T] // nil until the shard's first Add
	_        [40]byte               // keep shards' locks on separate cache lines
}

// A call is one operation waiting for, or running in, a batch.
type call[T any] struct {
	item     T
	err      error
	deadline time.Time
	state    atomic.Int32  // waiting, taken, abandoned
	done     chan struct{} // closed when err is set, or to make the call lead a batch
	batch    *Batch[T]     // set before done is closed to make this call lead the batch
}

const (
	waiting int32 = iota
	taken
	abandoned
)

// New returns a Batcher that runs batches with handler.
func New[T any](handler Handler[T], o Options) *Batcher[T] {
	b := &Batcher[T]{handler: handler, maxBatch: o.MaxBatch, refuse: o.Refuse, seed: maphash.MakeSeed()}
	if b.maxBatch <= 0 {
		b.maxBatch = DefaultMaxBatch
	}
	return b
}

// Batch is the operations the handler runs together, in the order they
// were added. It is used by one goroutine at a time: the handler's.
type Batch[T any] struct {
	b     *Batcher[T]
	key   string
	sh    *shard[T]
	calls []*call[T]
	items []T
	// one and oneItem hold the first call, so that a batch of one
	// allocates no slices.
	one     [1]*call[T]
	oneItem [1]T
}

// Deadline is when the batch must have ended: its first operation's
// deadline, the earliest of its operations'.
func (b *Batch[T]) Deadline() time.Time { return b.calls[0].deadline }

// Items returns the batch's operations, in order. The slice is valid
// until the next Join.
func (b *Batch[T]) Items() []T { return b.items }

// Join moves the operations waiting behind the batch into it, up to the
// batcher's MaxBatch, and returns all of them, as Items does. A handler
// calls it before each attempt, so that operations queued while an
// attempt ran are decided in the next one.
func (b *Batch[T]) Join() []T {
	if len(b.calls) >= b.b.maxBatch {
		return b.items
	}
	sh := b.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.inflight[b.key]
	if q == nil || len(*q) == 0 {
		return b.items
	}
	rest := (*q)[:0]
	for _, w := range *q {
		switch {
		case len(b.calls) < b.b.maxBatch && w.state.CompareAndSwap(waiting, taken):
			b.calls = append(b.calls, w)
			b.items = append(b.items, w.item)
		case w.state.Load() == waiting:
			rest = append(rest, w)
		}
	}
	clear((*q)[len(rest):])
	*q = rest
	return b.items
}

// Add runs item in a batch of key, alone or with the operations queued
// behind the key's batch in flight, and returns the batch's error. When
// ctx ends while item waits in the queue, item is dropped and Add returns
// ctx.Err(); when deadline passes first, it returns ErrExpired. Once item
// is taken into a batch, Add waits for the batch, which ends by item's
// deadline.
func (b *Batcher[T]) Add(ctx context.Context, key string, item T, deadline time.Time) error {
	sh := &b.shards[maphash.String(b.seed, key)&(shardCount-1)]
	sh.mu.Lock()
	if q, busy := sh.inflight[key]; busy {
		c := &call[T]{item: item, deadline: deadline, done: make(chan struct{})}
		*q = append(*q, c)
		sh.mu.Unlock()
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		select {
		case <-c.done:
		case <-ctx.Done():
			if c.state.CompareAndSwap(waiting, abandoned) {
				return ctx.Err()
			}
			<-c.done
		case <-timer.C:
			if c.state.CompareAndSwap(waiting, abandoned) {
				return ErrExpired
			}
			<-c.done
		}
		if c.batch != nil { // promoted: this call leads the next batch
			b.lead(ctx, c.batch)
		}
		return c.err
	}
	l := &leader[T]{c: call[T]{item: item, deadline: deadline}}
	l.q = l.qbuf[:0]
	if sh.inflight == nil { // made at the shard's first use: a Batcher per key costs no map per shard
		sh.inflight = make(map[string]*[]*call[T])
	}
	sh.inflight[key] = &l.q
	sh.mu.Unlock()
	bt := &l.bt
	bt.b, bt.key, bt.sh = b, key, sh
	bt.one[0], bt.oneItem[0] = &l.c, item
	bt.calls, bt.items = bt.one[:1:1], bt.oneItem[:1:1]
	b.lead(ctx, bt)
	return l.c.err
}

// A leader is what Add needs to lead a batch of its own call, in one
// allocation rather than four: the call, its batch and the key's queue,
// with room for a few waiting calls before the queue needs an array of
// its own.
type leader[T any] struct {
	c    call[T]
	bt   Batch[T]
	q    []*call[T]
	qbuf [4]*call[T]
}

// lead runs bt, whose first call is the calling goroutine's own, then
// hands the key's queue to its first waiting call, which leads the next
// batch, or retires the queue when it is empty.
func (b *Batcher[T]) lead(ctx context.Context, bt *Batch[T]) {
	err := b.handler(ctx, bt.key, bt)
	for i, c := range bt.calls {
		c.err = err
		if i > 0 {
			close(c.done)
		}
	}

	var refused error
	if b.refuse != nil {
		refused = b.refuse(bt.key)
	}
	sh := bt.sh
	sh.mu.Lock()
	q := sh.inflight[bt.key]
	var next []*call[T]
	rest := (*q)[:0]
	for _, w := range *q {
		switch {
		case refused != nil && w.state.CompareAndSwap(waiting, taken):
			w.err = refused // answered at once; nothing was sent
			close(w.done)
		case len(next) < b.maxBatch && w.state.CompareAndSwap(waiting, taken):
			next = append(next, w)
		case w.state.Load() == waiting:
			rest = append(rest, w)
		}
	}
	clear((*q)[len(rest):])
	*q = rest
	if len(next) == 0 {
		delete(sh.inflight, bt.key)
	}
	sh.mu.Unlock()
	if len(next) > 0 {
		nb := &Batch[T]{b: b, key: bt.key, sh: sh, calls: next, items: make([]T, len(next))}
		for i, c := range next {
			nb.items[i] = c.item
		}
		next[0].batch = nb
		close(next[0].done)
	}
}
