package contention

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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

// The shape of the settlement run: holds of holdTokens on one key of a
// bucket of limit tokens that does not refill during the test, each
// settled by every one of processes workers at once, which also charge
// charges tokens each, one at a time.
const (
	holds      = 60
	holdTokens = 10
	charges    = 40
)

// Environment variables of a settlement worker.
const (
	settleURL   = "SLUICE_SETTLE_URL"
	settleKey   = "SLUICE_SETTLE_KEY"
	settleIDs   = "SLUICE_SETTLE_IDS" // the holds' IDs, comma separated
	settleStart = "SLUICE_SETTLE_START"
)

// settleReport is what a settlement worker prints on its last line.
type settleReport struct {
	Settled, Charged, Errors int64
	FirstError               string
}

// costOf is the actual cost the hold i is settled at: above its estimate
// for even i, below it for odd i, so that charges and refunds race.
func costOf(i int) int64 { return 5 + 20*int64((i+1)%2) }

// newSettleLimiter is the limiter of the settlement run on url's store.
func newSettleLimiter(ctx context.Context, t *testing.T, url string) (*sluice.Limiter, func()) {
	store, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Check(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := sluice.NewLimiter(sluice.TokenBucket(limit, 1, 24*time.Hour),
		sluice.WithStore(store), sluice.WithStoreTimeout(storeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return l, func() { store.Close() }
}

// TestSettleContention: every hold is settled by three processes at
// once, beside charges from all three; each hold is settled exactly once,
// and the key ends with exactly the tokens the settled costs and the
// charges leave: none created, none lost. Run by a worker process, it is
// the worker.
func TestSettleContention(t *testing.T) {
	if url := os.Getenv(settleURL); url != "" {
		settleWork(t, url)
		return
	}
	redisURL := testserver.SharedRedis(t)
	pgURL := testserver.SharedPostgres(t)
	mariaDSN := testserver.SharedMariaDB(t)
	dynamo := testserver.SharedDynamo(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "sluice")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sluice")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	stores := []struct{ name, url string }{
		{"redis", redisURL},
		{"postgres/single_statement", pgURL + "&strategy=single_statement"},
		{"postgres/select_for_update", pgURL + "&strategy=select_for_update"},
		{"mariadb/single_statement", mysqlURL(t, mariaDSN) + "?strategy=single_statement"},
		{"dynamodb", "dynamodb://?region=us-east-1&table=sluice_contention&endpoint=" + dynamo},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			l, closeStore := newSettleLimiter(ctx, t, st.url)
			defer closeStore()
			key := fmt.Sprintf("settle/%s/%016x", st.name, rand.Uint64())
			ids := make([]string, holds)
			for i := range ids {
				h, err := l.Hold(ctx, key, holdTokens, time.Hour)
				if err != nil || !h.Allowed {
					t.Fatalf("Hold %d = %+v, %v", i, h, err)
				}
				ids[i] = h.ID
			}
			start := time.Now().Add(3 * time.Second)
			var wg sync.WaitGroup
			reports := make([]settleReport, processes)
			for i := range processes {
				wg.Go(func() { reports[i] = runSettleWorker(t, st.url, key, ids, start) })
			}
			wg.Wait()
			var total settleReport
			for _, r := range reports {
				total.Settled += r.Settled
				total.Charged += r.Charged
				total.Errors += r.Errors
				if total.FirstError == "" {
					total.FirstError = r.FirstError
				}
			}
			if total.Errors != 0 {
				t.Errorf("%d calls failed, want 0; first: %s", total.Errors, total.FirstError)
			}
			if total.Settled != holds {
				t.Errorf("%d settlements found their hold, want each of the %d holds settled once", total.Settled, holds)
			}
			want := int64(limit) - total.Charged
			for i := range holds {
				want -= costOf(i)
			}
			c, err := l.Debt(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if c.Remaining != want || c.Debt != 0 {
				t.Errorf("after the race: %d remaining, debt %d; want %d, no debt", c.Remaining, c.Debt, want)
			}
			t.Logf("%d processes settled %d holds and charged %d: %d left", processes, total.Settled, total.Charged, c.Remaining)
		})
	}
}

// runSettleWorker runs this test binary as a settlement worker and
// returns its report.
func runSettleWorker(t *testing.T, url, key string, ids []string, start time.Time) settleReport {
	return runAs[settleReport](t, "TestSettleContention", []string{settleURL + "=" + url, settleKey + "=" + key,
		settleIDs + "=" + strings.Join(ids, ","), settleStart + "=" + strconv.FormatInt(start.UnixNano(), 10)})
}

// settleWork is a settlement worker: a goroutine per hold settles it,
// beside goroutines charging one token at a time, from the start time
// on; then a report on stdout.
func settleWork(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	l, closeStore := newSettleLimiter(ctx, t, url)
	defer closeStore()
	key, ids := os.Getenv(settleKey), strings.Split(os.Getenv(settleIDs), ",")
	if _, err := l.PeekN(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(os.Getenv(settleStart), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, ns)))
	var settled, charged, failed atomic.Int64
	var first atomic.Pointer[string]
	fail := func(err error) {
		failed.Add(1)
		msg := err.Error()
		first.CompareAndSwap(nil, &msg)
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			c, err := l.Settle(ctx, id, costOf(i))
			switch {
			case err != nil:
				fail(err)
			case c.Settled:
				settled.Add(1)
			}
		})
	}
	for range charges {
		wg.Go(func() {
			if _, err := l.Charge(ctx, key, 1); err != nil {
				fail(err)
				return
			}
			charged.Add(1)
		})
	}
	wg.Wait()
	r := settleReport{Settled: settled.Load(), Charged: charged.Load(), Errors: failed.Load()}
	if p := first.Load(); p != nil {
		r.FirstError = *p
	}
	printReport(t, r)
}
