package keyed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/batch"
	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/internal/lease"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
	"github.com/sluicehq/sluice/internal/record"
	"github.com/sluicehq/sluice/internal/sleep"
)

// Clock is the time source of the engine: nanoseconds.
type Clock interface{ Now() int64 }

// Store is the state of every key in a driver.Store: each key's record,
// read, changed by a record.Codec and written back in one Update. The
// codec is given with each call, so that one Store serves any policy.
//
// Calls for a key that already has a store call in flight from this
// process are batched (package batch): they queue, and one of them runs
// the whole queue in the next Update, in order, so a hot key costs one
// round trip per batch rather than per call. Results are those of the
// calls run one after another. Each time the store runs the batch's
// UpdateFunc, which it does again after a lost race, the calls queued
// meanwhile join the batch, so that contention makes batches larger
// rather than queues longer.
//
// Every call has a deadline, its start plus the store timeout, which
// bounds its wait in the queue and the Update that runs it. A circuit
// breaker answers calls at once while the store, or the partition of the
// store that holds their key, is failing.
//
// Store is safe for simultaneous use by multiple goroutines.
type Store struct {
	store    driver.Store
	clock    Clock
	timeout  time.Duration
	breakers *breaker.Set
	batcher  *batch.Batcher[task]
}

// An op is one call's work on its key's record: it computes the
// operation on rec at now, setting its result in the closure, and returns
// the new record when it changed it, with the codec that wrote it, which
// decides the record's expiry (nil when unchanged). It may run more than
// once (a store retries after a conflict); the last run counts.
type op func(rec []byte, now int64) (next []byte, by record.Codec)

// A heldOp is an op on a key's record and the holds open on it (see
// record.SplitHolds), which it may change in place, reporting so.
type heldOp func(rec []byte, now int64, holds *[]record.Hold) (next []byte, by record.Codec, holdsChanged bool)

// A task is one call's work: an op, which sees only the policy's record,
// or a heldOp.
type task struct {
	op   op
	held heldOp
}

// changedBy is the codec of an op that changed a record, or nil.
func changedBy(c record.Codec, changed bool) record.Codec {
	if changed {
		return c
	}
	return nil
}

// NewStore returns the keys of s, on clock, each call bounded by timeout
// and guarded by its key's breaker of br.
func NewStore(s driver.Store, clock Clock, timeout time.Duration, br *breaker.Set) *Store {
	st := &Store{store: s, clock: clock, timeout: timeout, breakers: br}
	st.batcher = batch.New(st.run, batch.Options{Refuse: func(key string) error { return br.For(key).Refusing() }})
	return st
}

// ttl is how long the store should keep a record that is worth no more
// than no state from expiresAt on: the time left plus a margin for the
// clocks of other processes, which may lag this one's. 0 means keep it.
func ttl(expiresAt, now int64) time.Duration {
	const margin = int64(time.Second)
	switch {
	case expiresAt >= math.MaxInt64-margin:
		return 0
	case expiresAt <= now:
		return time.Duration(margin)
	}
	return time.Duration(expiresAt - now + margin)
}

// submit runs o on key, alone or in a batch, and returns the store's
// error. The store timeout bounds the whole call, its wait in the queue
// included. When ctx ends while o waits in a queue, o is dropped and
// submit returns ctx.Err(). While the circuit is open, submit returns
// breaker.ErrOpen at once.
func (s *Store) submit(ctx context.Context, key string, o op) error {
	return s.submitTask(ctx, key, task{op: o})
}

// submitTask is submit for a task.
func (s *Store) submitTask(ctx context.Context, key string, o task) error {
	br := s.breakers.For(key)
	probe, err := br.Allow()
	if err != nil {
		return err
	}
	defer br.EndProbe(probe)
	err = s.batcher.Add(ctx, key, o, time.Now().Add(s.timeout))
	if errors.Is(err, batch.ErrExpired) {
		// The store timeout ended while the call waited behind the key's
		// call in flight: nothing of it was sent.
		br.Result(context.DeadlineExceeded)
		err = fmt.Errorf("%w: no answer within the store timeout %v, waiting behind the key's call in flight: %w",
			driver.ErrUnavailable, s.timeout, context.DeadlineExceeded)
	}
	return err
}

// run is the batcher's handler: it runs the batch in one Update of key.
// An Update that fails with driver.ErrConflict wrote nothing and runs
// again, after a random backoff, until the batch's deadline.
func (s *Store) run(ctx context.Context, key string, b *batch.Batch[task]) error {
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), b.Deadline())
	defer cancel()
	fn := func(stored []byte) ([]byte, time.Duration, bool) {
		ops := b.Join()
		now := s.clock.Now()
		// The ops see the policy's record; the holds open on the key are
		// written back around it, less those expired.
		holds, rec := record.SplitHolds(stored)
		var last record.Codec // the codec of the last op that changed rec
		holdsChanged := false
		for _, o := range ops {
			var next []byte
			var by record.Codec
			if o.held != nil {
				var ch bool
				next, by, ch = o.held(rec, now, &holds)
				holdsChanged = holdsChanged || ch
			} else {
				next, by = o.op(rec, now)
			}
			if by != nil {
				rec, last = next, by
			}
		}
		if last == nil && !holdsChanged {
			return nil, 0, false
		}
		// A heldOp that changed the holds names its codec, so last is
		// set whenever there is something to write.
		expires := max(record.HoldsExpireAt(holds), last.ExpiresAt(rec))
		return record.JoinHolds(holds, rec, now), ttl(expires, now), true
	}
	err := s.store.Update(sctx, key, fn)
	for losses := 1; errors.Is(err, driver.ErrConflict); losses++ {
		if werr := sleep.Backoff(sctx, conflictBase, losses, conflictMost); werr != nil {
			break
		}
		err = s.store.Update(sctx, key, fn)
	}
	if err != nil && sctx.Err() != nil && !errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, driver.ErrIndeterminate) {
		// A context error as the contract returns it when nothing was
		// written, or the last lost race when the deadline came: the
		// store did not answer within the timeout, nothing was taken.
		err = fmt.Errorf("%w: no answer within the store timeout %v: %w", driver.ErrUnavailable, s.timeout, err)
	}
	s.breakers.For(key).Result(err)
	return err
}

// The backoff between the Updates of a batch that lost to a conflict:
// full jitter below conflictBase·2^losses, at most conflictMost. Unlike a
// lost compare-and-swap, which the driver's CAS block retries at once a
// few times, a conflict is a transaction the database rolled back (a
// deadlock, a lock wait timeout), so the first retry already waits.
const (
	conflictBase = 50 * time.Microsecond
	conflictMost = 10 * time.Millisecond
)

// Consume decides whether n tokens may pass for key, taking them if so.
func (s *Store) Consume(ctx context.Context, key string, c record.Codec, n int64) (policy.Result, error) {
	var res policy.Result
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		res, next, changed = c.Consume(rec, now, n)
		return next, changedBy(c, changed)
	})
	return res, err
}

// Lease takes need tokens for key and up to want more for a process's
// lease, in one update; see lease.Take. granted is 0 when even need was
// refused, and res is then the refusal. at is the time the grant was
// decided at, from which res's durations count.
func (s *Store) Lease(ctx context.Context, key string, c record.Codec, need, want int64) (res policy.Result, granted, at int64, err error) {
	err = s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		at = now
		res, granted, next, changed = lease.Take(c, rec, now, need, want)
		return next, changedBy(c, changed)
	})
	return res, granted, at, err
}

// Peek answers as Consume would, changing nothing.
func (s *Store) Peek(ctx context.Context, key string, c record.Codec, n int64) (policy.Result, error) {
	var res policy.Result
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		res = c.Peek(rec, now, n)
		return nil, nil
	})
	return res, err
}

// Reserve reserves n tokens for key within maxWait; a granted reservation
// that took something comes with its receipt.
func (s *Store) Reserve(ctx context.Context, key string, c record.Codec, n, maxWait int64) (policy.Result, *policy.Receipt, error) {
	var (
		res policy.Result
		rc  *policy.Receipt
	)
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		res, rc, next, changed = c.Reserve(rec, now, n, maxWait)
		return next, changedBy(c, changed)
	})
	if err != nil {
		rc = nil
	}
	return res, rc, err
}

// Cancel gives back the reservation of receipt r for key at now, as
// policy.Undo does.
func (s *Store) Cancel(ctx context.Context, key string, c record.Codec, now int64, r *policy.Receipt) error {
	return s.submit(ctx, key, func(rec []byte, _ int64) ([]byte, record.Codec) {
		next, changed := c.Cancel(rec, now, r)
		return next, changedBy(c, changed)
	})
}

// Reset forgets key: deleted when the store can, else overwritten with no
// state.
func (s *Store) Reset(ctx context.Context, key string, c record.Codec) error {
	if d, ok := s.store.(driver.Deleter); ok {
		br := s.breakers.For(key)
		if br.Blocking() {
			return breaker.ErrOpen
		}
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		err := d.Delete(sctx, key)
		if !CallerDone(ctx, err) {
			br.Result(err)
		}
		return err
	}
	return s.submit(ctx, key, func(rec []byte, _ int64) ([]byte, record.Codec) {
		next, changed := c.Reset(rec)
		return next, changedBy(c, changed)
	})
}

// ErrNoConfig is the error of a bucket call on a key without state whose
// codec has no configuration: a lazily configured bucket's, which must be
// configured first.
var ErrNoConfig = errors.New("sluice: no configuration")

// UpdateBucket runs f on key's token bucket, created by this call when the
// key has none; see record.Bucket.Update. It returns ErrNoConfig, having
// written nothing, when the key has no state and c no configuration.
func (s *Store) UpdateBucket(ctx context.Context, key string, c *record.Bucket, f func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool) error {
	var noConfig bool
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		next, changed, noConfig = c.Update(rec, now, f)
		return next, changedBy(c, changed)
	})
	if err == nil && noConfig {
		err = ErrNoConfig
	}
	return err
}

// ReplaceBucket switches key's bucket to cfg, carrying its tokens over by
// strategy, and shows seen (when not nil) the bucket it leaves; see
// record.Bucket.Replace.
func (s *Store) ReplaceBucket(ctx context.Context, key string, c *record.Bucket, cfg *tokenbucket.Config, strategy tokenbucket.Strategy,
	seen func(*tokenbucket.Config, tokenbucket.State, int64)) error {
	var noConfig bool
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		next, changed, noConfig = c.Replace(rec, now, cfg, strategy, seen)
		return next, changedBy(c, changed)
	})
	if err == nil && noConfig {
		err = ErrNoConfig
	}
	return err
}

// Configuration returns the configuration in force for key, or
// ErrNoConfig.
func (s *Store) Configuration(ctx context.Context, key string, c *record.Bucket) (*tokenbucket.Config, error) {
	var cfg *tokenbucket.Config
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		cfg = c.Configuration(rec, now)
		return nil, nil
	})
	if err == nil && cfg == nil {
		err = ErrNoConfig
	}
	return cfg, err
}

// CallerDone reports whether err is the caller's own context ending,
// which is not a store failure.
func CallerDone(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// ErrHoldsFull is the error of a hold on a key that has record.MaxHolds
// open already; nothing was taken.
var ErrHoldsFull = fmt.Errorf("sluice: %d holds open on the key, the most a key's record keeps", record.MaxHolds)

// Settled is what a call on a key's debt left: the decision, and the debt
// the key owes after it.
type Settled struct {
	Res  policy.Result
	Debt int64
	// Found reports, for Settle, whether the hold was open: false when it
	// was settled already, has expired, or never was.
	Found bool
}

// after is what key owes and has left at now, on the record rec after a
// call: Peek's answer for 1 token, whose Remaining is what a request could
// take now.
func after(c record.Debtor, rec []byte, now int64) Settled {
	p := c.Peek(rec, now, 1)
	p.Remaining = policy.RemainingAt(p)
	return Settled{Res: p, Debt: c.Debt(rec, now)}
}

// Charge takes n tokens for key whatever is left; what exceeds it is
// debt (policy.Debtor).
func (s *Store) Charge(ctx context.Context, key string, c record.Debtor, n int64) (Settled, error) {
	var out Settled
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		out = Settled{}
		out.Res, next, changed = c.Charge(rec, now, n)
		if out.Res.Code != policy.OK {
			return nil, nil
		}
		if changed {
			rec = next
		}
		out.Debt = c.Debt(rec, now)
		return next, changedBy(c, changed)
	})
	return out, err
}

// Hold takes n tokens for key as Consume does and, when they are allowed,
// opens the hold id on the key for ttl ns, to be settled once (Settle).
// It returns ErrHoldsFull, having taken nothing, when the key has
// record.MaxHolds open.
func (s *Store) Hold(ctx context.Context, key string, c record.Debtor, id uint64, n, ttl int64) (Settled, error) {
	var out Settled
	var full bool
	err := s.submitTask(ctx, key, task{held: func(rec []byte, now int64, holds *[]record.Hold) ([]byte, record.Codec, bool) {
		out, full = Settled{}, false
		live := 0
		for _, h := range *holds {
			if h.Expires > now {
				live++
			}
		}
		if live >= record.MaxHolds {
			full = true
			return nil, nil, false
		}
		res, next, changed := c.Consume(rec, now, n)
		out.Res = res
		if changed {
			rec = next
		}
		if res.Code != policy.OK || !res.Allowed {
			return next, changedBy(c, changed), false
		}
		*holds = append(*holds, record.Hold{ID: id, Tokens: n, At: now, Expires: policy.SatAdd(now, ttl)})
		out.Debt = c.Debt(rec, now)
		return rec, c, true
	}})
	if err == nil && full {
		err = ErrHoldsFull
	}
	return out, err
}

// Settle settles the hold id of key with its actual cost n ≥ 0: the
// tokens it held beyond n are given back, and those beyond its estimate
// charged, debt included. A hold settled already, expired (its estimate
// stays taken) or never opened changes nothing: Found is false.
func (s *Store) Settle(ctx context.Context, key string, c record.Debtor, id uint64, n int64) (Settled, error) {
	var out Settled
	err := s.submitTask(ctx, key, task{held: func(rec []byte, now int64, holds *[]record.Hold) ([]byte, record.Codec, bool) {
		out = Settled{}
		i := slices.IndexFunc(*holds, func(h record.Hold) bool { return h.ID == id && h.Expires > now })
		if i < 0 {
			out = after(c, rec, now)
			return nil, nil, false
		}
		h := (*holds)[i]
		*holds = slices.Delete(*holds, i, i+1)
		next := rec
		switch {
		case n > h.Tokens:
			// A charge refused for overflow takes nothing; the hold is
			// settled all the same, at its estimate.
			if _, nx, changed := c.Charge(rec, now, n-h.Tokens); changed {
				next = nx
			}
		case n < h.Tokens:
			if nx, changed := c.Refund(rec, now, h.At, h.Tokens-n); changed {
				next = nx
			}
		}
		out = after(c, next, now)
		out.Found = true
		return next, c, true
	}})
	return out, err
}

// Debt is what key owes now, with Peek's answer for 1 token.
func (s *Store) Debt(ctx context.Context, key string, c record.Debtor) (Settled, error) {
	var out Settled
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		out = after(c, rec, now)
		return nil, nil
	})
	return out, err
}

// Slotter is a record.Codec of a policy with slots (record.Machine).
type Slotter interface {
	record.Codec
	Slot(rec []byte, now int64, op policy.SlotOp) (policy.SlotResult, []byte, bool)
}

// Slot runs the slot operation op on key's record.
func (s *Store) Slot(ctx context.Context, key string, c Slotter, op policy.SlotOp) (policy.SlotResult, error) {
	var res policy.SlotResult
	err := s.submit(ctx, key, func(rec []byte, now int64) ([]byte, record.Codec) {
		var next []byte
		var changed bool
		res, next, changed = c.Slot(rec, now, op)
		return next, changedBy(c, changed)
	})
	return res, err
}
