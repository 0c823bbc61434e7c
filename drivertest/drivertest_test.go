package drivertest_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
)

// refStore is a store of the suite's own tests: a map behind one mutex,
// with a fake clock and a bug it may be told to have.
type refStore struct {
	mu    sync.Mutex
	m     map[string]refEntry // guarded by mu
	clock interface{ Now() time.Time }
	bug   string
	// lost counts each key's compare-and-swaps lost in a row; guarded
	// by mu.
	lost map[string]int
}

type refEntry struct {
	state   []byte
	expires time.Time // zero: no expiry
}

// get returns key's state, dropping it when it has expired. It requires
// that s.mu is held.
func (s *refStore) get(key string) []byte {
	e, ok := s.m[key]
	if ok && !e.expires.IsZero() && !s.clock.Now().Before(e.expires) && s.bug != "NeverExpires" {
		delete(s.m, key)
		return nil
	}
	if !ok && s.bug == "EmptyNotNil" {
		return []byte{}
	}
	return e.state
}

// set writes key's state. It requires that s.mu is held.
func (s *refStore) set(key string, next []byte, ttl time.Duration) {
	e := refEntry{state: bytes.Clone(next)}
	switch s.bug {
	case "KeepsCallerMemory":
		e.state = next
	case "NoTruncate":
		if old := s.m[key].state; len(old) > len(next) {
			e.state = append(bytes.Clone(next), old[len(next):]...)
		}
	}
	if ttl > 0 {
		e.expires = s.clock.Now().Add(ttl)
	}
	s.m[key] = e
}

func (s *refStore) key(key string) string {
	switch {
	case s.bug == "CaseInsensitive":
		return strings.ToLower(key)
	case s.bug == "TruncatesKeys" && len(key) > 255:
		return key[:255]
	}
	return key
}

func (s *refStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if err := ctx.Err(); err != nil && s.bug != "IgnoresContext" {
		return err
	}
	key = s.key(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	state := s.get(key)
	if s.bug == "NotAtomic" {
		state = bytes.Clone(state)
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
	}
	next, ttl, changed := fn(state)
	if s.bug == "FirstCallCounts" {
		next, ttl, changed = fn(state)
		fn(state)
	}
	if changed || s.bug == "WritesUnchanged" {
		s.set(key, next, ttl)
	}
	return nil
}

func (s *refStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bug != "DeleteNoop" {
		delete(s.m, s.key(key))
	}
	return nil
}

// Get and CompareAndSwap make refStore a driver.CAS.
func (s *refStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.get(key)), nil
}

func (s *refStore) CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.get(key)
	if (cur == nil) != (old == nil) || !bytes.Equal(cur, old) {
		return false, nil
	}
	// Lose a quarter of the races that could be won, as if another
	// writer came first, but never more than three in a row: the store
	// retries 8 times, and a random streak of 8 losses in a long suite
	// run is likely enough to fail CI now and then.
	if s.lost[key] < 3 && rand.N(4) == 0 {
		s.lost[key]++
		return false, nil
	}
	delete(s.lost, key)
	s.set(key, next, ttl)
	return true, nil
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness makes refStores on one fake clock, as a ClockHarness.
type harness struct {
	clock *fakeClock
	bug   string
	cas   bool // wrap the store in driver.NewCASStore
}

func newHarness(bug string) *harness {
	return &harness{clock: &fakeClock{now: time.Unix(1e9, 0)}, bug: bug}
}

func (h *harness) MakeStore(context.Context, *testing.T) (driver.Store, error) {
	s := &refStore{m: make(map[string]refEntry), clock: h.clock, bug: h.bug, lost: make(map[string]int)}
	if h.cas {
		return driver.NewCASStore(s, driver.WithMaxAttempts(8)), nil
	}
	return s, nil
}

func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }

func TestReference(t *testing.T) {
	drivertest.RunConformanceTests(t, newHarness(""))
}

// TestCAS runs the suite on a CAS store that answers driver.ErrConflict
// often, which the suite must retry.
func TestCAS(t *testing.T) {
	h := newHarness("")
	h.cas = true
	drivertest.RunConformanceTests(t, h)
}

// coarseHarness is a TTLHarness whose stores expire states a second late.
type coarseHarness struct{ *harness }

func (coarseHarness) TTLGranularity() time.Duration { return time.Second }

func TestTTLGranularity(t *testing.T) {
	h := coarseHarness{newHarness("")}
	drivertest.RunConformanceTests(t, h)
}

// TestHarnessFunc runs the suite on the real clock: it sleeps.
func TestHarnessFunc(t *testing.T) {
	drivertest.RunConformanceTests(t, drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
		return &refStore{m: make(map[string]refEntry), clock: realClock{}}, nil
	}))
}

// realClock is the system's clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// brokenEnv names the bug TestBroken gives its store; unset, TestBroken
// is skipped.
const brokenEnv = "DRIVERTEST_BROKEN"

// TestBroken runs the suite on a store with the bug in $DRIVERTEST_BROKEN;
// TestBrokenStoresFail runs it in a child process, which must fail.
func TestBroken(t *testing.T) {
	bug := os.Getenv(brokenEnv)
	if bug == "" {
		t.Skip(brokenEnv + " is not set")
	}
	drivertest.RunConformanceTests(t, newHarness(bug))
}

// TestBrokenStoresFail checks that each test of the suite can fail: a
// store with a bug fails the test written for it.
func TestBrokenStoresFail(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	tests := []struct {
		bug, failing string
	}{
		{"EmptyNotNil", "AbsentKey"},
		{"WritesUnchanged", "UnchangedIsNotWritten"},
		{"NoTruncate", "Overwrite"},
		{"KeepsCallerMemory", "KeepsNoCallerMemory"},
		{"NotAtomic", "AtomicOneKey"},
		{"NotAtomic", "AtomicSpread"},
		{"FirstCallCounts", "LastCallCounts"},
		{"NeverExpires", "TTL"},
		{"DeleteNoop", "Delete"},
		{"IgnoresContext", "Context"},
		{"CaseInsensitive", "Isolation"},
		{"TruncatesKeys", "Keys"},
	}
	out := make(map[string][]byte)
	for _, tt := range tests {
		t.Run(tt.bug+"/"+tt.failing, func(t *testing.T) {
			got, ok := out[tt.bug]
			if !ok {
				cmd := exec.Command(os.Args[0], "-test.run=^TestBroken$", "-test.v")
				cmd.Env = append(os.Environ(), brokenEnv+"="+tt.bug)
				var err error
				got, err = cmd.CombinedOutput()
				if err == nil {
					t.Fatalf("the suite passed a store with bug %s:\n%s", tt.bug, got)
				}
				out[tt.bug] = got
			}
			if want := "--- FAIL: TestBroken/" + tt.failing + " "; !bytes.Contains(got, []byte(want)) {
				t.Errorf("the suite on a store with bug %s did not fail %s:\n%s", tt.bug, tt.failing, got)
			}
		})
	}
}
