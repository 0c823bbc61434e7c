//go:build unix && !aix && !solaris

package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// Store keeps rate-limit state in a directory, one pair of files per key.
// It is safe for concurrent use by goroutines and by processes sharing
// the directory.
type Store struct {
	dir string
	s   driver.Store // driver.NewLockStore(locker{dir})
}

var (
	_ driver.Store   = (*Store)(nil)
	_ driver.Deleter = (*Store)(nil)
)

// New returns a store in dir, creating it (mode 0700) if needed.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("filestore: dir must not be empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	return &Store{dir: dir, s: driver.NewLockStore(locker{dir})}, nil
}

// Update atomically reads key's state, calls fn and writes its result
// when it changed, as driver.Store requires.
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return s.s.Update(ctx, key, fn)
}

// Delete removes key's state at once; a key without state is no error.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.remove(ctx, fileName(key), false)
}

// DeleteExpired removes the expired states in the directory, one key at a
// time under its lock.
func (s *Store) DeleteExpired(ctx context.Context) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("filestore: %w: %w", driver.ErrUnavailable, err)
	}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".state"); ok {
			if err := s.remove(ctx, name, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove locks the key whose files are named name and removes its state:
// all of it, or only an expired one (which reading removes).
func (s *Store) remove(ctx context.Context, name string, expiredOnly bool) error {
	t, err := locker{s.dir}.begin(ctx, name)
	if err != nil {
		return err
	}
	defer t.Release()
	if _, err := t.LockAndGet(ctx); err != nil {
		return err
	}
	if !expiredOnly {
		if err := os.Remove(t.path(".state")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("filestore: %w: %w", driver.ErrUnavailable, err)
		}
	}
	return t.Unlock(ctx)
}

// fileName returns the base name of key's files.
func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// locker is the driver.Locker of a directory.
type locker struct{ dir string }

func (l locker) Begin(ctx context.Context, key string) (driver.LockedTx, error) {
	return l.begin(ctx, fileName(key))
}

// begin opens (creating it) the lock file of the key named name.
func (l locker) begin(ctx context.Context, name string) (*tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := &tx{dir: l.dir, name: name}
	f, err := os.OpenFile(t.path(".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w: %w", driver.ErrUnavailable, err)
	}
	t.lock = f
	return t, nil
}

// tx is a transaction on one key; lock is its open lock file.
type tx struct {
	dir, name string
	lock      *os.File
}

func (t *tx) path(suffix string) string { return filepath.Join(t.dir, t.name+suffix) }

// maxPoll is the longest sleep between two tries for a busy lock.
const maxPoll = 4 * time.Millisecond

// LockAndGet takes the key's flock, polling until ctx ends, and reads its
// state. It removes an expired state, which reads as nil.
func (t *tx) LockAndGet(ctx context.Context) ([]byte, error) {
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, maxPoll) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		err := syscall.Flock(int(t.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			return nil, fmt.Errorf("filestore: %w: flock: %w", driver.ErrUnavailable, err)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
	b, err := os.ReadFile(t.path(".state"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("filestore: %w: %w", driver.ErrUnavailable, err)
	case len(b) < 8:
		return nil, fmt.Errorf("filestore: %w: %s has %d bytes, want at least 8", driver.ErrUnavailable, t.path(".state"), len(b))
	}
	if exp := int64(binary.BigEndian.Uint64(b)); exp != 0 && exp <= time.Now().UnixNano() {
		os.Remove(t.path(".state")) // best effort: the next write replaces it anyway
		return nil, nil
	}
	return b[8:], nil
}

// Create writes the state of a key that had none, as Update does.
func (t *tx) Create(ctx context.Context, state []byte, ttl time.Duration) error {
	return t.Update(ctx, state, ttl)
}

// Update writes the expiry and state to a temporary file and renames it
// over the state file. Until the rename nothing is written, and a failed
// rename leaves the old state, so every error wraps driver.ErrUnavailable.
// The expiry is now plus ttl in Unix nanoseconds, saturating at
// math.MaxInt64 (the year 2262); a ttl ≤ 0 means none.
func (t *tx) Update(ctx context.Context, state []byte, ttl time.Duration) error {
	var exp int64
	if now := time.Now().UnixNano(); ttl > 0 {
		exp = now + min(int64(ttl), math.MaxInt64-now)
	}
	f, err := os.CreateTemp(t.dir, t.name+".tmp*")
	if err != nil {
		return fmt.Errorf("filestore: %w: %w", driver.ErrUnavailable, err)
	}
	_, err = f.Write(append(binary.BigEndian.AppendUint64(nil, uint64(exp)), state...))
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(f.Name(), t.path(".state"))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("filestore: %w: %w", driver.ErrUnavailable, err)
	}
	return nil
}

// Unlock releases the flock. It ignores an error, since the state is
// already written and Release's close drops the lock anyway.
func (t *tx) Unlock(ctx context.Context) error {
	syscall.Flock(int(t.lock.Fd()), syscall.LOCK_UN)
	return nil
}

// Commit does nothing: the rename in Update was the commit.
func (t *tx) Commit(ctx context.Context) error { return nil }

// Rollback does nothing: a failed Update left the old state file in
// place, and Release drops the lock by closing the lock file.
func (t *tx) Rollback(ctx context.Context) error { return nil }

// Release closes the lock file, which releases a flock still held.
func (t *tx) Release() { t.lock.Close() }
