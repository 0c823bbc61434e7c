package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/sluicetest"
)

// VectorsEnv names an environment variable with more vector directories
// or files for the suite to run, separated by the OS's path list
// separator, e.g. vectors from other implementations' test suites.
const VectorsEnv = "SLUICE_VECTORS"

// slowStore is the store timeout of the limiter tests that check what is
// decided, not how fast: on a loaded machine (the store suites of many
// packages under -race at once) a decision can take more than the default
// second, and that must not fail them. Faults sets its own timeout.
const slowStore = 30 * time.Second

// runLimiterTests runs sluice's limiters and buckets on the store.
func runLimiterTests(t *testing.T, h Harness) {
	for _, tt := range []struct {
		name string
		f    func(t *testing.T, e *env)
	}{
		{"Vectors", testVectors},
		{"LimiterExact", testLimiterExact},
		{"LimiterMatchesMemory", testLimiterMatchesMemory},
		{"Migration", testMigration},
		{"ReadsCreateNothing", testReadsCreateNothing},
		{"Faults", testFaults},
		{"Debt", testDebt},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, newEnv(t, h)) })
	}
}

// testVectors runs the project's vectors, the shared examples when the
// checkout has them, and those named by VectorsEnv.
func testVectors(t *testing.T, e *env) {
	dir := t.TempDir()
	if err := conformance.WriteVectors(dir); err != nil {
		t.Fatal(err)
	}
	paths := []string{dir}
	if shared := sharedExamples(); shared != "" {
		paths = append(paths, shared)
	}
	for _, p := range filepath.SplitList(os.Getenv(VectorsEnv)) {
		if p != "" {
			paths = append(paths, p)
		}
	}
	conformance.RunT(t, conformance.Store{TargetName: "store", Store: fakeTimeStore(e.store),
		Options: []sluice.Option{sluice.WithStoreTimeout(slowStore)}}, paths...)
}

// fakeTimeStore returns s with an hour added to every TTL written. The
// vectors and LimiterMatchesMemory decide on a fake clock, which moves a
// few milliseconds per call, while a store expires records in real time:
// on a loaded machine, where a call can take seconds, a record would
// expire in the store while its state still counts on the fake clock,
// and the store would decide on no state. A record carries its own
// expiry, which the limiter checks on its clock, so the padding changes
// no decision of the policies.
func fakeTimeStore(s driver.Store) driver.Store {
	p := paddedTTL{s}
	if d, ok := s.(driver.Deleter); ok {
		return paddedTTLDeleter{p, d}
	}
	return p
}

type paddedTTL struct{ driver.Store }

func (s paddedTTL) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return s.Store.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) {
		next, ttl, changed := fn(state)
		if ttl > 0 {
			ttl += time.Hour
		}
		return next, ttl, changed
	})
}

type paddedTTLDeleter struct {
	paddedTTL
	d driver.Deleter
}

func (s paddedTTLDeleter) Delete(ctx context.Context, key string) error { return s.d.Delete(ctx, key) }

// sharedExamples finds the project's shared example vectors, a sibling of
// the module's checkout, or returns "".
func sharedExamples() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "..", "shared", "conformance", "examples")
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// testLimiterExact has many goroutines call limiters on one key: exactly
// the limit is admitted, nothing more, nothing less.
func testLimiterExact(t *testing.T, e *env) {
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(100, time.Hour),
		sluice.TokenBucket(100, 1, time.Hour),
		sluice.SlidingLog(50, time.Hour),
		sluice.GCRA(60, 1, time.Hour),
	} {
		t.Run(p.String(), func(t *testing.T) {
			l, err := sluice.NewLimiter(p, sluice.WithStore(e.store), sluice.WithStoreTimeout(slowStore))
			if err != nil {
				t.Fatal(err)
			}
			k := key(t)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			const callers, each = 16, 15
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						r, err := l.Allow(e.ctx, k)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			r, err := l.Peek(e.ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if got := admitted.Load(); got != r.Limit {
				t.Errorf("%s admitted %d of %d calls, want exactly its limit %d", p, got, callers*each, r.Limit)
			}
		})
	}
}

// testLimiterMatchesMemory runs the same random calls on the store and in
// memory, on a fake clock: every result must be the same.
func testLimiterMatchesMemory(t *testing.T, e *env) {
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(10, time.Second),
		sluice.SlidingWindow(10, time.Second),
		sluice.TokenBucket(10, 2, time.Second),
		sluice.Shaper(10, time.Second, 3),
		sluice.Compound(sluice.FixedWindow(8, time.Second), sluice.LeakyBucket(5, 1, 200*time.Millisecond)),
	} {
		t.Run(p.String(), func(t *testing.T) {
			clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
			mem, err := sluice.NewLimiter(p, sluice.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			st, err := sluice.NewLimiter(p, sluice.WithClock(clock), sluice.WithStore(fakeTimeStore(e.store)), sluice.WithStoreTimeout(slowStore))
			if err != nil {
				t.Fatal(err)
			}
			prefix := key(t)
			rng := rand.New(rand.NewPCG(7, 11))
			var held [][2]*sluice.Reservation // in memory, in the store: the Cancel of each must match
			for i := range 300 {
				k := fmt.Sprint(prefix, rng.IntN(2))
				n := int64(rng.IntN(3) + 1)
				var a, b string
				switch rng.IntN(8) {
				case 0:
					ra, ea := mem.PeekN(e.ctx, k, n)
					rb, eb := st.PeekN(e.ctx, k, n)
					a, b = fmt.Sprint(ra, ea), fmt.Sprint(rb, eb)
				case 1:
					da, ea := mem.ReserveN(e.ctx, k, n, 300*time.Millisecond)
					db, eb := st.ReserveN(e.ctx, k, n, 300*time.Millisecond)
					a, b = describeReservation(da, ea), describeReservation(db, eb)
					if ea == nil && eb == nil {
						held = append(held, [2]*sluice.Reservation{da, db})
					}
				case 2:
					if len(held) == 0 {
						continue
					}
					j := rng.IntN(len(held))
					held[j][0].Cancel()
					held[j][1].Cancel()
					held = append(held[:j], held[j+1:]...)
					ra, ea := mem.PeekN(e.ctx, k, n)
					rb, eb := st.PeekN(e.ctx, k, n)
					a, b = fmt.Sprint(ra, ea), fmt.Sprint(rb, eb)
				default:
					ra, ea := mem.AllowN(e.ctx, k, n)
					rb, eb := st.AllowN(e.ctx, k, n)
					a, b = fmt.Sprint(ra, ea), fmt.Sprint(rb, eb)
				}
				if a != b {
					t.Fatalf("call %d: memory %s, store %s", i, a, b)
				}
				clock.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
			}
		})
	}
}

// testMigration changes the policy of stored keys.
func testMigration(t *testing.T, e *env) {
	k := key(t)
	before, err := sluice.NewLimiter(sluice.TokenBucket(10, 1, time.Hour), sluice.WithStore(e.store), sluice.WithStoreTimeout(slowStore))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := before.AllowN(e.ctx, k, 6); err != nil || !r.Allowed {
		t.Fatalf("AllowN(6) = %+v, %v", r, err)
	}
	after, err := sluice.NewLimiter(sluice.TokenBucket(20, 1, time.Hour), sluice.WithStore(e.store), sluice.WithStoreTimeout(slowStore))
	if err != nil {
		t.Fatal(err)
	}
	// 4 of 10 proportionally become 8 of 20; one more leaves 7.
	if r, err := after.Allow(e.ctx, k); err != nil || !r.Allowed || r.Remaining != 7 {
		t.Errorf("Allow after the limit doubled = %+v, %v, want 7 left", r, err)
	}
	if r, err := before.Allow(e.ctx, k); err != nil || !r.Allowed || r.Remaining != 2 {
		t.Errorf("Allow by the old limiter again = %+v, %v, want 7 of 20 → 3 of 10, 2 left", r, err)
	}
}

// testReadsCreateNothing reads keys that have no state through every
// read-only call of a Limiter and a KeyBucket's Snapshot: none may write
// a record, or each look at a key (the server's inspect) would cost the
// store a record. A KeyBucket's other calls create the key at the first,
// even one that reads, as Bucket4j's proxy does.
func testReadsCreateNothing(t *testing.T, e *env) {
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(10, 1, time.Second), // intervally: its refill grid starts with the bucket
		sluice.LeakyBucket(10, 1, time.Second),
		sluice.FixedWindow(10, time.Second),
		sluice.SlidingLog(10, time.Second),
	} {
		t.Run(p.String(), func(t *testing.T) {
			l, err := sluice.NewLimiter(p, sluice.WithStore(e.store))
			if err != nil {
				t.Fatal(err)
			}
			k := key(t)
			if _, err := l.Peek(e.ctx, k); err != nil {
				t.Fatal(err)
			}
			// Refused, or an argument error for the policies that forbid
			// asking for more than the limit.
			if r, err := l.AllowN(e.ctx, k, 11); err == nil && r.Allowed {
				t.Fatalf("AllowN(11) of a limit of 10 = %+v, want refused", r)
			}
			b, bucketErr := l.Bucket(k)
			if bucketErr == nil {
				// A snapshot inspects; it creates nothing.
				if _, err := b.Snapshot(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
			var found []byte
			err = e.store.Update(e.ctx, k, func(rec []byte) ([]byte, time.Duration, bool) {
				found = append([]byte(nil), rec...)
				return nil, 0, false
			})
			if err != nil {
				t.Fatal(err)
			}
			if found != nil {
				t.Errorf("reading key %q wrote a record of %d bytes, want none", k, len(found))
			}
			if bucketErr == nil {
				// As Bucket4j's proxy, a KeyBucket's first call creates the
				// key, even one that only reads.
				if _, err := b.AvailableTokens(e.ctx); err != nil {
					t.Fatal(err)
				}
				found = nil
				if err := e.store.Update(e.ctx, k, func(rec []byte) ([]byte, time.Duration, bool) {
					found = append([]byte(nil), rec...)
					return nil, 0, false
				}); err != nil {
					t.Fatal(err)
				}
				if found == nil {
					t.Errorf("KeyBucket.AvailableTokens on key %q wrote no record, want the key's new bucket", k)
				}
			}
			// The first call that takes a token creates the key.
			if r, err := l.Allow(e.ctx, k); err != nil || !r.Allowed || r.Remaining != 9 {
				t.Errorf("Allow after the reads = %+v, %v, want allowed with 9 left", r, err)
			}
		})
	}
}

// faultyStore fails some of its calls the ways a network store does.

// faultyStore fails some of its calls the ways a network store does,
// four calls in a row of every five: fewer than the limiter's circuit
// breaker needs to open, so that each failure reaches the failure policy.
type faultyStore struct {
	driver.Store
	calls atomic.Int64
	every int64 // every n-th call fails
}

var errInjected = errors.New("drivertest: injected fault")

func (f *faultyStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	n := f.calls.Add(1)
	switch {
	case n%f.every == 0: // refused before anything was sent
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, errInjected)
	case n%f.every == 1 && n > 1: // sent, answer lost: the write happened
		if err := f.Store.Update(ctx, key, fn); err != nil {
			return err
		}
		return fmt.Errorf("%w: %w", driver.ErrIndeterminate, errInjected)
	case n%f.every == 2 && n > 2: // too slow: the limiter's timeout ends it
		<-ctx.Done()
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, ctx.Err())
	case n%f.every == 3 && n > 3: // too slow, and the store says only so, as the contract allows
		<-ctx.Done()
		return ctx.Err()
	}
	return f.Store.Update(ctx, key, fn)
}

// testFaults injects failures between the limiter and the store: each
// failed call reports a typed error or applies the configured fallback,
// and the state is never corrupted: never more admitted than the limit.
// A store's error always tells whether tokens may have been taken: a
// *StoreError matches driver.ErrUnavailable or driver.ErrIndeterminate,
// also when the store answered its timeout with a bare context error.
func testFaults(t *testing.T, e *env) {
	for _, failure := range []sluice.StoreFailure{sluice.FailClosed, sluice.FailOpen, sluice.FailLocal} {
		t.Run(failure.String(), func(t *testing.T) {
			fs := &faultyStore{Store: e.store, every: 5}
			counts := new(sluicetest.Counter)
			l, err := sluice.NewLimiter(sluice.FixedWindow(40, time.Hour), sluice.WithStore(fs),
				sluice.WithStoreFailure(failure), sluice.WithObserver(counts), sluice.WithStoreTimeout(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			k := key(t)
			var storeErrors, allowed int64
			for range 60 {
				r, err := l.Allow(e.ctx, k)
				var se *sluice.StoreError
				switch {
				case errors.As(err, &se):
					if !errors.Is(err, driver.ErrUnavailable) && !errors.Is(err, driver.ErrIndeterminate) {
						t.Errorf("store error %v matches neither ErrUnavailable nor ErrIndeterminate", err)
					}
					storeErrors++
				case err != nil:
					t.Fatalf("Allow = %v, want a result or a *StoreError", err)
				case r.Allowed:
					allowed++
				}
			}
			failures := counts.StoreFailures(failure)
			if failures == 0 || (failure == sluice.FailClosed) != (storeErrors == failures) {
				t.Errorf("%d store failures seen, %d store errors returned", failures, storeErrors)
			}
			// The store's own count never passes the limit, whatever failed.
			clean, err := sluice.NewLimiter(sluice.FixedWindow(40, time.Hour), sluice.WithStore(e.store), sluice.WithStoreTimeout(slowStore))
			if err != nil {
				t.Fatal(err)
			}
			r, err := clean.Peek(e.ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining < 0 || r.Remaining > 40 {
				t.Errorf("stored window has %d remaining, want 0..40", r.Remaining)
			}
			if failure == sluice.FailClosed && allowed > 40 {
				t.Errorf("failing closed admitted %d, more than the limit 40", allowed)
			}
		})
	}
}

// describeReservation is what a reservation decided, or its error, for
// comparing two.
func describeReservation(r *sluice.Reservation, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("ok %v, %d tokens, delay %v, %+v", r.OK(), r.Tokens(), r.Delay(), r.Result())
}
