package engine

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/lease"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/record"
)

// Leased is a Limiter's keys in a store, decided from leases: each
// key's lease in this process, taken from the store in one update when
// spent or expired.
type Leased struct {
	store  *keyed.Store
	codec  record.Codec
	clock  keyed.Clock
	cfg    lease.Config
	exact  *Stored // the calls that do not lease
	window bool    // a lease ends with its window (a fixed window)

	mu    sync.Mutex
	keys  map[string]*leasedKey // guarded by mu
	sweep int                   // guarded by mu: the len(keys) at which to drop expired leases
}

// leasedKey is one key's lease in this process.
type leasedKey struct {
	mu    sync.Mutex
	lease lease.Lease // guarded by mu
	// shared is the shared state's result at the last store update:
	// Remaining, ResetAfter from at, Limit. Guarded by mu.
	shared policy.Result
	at     int64
	// taking is closed when the store update in flight for this key
	// ends; nil when there is none. Guarded by mu. One update at a time
	// per key: the others wait for its lease rather than each taking one.
	taking chan struct{}
	// refused is the store's last refusal, of need tokens at refusedAt:
	// until its RetryAfter has passed (at most TTL, in case the key is
	// reset), a request that needs as many tokens beyond the lease gets
	// it without a round trip. Guarded by mu.
	refused   policy.Result
	need      int64
	refusedAt int64
}

// refusal is the store's last refusal as it stands at now, for a request
// that needs need tokens beyond the lease, if it still holds.
// refusal requires that k.mu is held.
func (k *leasedKey) refusal(now, need, ttl int64) (policy.Result, bool) {
	if k.need == 0 || need < k.need {
		return policy.Result{}, false
	}
	elapsed := now - k.refusedAt
	if elapsed < 0 || elapsed >= min(k.refused.RetryAfter, ttl) {
		return policy.Result{}, false
	}
	res := k.refused
	if res.RetryAfter != policy.Never {
		res.RetryAfter -= elapsed
	}
	res.ResetAfter = max(0, res.ResetAfter-elapsed)
	res.Remaining = policy.SatAdd(res.Remaining, k.lease.Left(now))
	return res, true
}

// NewLeased returns the keys of s decided from leases of cfg; with window, a
// lease ends with the window it was granted in (a fixed window's).
func NewLeased(s *Stored, cfg lease.Config, window bool) *Leased {
	return &Leased{store: s.Store, codec: s.Codec, clock: s.Clock, cfg: cfg, exact: s, window: window,
		keys: make(map[string]*leasedKey), sweep: 1024}
}

// key returns key's lease, made when missing. Past the sweep mark it
// first drops the leases that hold nothing any more, so that the map
// holds about the keys of the last TTL.
func (s *Leased) key(key string, now int64) *leasedKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[key]
	if ok {
		return k
	}
	if len(s.keys) >= s.sweep {
		for name, k := range s.keys {
			// TryLock: a key in use is kept.
			if k.mu.TryLock() {
				if k.taking == nil && k.lease.Expires() <= now {
					delete(s.keys, name)
				}
				k.mu.Unlock()
			}
		}
		s.sweep = max(1024, 2*len(s.keys))
	}
	k = new(leasedKey)
	s.keys[key] = k
	return k
}

// local is the result of a decision from k's lease at now.
// local requires that k.mu is held.
func (k *leasedKey) local(now int64) policy.Result {
	return policy.Result{
		Allowed:    true,
		Remaining:  policy.SatAdd(k.lease.Left(now), k.shared.Remaining),
		ResetAfter: max(0, k.shared.ResetAfter-(now-k.at)),
		Limit:      k.shared.Limit,
	}
}

func (s *Leased) Consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	if n < 1 {
		return s.exact.Consume(ctx, key, n)
	}
	k := s.key(key, s.clock.Now())
	for {
		k.mu.Lock()
		now := s.clock.Now()
		if k.lease.Spend(now, n) {
			res := k.local(now)
			k.mu.Unlock()
			return res, nil
		}
		if res, ok := k.refusal(now, n-k.lease.Left(now), s.cfg.TTL); ok {
			k.mu.Unlock()
			return res, nil
		}
		if ch := k.taking; ch != nil {
			k.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return policy.Result{}, ctx.Err()
			}
		}
		ch := make(chan struct{})
		k.taking = ch
		left := k.lease.Drain(now)
		want := k.lease.Want(s.cfg, now)
		k.mu.Unlock()
		res, err := s.take(ctx, key, k, n, left, want)
		k.mu.Lock()
		k.taking = nil
		k.mu.Unlock()
		close(ch)
		return res, err
	}
}

// take asks the store for a lease of want tokens and the request's n,
// less left, the tokens of the lease it drained. k.taking is set by the
// caller, so k's lease is this call's to change.
func (s *Leased) take(ctx context.Context, key string, k *leasedKey, n, left, want int64) (policy.Result, error) {
	need := n - left
	res, granted, at, err := s.store.Lease(ctx, key, s.codec, need, want)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil || granted == 0 {
		// The store refused, or failed: the drained tokens are the lease's
		// again, and a refusal says what this process still holds.
		k.lease.Refund(s.clock.Now(), left)
		if err == nil && res.Code == policy.OK {
			k.refused, k.need, k.refusedAt = res, need, at
			res.Remaining = policy.SatAdd(res.Remaining, k.lease.Left(s.clock.Now()))
		}
		return res, err
	}
	k.need = 0
	until := int64(policy.Never)
	if s.window {
		until = policy.SatAdd(at, res.ResetAfter) // the window's end
	}
	k.lease.Grant(s.cfg, at, want, need, granted, until)
	k.shared, k.at = res, at
	return k.local(at), nil
}

func (s *Leased) Peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	if n >= 1 {
		k := s.key(key, s.clock.Now())
		k.mu.Lock()
		now := s.clock.Now()
		if left := k.lease.Left(now); left >= n {
			res := k.local(now)
			res.Remaining = policy.SatAdd(left-n, k.shared.Remaining)
			k.mu.Unlock()
			return res, nil
		}
		k.mu.Unlock()
	}
	return s.exact.Peek(ctx, key, n)
}

func (s *Leased) Reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	return s.exact.Reserve(ctx, key, n, maxWait)
}

// reset drops the key's lease in this process as well as its state in
// the store; other processes' leases run out as they would.
func (s *Leased) Reset(ctx context.Context, key string) error {
	s.mu.Lock()
	delete(s.keys, key)
	s.mu.Unlock()
	return s.exact.Reset(ctx, key)
}
