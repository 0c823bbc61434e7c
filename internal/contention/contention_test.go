package contention

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// The shape of the run: processes × goroutines callers, each making calls
// calls of one token on one key of a bucket of limit tokens that does not
// refill during the test. processes × goroutines × calls is well above
// limit, and every admitted call before the limit is reached is a write
// that the processes race for.
const (
	processes  = 3
	goroutines = 48
	calls      = 30
	limit      = 3000
	// storeTimeout is the limiters' store timeout: generous, since the
	// property under test is an exact answer under contention on a
	// loaded machine, not latency.
	storeTimeout = 5 * time.Second
	// runTimeout bounds one worker process.
	runTimeout = 2 * time.Minute
)

// Environment variables of a worker process.
const (
	workerURL   = "SLUICE_CONTENTION_URL"
	workerKey   = "SLUICE_CONTENTION_KEY"
	workerStart = "SLUICE_CONTENTION_START" // Unix nanoseconds to start at
	workerSlots = "SLUICE_CONTENTION_SLOTS" // "1": acquire slots of a concurrency limit of slotLimit
)

// slotLimit is the concurrency limit of TestSlotContention, whose slots
// are never released: its workers must acquire exactly that many.
const slotLimit = 500

// report is what a worker prints on its last line of output.
type report struct {
	Allowed, Rejected, Errors int64
	FirstError                string
}

// TestContention runs the workers against each store. Run by a worker
// process, it is the worker.
func TestContention(t *testing.T) {
	if url := os.Getenv(workerURL); url != "" {
		work(t, url)
		return
	}
	redisURL := testserver.SharedRedis(t)
	pgURL := testserver.SharedPostgres(t)
	mariaDSN := testserver.SharedMariaDB(t)
	dynamo := testserver.SharedDynamo(t)
	// Made-up credentials, which dynalite accepts, for the workers too.
	t.Setenv("AWS_ACCESS_KEY_ID", "sluice")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sluice")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	stores := []struct{ name, url string }{
		{"redis", redisURL},
		{"postgres/single_statement", pgURL + "&strategy=single_statement"},
		{"postgres/select_for_update", pgURL + "&strategy=select_for_update"},
		{"postgres/advisory_lock", pgURL + "&strategy=advisory_lock"},
		{"mariadb/single_statement", mysqlURL(t, mariaDSN) + "?strategy=single_statement"},
		{"mariadb/select_for_update", mysqlURL(t, mariaDSN) + "?strategy=select_for_update&table=sluice_sfu"},
		{"dynamodb", "dynamodb://?region=us-east-1&table=sluice_contention&endpoint=" + dynamo},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			key := fmt.Sprintf("contention/%s/%016x", st.name, rand.Uint64())
			start := time.Now().Add(3 * time.Second) // after every worker has connected
			var wg sync.WaitGroup
			reports := make([]report, processes)
			for i := range processes {
				wg.Go(func() { reports[i] = runWorker(t, st.url, key, start, nil) })
			}
			wg.Wait()
			var total report
			for _, r := range reports {
				total.Allowed += r.Allowed
				total.Rejected += r.Rejected
				total.Errors += r.Errors
				if total.FirstError == "" {
					total.FirstError = r.FirstError
				}
			}
			t.Logf("%d processes × %d goroutines × %d calls: %d allowed, %d rejected, %d errors",
				processes, goroutines, calls, total.Allowed, total.Rejected, total.Errors)
			if total.Errors != 0 {
				t.Errorf("%d calls failed under contention on a healthy store, want 0; first: %s", total.Errors, total.FirstError)
			}
			if total.Allowed != limit {
				t.Errorf("admitted %d calls, want exactly the limit %d", total.Allowed, limit)
			}
		})
	}
}

// mysqlURL turns testserver's DSN, "user@tcp(host:port)/db", into a
// store URL.
func mysqlURL(t *testing.T, dsn string) string {
	user, rest, ok1 := strings.Cut(dsn, "@tcp(")
	addr, db, ok2 := strings.Cut(rest, ")/")
	if !ok1 || !ok2 {
		t.Fatalf("unexpected MariaDB DSN %q", dsn)
	}
	return fmt.Sprintf("mysql://%s@%s/%s", user, addr, db)
}

// runWorker runs this test binary as a worker and returns its report.
func runWorker(t *testing.T, url, key string, start time.Time, env []string) report {
	return runAs[report](t, "TestContention", append([]string{workerURL + "=" + url, workerKey + "=" + key,
		workerStart + "=" + strconv.FormatInt(start.UnixNano(), 10)}, env...))
}

// runAs runs this test binary's test as a worker process, with env added
// to its environment, and returns the report R it printed last (see
// printReport); a worker that fails or prints none fails t.
func runAs[R any](t *testing.T, test string, env []string) R {
	var r R
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("worker: %v\n%s", err, out)
		return r
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if line, ok := bytes.CutPrefix(bytes.TrimSpace(lines[i]), []byte("REPORT ")); ok {
			if err := json.Unmarshal(line, &r); err != nil {
				t.Errorf("worker report %q: %v", line, err)
			}
			return r
		}
	}
	t.Errorf("worker printed no report:\n%s", out)
	return r
}

// printReport prints a worker's report r on stdout, for runAs.
func printReport(t *testing.T, r any) {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("REPORT %s\n", b)
}

// work is a worker: goroutines callers on one key, from the start time
// on, then a report on stdout.
func work(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	store, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Check(ctx); err != nil { // creates the SQL or DynamoDB table
		t.Fatal(err)
	}
	p := sluice.TokenBucket(limit, 1, 24*time.Hour)
	slots := os.Getenv(workerSlots) == "1"
	if slots {
		p = sluice.Concurrency(slotLimit, time.Hour)
	}
	l, err := sluice.NewLimiter(p, sluice.WithStore(store), sluice.WithStoreTimeout(storeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	allow := l.Allow
	if slots {
		allow = func(ctx context.Context, key string) (sluice.Result, error) {
			s, err := l.Acquire(ctx, key, 0, 0)
			return s.Result, err
		}
	}
	key := os.Getenv(workerKey)
	// Connect before the start, so that the workers start together.
	if _, err := l.PeekN(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(os.Getenv(workerStart), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, ns)))
	var allowed, rejected, failed atomic.Int64
	var first atomic.Pointer[string]
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				r, err := allow(ctx, key)
				switch {
				case err != nil:
					failed.Add(1)
					msg := err.Error()
					first.CompareAndSwap(nil, &msg)
				case r.Allowed:
					allowed.Add(1)
				default:
					rejected.Add(1)
				}
			}
		})
	}
	wg.Wait()
	r := report{Allowed: allowed.Load(), Rejected: rejected.Load(), Errors: failed.Load()}
	if p := first.Load(); p != nil {
		r.FirstError = *p
	}
	printReport(t, r)
}

// TestSlotContention is TestContention for a concurrency limit, on the
// stores of the fleet test: the workers acquire slots that they never
// release, and together must get exactly slotLimit of them, with no
// error.
func TestSlotContention(t *testing.T) {
	stores := []struct{ name, url string }{
		{"redis", testserver.SharedRedis(t)},
		{"postgres", testserver.SharedPostgres(t)},
		{"mariadb", mysqlURL(t, testserver.SharedMariaDB(t))},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			key := fmt.Sprintf("slots/%s/%016x", st.name, rand.Uint64())
			start := time.Now().Add(3 * time.Second)
			var wg sync.WaitGroup
			reports := make([]report, processes)
			for i := range processes {
				wg.Go(func() { reports[i] = runWorker(t, st.url, key, start, []string{workerSlots + "=1"}) })
			}
			wg.Wait()
			var total report
			for _, r := range reports {
				total.Allowed += r.Allowed
				total.Errors += r.Errors
				if total.FirstError == "" {
					total.FirstError = r.FirstError
				}
			}
			t.Logf("%d processes × %d goroutines × %d acquisitions: %d slots, %d errors", processes, goroutines, calls, total.Allowed, total.Errors)
			if total.Errors != 0 {
				t.Errorf("%d acquisitions failed under contention on a healthy store, want 0; first: %s", total.Errors, total.FirstError)
			}
			if total.Allowed != slotLimit {
				t.Errorf("acquired %d slots, want exactly the limit %d", total.Allowed, slotLimit)
			}
		})
	}
}
