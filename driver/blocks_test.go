package driver_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// memCAS is an in-memory CAS, with a hook to make writes lose races.
type memCAS struct {
	mu      sync.Mutex
	m       map[string][]byte
	conflix int // the next conflix CompareAndSwaps fail as if another writer won
	writes  int
}

func (c *memCAS) Get(_ context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.m[key]), nil
}

func (c *memCAS) CompareAndSwap(_ context.Context, key string, old, next []byte, _ time.Duration) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conflix > 0 {
		c.conflix--
		return false, nil
	}
	cur, ok := c.m[key]
	if (old == nil) == ok || !bytes.Equal(cur, old) {
		return false, nil
	}
	c.m[key] = bytes.Clone(next)
	c.writes++
	return true, nil
}

// memLocker is an in-memory Locker: one mutex per key.
type memLocker struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
	m     map[string][]byte
	log   []string
	fail  string // the step that fails once, e.g. "Update"
}

func (l *memLocker) Begin(_ context.Context, key string) (driver.LockedTx, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks[key] == nil {
		l.locks[key] = new(sync.Mutex)
	}
	return &memLockedTx{l: l, key: key, lock: l.locks[key]}, nil
}

type memLockedTx struct {
	l       *memLocker
	key     string
	lock    *sync.Mutex
	locked  bool
	pending []byte
	write   bool
}

func (tx *memLockedTx) step(name string) error {
	tx.l.mu.Lock()
	defer tx.l.mu.Unlock()
	tx.l.log = append(tx.l.log, name)
	if tx.l.fail == name {
		tx.l.fail = ""
		return errors.New(name + " failed")
	}
	return nil
}

func (tx *memLockedTx) LockAndGet(context.Context) ([]byte, error) {
	tx.lock.Lock()
	tx.locked = true
	if err := tx.step("LockAndGet"); err != nil {
		return nil, err
	}
	tx.l.mu.Lock()
	defer tx.l.mu.Unlock()
	return bytes.Clone(tx.l.m[tx.key]), nil
}

func (tx *memLockedTx) Create(_ context.Context, s []byte, _ time.Duration) error {
	tx.pending, tx.write = bytes.Clone(s), true
	return tx.step("Create")
}

func (tx *memLockedTx) Update(_ context.Context, s []byte, _ time.Duration) error {
	tx.pending, tx.write = bytes.Clone(s), true
	return tx.step("Update")
}

func (tx *memLockedTx) Unlock(context.Context) error { return tx.step("Unlock") }

func (tx *memLockedTx) Commit(context.Context) error {
	if err := tx.step("Commit"); err != nil {
		return err
	}
	if tx.write {
		tx.l.mu.Lock()
		tx.l.m[tx.key] = tx.pending
		tx.l.mu.Unlock()
	}
	return nil
}

func (tx *memLockedTx) Rollback(context.Context) error { return tx.step("Rollback") }

func (tx *memLockedTx) Release() {
	_ = tx.step("Release")
	if tx.locked {
		tx.lock.Unlock()
	}
}

// memRows is an in-memory RowLocker: rows may be absent, empty or full.
type memRows struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	rows    map[string][]byte // present key: a row; nil value: an empty row
	inserts int
}

func (r *memRows) Begin(_ context.Context, key string) (driver.RowTx, error) {
	return &memRowTx{r: r, key: key}, nil
}

type memRowTx struct {
	r       *memRows
	key     string
	lock    *sync.Mutex
	pending []byte
	write   bool
}

func (tx *memRowTx) TryLockAndGet(context.Context) ([]byte, bool, error) {
	tx.r.mu.Lock()
	_, found := tx.r.rows[tx.key]
	if !found {
		tx.r.mu.Unlock()
		return nil, false, nil
	}
	lock := tx.r.locks[tx.key]
	tx.r.mu.Unlock()
	lock.Lock()
	tx.lock = lock
	tx.r.mu.Lock()
	defer tx.r.mu.Unlock()
	return bytes.Clone(tx.r.rows[tx.key]), true, nil
}

func (tx *memRowTx) TryInsertEmpty(context.Context) error {
	tx.r.mu.Lock()
	defer tx.r.mu.Unlock()
	if _, ok := tx.r.rows[tx.key]; !ok {
		tx.r.rows[tx.key] = nil
		tx.r.locks[tx.key] = new(sync.Mutex)
		tx.r.inserts++
	}
	return nil
}

func (tx *memRowTx) Update(_ context.Context, s []byte, _ time.Duration) error {
	tx.pending, tx.write = bytes.Clone(s), true
	return nil
}

func (tx *memRowTx) Commit(context.Context) error {
	if tx.write {
		tx.r.mu.Lock()
		tx.r.rows[tx.key] = tx.pending
		tx.r.mu.Unlock()
	}
	return nil
}

func (tx *memRowTx) Rollback(context.Context) error { return nil }

func (tx *memRowTx) Release() {
	if tx.lock != nil {
		tx.lock.Unlock()
	}
}

// increment is an UpdateFunc that counts in decimal.
func increment(state []byte) ([]byte, time.Duration, bool) {
	n := 0
	if state != nil {
		n, _ = strconv.Atoi(string(state))
	}
	return []byte(strconv.Itoa(n + 1)), time.Minute, true
}

func stores() map[string]func() (driver.Store, func(key string) string) {
	return map[string]func() (driver.Store, func(string) string){
		"cas": func() (driver.Store, func(string) string) {
			c := &memCAS{m: map[string][]byte{}}
			return driver.NewCASStore(c, driver.WithMaxAttempts(1000)), func(k string) string { return string(c.m[k]) }
		},
		"lock": func() (driver.Store, func(string) string) {
			l := &memLocker{locks: map[string]*sync.Mutex{}, m: map[string][]byte{}}
			return driver.NewLockStore(l), func(k string) string { return string(l.m[k]) }
		},
		"rowlock": func() (driver.Store, func(string) string) {
			r := &memRows{locks: map[string]*sync.Mutex{}, rows: map[string][]byte{}}
			return driver.NewRowLockStore(r), func(k string) string { return string(r.rows[k]) }
		},
	}
}

// TestConcurrentIncrements: many goroutines on one key lose no update.
func TestConcurrentIncrements(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			s, get := newStore()
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 100 {
						if err := s.Update(context.Background(), "hot", increment); err != nil {
							t.Errorf("Update: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			if got := get("hot"); got != "800" {
				t.Errorf("after 800 concurrent increments the state is %q, want 800", got)
			}
		})
	}
}

func TestUnchangedIsNotWritten(t *testing.T) {
	c := &memCAS{m: map[string][]byte{"k": []byte("1")}}
	s := driver.NewCASStore(c)
	err := s.Update(context.Background(), "k", func(state []byte) ([]byte, time.Duration, bool) { return state, 0, false })
	if err != nil || c.writes != 0 {
		t.Errorf("Update without a change = %v with %d writes, want nil and 0", err, c.writes)
	}
}

func TestCASGivesUpWithErrConflict(t *testing.T) {
	c := &memCAS{m: map[string][]byte{}, conflix: 3}
	s := driver.NewCASStore(c, driver.WithMaxAttempts(3))
	if err := s.Update(context.Background(), "k", increment); !errors.Is(err, driver.ErrConflict) {
		t.Fatalf("Update after 3 lost races = %v, want ErrConflict", err)
	}
	if c.m["k"] != nil {
		t.Errorf("state = %q after giving up, want none", c.m["k"])
	}
	if err := driver.NewCASStore(c, driver.WithMaxAttempts(3)).Update(context.Background(), "k", increment); err != nil {
		t.Errorf("Update once the races stop = %v", err)
	}
}

func TestLockStoreSteps(t *testing.T) {
	tests := []struct {
		name string
		init map[string][]byte
		fail string
		want []string
		err  bool
	}{
		{"create", nil, "", []string{"LockAndGet", "Create", "Unlock", "Commit", "Release"}, false},
		{"update", map[string][]byte{"k": []byte("1")}, "", []string{"LockAndGet", "Update", "Unlock", "Commit", "Release"}, false},
		{"failed write rolls back", nil, "Create", []string{"LockAndGet", "Create", "Rollback", "Release"}, true},
		{"failed commit rolls back", nil, "Commit", []string{"LockAndGet", "Create", "Unlock", "Commit", "Rollback", "Release"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &memLocker{locks: map[string]*sync.Mutex{}, m: map[string][]byte{}, fail: tt.fail}
			for k, v := range tt.init {
				l.m[k] = v
			}
			err := driver.NewLockStore(l).Update(context.Background(), "k", increment)
			if (err != nil) != tt.err {
				t.Errorf("Update = %v, want error %v", err, tt.err)
			}
			if !slices.Equal(l.log, tt.want) {
				t.Errorf("steps = %v, want %v", l.log, tt.want)
			}
		})
	}
}

func TestRowLockStoreInsertsTheFirstRow(t *testing.T) {
	r := &memRows{locks: map[string]*sync.Mutex{}, rows: map[string][]byte{}}
	s := driver.NewRowLockStore(r)
	for range 3 {
		if err := s.Update(context.Background(), "k", increment); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(r.rows["k"]); got != "3" || r.inserts != 1 {
		t.Errorf("state %q after %d inserts, want 3 after 1", got, r.inserts)
	}
}
