// Package sweep deletes a store's expired state in the background, in
// small batches: the loop behind the WithSweep options of pgstore and
// mysqlstore, whose tables keep a row per key until it is deleted.
//
// The store gives the statement (a Func) and this package only decides
// when it runs: every interval, one batch after another until a batch
// comes back short, each batch bounded in rows and in time, so that no
// statement holds many row locks or holds them long.
package sweep

import (
	"context"
	"sync"
	"time"
)

// BatchSize is the most rows one batch deletes. A thousand rows is a
// statement of a few milliseconds on PostgreSQL and MariaDB, short
// enough that the row locks it takes delay a limiter's update of an
// expired key by no more than that, and large enough that a sweep keeps
// up with thousands of keys expiring a second.
const BatchSize = 1000

// batchTimeout bounds one batch, so that a sweep never waits on a hung
// connection until the next one is due; the store's statement is
// cancelled with its context.
const batchTimeout = 30 * time.Second

// Func deletes at most n expired rows and returns how many it deleted.
// It must check each row's expiry as it deletes it, under the row's lock,
// so that a row renewed since it was found expired is kept.
type Func func(ctx context.Context, n int) (deleted int64, err error)

// Report is told what each batch did: the rows it deleted, or its error.
// It runs on the sweep's goroutine, so it must not block.
type Report func(deleted int64, err error)

// Sweeper runs the sweeps of one store until Close.
type Sweeper struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start starts a goroutine that sweeps with del every interval, the first
// time one interval from now, and tells report (which may be nil) about
// every batch. A sweep runs batches of BatchSize rows until one deletes
// fewer, fails, or Close is called. interval must be positive. The
// caller must call Close.
func Start(interval time.Duration, del Func, report Report) *Sweeper {
	t := time.NewTicker(interval)
	return start(t.C, t.Stop, del, report)
}

// start is Start with the ticks given, for tests: a sweep runs on each
// value received from tick; stop is called once the goroutine ends.
func start(tick <-chan time.Time, stop func(), del Func, report Report) *Sweeper {
	if report == nil {
		report = func(int64, error) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sweeper{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick:
				sweep(ctx, del, report)
			}
		}
	}()
	return s
}

// sweep runs batches until one deletes fewer than BatchSize rows, fails,
// or ctx ends. A batch cut short by ctx (Close) is not reported unless it
// deleted rows: it is no failure of the store.
func sweep(ctx context.Context, del Func, report Report) {
	for ctx.Err() == nil {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		n, err := del(bctx, BatchSize)
		cancel()
		if err != nil && ctx.Err() != nil {
			return
		}
		report(n, err)
		if err != nil || n < BatchSize {
			return
		}
	}
}

// Close stops the sweeps and waits for the goroutine to end, cancelling
// a batch in progress. Nothing is reported once it returns. It may be
// called more than once.
func (s *Sweeper) Close() {
	s.once.Do(s.cancel)
	<-s.done
}
