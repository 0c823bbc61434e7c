// Package drivertest is the conformance suite of sluice's stores: every
// [driver.Store] runs the same tests, so that a limiter behaves the same on
// each of them.
//
// # Running the suite
//
// A store's own tests call [RunConformanceTests] with a [Harness] that
// makes a store for each test:
//
//	func TestConformance(t *testing.T) {
//		client := redis.NewClient(&redis.Options{Addr: addr})
//		t.Cleanup(func() { client.Close() })
//		drivertest.RunConformanceTests(t, drivertest.HarnessFunc(
//			func(ctx context.Context, t *testing.T) (driver.Store, error) {
//				return redisstore.New(client), nil
//			}))
//	}
//
// Each test is a subtest of t named after what it checks (AbsentKey,
// RoundTrip, AtomicOneKey, TTL, Delete, Context, …), so one can be run
// alone with go test -run 'TestConformance/TTL'.
//
// The stores a harness makes may share one backing server, even one in
// use: every test works on keys of its own, made of its name and a random
// suffix, and writes them with a TTL of ten minutes, except the one key
// the TTL test writes without a TTL to check that it is kept, which it
// deletes afterwards when the store is a [driver.Deleter].
//
// # What is checked
//
//   - A key never written reads as nil, and a state fn reports unchanged
//     is not written.
//   - States come back byte for byte (a zero byte, 0xff bytes, every byte
//     value, 1 KiB), and a shorter state replaces a longer one whole. The
//     suite writes only non-empty states: the contract gives nil as "no
//     state" and says nothing of empty ones.
//   - The store copies the state it is given: the caller may reuse it.
//   - Updates are atomic: 32 goroutines incrementing one counter 50 times
//     each end with 1600, on one key and spread over 100 keys.
//   - When a store calls fn more than once in an Update, only the last
//     call's result is written.
//   - A state is kept for its TTL and no longer; a rewrite restarts its
//     TTL; a TTL of 0 means no expiry.
//   - Delete, on a store that is a [driver.Deleter], forgets a key at once.
//   - A context that has ended fails Update and Delete with an error
//     matching its own (errors.Is), and nothing is written.
//   - Updates of one key never change another, even one that differs from
//     it only in case or by a trailing space.
//   - A key is a key: keys with NUL bytes, invalid UTF-8, of
//     driver.MaxKeyLen-1, MaxKeyLen and MaxKeyLen+1 bytes, and of a MiB,
//     are all accepted and never share a state, whether the store holds
//     them as they are or under driver.ShortKey.
//
// A store may answer [driver.ErrConflict], which means nothing was
// written: the suite then runs the update again (up to 1000 times), and
// still requires every count to be exact. Any other error fails the test.
// The limiter tests (LimiterExact: 16 goroutines on one key) allow no
// error at all, conflicts included: contention on a healthy store must
// end in an answer, which the store's own retries or the limiter's give.
//
// # Time
//
// The TTL test writes states with a TTL of 300ms and, on the real clock,
// waits that long, then reads until they are gone, failing after three
// seconds more. A harness tells the suite more about its stores' clocks
// through optional interfaces:
//
//   - [TTLHarness]: the store expires states late, by up to its
//     TTLGranularity (whole seconds, a periodic sweep).
//   - [ClockHarness]: the store measures TTLs on a clock the harness
//     moves, a fake clock or miniredis's FastForward; the suite then
//     advances it instead of sleeping.
//
// For example, a harness for a store on a fake clock:
//
//	type fakeClockHarness struct{ clock *fakeClock }
//
//	func (h fakeClockHarness) MakeStore(ctx context.Context, t *testing.T) (driver.Store, error) {
//		return memstore.New(memstore.WithClock(h.clock.Now)), nil
//	}
//
//	func (h fakeClockHarness) Advance(d time.Duration) { h.clock.Advance(d) }
package drivertest
