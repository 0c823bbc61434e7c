package cli

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/storeurl"
)

// workerEnv marks a process started by check-store as one of its writers,
// so that a test binary standing in for the sluice command knows to run
// the worker.
const workerEnv = "SLUICE_CHECK_STORE_WORKER"

const checkStoreDoc = `Check-store says whether a store is safe to use for shared limits. It has N goroutines
and P processes increment one counter M times each through the store's atomic update
(every increment must be counted), has a limiter admit exactly its limit under
concurrent calls, and runs sluice's own conformance vectors against the store.

It writes to the store at URL, and says so before it starts: a few hundred keys, all
under a prefix of the run's own (sluice-check-<random>:), none kept longer than an
hour. When it ends it deletes every key it wrote, also when a check failed or it
was interrupted (Ctrl-C). On PostgreSQL and MySQL it creates the store's table if it
is missing, as sluice serve would, and leaves the table. Its keys never collide with
a limiter's, but a scratch database (redis://host:6379/15, a test schema) is the
tidier place to run it.

mem:// is this process's memory, which no other process sees: on it the check starts
no writer processes and ends "ONE PROCESS ONLY" rather than "SAFE".`

func runCheckStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check-store", "[--writers N] [--processes P] [--increments M] [--timeout D] URL", checkStoreDoc, stderr)
	writers := fs.Int("writers", 16, "concurrent goroutines writing")
	processes := fs.Int("processes", 2, "concurrent processes writing, each one more sluice process")
	increments := fs.Int("increments", 50, "increments per writer")
	timeout := fs.duration("timeout", 2*time.Minute, "bound on the whole check (a `duration`: 30s, 1m30s, '5 minutes')")
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return fs.usagef("want exactly one URL, got %d arguments", fs.NArg())
	case *writers < 1 || *writers > 1024:
		return fs.usagef("--writers %d: want 1 to 1024", *writers)
	case *processes < 0 || *processes > 64:
		return fs.usagef("--processes %d: want 0 to 64", *processes)
	case *increments < 1 || *increments > 100000:
		return fs.usagef("--increments %d: want 1 to 100000", *increments)
	case *timeout <= 0:
		return fs.usagef("--timeout %v: want a positive duration", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rawURL := fs.Arg(0)
	store, err := storeurl.Open(ctx, rawURL)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Check(ctx); err != nil {
		return err
	}

	s := newScratch(store.Store, "sluice-check-"+randomHex()+":")
	fmt.Fprintf(stdout, "check-store writes keys under %q to %s, each kept at most an hour, and deletes them when it ends\n",
		s.prefix, store.URL)
	// Deleted before the verdict, which stays the last line, and on every
	// way out.
	cleanup := sync.OnceFunc(func() { fmt.Fprintln(stdout, s.cleanupMessage(s.cleanup(ctx))) })
	defer cleanup()

	r := &checkReport{w: stdout, ctx: ctx}
	if store.Local && *processes > 0 {
		// Each writer process would open a store of its own and its
		// increments would look lost.
		fmt.Fprintf(stdout, "skip the %d writer processes: %s is this process's memory; other processes cannot see it\n",
			*processes, store.URL)
		*processes = 0
	}
	checkCounter(ctx, r, s, rawURL, *writers, *processes, *increments)
	if err := checkLimiter(ctx, r, s, *writers); err != nil {
		return err
	}
	if err := checkVectors(ctx, r, s, store.Scheme); err != nil {
		return err
	}
	cleanup()
	switch err := ctx.Err(); {
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stdout, "UNKNOWN: the checks did not finish within --timeout %v\n", *timeout)
		return fmt.Errorf("timed out after %v", *timeout)
	case err != nil:
		fmt.Fprintln(stdout, "UNKNOWN: interrupted before the checks finished")
		return err
	}
	if n := r.failed(); n > 0 {
		fmt.Fprintf(stdout, "NOT SAFE: %s failed %d checks; do not share limits through it\n", store.Scheme, n)
		return fmt.Errorf("%d checks failed", n)
	}
	if store.Local {
		fmt.Fprintf(stdout, "ONE PROCESS ONLY: %s passed every check in this process; it is this process's memory, so processes cannot share limits through it\n",
			store.Scheme)
		return nil
	}
	fmt.Fprintf(stdout, "SAFE: %s passed every check\n", store.Scheme)
	return nil
}

// checkReport prints the outcome of each check and counts the failures.
// Once ctx has ended, failures are the interruption's, not the store's,
// and it drops them. It is safe for concurrent use.
type checkReport struct {
	w        io.Writer
	ctx      context.Context
	mu       sync.Mutex
	problems int
}

func (r *checkReport) ok(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "ok   "+format+"\n", args...)
}

func (r *checkReport) fail(format string, args ...any) {
	if r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems++
	fmt.Fprintf(r.w, "FAIL "+format+"\n", args...)
}

func (r *checkReport) failed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.problems
}

// checkCounter is check 1: every increment counted, from goroutines and
// from processes.
func checkCounter(ctx context.Context, r *checkReport, s *scratch, rawURL string, writers, processes, increments int) {
	const key = "counter"
	var conflicts atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			if err := increment(ctx, s, key, increments, &conflicts); err != nil {
				r.fail("writer: %v", err)
			}
		})
	}
	for range processes {
		wg.Go(func() {
			if err := runWorker(ctx, rawURL, s.remember(key), increments); err != nil {
				r.fail("writer: %v", err)
			}
		})
	}
	wg.Wait()
	want := int64((writers + processes) * increments)
	got, err := readCounter(ctx, s, key)
	switch {
	case err != nil:
		r.fail("reading the counter: %v", err)
	case got != want:
		r.fail("counter is %d after %d increments: %d lost or duplicated", got, want, want-got)
	default:
		r.ok("%d writers × %d increments (%d goroutines, %d processes): all %d counted, %d conflicts retried",
			writers+processes, increments, writers, processes, want, conflicts.Load())
	}
}

// checkLimiter is check 2: a limiter admits exactly its limit under
// concurrent calls.
func checkLimiter(ctx context.Context, r *checkReport, s *scratch, writers int) error {
	const limit = 100
	l, err := sluice.NewLimiter(sluice.FixedWindow(limit, time.Hour), sluice.WithStore(s))
	if err != nil {
		return err
	}
	const key = "limiter"
	perWriter := 2 * limit / writers
	var admitted atomic.Int64
	var calls sync.WaitGroup
	for range writers {
		calls.Go(func() {
			for range perWriter {
				res, err := l.Allow(ctx, key)
				if err != nil {
					r.fail("limiter: %v", err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	calls.Wait()
	switch n := admitted.Load(); {
	case n != limit && writers*perWriter >= limit:
		r.fail("a fixed window of %d admitted %d under concurrent calls", limit, n)
	default:
		r.ok("a fixed window of %d admitted exactly %d of %d concurrent calls", limit, n, writers*perWriter)
	}
	return nil
}

// checkVectors is check 3: the repository's vectors pass on the store.
func checkVectors(ctx context.Context, r *checkReport, s *scratch, scheme string) error {
	dir, err := os.MkdirTemp("", "sluice-vectors-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := conformance.WriteVectors(dir); err != nil {
		return err
	}
	rep, err := conformance.Run(ctx, conformance.Store{TargetName: scheme, Store: s}, dir)
	if err != nil {
		r.fail("vectors: %v", err)
		return nil
	}
	switch passed, failed, _ := rep.Counts(); {
	case failed > 0:
		printReport(r.w, rep, false)
		r.fail("%d of %d vector cases failed", failed, passed+failed)
	default:
		r.ok("vectors: %s", rep.Summary())
	}
	return nil
}

// scratchTTL (an hour, as the messages say) bounds how long a key written by check-store or conformance
// --store stays in the store, should the command die before it deletes
// it. A vector case lasts seconds, so no case sees it.
const scratchTTL = time.Hour

// scratch is a store as the commands that test one use it: every key
// under a prefix of the run's own, every write kept at most scratchTTL,
// and every key written remembered, so that cleanup can delete them all.
// It is safe for concurrent use.
type scratch struct {
	store  driver.Store
	prefix string

	mu   sync.Mutex
	keys map[string]bool // full keys
}

var _ driver.Deleter = (*scratch)(nil)

func newScratch(s driver.Store, prefix string) *scratch {
	return &scratch{store: s, prefix: prefix, keys: make(map[string]bool)}
}

// remember records key as written and returns its full key.
func (s *scratch) remember(key string) string {
	full := s.prefix + key
	s.mu.Lock()
	s.keys[full] = true
	s.mu.Unlock()
	return full
}

func (s *scratch) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	return s.store.Update(ctx, s.remember(key), func(state []byte) ([]byte, time.Duration, bool) {
		next, ttl, changed := fn(state)
		if ttl <= 0 || ttl > scratchTTL { // 0 means no expiry
			ttl = scratchTTL
		}
		return next, ttl, changed
	})
}

func (s *scratch) Delete(ctx context.Context, key string) error {
	d, ok := s.store.(driver.Deleter)
	if !ok {
		return errors.ErrUnsupported
	}
	return d.Delete(ctx, s.prefix+key)
}

// cleanup deletes every key written, with a context of its own, since ctx
// may have ended (a timeout, Ctrl-C). It returns how many keys it deleted
// of how many, and the first error.
func (s *scratch) cleanup(ctx context.Context) (deleted, written int, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s.mu.Lock()
	keys := make([]string, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	d, ok := s.store.(driver.Deleter)
	if !ok {
		return 0, len(keys), errors.New("the store cannot delete keys")
	}
	var errs []error
	for _, k := range keys {
		if err := d.Delete(ctx, k); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return len(keys) - len(errs), len(keys), errs[0]
	}
	return len(keys), len(keys), nil
}

// cleanupMessage says what cleanup did.
func (s *scratch) cleanupMessage(deleted, written int, err error) string {
	if err != nil {
		return fmt.Sprintf("deleted %d of the %d keys written under %q; the rest expire within an hour: %v",
			deleted, written, s.prefix, err)
	}
	return fmt.Sprintf("deleted the %d keys written under %q", written, s.prefix)
}

// increment adds 1 to the 8-byte counter at key n times, retrying
// conflicts (nothing was written) and counting them.
func increment(ctx context.Context, s driver.Store, key string, n int, conflicts *atomic.Int64) error {
	for i := 0; i < n; i++ {
		err := s.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) {
			var v uint64
			if len(state) == 8 {
				v = binary.BigEndian.Uint64(state)
			}
			return binary.BigEndian.AppendUint64(nil, v+1), time.Hour, true
		})
		switch {
		case errors.Is(err, driver.ErrConflict):
			conflicts.Add(1)
			i--
		case err != nil:
			return err
		}
	}
	return nil
}

func readCounter(ctx context.Context, s driver.Store, key string) (int64, error) {
	var v int64 = -1
	err := s.Update(ctx, key, func(state []byte) ([]byte, time.Duration, bool) {
		if len(state) == 8 {
			v = int64(binary.BigEndian.Uint64(state))
		}
		return nil, 0, false
	})
	return v, err
}

// runWorker runs one more sluice process incrementing the counter at the
// full key.
func runWorker(ctx context.Context, rawURL, key string, n int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, "check-store-worker", rawURL, key, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("worker process: %w: %s", err, out)
	}
	return nil
}

// runCheckStoreWorker is the hidden command a check-store process runs.
func runCheckStoreWorker(ctx context.Context, args []string, _, _ io.Writer) error {
	if len(args) != 3 || os.Getenv(workerEnv) != "1" {
		return usagef("it is started by check-store")
	}
	n, err := strconv.Atoi(args[2])
	if err != nil || n < 1 {
		return usagef("bad count %q", args[2])
	}
	store, err := storeurl.Open(ctx, args[0])
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Check(ctx); err != nil {
		return err
	}
	var conflicts atomic.Int64
	return increment(ctx, newScratch(store.Store, ""), args[1], n, &conflicts)
}

// IsWorker reports whether this process was started by check-store as a
// writer; a test binary standing in for the command checks it in TestMain.
func IsWorker() bool { return os.Getenv(workerEnv) == "1" }

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
