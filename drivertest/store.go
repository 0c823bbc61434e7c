package drivertest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

const (
	// keyTTL is the TTL of the states the suite writes, except where a
	// test is about TTLs, so that a shared server forgets them.
	keyTTL = 10 * time.Minute
	// maxConflicts bounds how many times the suite runs an update whose
	// store answered driver.ErrConflict.
	maxConflicts = 1000
	// goroutines and increments shape the atomicity tests: goroutines
	// each increment a counter increments times.
	goroutines = 32
	increments = 50
	// spreadKeys is how many keys the spread atomicity test uses.
	spreadKeys = 100
	// testTTL is the TTL of the TTL test, which waits this long (plus the
	// harness's TTLGranularity) on a real clock.
	testTTL = 300 * time.Millisecond
	// expiryPatience is how long, in real time, past a state's TTL and
	// granularity the TTL test keeps reading it before it fails;
	// fakeExpiryPatience is that when a ClockHarness moves the time.
	expiryPatience     = 3 * time.Second
	fakeExpiryPatience = 500 * time.Millisecond
	// pollInterval is how often the TTL test reads a state it waits for.
	pollInterval = 25 * time.Millisecond
)

// driverTests are the tests of the driver.Store contract, each run on a
// store of its own.
var driverTests = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"AbsentKey", testAbsentKey},
	{"UnchangedIsNotWritten", testUnchangedIsNotWritten},
	{"RoundTrip", testRoundTrip},
	{"Overwrite", testOverwrite},
	{"KeepsNoCallerMemory", testKeepsNoCallerMemory},
	{"AtomicOneKey", testAtomicOneKey},
	{"AtomicSpread", testAtomicSpread},
	{"LastCallCounts", testLastCallCounts},
	{"TTL", testTTLExpiry},
	{"Delete", testDelete},
	{"Context", testContext},
	{"Isolation", testIsolation},
	{"Keys", testKeys},
}

// runDriverTests runs driverTests as subtests of t.
func runDriverTests(t *testing.T, h Harness) {
	t.Helper()
	for _, tt := range driverTests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newEnv(t, h))
		})
	}
}

// update runs s.Update, and runs it again after driver.ErrConflict, which
// means that nothing was written.
func update(ctx context.Context, s driver.Store, key string, fn driver.UpdateFunc) error {
	var err error
	for range maxConflicts {
		err = s.Update(ctx, key, fn)
		if !errors.Is(err, driver.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("still conflicting after %d tries: %w", maxConflicts, err)
}

// get returns a copy of key's state, nil when it has none.
func get(ctx context.Context, s driver.Store, key string) ([]byte, error) {
	var got []byte
	called := false
	err := update(ctx, s, key, func(state []byte) ([]byte, time.Duration, bool) {
		called = true
		got = bytes.Clone(state) // keeps nil nil
		return nil, 0, false
	})
	if err == nil && !called {
		err = errors.New("the store returned nil from Update without calling fn")
	}
	return got, err
}

// read returns a copy of key's state, nil when it has none.
func read(t *testing.T, e *env, key string) []byte {
	t.Helper()
	got, err := get(e.ctx, e.store, key)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return got
}

// write sets key's state.
func write(t *testing.T, e *env, key string, state []byte, ttl time.Duration) {
	t.Helper()
	err := update(e.ctx, e.store, key, func([]byte) ([]byte, time.Duration, bool) {
		return state, ttl, true
	})
	if err != nil {
		t.Fatalf("writing %q: %v", key, err)
	}
}

// wantState fails t unless key's state is want; a nil want means no state.
func wantState(t *testing.T, e *env, key string, want []byte) {
	t.Helper()
	got := read(t, e, key)
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		t.Errorf("state of %q = %s, want %s", key, show(got), show(want))
	}
}

// show formats a state for a failure message.
func show(b []byte) string {
	switch {
	case b == nil:
		return "nil"
	case len(b) > 32:
		return fmt.Sprintf("%d bytes %x…", len(b), b[:32])
	}
	return fmt.Sprintf("%q", b)
}

// incrementer returns an UpdateFunc that increments an 8-byte big-endian
// counter, reporting any other state on t.
func incrementer(t *testing.T) driver.UpdateFunc {
	return func(state []byte) ([]byte, time.Duration, bool) {
		if state != nil && len(state) != 8 {
			t.Errorf("counter state is %s, want 8 bytes", show(state))
			return nil, 0, false
		}
		var n uint64
		if state != nil {
			n = binary.BigEndian.Uint64(state)
		}
		return binary.BigEndian.AppendUint64(nil, n+1), keyTTL, true
	}
}

// incrementConcurrently runs n goroutines, each of which increments, one
// after another, the counters of keyOf(g, i) for i from 0 to increments,
// g being the goroutine's number, and waits for them.
func incrementConcurrently(t *testing.T, e *env, n int, keyOf func(g, i int) string) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			inc := incrementer(t)
			for i := range increments {
				k := keyOf(g, i)
				if err := update(e.ctx, e.store, k, inc); err != nil {
					t.Errorf("Update(%q) = %v, want nil", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// counter returns the counter in key's state, 0 when it has none.
func counter(t *testing.T, e *env, key string) uint64 {
	t.Helper()
	state := read(t, e, key)
	if state == nil {
		return 0
	}
	if len(state) != 8 {
		t.Fatalf("counter state of %q is %s, want 8 bytes", key, show(state))
	}
	return binary.BigEndian.Uint64(state)
}

// testAbsentKey: fn sees nil for a key without state, and an unchanged
// result is not written.
func testAbsentKey(t *testing.T, e *env) {
	k := key(t)
	calls := 0
	err := update(e.ctx, e.store, k, func(state []byte) ([]byte, time.Duration, bool) {
		calls++
		if state != nil {
			t.Errorf("fn got state %s for a key never written, want nil", show(state))
		}
		return []byte("not written"), keyTTL, false
	})
	if err != nil {
		t.Fatalf("Update(%q) = %v, want nil", k, err)
	}
	if calls == 0 {
		t.Fatalf("Update(%q) returned without calling fn", k)
	}
	wantState(t, e, k, nil)
}

// testUnchangedIsNotWritten: a state fn reports unchanged stays as it was.
func testUnchangedIsNotWritten(t *testing.T, e *env) {
	k := key(t)
	write(t, e, k, []byte("first"), keyTTL)
	err := update(e.ctx, e.store, k, func([]byte) ([]byte, time.Duration, bool) {
		return []byte("second"), keyTTL, false
	})
	if err != nil {
		t.Fatalf("Update(%q) = %v, want nil", k, err)
	}
	wantState(t, e, k, []byte("first"))
}

// testRoundTrip: the bytes written come back exactly. States are never
// empty: the contract gives nil as "no state" and says nothing of empty
// ones.
func testRoundTrip(t *testing.T, e *env) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	kib := make([]byte, 1024)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(kib) // never fails
	tests := []struct {
		name  string
		state []byte
	}{
		{"ZeroByte", []byte{0}},
		{"FFByte", []byte{0xff}},
		{"EightFF", bytes.Repeat([]byte{0xff}, 8)},
		{"TrailingZeros", []byte{'a', 0, 0}},
		{"InvalidUTF8", []byte{0xc3, 0x28, 0xa0, 0xa1}},
		{"EveryByte", every},
		{"KiB", kib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := key(t)
			write(t, e, k, tt.state, keyTTL)
			wantState(t, e, k, tt.state)
		})
	}
}

// testOverwrite: a shorter state replaces a longer one whole, and a longer
// a shorter.
func testOverwrite(t *testing.T, e *env) {
	k := key(t)
	long := bytes.Repeat([]byte("0123456789abcdef"), 64)
	for _, state := range [][]byte{long, []byte("x"), long, []byte("yz")} {
		write(t, e, k, state, keyTTL)
		wantState(t, e, k, state)
	}
}

// testKeepsNoCallerMemory: the store copies next; the caller may reuse it
// once Update returns.
func testKeepsNoCallerMemory(t *testing.T, e *env) {
	one, two := key(t, "one"), key(t, "two")
	buf := []byte("state one")
	write(t, e, one, buf, keyTTL)
	copy(buf, "STATE TWO")
	wantState(t, e, one, []byte("state one"))
	write(t, e, two, buf, keyTTL)
	copy(buf, "overwrite")
	wantState(t, e, one, []byte("state one"))
	wantState(t, e, two, []byte("STATE TWO"))
}

// testAtomicOneKey: concurrent increments of one key lose none.
func testAtomicOneKey(t *testing.T, e *env) {
	k := key(t)
	incrementConcurrently(t, e, goroutines, func(int, int) string { return k })
	if got, want := counter(t, e, k), uint64(goroutines*increments); got != want {
		t.Errorf("counter after %d×%d concurrent increments = %d, want %d", goroutines, increments, got, want)
	}
}

// testAtomicSpread: concurrent increments of many keys lose none, and each
// key gets exactly its own.
func testAtomicSpread(t *testing.T, e *env) {
	keys := make([]string, spreadKeys)
	for i := range keys {
		keys[i] = key(t, i)
	}
	incrementConcurrently(t, e, goroutines, func(g, i int) string { return keys[(g*increments+i)%spreadKeys] })
	want := make([]uint64, spreadKeys)
	for n := range goroutines * increments {
		want[n%spreadKeys]++
	}
	for i, k := range keys {
		if got := counter(t, e, k); got != want[i] {
			t.Errorf("counter of key %d after concurrent increments = %d, want %d", i, got, want[i])
		}
	}
}

// testLastCallCounts: when a store calls fn more than once in one Update,
// only the last call's result is written. Every call appends a token of
// its own to the state; the final state must hold exactly the tokens of
// the last calls, once each, and each goroutine's in its order.
func testLastCallCounts(t *testing.T, e *env) {
	const goroutines, updates = 8, 20 // 160 4-byte tokens: 640 bytes
	k := key(t)
	var next atomic.Uint32 // the last token handed out
	var mu sync.Mutex
	applied := make(map[uint32][2]int) // last token of an update → goroutine, sequence
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range updates {
				var last uint32
				err := update(e.ctx, e.store, k, func(state []byte) ([]byte, time.Duration, bool) {
					last = next.Add(1)
					if len(state)%4 != 0 {
						t.Errorf("state is %s, want 4-byte tokens", show(state))
						return nil, 0, false
					}
					return binary.BigEndian.AppendUint32(bytes.Clone(state), last), keyTTL, true
				})
				if err != nil {
					t.Errorf("Update(%q) = %v, want nil", k, err)
					return
				}
				mu.Lock()
				applied[last] = [2]int{g, i}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("fn called %d times for %d updates", next.Load(), goroutines*updates)
	state := read(t, e, k)
	if len(state) != 4*goroutines*updates {
		t.Fatalf("state holds %d bytes after %d updates of 4 bytes each, want %d", len(state), goroutines*updates, 4*goroutines*updates)
	}
	seen := make(map[uint32]bool)
	lastSeq := make([]int, goroutines)
	for g := range lastSeq {
		lastSeq[g] = -1
	}
	for i := 0; i < len(state); i += 4 {
		tok := binary.BigEndian.Uint32(state[i:])
		who, ok := applied[tok]
		switch {
		case !ok:
			t.Errorf("state holds token %d, from a call of fn that was not the last of its Update", tok)
		case seen[tok]:
			t.Errorf("state holds token %d twice", tok)
		case who[1] <= lastSeq[who[0]]:
			t.Errorf("state holds update %d of goroutine %d after its update %d", who[1], who[0], lastSeq[who[0]])
		default:
			lastSeq[who[0]] = who[1]
		}
		seen[tok] = true
	}
}

// testTTLExpiry: a state is kept for its TTL, a rewrite restarts its TTL,
// it reads as nil once its TTL (and the harness's granularity) has passed,
// and a TTL of 0 means no expiry.
func testTTLExpiry(t *testing.T, e *env) {
	var granularity time.Duration
	if th, ok := e.h.(TTLHarness); ok {
		granularity = th.TTLGranularity()
	}
	expiring, refreshed, forever := key(t, "expiring"), key(t, "refreshed"), key(t, "forever")
	start := e.clock.now()
	write(t, e, expiring, []byte("expiring"), testTTL)
	write(t, e, refreshed, []byte("refreshed"), testTTL)
	write(t, e, forever, []byte("forever"), 0)
	if d, ok := e.store.(driver.Deleter); ok {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.Delete(ctx, forever)
		})
	}
	// A state is checked only while it is surely within its TTL: the write
	// happened after the time taken before it began.
	wantLive(t, e, expiring, []byte("expiring"), start)
	e.clock.sleep(testTTL / 2)
	rewrite := e.clock.now()
	write(t, e, refreshed, []byte("refreshed again"), testTTL)
	e.clock.sleep(testTTL - testTTL/2)
	wantLive(t, e, refreshed, []byte("refreshed again"), rewrite)
	wantState(t, e, forever, []byte("forever"))
	if granularity < 0 {
		t.Log("the harness's TTLGranularity is negative: not waiting for expiry")
		return
	}
	e.clock.sleep(granularity)
	waitExpired(t, e, expiring, []byte("expiring"))
	wantState(t, e, forever, []byte("forever"))
	// An expired key starts afresh.
	write(t, e, expiring, []byte("again"), keyTTL)
	wantState(t, e, expiring, []byte("again"))
	if e.clock.adv == nil {
		return
	}
	// On a clock the harness moves, a long wait costs nothing.
	e.clock.sleep(24 * time.Hour)
	waitExpired(t, e, refreshed, []byte("refreshed again"))
	wantState(t, e, forever, []byte("forever"))
}

// wantLive fails t unless key's state is want, written with testTTL at or
// after written, when the read surely happened within that TTL: it ended
// less than testTTL after written. A read that ended later (a loaded
// machine) proves nothing and is only logged.
func wantLive(t *testing.T, e *env, key string, want []byte, written time.Time) {
	t.Helper()
	got := read(t, e, key)
	if e.clock.now().Sub(written) >= testTTL {
		t.Logf("the read of %q ended past its TTL: not checked", key)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("state of %q = %s within its TTL, want %s", key, show(got), show(want))
	}
}

// waitExpired reads key until it has no state, failing t if that takes
// longer than expiryPatience or if the state is ever other than old.
func waitExpired(t *testing.T, e *env, key string, old []byte) {
	t.Helper()
	patience := expiryPatience
	if e.clock.adv != nil {
		patience = fakeExpiryPatience
	}
	deadline := time.Now().Add(patience)
	for {
		got := read(t, e, key)
		if got == nil {
			return
		}
		if !bytes.Equal(got, old) {
			t.Fatalf("state of %q = %s while waiting for it to expire, want %s or nil", key, show(got), show(old))
		}
		if time.Now().After(deadline) {
			t.Fatalf("state of %q = %s %v after its TTL of %v (and granularity), want nil", key, show(got), patience, testTTL)
		}
		time.Sleep(pollInterval)
	}
}

// testDelete: a deleted key has no state; others keep theirs; deleting a
// key without state succeeds.
func testDelete(t *testing.T, e *env) {
	d, ok := e.store.(driver.Deleter)
	if !ok {
		t.Skip("the store does not implement driver.Deleter")
	}
	gone, kept, never := key(t, "gone"), key(t, "kept"), key(t, "never")
	write(t, e, gone, []byte("gone"), keyTTL)
	write(t, e, kept, []byte("kept"), keyTTL)
	if err := d.Delete(e.ctx, gone); err != nil {
		t.Fatalf("Delete(%q) = %v, want nil", gone, err)
	}
	wantState(t, e, gone, nil)
	wantState(t, e, kept, []byte("kept"))
	if err := d.Delete(e.ctx, gone); err != nil {
		t.Errorf("Delete(%q) again = %v, want nil", gone, err)
	}
	if err := d.Delete(e.ctx, never); err != nil {
		t.Errorf("Delete(%q) of a key never written = %v, want nil", never, err)
	}
	write(t, e, gone, []byte("back"), keyTTL)
	wantState(t, e, gone, []byte("back"))
}

// testContext: a context that has ended fails Update and Delete with its
// error, and nothing is written.
func testContext(t *testing.T, e *env) {
	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
	defer cancel2()
	tests := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"Cancelled", cancelled, context.Canceled},
		{"DeadlineExceeded", expired, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			absent, present := key(t, "absent"), key(t, "present")
			write(t, e, present, []byte("kept"), keyTTL)
			writeNext := func([]byte) ([]byte, time.Duration, bool) {
				return []byte("written"), keyTTL, true
			}
			if err := e.store.Update(tt.ctx, absent, writeNext); !errors.Is(err, tt.want) {
				t.Errorf("Update(%q) with an ended context = %v, want %v", absent, err, tt.want)
			}
			if err := e.store.Update(tt.ctx, present, writeNext); !errors.Is(err, tt.want) {
				t.Errorf("Update(%q) with an ended context = %v, want %v", present, err, tt.want)
			}
			wantState(t, e, absent, nil)
			wantState(t, e, present, []byte("kept"))
			d, ok := e.store.(driver.Deleter)
			if !ok {
				return
			}
			if err := d.Delete(tt.ctx, present); !errors.Is(err, tt.want) {
				t.Errorf("Delete(%q) with an ended context = %v, want %v", present, err, tt.want)
			}
			wantState(t, e, present, []byte("kept"))
		})
	}
}

// testIsolation: updates of one key never change another, even one whose
// name differs only in case, by a trailing space or by a suffix, which
// stores with case-insensitive or space-padding collations confuse.
func testIsolation(t *testing.T, e *env) {
	k := key(t)
	neighbours := []string{k + "/x", k + " ", strings.ToUpper(k), k[:len(k)-1]}
	states := make([][]byte, len(neighbours))
	for i, n := range neighbours {
		states[i] = fmt.Appendf(nil, "neighbour %d", i)
		write(t, e, n, states[i], keyTTL)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// Read the neighbours while the key is hammered.
		for {
			for i, n := range neighbours {
				got, err := get(e.ctx, e.store, n)
				if err != nil {
					t.Errorf("reading %q: %v", n, err)
					return
				}
				if !bytes.Equal(got, states[i]) {
					t.Errorf("state of %q = %s while %q was updated, want %s", n, show(got), k, show(states[i]))
					return
				}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	incrementConcurrently(t, e, goroutines/4, func(int, int) string { return k })
	close(done)
	wg.Wait()
	if got, want := counter(t, e, k), uint64(goroutines/4*increments); got != want {
		t.Errorf("counter of %q = %d, want %d", k, got, want)
	}
	for i, n := range neighbours {
		wantState(t, e, n, states[i])
	}
}

// hugeKey is the length of the longest keys testKeys writes: far past any
// key column, index entry or digest threshold.
const hugeKey = 1 << 20

// testKeys: a key is a key. Every byte string is held apart from every
// other: keys with NUL bytes, invalid UTF-8 (and the U+FFFD a decoder
// would make of it), keys of driver.MaxKeyLen-1, MaxKeyLen and MaxKeyLen+1
// bytes, huge keys that differ only in their last byte or in their middle,
// and a key that equals another's driver.ShortKey digest form. No key is
// refused, and no two share a state.
func testKeys(t *testing.T, e *env) {
	base := key(t)
	pad := func(n int, last byte) string {
		b := []byte(base + strings.Repeat("x", max(n-len(base)-1, 0)))
		return string(append(b, last))
	}
	middle := func(c byte) string {
		b := []byte(pad(hugeKey, 'z'))
		b[hugeKey/2] = c
		return string(b)
	}
	keys := []string{
		base,
		base + "\x00",
		base + "\x00\x00",
		base + "\x00a",
		"\x00" + base,
		base + "\xff\xfe",
		base + "\xc3\x28",
		base + "\ufffd",
		base + "\ufffd\ufffd",
		pad(driver.MaxKeyLen-1, 'a'),
		pad(driver.MaxKeyLen-1, 'b'),
		pad(driver.MaxKeyLen, 'a'),
		pad(driver.MaxKeyLen, 'b'),
		pad(driver.MaxKeyLen+1, 'a'),
		pad(driver.MaxKeyLen+1, 'b'),
		pad(4096, 'a'),
		pad(hugeKey, 'a'),
		pad(hugeKey, 'b'),
		middle('m'),
		middle('n'),
		driver.ShortKey(pad(4096, 'a')),
		driver.ShortKey(pad(hugeKey, 'a')),
	}
	states := make([][]byte, len(keys))
	for i, k := range keys {
		states[i] = fmt.Appendf(nil, "state of key %d (%d bytes)", i, len(k))
		err := update(e.ctx, e.store, k, func([]byte) ([]byte, time.Duration, bool) {
			return states[i], keyTTL, true
		})
		if err != nil {
			t.Fatalf("writing key %d (%d bytes, %s): %v", i, len(k), show([]byte(k)), err)
		}
	}
	for i, k := range keys {
		got, err := get(e.ctx, e.store, k)
		if err != nil {
			t.Fatalf("reading key %d (%d bytes, %s): %v", i, len(k), show([]byte(k)), err)
		}
		if !bytes.Equal(got, states[i]) {
			t.Errorf("key %d (%d bytes, %s) holds %s, want %s: two keys share a state", i, len(k), show([]byte(k)), show(got), show(states[i]))
		}
	}
	d, ok := e.store.(driver.Deleter)
	if !ok {
		return
	}
	for i, k := range keys {
		if i%2 == 0 {
			if err := d.Delete(e.ctx, k); err != nil {
				t.Fatalf("Delete(key %d, %d bytes): %v", i, len(k), err)
			}
		}
	}
	for i, k := range keys {
		want := states[i]
		if i%2 == 0 {
			want = nil
		}
		wantState(t, e, k, want)
	}
}
