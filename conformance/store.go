package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Store is the Target of buckets and limiters that keep their state in a
// driver.Store: every case runs on keys of its own, so one store serves a
// whole run. Its buckets implement BlockingBucket.
type Store struct {
	// TargetName names the target in reports, e.g. "redis".
	TargetName string
	// Store keeps the state.
	Store driver.Store
	// Options are added to every bucket and limiter, e.g. a store timeout.
	Options []sluice.Option
}

var _ LimiterTarget = Store{}

// Name returns s.TargetName, or "store".
func (s Store) Name() string {
	if s.TargetName == "" {
		return "store"
	}
	return s.TargetName
}

// NewBucket returns the bucket of a new key of a sluice.Limiter of
// sluice.BucketPolicy(cfg) on s.Store.
func (s Store) NewBucket(ctx context.Context, cfg sluice.BucketConfig, clock sluice.Clock) (Bucket, error) {
	opts := append([]sluice.Option{sluice.WithClock(clock), sluice.WithStore(s.Store)}, s.Options...)
	l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), opts...)
	if err != nil {
		return nil, err
	}
	b, err := l.Bucket(newKey())
	if err != nil {
		return nil, err
	}
	// A key's bucket is created by its first call, as Bucket4j's proxy
	// does; the vectors' bucket exists from the case's start, as a local
	// bucket does.
	if _, err := b.AvailableTokens(ctx); err != nil {
		return nil, err
	}
	return storeBucket{b}, nil
}

// NewLimiter returns a sluice.Limiter on s.Store whose keys are prefixed
// by a prefix of its own.
func (s Store) NewLimiter(_ context.Context, p sluice.Policy, clock sluice.Clock) (Limiter, error) {
	opts := append([]sluice.Option{sluice.WithClock(clock), sluice.WithStore(s.Store)}, s.Options...)
	l, err := sluice.NewLimiter(p, opts...)
	if err != nil {
		return nil, err
	}
	return prefixed{l: l, prefix: newKey() + ":"}, nil
}

// newKey returns a key no other case uses, in this run or an earlier one
// on the same store.
func newKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "conformance:" + hex.EncodeToString(b[:])
}

type prefixed struct {
	l      *sluice.Limiter
	prefix string
}

func (p prefixed) AllowN(ctx context.Context, key string, n int64) (sluice.Result, error) {
	return p.l.AllowN(ctx, p.prefix+key, n)
}

func (p prefixed) ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*sluice.Reservation, error) {
	return p.l.ReserveN(ctx, p.prefix+key, n, maxWait)
}

func (p prefixed) Reset(ctx context.Context, key string) error { return p.l.Reset(ctx, p.prefix+key) }

var _ DebtLimiter = prefixed{}

func (p prefixed) Charge(ctx context.Context, key string, n int64) (sluice.Cost, error) {
	return p.l.Charge(ctx, p.prefix+key, n)
}

func (p prefixed) Hold(ctx context.Context, key string, n int64, ttl time.Duration) (sluice.Cost, error) {
	return p.l.Hold(ctx, p.prefix+key, n, ttl)
}

// Settle takes a hold's ID, which names its prefixed key already.
func (p prefixed) Settle(ctx context.Context, id string, n int64) (sluice.Cost, error) {
	return p.l.Settle(ctx, id, n)
}

func (p prefixed) Debt(ctx context.Context, key string) (sluice.Cost, error) {
	return p.l.Debt(ctx, p.prefix+key)
}

var _ SlotLimiter = prefixed{}

// The slot operations keep the slot's key as the limiter has it, with the
// prefix: a Slot goes back to the limiter as Acquire returned it.

func (p prefixed) Acquire(ctx context.Context, key string, ttl, maxWait time.Duration) (sluice.Slot, error) {
	return p.l.Acquire(ctx, p.prefix+key, ttl, maxWait)
}

func (p prefixed) Release(ctx context.Context, s sluice.Slot) (sluice.Slot, error) {
	return p.l.Release(ctx, s)
}

func (p prefixed) Renew(ctx context.Context, s sluice.Slot) (sluice.Slot, error) {
	return p.l.Renew(ctx, s)
}

// storeBucket adds TryConsume to a *sluice.KeyBucket, which has every
// other method of BlockingBucket already.
type storeBucket struct{ *sluice.KeyBucket }

var _ BlockingBucket = storeBucket{}

// TryConsume is AllowN's decision: a KeyBucket has no boolean shortcut.
func (b storeBucket) TryConsume(ctx context.Context, n int64) (bool, error) {
	r, err := b.AllowN(ctx, n)
	return r.Allowed, err
}
