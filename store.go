package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// StoreFailure is what a Limiter does when its store fails: cannot be
// reached, or answers too late. Contention is not a failure: a call whose
// update lost races to other writers runs again, until it wins or its
// store timeout ends.
type StoreFailure uint8

// The store failure policies.
const (
	// FailClosed rejects: the call returns a *StoreError and takes
	// nothing it knows of. It is the default.
	FailClosed StoreFailure = iota
	// FailOpen lets the request through, as if the limit were not there,
	// and reports it to the listener. Result.Remaining is then 0.
	FailOpen
	// FailLocal decides on an in-memory limiter of the same policy in this
	// process, which holds each key's state from its first failure on, as
	// if the key were new then. A fleet of n processes may then let n
	// times the limit through.
	FailLocal
)

func (f StoreFailure) String() string {
	switch f {
	case FailClosed:
		return "fail closed"
	case FailOpen:
		return "fail open"
	case FailLocal:
		return "local fallback"
	}
	return fmt.Sprintf("StoreFailure(%d)", uint8(f))
}

// DefaultStoreTimeout bounds each call of a Limiter to its store, from the
// call's start to its answer, unless WithStoreTimeout says otherwise.
const DefaultStoreTimeout = time.Second

// StoreError is a store's failure, as a Limiter that fails closed returns
// it. Err wraps the store's error, which matches (errors.Is) either
// driver.ErrUnavailable (nothing was taken: the store could not be
// reached, refused the call, did not answer within the store timeout
// before anything was sent, or the circuit is open: ErrCircuitOpen) or
// driver.ErrIndeterminate (tokens may have been taken). A store timeout
// also matches context.DeadlineExceeded.
type StoreError struct {
	// Op is the operation, e.g. "Limiter.AllowN".
	Op string
	// Key is the key whose state could not be read or written.
	Key string
	// Err is the store's error.
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("sluice: %s of key %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// StoreListener is a Listener that is also told of store failures and of
// what the limiter did about them. A Limiter tells its listener (see
// WithListener) when it implements StoreListener.
type StoreListener interface {
	Listener
	// OnStoreFailure reports a failed store call and the policy applied.
	OnStoreFailure(err error, f StoreFailure)
	// OnCircuit reports that the limiter's circuit breaker moved to state
	// s (see WithCircuitBreaker). It is called in the order of the
	// changes, with the breaker locked: it must return quickly and not
	// call the limiter.
	OnCircuit(s CircuitState)
}

// WithStore keeps a Limiter's state in s instead of this process's
// memory, so that every process using s shares the limits. NewBucket
// ignores it.
func WithStore(s driver.Store) Option { return func(o *options) { o.store = s } }

// WithMaxKeys bounds the keys an in-memory Limiter (and the local fallback
// of one with a store) holds to n exactly: past it, a new key first drops
// expired ones, then evicts an arbitrary key, which starts afresh when
// next seen (a full bucket, an empty window). The bound is split among
// shards of at least 1024 keys (a bound under 2048 keys has a single
// lock), and a shard may evict while others still have room: the limiter
// never holds more than n keys, and holds n once every shard has filled.
// The default, 0, is no bound beyond expiry.
func WithMaxKeys(n int) Option { return func(o *options) { o.maxKeys = n } }

// WithStoreTimeout bounds each call to the store, end to end: the time it
// waits behind the key's call in flight from this process is included, so
// a call that does not have its answer d after it began fails with a
// store timeout and gets the failure policy's answer. The default is
// DefaultStoreTimeout. A zero or negative d keeps the default.
func WithStoreTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.storeTimeout = d
		}
	}
}

// WithStoreFailure sets what a Limiter with a store does when the store
// fails; the default is FailClosed.
func WithStoreFailure(f StoreFailure) Option { return func(o *options) { o.storeFailure = f } }

// WithInheritance sets how a key's stored state is carried over when the
// limiter's policy changed since it was written (detected by the
// fingerprint stored with it). For token-bucket policies it is the token
// inheritance of ReplaceConfiguration; for other policies Reset drops the
// old state and any other strategy keeps it when the new policy can read
// it (same kind of policy). The default is Proportionally.
func WithInheritance(t TokensInheritance) Option { return func(o *options) { o.inheritance = t } }

// storeKeyed is a Limiter's state in a driver.Store: each key's record
// (see record.go), read, changed and written back in one Update.
//
// Calls for a key that already has a store call in flight from this
// process are coalesced: they queue, and one of them runs the whole queue
// in the next Update, in order, so a hot key costs one round trip per
// batch rather than per call (Bucket4j's batching). Results are those of
// the calls run one after another. Each time the store runs the batch's
// UpdateFunc, which it does again after a lost race, the calls queued
// meanwhile join the batch, so that contention makes batches larger
// rather than queues longer.
//
// Every call has a deadline, its start plus the store timeout, which
// bounds its wait in the queue and the Update that runs it; a batch's
// Update runs until the deadline of its first call, the earliest.
type storeKeyed struct {
	store    driver.Store
	clock    Clock
	timeout  time.Duration
	failure  StoreFailure
	inherit  TokensInheritance
	listener StoreListener // nil when there is none
	local    keyed         // for FailLocal; the in-memory form of the policy

	fp uint64
	// machine runs non-bucket policies; bucket (with encoded and strict)
	// token-bucket policies, whose records carry their configuration.
	machine policy.Erased
	bucket  *tokenbucket.Config
	encoded []byte
	strict  bool
	configs configCache
	// noMigrate keeps a stored configuration as it is: the lazily
	// configured bucket's, whose configuration is only for new keys.
	noMigrate bool
	// createOnRead is set for the buckets of NewStoreBucket, Bucket4j's
	// proxies, which create the state at their first call even when it
	// only reads: the refill of an intervally bandwidth or of initial
	// tokens counts from then. A Limiter's key has no state until a call
	// changes it, as a key without state is a bucket created at the time
	// of the call; reading it then writes nothing.
	createOnRead bool

	breaker *breaker

	seed   maphash.Seed
	shards [shardCount]queueShard
}

type queueShard struct {
	mu       sync.Mutex
	inflight map[string]*[]*call // guarded by mu; the calls waiting behind the key's call in flight
	_        [40]byte
}

// maxBatch bounds the calls one Update runs.
const maxBatch = 256

// A call is one operation waiting for, or running in, an Update.
type call struct {
	// apply computes the operation on rec at now, setting its result in
	// the closure, and returns the new record when it changed. It may run
	// more than once (a store retries after a conflict); the last run
	// counts.
	apply    func(rec []byte, now int64) (next []byte, changed bool)
	err      error
	deadline time.Time     // when the store timeout ends the call
	state    atomic.Int32  // callWaiting, callTaken, callAbandoned
	done     chan struct{} // closed when err and the result are set, or to promote
	batch    *[]*call      // set before done is closed to make this call lead the batch
}

const (
	callWaiting int32 = iota
	callTaken
	callAbandoned
)

// newStoreKeyed returns p's state in o.store; local, when not nil, is the
// in-memory form of p to fall back on (else one is built for FailLocal).
// A nil p is a lazy bucket's, configured later.
func newStoreKeyed(p Policy, o *options, clock Clock, local keyed) (*storeKeyed, error) {
	s := &storeKeyed{
		store:   o.store,
		clock:   clock,
		timeout: o.storeTimeout,
		failure: o.storeFailure,
		inherit: o.inheritance,
		local:   local,
		seed:    maphash.MakeSeed(),
	}
	if s.timeout <= 0 {
		s.timeout = DefaultStoreTimeout
	}
	if s.inherit == 0 {
		s.inherit = Proportionally
	}
	if err := checkStrategy("inheritance", s.inherit); err != nil {
		return nil, err
	}
	if s.failure > FailLocal {
		return nil, &ConfigError{Rule: RuleUnknownStrategy, Bandwidth: -1, Field: "store failure", Value: s.failure.String(),
			Msg: "must be FailClosed, FailOpen or FailLocal"}
	}
	var notify func(CircuitState)
	if l, ok := o.listener.(StoreListener); ok {
		s.listener = l
		notify = l.OnCircuit
	}
	threshold := o.circuitFailures
	if threshold == 0 {
		threshold = DefaultCircuitFailures
	}
	s.breaker = newBreaker(threshold, notify)
	if p == nil { // a lazy bucket, configured at the first key without state
		return s.init(), nil
	}
	if cfg, strict, ok := p.tokenBucket(); ok {
		s.bucket, s.strict = cfg, strict
		s.encoded = encodeConfig(cfg)
		s.fp = fingerprint([]byte("bucket"), s.encoded, []byte{boolByte(strict)})
	} else {
		e, err := p.erased()
		if err != nil {
			return nil, err
		}
		s.machine = e
		s.fp = fingerprint([]byte(p.String()))
	}
	if s.local == nil && s.failure == FailLocal {
		local, err := p.build()
		if err != nil {
			return nil, err
		}
		s.local = local
	}
	return s.init(), nil
}

func (s *storeKeyed) init() *storeKeyed {
	for i := range s.shards {
		s.shards[i].inflight = make(map[string]*[]*call)
	}
	return s
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// ttl is how long the store should keep a record that is worth no more
// than no state from expiresAt on: the time left plus a margin for the
// clocks of other processes, which may lag this one's. 0 means keep it.
func ttl(expiresAt, now int64) time.Duration {
	const margin = int64(time.Second)
	switch {
	case expiresAt >= int64(Never)-margin:
		return 0
	case expiresAt <= now:
		return time.Duration(margin)
	}
	return time.Duration(expiresAt - now + margin)
}

// submit runs c in an Update of key, alone or in a batch with the calls
// queued behind the key's call in flight, and returns the store's error.
// The store timeout bounds the whole call, wait in the queue included.
// When ctx ends while c waits in a queue, c is dropped and submit returns
// ctx.Err(); once c is taken into a batch it waits for the batch, which
// ends by c's deadline. While the circuit is open, submit returns
// ErrCircuitOpen at once.
func (s *storeKeyed) submit(ctx context.Context, key string, c *call) error {
	probe, err := s.breaker.allow()
	if err != nil {
		return err
	}
	defer s.breaker.endProbe(probe)
	c.deadline = time.Now().Add(s.timeout)
	sh := &s.shards[maphash.String(s.seed, key)&(shardCount-1)]
	sh.mu.Lock()
	if q, busy := sh.inflight[key]; busy {
		c.done = make(chan struct{})
		*q = append(*q, c)
		sh.mu.Unlock()
		timer := time.NewTimer(time.Until(c.deadline))
		defer timer.Stop()
		select {
		case <-c.done:
		case <-ctx.Done():
			if c.state.CompareAndSwap(callWaiting, callAbandoned) {
				return ctx.Err()
			}
			<-c.done
		case <-timer.C:
			if c.state.CompareAndSwap(callWaiting, callAbandoned) {
				return s.queueTimeout()
			}
			<-c.done
		}
		if c.batch != nil { // promoted: this call leads the next batch
			s.lead(ctx, key, sh, c.batch)
		}
		return c.err
	}
	q := make([]*call, 0, 4)
	sh.inflight[key] = &q
	sh.mu.Unlock()
	s.lead(ctx, key, sh, &[]*call{c})
	return c.err
}

// queueTimeout is the error of a call whose store timeout ended while it
// waited behind the key's call in flight: nothing of it was sent.
func (s *storeKeyed) queueTimeout() error {
	s.breaker.result(context.DeadlineExceeded)
	return fmt.Errorf("%w: no answer within the store timeout %v, waiting behind the key's call in flight: %w",
		driver.ErrUnavailable, s.timeout, context.DeadlineExceeded)
}

// lead runs batch in one Update, then hands the queue of key to its first
// waiting call, or retires the key's queue when it is empty. (*batch)[0]
// is the calling goroutine's own call. An Update that fails with
// driver.ErrConflict wrote nothing and runs again, after a random
// backoff, until the batch's deadline.
func (s *storeKeyed) lead(ctx context.Context, key string, sh *queueShard, batch *[]*call) {
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), (*batch)[0].deadline)
	fn := func(rec []byte) ([]byte, time.Duration, bool) {
		s.join(key, sh, batch)
		now := s.clock.Now()
		changed := false
		for _, c := range *batch {
			if next, ch := c.apply(rec, now); ch {
				rec, changed = next, true
			}
		}
		if !changed {
			return nil, 0, false
		}
		return rec, ttl(s.expiresAt(rec), now), true
	}
	err := s.store.Update(sctx, key, fn)
	for losses := 1; errors.Is(err, driver.ErrConflict); losses++ {
		if werr := backoff(sctx, losses); werr != nil {
			break
		}
		err = s.store.Update(sctx, key, fn)
	}
	cancel()
	if err != nil && sctx.Err() != nil && !errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, driver.ErrIndeterminate) {
		// A context error as the contract returns it when nothing was
		// written, or the last lost race when the deadline came: the
		// store did not answer within the timeout, nothing was taken.
		err = fmt.Errorf("%w: no answer within the store timeout %v: %w", driver.ErrUnavailable, s.timeout, err)
	}
	s.breaker.result(err)
	for i, c := range *batch {
		c.err = err
		if i > 0 {
			close(c.done)
		}
	}

	sh.mu.Lock()
	q := sh.inflight[key]
	var next []*call
	open := s.breaker.refusing()
	rest := (*q)[:0]
	for _, w := range *q {
		switch {
		case open && w.state.CompareAndSwap(callWaiting, callTaken):
			w.err = ErrCircuitOpen // answered at once; nothing was sent
			close(w.done)
		case len(next) < maxBatch && w.state.CompareAndSwap(callWaiting, callTaken):
			next = append(next, w)
		case w.state.Load() == callWaiting:
			rest = append(rest, w)
		}
	}
	clear((*q)[len(rest):])
	*q = rest
	if len(next) == 0 {
		delete(sh.inflight, key)
	}
	sh.mu.Unlock()
	if len(next) > 0 {
		next[0].batch = &next
		close(next[0].done)
	}
}

// join moves the calls waiting behind key's call in flight into batch, up
// to maxBatch calls in all. It runs in the batch's UpdateFunc, so the
// calls that queued while the store read the key, or while a lost race
// was retried, are decided in the same write.
func (s *storeKeyed) join(key string, sh *queueShard, batch *[]*call) {
	if len(*batch) >= maxBatch {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.inflight[key]
	if q == nil || len(*q) == 0 {
		return
	}
	rest := (*q)[:0]
	for _, w := range *q {
		switch {
		case len(*batch) < maxBatch && w.state.CompareAndSwap(callWaiting, callTaken):
			*batch = append(*batch, w)
		case w.state.Load() == callWaiting:
			rest = append(rest, w)
		}
	}
	clear((*q)[len(rest):])
	*q = rest
}

// backoff waits a random time before the attempt after the given number
// of lost races, longer as they add up (full jitter, at most 10ms), or
// returns ctx's error when it ends first.
func backoff(ctx context.Context, losses int) error {
	ceiling := 10 * time.Millisecond
	if losses < 10 {
		ceiling = min(ceiling, 50*time.Microsecond<<losses)
	}
	t := time.NewTimer(rand.N(ceiling) + 1)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// expiresAt is when rec is worth no more than no state.
func (s *storeKeyed) expiresAt(rec []byte) int64 {
	if s.machine != nil {
		_, st, err := readRecordHeader(rec, recordMachine)
		if err != nil {
			return 0
		}
		return s.machine.ExpiresAt(st)
	}
	r, err := decodeBucketRecord(rec)
	if err != nil {
		return 0
	}
	cfg, err := s.configOf(r.encoded)
	if err != nil {
		return 0
	}
	return tokenbucket.NewKeyed(cfg, s.strict).ExpiresAt(r.state)
}

func (s *storeKeyed) configOf(encoded []byte) (*tokenbucket.Config, error) {
	if bytes.Equal(encoded, s.encoded) {
		return s.bucket, nil
	}
	return s.configs.get(encoded)
}

// machineState returns the policy state in rec: nil for none, an expired
// state, or one of another configuration that the inheritance drops.
func (s *storeKeyed) machineState(rec []byte, now int64) []byte {
	origin, st, err := readRecordHeader(rec, recordMachine)
	if err != nil || (origin != s.fp && s.inherit == Reset) || s.machine.ExpiresAt(st) <= now {
		return nil
	}
	return st
}

func (s *storeKeyed) machineRecord(st []byte) []byte {
	return append(appendRecordHeader(make([]byte, 0, recordHeader+len(st)), recordMachine, s.fp), st...)
}

// loadedBucket is a key's token bucket as read from its record.
type loadedBucket struct {
	cfg     *tokenbucket.Config
	encoded []byte
	origin  uint64
	state   tokenbucket.State
	exists  bool // false: no state, or an expired one
	// migrated is set when the state was carried over to the configured
	// policy, which must then be written even if the operation changes
	// nothing.
	migrated bool
}

// loadBucket reads rec at now, migrating it to s's configuration when it
// was written for another (and s has one: a lazily configured bucket
// passes cfg nil and takes the stored configuration as it is). With
// expire, a state past its ExpiresAt reads as none, as the keyed policies
// want; the bucket API keeps it, since a bucket with initial tokens below
// its capacity is not a new bucket once it has filled up.
func (s *storeKeyed) loadBucket(rec []byte, now int64, expire bool) loadedBucket {
	fresh := loadedBucket{cfg: s.bucket, encoded: s.encoded, origin: s.fp}
	r, err := decodeBucketRecord(rec)
	if err != nil {
		return fresh
	}
	cfg, err := s.configOf(r.encoded)
	if err != nil || len(r.state) != len(cfg.Bandwidths) {
		return fresh
	}
	b := loadedBucket{cfg: cfg, encoded: r.encoded, origin: r.origin, state: r.state, exists: true}
	if s.bucket != nil && r.origin != s.fp && !s.noMigrate {
		b.state = tokenbucket.Replace(cfg, r.state, now, s.bucket, tokenbucket.Strategy(s.inherit))
		b.cfg, b.encoded, b.origin, b.migrated = s.bucket, s.encoded, s.fp, true
	}
	if expire && tokenbucket.NewKeyed(b.cfg, s.strict).ExpiresAt(b.state) <= now {
		b.exists = false // a new bucket of the configuration in force
	}
	return b
}

func (b *loadedBucket) record() []byte {
	return appendBucketRecord(nil, b.origin, b.encoded, b.state)
}

// consume, peek and reserve are the keyed operations on the store; the
// first result is the policy's.

func (s *storeKeyed) consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	var res policy.Result
	err := s.submit(ctx, key, &call{apply: func(rec []byte, now int64) ([]byte, bool) {
		if s.machine != nil {
			var next []byte
			var changed bool
			res, next, changed = s.machine.Consume(s.machineState(rec, now), now, n, nil)
			if !changed {
				return nil, false
			}
			return s.machineRecord(next), true
		}
		b := s.loadBucket(rec, now, true)
		var changed bool
		res, changed = tokenbucket.NewKeyed(b.cfg, s.strict).Consume(&b.state, b.exists, now, n)
		if !changed && !b.migrated {
			return nil, false
		}
		return b.record(), true
	}})
	return res, err
}

func (s *storeKeyed) peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	var res policy.Result
	err := s.submit(ctx, key, &call{apply: func(rec []byte, now int64) ([]byte, bool) {
		if s.machine != nil {
			res = s.machine.Peek(s.machineState(rec, now), now, n)
			return nil, false
		}
		b := s.loadBucket(rec, now, true)
		res = tokenbucket.NewKeyed(b.cfg, s.strict).Peek(&b.state, b.exists, now, n)
		return nil, false
	}})
	return res, err
}

// reserve reserves n tokens for key within maxWait; a granted
// reservation that took something comes with its receipt.
func (s *storeKeyed) reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, *policy.Receipt, error) {
	var res policy.Result
	var rc *policy.Receipt
	err := s.submit(ctx, key, &call{apply: func(rec []byte, now int64) ([]byte, bool) {
		rc = nil
		if s.machine != nil {
			before := s.machineState(rec, now)
			var next []byte
			var changed bool
			res, next, changed = s.machine.Reserve(before, now, n, maxWait, nil)
			if !changed {
				return nil, false
			}
			if res.Allowed {
				rc = newReceipt(now, n, res.Wait, bytes.Clone(before), bytes.Clone(next))
				if res.Wait > 0 {
					res.Remaining = remainingAt(s.machine.Peek(next, rc.Due, 1))
				}
			}
			return s.machineRecord(next), true
		}
		b := s.loadBucket(rec, now, true)
		m := tokenbucket.NewMulti(b.cfg)
		var before []byte
		if b.exists {
			before = m.AppendState(nil, &b.state)
		}
		var changed bool
		k := tokenbucket.NewKeyed(b.cfg, s.strict)
		res, changed = k.Reserve(&b.state, b.exists, now, n, maxWait)
		if changed && res.Allowed {
			rc = newReceipt(now, n, res.Wait, before, m.AppendState(nil, &b.state))
			if res.Wait > 0 {
				res.Remaining = remainingAt(k.Peek(&b.state, true, rc.Due, 1))
			}
		}
		if !changed && !b.migrated {
			return nil, false
		}
		return b.record(), true
	}})
	return res, rc, err
}

// newReceipt is the receipt of a reservation of n tokens at now, due after
// wait, that took the state from before to after.
func newReceipt(now, n, wait int64, before, after []byte) *policy.Receipt {
	return &policy.Receipt{Tokens: n, At: now, Due: policy.SatAdd(now, wait), Before: before, After: after}
}

// cancel gives back the reservation of receipt r for key, at now, as
// policy.Undo does. A record written since by another configuration keeps
// its tokens.
func (s *storeKeyed) cancel(ctx context.Context, key string, now int64, r *policy.Receipt) error {
	return s.submit(ctx, key, &call{apply: func(rec []byte, _ int64) ([]byte, bool) {
		if s.machine != nil {
			origin, st, err := readRecordHeader(rec, recordMachine)
			if err != nil || origin != s.fp {
				return nil, false
			}
			next, changed := s.machine.Cancel(st, now, r, nil)
			if !changed {
				return nil, false
			}
			return s.machineRecord(next), true
		}
		b := s.loadBucket(rec, now, true)
		if b.migrated || b.origin != s.fp || !bytes.Equal(b.encoded, s.encoded) {
			return nil, false
		}
		switch policy.Undo(tokenbucket.NewMulti(b.cfg), &b.state, b.exists, now, r) {
		case policy.Changed:
			return b.record(), true
		case policy.Dropped:
			return appendRecordHeader(nil, recordBucket, 0), true // undecodable: no state
		}
		return nil, false
	}})
}

// reset forgets key: deleted when the store can, else overwritten with no
// state.
func (s *storeKeyed) reset(ctx context.Context, key string) error {
	if d, ok := s.store.(driver.Deleter); ok {
		if s.breaker.open() {
			return ErrCircuitOpen
		}
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		err := d.Delete(sctx, key)
		if !isCallerDone(ctx, err) {
			s.breaker.result(err)
		}
		return err
	}
	return s.submit(ctx, key, &call{apply: func(rec []byte, now int64) ([]byte, bool) {
		if len(rec) == 0 {
			return nil, false
		}
		if s.machine != nil {
			return s.machineRecord(nil), true
		}
		return appendRecordHeader(nil, recordBucket, 0), true // undecodable: no state
	}})
}

// bucketOp runs f on key's token bucket, a new one when the key has none,
// and writes the bucket when f changed it or migrated it, or when it is
// new and s creates state on reads. A lazily configured bucket whose key
// has no state returns errNeedConfig and writes nothing.
func (s *storeKeyed) bucketOp(ctx context.Context, key string, f func(b *loadedBucket, now int64) (changed bool)) error {
	var needConfig bool
	err := s.submit(ctx, key, &call{apply: func(rec []byte, now int64) ([]byte, bool) {
		b := s.loadBucket(rec, now, false)
		if needConfig = !b.exists && b.cfg == nil; needConfig {
			return nil, false
		}
		if !b.exists {
			b.state = tokenbucket.New(b.cfg, now)
			b.migrated = s.createOnRead // Bucket4j creates a bucket at its first call, even one that reads
		}
		if changed := f(&b, now); !changed && !b.migrated {
			return nil, false
		}
		return b.record(), true
	}})
	if err == nil && needConfig {
		err = errNeedConfig
	}
	return err
}

// applyBucket runs f on key's token bucket, created by this call when the
// key has none.
func (s *storeKeyed) applyBucket(ctx context.Context, key string, f bucketFunc) error {
	return s.bucketOp(ctx, key, func(b *loadedBucket, now int64) bool {
		return f(b.cfg, b.state, now)
	})
}

// replaceBucket switches key's bucket to cfg, keeping the record's origin
// so that the limiter's own policy does not migrate it back.
func (s *storeKeyed) replaceBucket(ctx context.Context, key string, cfg *tokenbucket.Config, strategy TokensInheritance) error {
	encoded := encodeConfig(cfg)
	return s.bucketOp(ctx, key, func(b *loadedBucket, now int64) bool {
		b.state = tokenbucket.Replace(b.cfg, b.state, now, cfg, tokenbucket.Strategy(strategy))
		b.cfg, b.encoded = cfg, encoded
		return true
	})
}

// configuration returns the configuration in force for key.
func (s *storeKeyed) configuration(ctx context.Context, key string) (*tokenbucket.Config, error) {
	var cfg *tokenbucket.Config
	err := s.submit(ctx, key, &call{apply: func(rec []byte, now int64) ([]byte, bool) {
		cfg = s.loadBucket(rec, now, false).cfg
		return nil, false
	}})
	if err == nil && cfg == nil {
		err = errNeedConfig
	}
	return cfg, err
}

// failed applies the failure policy to err, a store call's error, and
// reports it. It returns the error to give the caller: nil when the
// policy lets the call go on (open or local), or a *StoreError.
func (s *storeKeyed) failed(op, key string, err error) error {
	if s.listener != nil {
		s.listener.OnStoreFailure(err, s.failure)
	}
	if s.failure == FailClosed {
		return &StoreError{Op: op, Key: key, Err: err}
	}
	return nil
}

// isCallerDone reports whether err is the caller's own context ending,
// which is not a store failure.
func isCallerDone(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}
