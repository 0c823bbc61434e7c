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
	gets    int // calls of Get
	cass    int // calls of CompareAndSwap
}

func (c *memCAS) Get(_ context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets++
	return bytes.Clone(c.m[key]), nil
}

func (c *memCAS) CompareAndSwap(_ context.Context, key string, old, next []byte, _ time.Duration) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cass++
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
		"cas+cache": func() (driver.Store, func(string) string) {
			c := &memCAS{m: map[string][]byte{}}
			return driver.NewCASStore(c, driver.WithMaxAttempts(1000), driver.WithStateCache(4)), func(k string) string { return string(c.m[k]) }
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

// TestCASOutlastsContention: by default an update keeps trying past any
// count of lost races (here 50, where the old default gave up after 8)
// and wins once they stop; only its context ends it, and then with the
// context's error and nothing written.
func TestCASOutlastsContention(t *testing.T) {
	c := &memCAS{m: map[string][]byte{}, conflix: 50}
	if err := driver.NewCASStore(c).Update(context.Background(), "k", increment); err != nil {
		t.Fatalf("Update after 50 lost races = %v, want nil", err)
	}
	if got := string(c.m["k"]); got != "1" {
		t.Errorf("state = %q, want 1", got)
	}
	c = &memCAS{m: map[string][]byte{}, conflix: 1 << 30}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := driver.NewCASStore(c).Update(ctx, "k", increment)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrIndeterminate) {
		t.Errorf("Update that never wins = %v, want context.DeadlineExceeded", err)
	}
	if c.m["k"] != nil {
		t.Errorf("state = %q after the context ended, want none", c.m["k"])
	}
}

// swapReaderCAS is a memCAS that returns the current state of a lost race.
type swapReaderCAS struct{ *memCAS }

func (c swapReaderCAS) CompareAndSwapRead(ctx context.Context, key string, old, next []byte, ttl time.Duration) ([]byte, bool, error) {
	ok, err := c.CompareAndSwap(ctx, key, old, next, ttl)
	if ok || err != nil {
		return nil, ok, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.m[key]), false, nil
}

// TestCASSwapReaderSkipsGet: with a SwapReader, a lost race costs no Get.
func TestCASSwapReaderSkipsGet(t *testing.T) {
	c := &memCAS{m: map[string][]byte{"k": []byte("5")}}
	s := driver.NewCASStore(swapReaderCAS{c}, driver.WithStateCache(4))
	if err := s.Update(context.Background(), "k", increment); err != nil { // caches 6
		t.Fatal(err)
	}
	c.m["k"] = []byte("10") // another process wrote
	c.gets = 0
	if err := s.Update(context.Background(), "k", increment); err != nil {
		t.Fatal(err)
	}
	if got := string(c.m["k"]); got != "11" {
		t.Errorf("state = %q, want 11", got)
	}
	if c.gets != 0 {
		t.Errorf("%d Gets after a lost race of a SwapReader, want 0", c.gets)
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

// set writes key's state as another process would, behind the stores'
// backs.
func (c *memCAS) set(key, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = []byte(state)
}

// calls returns how many Gets and CompareAndSwaps c has served, and resets
// the counts.
func (c *memCAS) calls() (gets, cass int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gets, cass = c.gets, c.cass
	c.gets, c.cass = 0, 0
	return gets, cass
}

// delCAS is a memCAS that can delete keys.
type delCAS struct{ *memCAS }

func (c delCAS) Delete(_ context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
	return nil
}

// unchanged is an UpdateFunc that decides to write nothing, and records
// the states it saw.
type unchanged struct{ seen []string }

func (u *unchanged) fn(state []byte) ([]byte, time.Duration, bool) {
	u.seen = append(u.seen, string(state))
	return nil, 0, false
}

func mustUpdate(t *testing.T, s driver.Store, key string, fn driver.UpdateFunc) {
	t.Helper()
	if err := s.Update(context.Background(), key, fn); err != nil {
		t.Fatalf("Update(%q) = %v", key, err)
	}
}

// TestCASRoundTrips counts the calls of ten increments of one key, then
// of one decision that changes nothing.
func TestCASRoundTrips(t *testing.T) {
	tests := []struct {
		name           string
		opts           []driver.StoreOption
		gets, cass     int // for the ten increments
		unchangedGets  int
		unchangedCalls int
	}{
		{"no cache", nil, 10, 10, 1, 1},
		{"cache off", []driver.StoreOption{driver.WithStateCache(0)}, 10, 10, 1, 1},
		{"cache", []driver.StoreOption{driver.WithStateCache(100)}, 1, 10, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &memCAS{m: map[string][]byte{}}
			s := driver.NewCASStore(c, tt.opts...)
			for range 10 {
				mustUpdate(t, s, "k", increment)
			}
			if gets, cass := c.calls(); gets != tt.gets || cass != tt.cass {
				t.Errorf("10 increments made %d Gets and %d CompareAndSwaps, want %d and %d", gets, cass, tt.gets, tt.cass)
			}
			if got := string(c.m["k"]); got != "10" {
				t.Errorf("state = %q, want 10", got)
			}
			var u unchanged
			mustUpdate(t, s, "k", u.fn)
			if gets, cass := c.calls(); gets != tt.unchangedGets || cass != 0 || len(u.seen) != tt.unchangedCalls {
				t.Errorf("an unchanged decision made %d Gets, %d CompareAndSwaps and %d calls of fn, want %d, 0 and %d",
					gets, cass, len(u.seen), tt.unchangedGets, tt.unchangedCalls)
			}
		})
	}
}

// TestCASStaleCache: another writer changes a key whose state the store
// has cached.
func TestCASStaleCache(t *testing.T) {
	c := &memCAS{m: map[string][]byte{}}
	s := driver.NewCASStore(c, driver.WithStateCache(100))
	mustUpdate(t, s, "k", increment) // caches 1
	c.set("k", "5")
	c.calls()

	mustUpdate(t, s, "k", increment)
	if got := string(c.m["k"]); got != "6" {
		t.Errorf("increment after another writer set 5 left %q, want 6", got)
	}
	if gets, cass := c.calls(); gets != 1 || cass != 2 {
		t.Errorf("increment on a stale cache made %d Gets and %d CompareAndSwaps, want 1 and 2", gets, cass)
	}

	// An unchanged decision on stale bytes runs again on the current ones.
	c.set("k", "9")
	var u unchanged
	mustUpdate(t, s, "k", u.fn)
	if want := []string{"6", "9"}; !slices.Equal(u.seen, want) {
		t.Errorf("unchanged decision on a stale cache saw %q, want %q", u.seen, want)
	}
	if gets, cass := c.calls(); gets != 1 || cass != 0 {
		t.Errorf("unchanged decision on a stale cache made %d Gets and %d CompareAndSwaps, want 1 and 0", gets, cass)
	}
	// It cached the current state: the next increment needs no Get.
	mustUpdate(t, s, "k", increment)
	if gets, cass := c.calls(); gets != 0 || cass != 1 || string(c.m["k"]) != "10" {
		t.Errorf("increment after refresh made %d Gets and %d CompareAndSwaps to %q, want 0, 1 and 10", gets, cass, c.m["k"])
	}

	// A key deleted behind the store's back is a stale entry too.
	delete(c.m, "k")
	mustUpdate(t, s, "k", increment)
	if got := string(c.m["k"]); got != "1" {
		t.Errorf("increment of a vanished key left %q, want 1", got)
	}
}

// TestCASStateCacheGivesUpWithErrConflict: lost races stay bounded with a
// cache.
func TestCASStateCacheGivesUpWithErrConflict(t *testing.T) {
	c := &memCAS{m: map[string][]byte{}}
	s := driver.NewCASStore(c, driver.WithMaxAttempts(3), driver.WithStateCache(10))
	mustUpdate(t, s, "k", increment)
	c.calls()
	c.conflix = 3
	if err := s.Update(context.Background(), "k", increment); !errors.Is(err, driver.ErrConflict) {
		t.Fatalf("Update after 3 lost races = %v, want ErrConflict", err)
	}
	if gets, cass := c.calls(); gets != 2 || cass != 3 {
		t.Errorf("3 lost races made %d Gets and %d CompareAndSwaps, want 2 and 3", gets, cass)
	}
	mustUpdate(t, s, "k", increment)
	if got := string(c.m["k"]); got != "2" {
		t.Errorf("state = %q, want 2", got)
	}
}

// TestCASStateCacheCopies: the cache keeps neither the caller's next nor
// hands out its own memory.
func TestCASStateCacheCopies(t *testing.T) {
	c := &memCAS{m: map[string][]byte{}}
	s := driver.NewCASStore(c, driver.WithStateCache(10))
	buf := []byte("abc")
	mustUpdate(t, s, "k", func([]byte) ([]byte, time.Duration, bool) { return buf, 0, true })
	buf[0] = 'X'
	mustUpdate(t, s, "k", func(state []byte) ([]byte, time.Duration, bool) {
		if string(state) != "abc" {
			t.Errorf("state = %q, want abc", state)
		}
		state[0] = 'Y' // scribbles on what it was given
		return nil, 0, false
	})
	var u unchanged
	mustUpdate(t, s, "k", u.fn)
	if !slices.Equal(u.seen, []string{"abc"}) {
		t.Errorf("after the caller changed its buffers, fn saw %q, want [abc]", u.seen)
	}
}

// TestCASStateCacheBounded: a cache of n entries serves at most n of 100
// keys.
func TestCASStateCacheBounded(t *testing.T) {
	for _, entries := range []int{1, 10, 70, 100} {
		t.Run(strconv.Itoa(entries), func(t *testing.T) {
			c := &memCAS{m: map[string][]byte{}}
			s := driver.NewCASStore(c, driver.WithStateCache(entries))
			for i := range 100 {
				mustUpdate(t, s, strconv.Itoa(i), increment)
			}
			c.calls()
			for i := 99; i >= 0; i-- { // the last written first, so some hit
				mustUpdate(t, s, strconv.Itoa(i), increment)
			}
			gets, _ := c.calls()
			if hits := 100 - gets; hits > entries || hits < 1 {
				t.Errorf("WithStateCache(%d): %d of 100 keys came from the cache, want 1 to %d", entries, hits, entries)
			}
		})
	}
}

// TestCASStateCacheConcurrent runs increments of many keys from many
// goroutines through a cache smaller than the keys, with another store
// writing the same keys.
func TestCASStateCacheConcurrent(t *testing.T) {
	c := &memCAS{m: map[string][]byte{}}
	a := driver.NewCASStore(c, driver.WithMaxAttempts(1000), driver.WithStateCache(5))
	b := driver.NewCASStore(c, driver.WithMaxAttempts(1000), driver.WithStateCache(50))
	var wg sync.WaitGroup
	for g := range 8 {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Go(func() {
			var u unchanged
			for i := range 200 {
				key := strconv.Itoa(i % 20)
				if err := s.Update(context.Background(), key, increment); err != nil {
					t.Errorf("Update: %v", err)
					return
				}
				if err := s.Update(context.Background(), key, u.fn); err != nil {
					t.Errorf("Update: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range 20 {
		if got := string(c.m[strconv.Itoa(i)]); got != "80" {
			t.Errorf("key %d = %q after 80 increments", i, got)
		}
	}
}

func TestCASStoreDelete(t *testing.T) {
	if _, ok := driver.NewCASStore(&memCAS{m: map[string][]byte{}}).(driver.Deleter); ok {
		t.Errorf("NewCASStore of a CAS without Delete is a Deleter")
	}
	c := delCAS{&memCAS{m: map[string][]byte{}}}
	s := driver.NewCASStore(c, driver.WithStateCache(10))
	d, ok := s.(driver.Deleter)
	if !ok {
		t.Fatalf("NewCASStore of a Deleter is not a Deleter")
	}
	mustUpdate(t, s, "k", increment)
	mustUpdate(t, s, "k", increment)
	if err := d.Delete(context.Background(), "k"); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	c.calls()
	var u unchanged
	mustUpdate(t, s, "k", u.fn)
	if gets, _ := c.calls(); gets != 1 || !slices.Equal(u.seen, []string{""}) {
		t.Errorf("after Delete, an update made %d Gets and saw %q, want 1 and no state", gets, u.seen)
	}
	mustUpdate(t, s, "k", increment)
	if got := string(c.m["k"]); got != "1" {
		t.Errorf("state = %q after Delete and an increment, want 1", got)
	}
}

// slowCAS is a memCAS on a slow server: each call takes d, and the
// compare-and-swaps of a key run one at a time, as a store serializes the
// writes of one key.
type slowCAS struct {
	*memCAS
	d      time.Duration
	server sync.Mutex // one write at a time
}

func (c *slowCAS) Get(ctx context.Context, key string) ([]byte, error) {
	time.Sleep(c.d)
	return c.memCAS.Get(ctx, key)
}

func (c *slowCAS) CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error) {
	c.server.Lock()
	defer c.server.Unlock()
	time.Sleep(c.d)
	return c.memCAS.CompareAndSwap(ctx, key, old, next, ttl)
}

// TestCASContentionOnASlowStore: writers that lose races on a store whose
// calls take milliseconds back off in proportion to that time, so that a
// success costs a few attempts, not one per writer. With a backoff of at
// most 5ms whatever the store's speed, 16 writers on a store of 2ms per
// call made about 12 attempts per success (and dynalite's one-key suite
// took over a minute under load).
func TestCASContentionOnASlowStore(t *testing.T) {
	const writers, each = 16, 10
	c := &slowCAS{memCAS: &memCAS{m: map[string][]byte{}}, d: 2 * time.Millisecond}
	s := driver.NewCASStore(c)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if err := s.Update(context.Background(), "k", increment); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, want := string(c.m["k"]), strconv.Itoa(writers*each); got != want {
		t.Fatalf("state = %q, want %s", got, want)
	}
	perSuccess := float64(c.cass) / (writers * each)
	t.Logf("%d compare-and-swaps for %d successes: %.2f each", c.cass, writers*each, perSuccess)
	if perSuccess > 6 {
		t.Errorf("%.2f compare-and-swaps per success, want at most 6", perSuccess)
	}
}

// TestCASPromptExpiry: with WithPromptExpiry, a cached state past the ttl
// it was written with is taken for none, which costs one compare-and-swap
// when the store did expire it, and stays right when it did not.
func TestCASPromptExpiry(t *testing.T) {
	const ttl = time.Millisecond
	shortLived := func(state []byte) ([]byte, time.Duration, bool) {
		next, _, changed := increment(state)
		return next, ttl, changed
	}
	tests := []struct {
		name       string
		opts       []driver.StoreOption
		expired    bool // the store deleted the state at its ttl
		gets, cass int
		want       string
	}{
		{"expired, guessed", []driver.StoreOption{driver.WithStateCache(10), driver.WithPromptExpiry()}, true, 0, 1, "1"},
		{"expired, not guessed", []driver.StoreOption{driver.WithStateCache(10)}, true, 1, 2, "1"},
		{"kept longer, guessed wrong", []driver.StoreOption{driver.WithStateCache(10), driver.WithPromptExpiry()}, false, 1, 2, "2"},
		{"kept longer, not guessed", []driver.StoreOption{driver.WithStateCache(10)}, false, 0, 1, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &memCAS{m: map[string][]byte{}}
			s := driver.NewCASStore(c, tt.opts...)
			mustUpdate(t, s, "k", shortLived)
			time.Sleep(3 * ttl) // past the entry's expiry
			if tt.expired {
				delete(c.m, "k")
			}
			c.calls()
			mustUpdate(t, s, "k", shortLived)
			if gets, cass := c.calls(); gets != tt.gets || cass != tt.cass {
				t.Errorf("update made %d Gets and %d CompareAndSwaps, want %d and %d", gets, cass, tt.gets, tt.cass)
			}
			if got := string(c.m["k"]); got != tt.want {
				t.Errorf("state = %q, want %q", got, tt.want)
			}
		})
	}
}
