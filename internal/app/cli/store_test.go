package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
)

func TestMain(m *testing.M) {
	if IsWorker() { // this test binary stands in for sluice as a check-store writer
		err := Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(ExitCode(err))
	}
	os.Exit(testserver.Main(m))
}

// storeURLs are the URLs of every kind of store, on throwaway servers. It
// gives the AWS SDK made-up credentials, which dynalite accepts, for t's
// processes and their writers.
func storeURLs(t *testing.T) map[string]string {
	mysqlDSN := testserver.SharedMariaDB(t) // root@tcp(127.0.0.1:PORT)/sluice
	hostPort := strings.TrimSuffix(strings.TrimPrefix(mysqlDSN, "root@tcp("), ")/sluice")
	t.Setenv("AWS_ACCESS_KEY_ID", "sluice")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sluice")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return map[string]string{
		"mem":            "mem://",
		"redis":          testserver.SharedRedis(t),
		"redis+cluster":  "redis+cluster://" + strings.Join(testserver.SharedRedisCluster(t), ","),
		"redis+sentinel": testserver.SharedRedisSentinel(t),
		"postgres":       testserver.SharedPostgres(t),
		"postgres-sfu":   addQuery(testserver.SharedPostgres(t), "strategy=select_for_update&table=sluice_sfu"),
		"postgres-lock":  addQuery(testserver.SharedPostgres(t), "strategy=advisory_lock&table=sluice_lock"),
		"mysql":          "mysql://root@" + hostPort + "/sluice",
		"mysql-sfu":      "mysql://root@" + hostPort + "/sluice?strategy=select_for_update&table=sluice_sfu",
		"dynamodb":       "dynamodb://?region=us-east-1&endpoint=" + testserver.SharedDynamo(t),
	}
}

func addQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

// TestCheckStore runs check-store, with writer processes, on every store.
func TestCheckStore(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			verdict := "SAFE: "
			if name == "mem" {
				verdict = "ONE PROCESS ONLY: " // TestCheckStoreInProcess
			}
			out, _, err := runCLI(t, "check-store", "--writers", "8", "--processes", "2", "--increments", "20", url)
			if err != nil || !strings.HasPrefix(lastLine(out), verdict) {
				t.Errorf("check-store %s = %v\n%s", url, err, out)
			}
		})
	}
}

// TestConformanceStore runs the repository's vectors through
// `sluice conformance --store` on every store.
func TestConformanceStore(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			// A loaded machine may answer a call in over the default 1s.
			out, _, err := runCLI(t, "conformance", "--store", url, "--store-timeout", "10s", "../../../conformance/vectors")
			last := lastLine(out)
			if err != nil || !strings.Contains(last, " 0 failed") || strings.HasPrefix(last, "0 passed") {
				t.Errorf("conformance --store %s = %v\n%s", url, err, out)
			}
		})
	}
}

func TestCheckStoreBadURL(t *testing.T) {
	_, _, err := runCLI(t, "check-store", "ftp://nowhere")
	if err == nil || !strings.Contains(err.Error(), `unknown scheme "ftp"`) {
		t.Errorf("check-store ftp:// = %v, want an unknown scheme error", err)
	}
}

// TestCheckStoreInProcess: mem:// is one process's memory, so writer
// processes each had a store of their own, and check-store called what they
// wrote lost: "NOT SAFE", exit 1, where nothing was lost. It says what the
// store is instead, with or without --processes.
func TestCheckStoreInProcess(t *testing.T) {
	for _, processes := range []string{"0", "2"} {
		out, _, err := runCLI(t, "check-store", "--writers", "2", "--processes", processes, "--increments", "10", "mem://")
		if err != nil || strings.Contains(out, "FAIL") || !strings.HasPrefix(lastLine(out), "ONE PROCESS ONLY: ") ||
			!strings.Contains(out, "2 writers × 10 increments") {
			t.Errorf("check-store --processes %s mem:// = %v\n%s", processes, err, out)
		}
		if want := "other processes cannot see it"; processes != "0" && !strings.Contains(out, want) {
			t.Errorf("check-store --processes %s mem:// does not say %q:\n%s", processes, want, out)
		}
	}
}

// leftovers counts the keys under prefix in the store at url, as the
// store keeps them: Redis keys under redisstore's prefix, rows of the SQL
// stores' default table, items of DynamoDB's.
func leftovers(t *testing.T, url, prefix string) int {
	t.Helper()
	ctx := t.Context()
	switch {
	case strings.HasPrefix(url, "redis://"):
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opt)
		defer c.Close()
		keys, err := c.Keys(ctx, "*"+prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	case strings.HasPrefix(url, "postgres://"):
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM sluice_state WHERE key LIKE $1", prefix+"%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	case strings.HasPrefix(url, "mysql://"):
		db, err := sql.Open("mysql", mysqlDSN(url))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sluice_state WHERE `key` LIKE ?", prefix+"%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	case strings.HasPrefix(url, "dynamodb://"):
		endpoint := strings.TrimPrefix(url, "dynamodb://?region=us-east-1&endpoint=")
		c := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "sluice", SecretAccessKey: "sluice"}, nil
			})})
		out, err := c.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String("sluice_state"),
			FilterExpression:          aws.String("begins_with(#k, :p)"),
			ExpressionAttributeNames:  map[string]string{"#k": "key"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberB{Value: []byte("sluice:" + prefix)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Items)
	}
	t.Fatalf("leftovers: no way to look into %s", url)
	return 0
}

// mysqlDSN turns mysql://root@HOST:PORT/DB into root@tcp(HOST:PORT)/DB.
func mysqlDSN(url string) string {
	userHost, db, _ := strings.Cut(strings.TrimPrefix(url, "mysql://"), "/")
	user, host, _ := strings.Cut(userHost, "@")
	return user + "@tcp(" + host + ")/" + db
}

var scratchPrefix = regexp.MustCompile(`writes keys under "(sluice-check-[0-9a-f]+:)"`)

// TestCheckStoreLeavesNothing: check-store says up front where it writes,
// and deletes every key it wrote (it left its counter without expiry and
// the vectors' keys for up to 146 years).
func TestCheckStoreLeavesNothing(t *testing.T) {
	urls := storeURLs(t)
	for _, name := range []string{"redis", "postgres", "mysql", "dynamodb"} {
		t.Run(name, func(t *testing.T) {
			url := urls[name]
			out, _, err := runCLI(t, "check-store", "--writers", "4", "--processes", "1", "--increments", "5", url)
			if err != nil {
				t.Fatalf("check-store %s = %v\n%s", url, err, out)
			}
			m := scratchPrefix.FindStringSubmatch(strings.SplitN(out, "\n", 2)[0])
			if m == nil {
				t.Fatalf("check-store's first line does not say where it writes:\n%s", out)
			}
			if !regexp.MustCompile(`deleted the [1-9][0-9]* keys written under "` + m[1] + `"`).MatchString(out) {
				t.Errorf("check-store does not say it deleted its keys:\n%s", out)
			}
			if n := leftovers(t, url, m[1]); n != 0 {
				t.Errorf("check-store left %d keys under %s in %s", n, m[1], url)
			}
		})
	}
}

// TestCheckStoreInterrupted cancels check-store (as Ctrl-C does) while its
// writers run: it still deletes what it wrote.
func TestCheckStoreInterrupted(t *testing.T) {
	url := storeURLs(t)["redis"]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out testserver.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"check-store", "--processes", "0", "--increments", "100000", url}, &out, io.Discard)
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "\n"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("check-store printed nothing within 30s")
		}
	}
	time.Sleep(100 * time.Millisecond) // let the writers write
	cancel()
	if err := <-done; err == nil {
		t.Errorf("check-store cancelled = nil error, want one")
	}
	m := scratchPrefix.FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(out.String(), "deleted the ") || !strings.Contains(out.String(), "UNKNOWN: interrupted") ||
		strings.Contains(out.String(), "FAIL") {
		t.Fatalf("check-store cancelled printed:\n%s\nwant where it wrote, that it was interrupted (no failures) and that it deleted its keys", out.String())
	}
	if n := leftovers(t, url, m[1]); n != 0 {
		t.Errorf("check-store cancelled left %d keys under %s", n, m[1])
	}
}

// TestConformanceStoreLeavesNothing: conformance --store deletes the keys
// of its cases.
func TestConformanceStoreLeavesNothing(t *testing.T) {
	url := storeURLs(t)["redis"]
	out, errOut, err := runCLI(t, "conformance", "--store", url, "../../../conformance/vectors")
	if err != nil {
		t.Fatalf("conformance --store = %v\n%s%s", err, out, errOut)
	}
	if n := leftovers(t, url, "sluice-conformance-"); n != 0 {
		t.Errorf("conformance --store left %d keys", n)
	}
}

// deadlineOf is a store that notes the deadline of each Update's context
// (the zero Time for none) on got.
type deadlineOf struct {
	driver.Store
	got chan time.Time
}

func (s deadlineOf) Update(ctx context.Context, key string, f driver.UpdateFunc) error {
	d, _ := ctx.Deadline()
	select {
	case s.got <- d:
	default: // only the first is checked
	}
	return s.Store.Update(ctx, key, f)
}

// TestConformanceStoreTimeout: conformance --store bounds each store call
// by --store-timeout: the store is given it as the call's deadline, from
// a time within the call. (Before, a store answering after 1.2 s had to
// fail at 1 s and pass at 10 s, a bet on how slow the machine was.)
func TestConformanceStoreTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{sluice.DefaultStoreTimeout, 10 * time.Second} {
		target, release, err := targetFor(t.Context(), "mem://", timeout, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		st := target.(conformance.Store)
		store := deadlineOf{st.Store, make(chan time.Time, 1)}
		st.Store = store
		l, err := st.NewLimiter(t.Context(), sluice.FixedWindow(1, time.Hour), sluice.WallClock())
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		r, err := l.AllowN(t.Context(), "k", 1)
		after := time.Now()
		if err != nil || !r.Allowed {
			t.Errorf("--store-timeout %v: AllowN = %+v, %v; want allowed", timeout, r, err)
		}
		select {
		case got := <-store.got:
			if got.Before(before.Add(timeout)) || got.After(after.Add(timeout)) {
				t.Errorf("--store-timeout %v: the store's deadline is %v from the call's start, want %v from a time within the call (which took %v)",
					timeout, got.Sub(before), timeout, after.Sub(before))
			}
		default:
			t.Errorf("--store-timeout %v: the store was not asked", timeout)
		}
		release()
	}
}

func TestConformanceBadStoreTimeout(t *testing.T) {
	for _, args := range [][]string{
		{"--store", "mem://", "--store-timeout", "0s", "../../../conformance/vectors"},
		{"--store", "mem://", "--store-timeout", "soon", "../../../conformance/vectors"},
		{"--store-timeout", "5s", "../../../conformance/vectors"},
	} {
		_, _, err := runCLI(t, append([]string{"conformance"}, args...)...)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "store-timeout") {
			t.Errorf("conformance %q = %v, want a usage error naming --store-timeout", args, err)
		}
	}
}

// failing is a store whose every update fails.
type failing struct{}

func (failing) Update(context.Context, string, driver.UpdateFunc) error {
	return fmt.Errorf("failing: %w", driver.ErrUnavailable)
}

// TestCheckLimiterFailures: the limiter check's writers report their
// failures concurrently (a data race on the list of problems once).
func TestCheckLimiterFailures(t *testing.T) {
	var out testserver.Buffer
	r := &checkReport{w: &out, ctx: t.Context()}
	if err := checkLimiter(t.Context(), r, newScratch(failing{}, "p:"), 8); err != nil {
		t.Fatal(err)
	}
	if got := r.failed(); got < 8 {
		t.Errorf("%d failures reported by 8 failing writers, want at least 8:\n%s", got, out.String())
	}
}
