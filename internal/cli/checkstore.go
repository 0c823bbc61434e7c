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
	"github.com/sluicehq/sluice/internal/storeurl"
)

// workerEnv marks a process started by check-store as one of its writers,
// so that a test binary standing in for the sluice command knows to run
// the worker.
const workerEnv = "SLUICE_CHECK_STORE_WORKER"

func runCheckStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check-store", "[--writers N] [--processes P] [--increments M] URL",
		"Check-store says whether a store is safe to use for shared limits. It has N goroutines\n"+
			"and P processes increment one counter M times each through the store's atomic update\n"+
			"(every increment must be counted), has a limiter admit exactly its limit under\n"+
			"concurrent calls, and runs sluice's own conformance vectors against the store.", stderr)
	writers := fs.Int("writers", 16, "concurrent goroutines writing")
	processes := fs.Int("processes", 2, "concurrent processes writing, each one more sluice process")
	increments := fs.Int("increments", 50, "increments per writer")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole check")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return usagef("sluice check-store: want exactly one URL, got %d arguments", fs.NArg())
	}
	switch {
	case *writers < 1 || *writers > 1024:
		return usagef("sluice check-store: --writers %d: want 1 to 1024", *writers)
	case *processes < 0 || *processes > 64:
		return usagef("sluice check-store: --processes %d: want 0 to 64", *processes)
	case *increments < 1 || *increments > 100000:
		return usagef("sluice check-store: --increments %d: want 1 to 100000", *increments)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rawURL := fs.Arg(0)
	store, err := storeurl.Open(ctx, rawURL)
	if err != nil {
		return fmt.Errorf("sluice check-store: %w", err)
	}
	defer store.Close()

	var problems []string
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		problems = append(problems, msg)
		fmt.Fprintln(stdout, "FAIL", msg)
	}
	if err := store.Check(ctx); err != nil {
		return fmt.Errorf("sluice check-store: %w", err)
	}

	// 1. Every increment counted, from goroutines and processes.
	key := "sluice-check:" + randomHex()
	var conflicts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *writers+*processes)
	for range *writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := increment(ctx, store, key, *increments, &conflicts); err != nil {
				errs <- err
			}
		}()
	}
	for range *processes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runWorker(ctx, rawURL, key, *increments); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fail("writer: %v", err)
	}
	want := int64((*writers + *processes) * *increments)
	got, err := readCounter(ctx, store, key)
	switch {
	case err != nil:
		fail("reading the counter: %v", err)
	case got != want:
		fail("counter is %d after %d increments: %d lost or duplicated", got, want, want-got)
	default:
		fmt.Fprintf(stdout, "ok   %d writers × %d increments (%d goroutines, %d processes): all %d counted, %d conflicts retried\n",
			*writers+*processes, *increments, *writers, *processes, want, conflicts.Load())
	}
	if d, ok := store.Store.(driver.Deleter); ok {
		_ = d.Delete(ctx, key)
	}

	// 2. A limiter admits exactly its limit.
	const limit = 100
	l, err := sluice.NewLimiter(sluice.FixedWindow(limit, time.Hour), sluice.WithStore(store))
	if err != nil {
		return err
	}
	lkey := "sluice-check:" + randomHex()
	var admitted atomic.Int64
	var calls sync.WaitGroup
	for range *writers {
		calls.Add(1)
		go func() {
			defer calls.Done()
			for range 2 * limit / *writers {
				r, err := l.Allow(ctx, lkey)
				if err != nil {
					fail("limiter: %v", err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	calls.Wait()
	if n := admitted.Load(); n != limit && *writers*(2*limit / *writers) >= limit {
		fail("a fixed window of %d admitted %d under concurrent calls", limit, n)
	} else {
		fmt.Fprintf(stdout, "ok   a fixed window of %d admitted exactly %d of %d concurrent calls\n", limit, n, *writers*(2*limit / *writers))
	}
	_ = l.Reset(ctx, lkey)

	// 3. The vectors.
	dir, err := os.MkdirTemp("", "sluice-vectors-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := conformance.WriteVectors(dir); err != nil {
		return err
	}
	r, err := conformance.Run(ctx, conformance.Store{TargetName: store.Scheme, Store: store}, dir)
	if err != nil {
		fail("vectors: %v", err)
	} else if passed, failed, _ := r.Counts(); failed > 0 {
		printReport(stdout, r, false)
		fail("%d of %d vector cases failed", failed, passed+failed)
	} else {
		fmt.Fprintf(stdout, "ok   vectors: %s\n", r.Summary())
	}

	if len(problems) > 0 {
		fmt.Fprintf(stdout, "NOT SAFE: %s failed %d checks; do not share limits through it\n", store.Scheme, len(problems))
		return fmt.Errorf("sluice check-store: %d checks failed", len(problems))
	}
	fmt.Fprintf(stdout, "SAFE: %s passed every check\n", store.Scheme)
	return nil
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

// runWorker runs one more sluice process incrementing the counter.
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
		return usagef("sluice check-store-worker is started by check-store")
	}
	n, err := strconv.Atoi(args[2])
	if err != nil || n < 1 {
		return usagef("sluice check-store-worker: bad count %q", args[2])
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
	return increment(ctx, store, args[1], n, &conflicts)
}

// IsWorker reports whether this process was started by check-store as a
// writer; a test binary standing in for the command checks it in TestMain.
func IsWorker() bool { return os.Getenv(workerEnv) == "1" }

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
