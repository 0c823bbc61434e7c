package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// CAS is the building block of optimistic stores: a read, and a write that
// succeeds only if the state is still what was read.
type CAS interface {
	// Get returns key's state, or nil when it has none.
	Get(ctx context.Context, key string) ([]byte, error)
	// CompareAndSwap writes next, to be kept at least ttl (0: no expiry),
	// if key's state still equals old, where a nil old means the key must
	// have no state. It reports whether it wrote.
	CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error)
}

// DefaultMaxAttempts is how many times NewCASStore and NewRowLockStore try
// an update before they give up with ErrConflict.
const DefaultMaxAttempts = 8

// StoreOption configures the stores built from the building blocks.
type StoreOption func(*storeOptions)

type storeOptions struct {
	maxAttempts int
}

// WithMaxAttempts bounds the attempts of one update (at least 1; smaller
// values keep the default). A hot key under contention then fails with
// ErrConflict instead of looping without end.
func WithMaxAttempts(n int) StoreOption {
	return func(o *storeOptions) {
		if n >= 1 {
			o.maxAttempts = n
		}
	}
}

func newStoreOptions(opts []StoreOption) storeOptions {
	o := storeOptions{maxAttempts: DefaultMaxAttempts}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// NewCASStore makes a Store of c: each update reads, computes and
// compares-and-swaps, retrying a lost race at most the configured number
// of attempts.
func NewCASStore(c CAS, opts ...StoreOption) Store {
	return &casStore{c: c, o: newStoreOptions(opts)}
}

type casStore struct {
	c CAS
	o storeOptions
}

func (s *casStore) Update(ctx context.Context, key string, fn UpdateFunc) error {
	for range s.o.maxAttempts {
		old, err := s.c.Get(ctx, key)
		if err != nil {
			return err
		}
		next, ttl, changed := fn(old)
		if !changed {
			return nil
		}
		ok, err := s.c.CompareAndSwap(ctx, key, old, next, ttl)
		if err != nil || ok {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: key %q still contended after %d attempts", ErrConflict, key, s.o.maxAttempts)
}

// Locker is the building block of pessimistic stores: a transaction that
// locks a key, reads it, writes it and unlocks it.
type Locker interface {
	// Begin starts a transaction on key.
	Begin(ctx context.Context, key string) (LockedTx, error)
}

// LockedTx is one transaction of a Locker. NewLockStore calls LockAndGet,
// then Create or Update when the state changed, then Unlock and Commit; on
// an error it calls Rollback instead; Release always comes last.
type LockedTx interface {
	// LockAndGet takes key's lock and returns its state, nil when none.
	LockAndGet(ctx context.Context) ([]byte, error)
	// Create writes the state of a key that had none.
	Create(ctx context.Context, state []byte, ttl time.Duration) error
	// Update replaces the key's state.
	Update(ctx context.Context, state []byte, ttl time.Duration) error
	Unlock(ctx context.Context) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Release frees what the transaction holds.
	Release()
}

// NewLockStore makes a Store of l.
func NewLockStore(l Locker) Store { return lockStore{l} }

type lockStore struct{ l Locker }

func (s lockStore) Update(ctx context.Context, key string, fn UpdateFunc) (err error) {
	tx, err := s.l.Begin(ctx, key)
	if err != nil {
		return err
	}
	defer tx.Release()
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}()
	old, err := tx.LockAndGet(ctx)
	if err != nil {
		return err
	}
	if next, ttl, changed := fn(old); changed {
		if old == nil {
			err = tx.Create(ctx, next, ttl)
		} else {
			err = tx.Update(ctx, next, ttl)
		}
		if err != nil {
			return err
		}
	}
	if err := tx.Unlock(ctx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// RowLocker is the building block of SQL stores that lock a row with
// SELECT … FOR UPDATE. A key without a row cannot be locked, so the first
// update inserts an empty row (which a concurrent first update may do
// too) and starts again.
type RowLocker interface {
	// Begin starts a transaction on key.
	Begin(ctx context.Context, key string) (RowTx, error)
}

// RowTx is one transaction of a RowLocker. NewRowLockStore calls
// TryLockAndGet; with no row, TryInsertEmpty and Commit, then a new
// transaction; with a row, Update when the state changed, then Commit. On
// an error it calls Rollback instead; Release always comes last.
type RowTx interface {
	// TryLockAndGet locks key's row and returns its state (nil for an
	// empty row); found is false when there is no row.
	TryLockAndGet(ctx context.Context) (state []byte, found bool, err error)
	// TryInsertEmpty inserts an empty row for key unless one exists.
	TryInsertEmpty(ctx context.Context) error
	// Update replaces the row's state.
	Update(ctx context.Context, state []byte, ttl time.Duration) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Release frees what the transaction holds.
	Release()
}

// NewRowLockStore makes a Store of r.
func NewRowLockStore(r RowLocker, opts ...StoreOption) Store {
	return &rowLockStore{r: r, o: newStoreOptions(opts)}
}

type rowLockStore struct {
	r RowLocker
	o storeOptions
}

func (s *rowLockStore) Update(ctx context.Context, key string, fn UpdateFunc) error {
	for range s.o.maxAttempts {
		done, err := s.attempt(ctx, key, fn)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("%w: no row for key %q after %d attempts", ErrConflict, key, s.o.maxAttempts)
}

// attempt runs one transaction; done is false when it only inserted the
// empty row.
func (s *rowLockStore) attempt(ctx context.Context, key string, fn UpdateFunc) (done bool, err error) {
	tx, err := s.r.Begin(ctx, key)
	if err != nil {
		return false, err
	}
	defer tx.Release()
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}()
	old, found, err := tx.TryLockAndGet(ctx)
	if err != nil {
		return false, err
	}
	if !found {
		if err := tx.TryInsertEmpty(ctx); err != nil {
			return false, err
		}
		return false, tx.Commit(ctx)
	}
	if next, ttl, changed := fn(old); changed {
		if err := tx.Update(ctx, next, ttl); err != nil {
			return false, err
		}
	}
	return true, tx.Commit(ctx)
}
