package storeurl

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/mysqlstore"
	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// TestOpenBadURLs: a URL that Open cannot read exactly as written is an
// *Error naming the value (without its password) and, for a scheme, the
// schemes there are. Before the table of schemes, a URL without one
// (a typo) opened the in-memory store.
func TestOpenBadURLs(t *testing.T) {
	tests := []struct {
		url  string
		want []string // in the error
	}{
		{"redis//127.0.0.1:6379/9", []string{"redis//127.0.0.1:6379/9", "no scheme", "redis://", "mem://", "mysql://"}},
		{"", []string{"no scheme", "redis+sentinel://"}},
		{"127.0.0.1:6379", []string{"127.0.0.1:6379", "no scheme"}},
		{"ftp://x", []string{`unknown scheme "ftp"`, "postgres://"}},
		{"mem://localhost", []string{"mem:// takes no host"}},
		{"mem://?max_keys=10", []string{"mem:// takes no host, path or parameters"}},
		{"redis://127.0.0.1:1/0?frobnicate=1", []string{"bad Redis URL", "frobnicate"}},
		{"redis+cluster://127.0.0.1:1,127.0.0.1:2?max_retries=3", []string{`unknown parameter "max_retries"`, "take password_file, password_env"}},
		{"redis+cluster://127.0.0.1:1/3", []string{"database 0 only"}},
		{"redis+sentinel://127.0.0.1:1", []string{"must name the master"}},
		{"redis+sentinel://127.0.0.1:1/m?db=2", []string{`unknown parameter "db"`}},
		{"postgres://127.0.0.1:1/db?strategy=optimistic", []string{`unknown strategy "optimistic"`}},
		{"postgres://127.0.0.1:1/db?table=x;drop", []string{"bad query", "semicolon"}},
		{"postgres://127.0.0.1:1/db?table=", []string{`parameter "table" is empty`}},
		{"postgres://127.0.0.1:1/db?table=1x", []string{"bad store options", "not an SQL identifier"}},
		// Issue 27: pgx sent these to the server, which refused the
		// connection only once it answered; a typo of sluice's own
		// parameters left the default strategy in use until then.
		{"postgres://127.0.0.1:1/db?stratgy=advisory_lock", []string{`unknown parameter "stratgy"`, "strategy, table, sweep_interval", "sslmode"}},
		{"postgres://127.0.0.1:1/db?sslmode=disable&tabel=limits", []string{`unknown parameter "tabel"`}},
		{"postgres://127.0.0.1:1/db?search_path=limits", []string{`unknown parameter "search_path"`, "options=-c%20search_path%3Dlimits"}},
		{"postgres://127.0.0.1:1/db?sweep_interval=10ms", []string{"sweep_interval", "at least 1s", `"10ms"`}},
		{"postgres://127.0.0.1:1/db?sweep_interval=never", []string{"sweep_interval", "or off", `"never"`}},
		{"mysql://127.0.0.1:1/db?sweep_interval=-1m", []string{"sweep_interval", "at least 1s"}},
		{"redis://127.0.0.1:1/0?db=1;x=2", []string{"bad query"}},
		{"mysql://127.0.0.1:1/db?strategy=advisory_lock", []string{`unknown strategy "advisory_lock"`, "single_statement or select_for_update"}},
		{"mysql://root@127.0.0.1:1/db?tls=skip-verify", []string{"parameter tls: want true", `"skip-verify"`}},
		{"mysql://root@127.0.0.1:1/db?ssl=true", []string{`unknown parameter "ssl"`, "strategy, table", "tls_ca_file"}},
		{"mysql://root:hunter2@127.0.0.1:1/db?x=1", []string{"root:xxxxx@"}},
		// pgx takes the password as a parameter too.
		{"postgres://u@127.0.0.1:1/db?password=hunter2&strategy=x", []string{"password=xxxxx&strategy=x", `unknown strategy "x"`}},
		{"postgres://u@127.0.0.1:1/db?sslpassword=hunter2&stratgy=x", []string{"sslpassword=xxxxx&stratgy=x", `unknown parameter "stratgy"`}},
		{"redis://user:hunter2@host:port/x", []string{"(unparsable)"}},
		{"dynamodb://sluice_state?region=us-east-1", []string{"takes no host or path", "?table="}},
		{"dynamodb://?region=us-east-1&consistent=1", []string{`unknown parameter "consistent"`, "endpoint, region, table"}},
		{"dynamodb://?region=us-east-1&endpoint=localhost:8000", []string{`endpoint "localhost:8000" is not an http:// or https:// URL`}},
		{"dynamodb://?region=us-east-1&table=ab", []string{"bad store options", "not a DynamoDB table name"}},
		{"dynamodb://?table=limits", []string{"no region", "AWS_REGION"}},
	}
	awsEnv(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			s, err := Open(t.Context(), tt.url)
			var e *Error
			if !errors.As(err, &e) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open(%q) = %v, %v, want an *Error", tt.url, s, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open(%q) = %q, want it to contain %q", tt.url, err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Open(%q) = %q shows the password", tt.url, err)
			}
		})
	}
}

// TestOpenPostgresParams: a postgres:// URL takes sluice's parameters,
// pgx's and the libpq parameters that pgx sends to the server, and
// Open passes them on: it builds the pool without connecting.
func TestOpenPostgresParams(t *testing.T) {
	for _, u := range []string{
		"postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=5&application_name=sluice",
		"postgresql://u@127.0.0.1:1/db?strategy=advisory_lock&table=limits.state&sweep_interval=30s",
		"postgres://u@127.0.0.1:1/db?sweep_interval=off&pool_max_conns=4&pool_max_conn_idle_time=1m",
		"postgres://u@127.0.0.1:1/db?statement_cache_capacity=64&default_query_exec_mode=exec&target_session_attrs=any",
		"postgres://u@127.0.0.1:1/db?dbname=other&client_encoding=UTF8&options=-c%20search_path%3Dlimits",
		"postgres://u@127.0.0.1:1/db?sslmode=require&sslsni=0&channel_binding=disable&krbsrvname=postgres",
	} {
		s, err := Open(t.Context(), u)
		if err != nil {
			t.Errorf("Open(%q) = %v", u, err)
			continue
		}
		s.Close()
	}
}

// TestOpenStrategy: a SQL store's strategy parameter names its
// Strategy constant, SingleStatement when absent.
func TestOpenStrategy(t *testing.T) {
	tests := []struct {
		url  string
		want string
	}{
		{"postgres://u@127.0.0.1:1/db", "SingleStatement"},
		{"postgres://u@127.0.0.1:1/db?strategy=single_statement", "SingleStatement"},
		{"postgres://u@127.0.0.1:1/db?strategy=select_for_update", "SelectForUpdate"},
		{"postgres://u@127.0.0.1:1/db?strategy=advisory_lock", "AdvisoryLock"},
		{"mysql://u@127.0.0.1:1/db", "SingleStatement"},
		{"mysql://u@127.0.0.1:1/db?strategy=single_statement", "SingleStatement"},
		{"mysql://u@127.0.0.1:1/db?strategy=select_for_update", "SelectForUpdate"},
	}
	for _, tt := range tests {
		s, err := Open(t.Context(), tt.url)
		if err != nil {
			t.Errorf("Open(%q) = %v", tt.url, err)
			continue
		}
		var got string
		switch st := s.Store.(type) {
		case *pgstore.Store:
			got = st.Strategy().String()
		case *mysqlstore.Store:
			got = st.Strategy().String()
		}
		if got != tt.want {
			t.Errorf("Open(%q).Strategy() = %s, want %s", tt.url, got, tt.want)
		}
		s.Close()
	}
}

// TestOpenSweep: the SQL stores sweep only when opened WithSweep, every
// sweep_interval, by default DefaultSweepInterval, never with off.
func TestOpenSweep(t *testing.T) {
	report := func(int64, error) {}
	tests := []struct {
		url   string
		sweep bool
		want  time.Duration
	}{
		{"postgres://u@127.0.0.1:1/db", true, DefaultSweepInterval},
		{"postgres://u@127.0.0.1:1/db?sweep_interval=5m", true, 5 * time.Minute},
		{"postgres://u@127.0.0.1:1/db?sweep_interval=off", true, 0},
		{"postgres://u@127.0.0.1:1/db?sweep_interval=5m", false, 0},
		{"mysql://u@127.0.0.1:1/db", true, DefaultSweepInterval},
		{"mysql://u@127.0.0.1:1/db?sweep_interval=1s", true, time.Second},
		{"mysql://u@127.0.0.1:1/db?sweep_interval=off", true, 0},
		{"mysql://u@127.0.0.1:1/db", false, 0},
		{"mem://", true, 0},
		{"redis://127.0.0.1:1/0", true, 0},
	}
	for _, tt := range tests {
		var opts []Option
		if tt.sweep {
			opts = append(opts, WithSweep(report))
		}
		s, err := Open(t.Context(), tt.url, opts...)
		if err != nil {
			t.Errorf("Open(%q) = %v", tt.url, err)
			continue
		}
		if s.SweepInterval != tt.want {
			t.Errorf("Open(%q), sweep %v: SweepInterval = %v, want %v", tt.url, tt.sweep, s.SweepInterval, tt.want)
		}
		s.Close()
	}
}

// awsEnv gives the AWS SDK made-up credentials, which dynalite accepts,
// and keeps it from the machine's own configuration and from the
// instance metadata service.
func awsEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "sluice",
		"AWS_SECRET_ACCESS_KEY":       "sluice",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             dir + "/config",
		"AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
}

// dynamoURL is the store URL of a table on the dynalite at endpoint.
func dynamoURL(endpoint string) string {
	return "dynamodb://?region=us-east-1&table=sluice_check&endpoint=" + endpoint
}

// TestCheck connects to real servers: a store that answers passes; one
// that does not is ErrUnreachable; one that answers no (a database index
// out of range, a wrong password, a database that does not exist) is an
// error that does not match ErrUnreachable and says what the server said.
func TestCheck(t *testing.T) {
	redisURL := testserver.SharedRedis(t) // redis://127.0.0.1:PORT/0
	pgURL := testserver.SharedPostgres(t)
	mysqlHost := strings.TrimSuffix(strings.TrimPrefix(testserver.SharedMariaDB(t), "root@tcp("), ")/sluice")
	// Where a stopped server was: nothing listens, and nothing else can.
	stopped := "redis://" + testserver.ClosedAddr(t) + "/0"
	host := func(u string) string { return strings.Split(strings.TrimPrefix(u, "redis://"), "/")[0] }
	// A Redis of its own that asks for a password.
	locked := testserver.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: host(locked)})
	if err := rdb.ConfigSet(t.Context(), "requirepass", "sesame").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	awsEnv(t)
	dynamo := testserver.SharedDynamo(t)
	dynamoStopped := "http://" + testserver.ClosedAddr(t)
	tests := []struct {
		name        string
		url         string
		unreachable bool
		want        string // in the error; "" for none
	}{
		{"mem", "mem://", false, ""},
		{"redis", redisURL, false, ""},
		{"postgres", pgURL, false, ""},
		{"mysql", "mysql://root@" + mysqlHost + "/sluice", false, ""},
		{"redis stopped", stopped, true, "connection refused"},
		{"redis db 99", "redis://" + host(redisURL) + "/99", false, "DB index is out of range"},
		{"redis password", "redis://:sesame@" + host(locked) + "/0", false, ""},
		{"redis wrong password", "redis://:hunter2@" + host(locked) + "/0", false, "WRONGPASS"},
		{"redis no password", "redis://" + host(locked) + "/0", false, "NOAUTH"},
		{"sentinel unknown master", strings.TrimSuffix(testserver.SharedRedisSentinel(t), "/sluice") + "/nosuchmaster", false,
			`no Sentinel knows a master called "nosuchmaster"`},
		{"postgres unknown database", strings.Replace(pgURL, "/postgres?", "/nosuchdb?", 1), false, `database "nosuchdb" does not exist`},
		{"mysql unknown database", "mysql://root@" + mysqlHost + "/nosuchdb", false, "Unknown database 'nosuchdb'"},
		{"mysql wrong password", "mysql://root:hunter2@" + mysqlHost + "/sluice", false, "Access denied"},
		{"dynamodb", dynamoURL(dynamo), false, ""},
		{"dynamodb again", dynamoURL(dynamo), false, ""},
		{"dynamodb stopped", dynamoURL(dynamoStopped), true, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			s, err := Open(ctx, tt.url)
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			defer s.Close()
			err = s.Check(ctx)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check(%s) = %v, want nil", tt.url, err)
			case tt.want == "":
				return
			case err == nil:
				t.Fatalf("Check(%s) = nil, want an error containing %q", tt.url, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%s) = %q, want it to contain %q", tt.url, err, tt.want)
			}
			if got := errors.Is(err, ErrUnreachable); got != tt.unreachable {
				t.Errorf("Check(%s) = %q: errors.Is(err, ErrUnreachable) = %v, want %v", tt.url, err, got, tt.unreachable)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Check(%s) = %q shows the password", tt.url, err)
			}
		})
	}
}

// TestServerKilled stops a store's server in the middle of a run: every
// call still returns, with the configured failure policy's answer, each
// counted as a store failure, and nothing panics. That each returns within
// the store timeout is the limiter's deadline, which the root package's
// tests and redisstore's TestOutageLatency check.
func TestServerKilled(t *testing.T) {
	awsEnv(t)
	starts := map[string]func(context.Context) (string, func() error, error){
		"redis":    testserver.StartRedis,
		"postgres": testserver.StartPostgres,
		"dynamodb": func(ctx context.Context) (string, func() error, error) {
			endpoint, stop, err := testserver.StartDynamo(ctx)
			return dynamoURL(endpoint), stop, err
		},
	}
	for name, start := range starts {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			url, stop, err := start(ctx)
			if err != nil {
				var missing *testserver.MissingError
				if errors.As(err, &missing) && os.Getenv("CI") != "true" {
					t.Skip(err)
				}
				t.Fatal(err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = stop()
				}
			})
			store, err := Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if err := store.Check(ctx); err != nil {
				t.Fatal(err)
			}
			counts := new(sluicetest.Counter)
			local, err := sluice.NewLimiter(sluice.FixedWindow(30, time.Hour), sluice.WithStore(store),
				sluice.WithStoreFailure(sluice.FailLocal), sluice.WithObserver(counts), sluice.WithStoreTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			closed, err := sluice.NewLimiter(sluice.FixedWindow(30, time.Hour), sluice.WithStore(store),
				sluice.WithStoreTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if r, err := local.Allow(ctx, "k"); err != nil || !r.Allowed {
					t.Fatalf("call %d with the server up = %+v, %v", i, r, err)
				}
			}
			// A call that timed out on this busy machine with the server
			// up counted in the local fallback already.
			early := counts.StoreFailures(sluice.FailLocal)
			if early > 0 {
				t.Logf("%d calls fell back to local with the server up", early)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			stopped = true
			allowed := 0
			for i := range 40 {
				r, err := local.Allow(ctx, "k")
				if err != nil {
					t.Fatalf("call %d after the kill, failing to local = %v", i, err)
				}
				if r.Allowed {
					allowed++
				}
			}
			// The local fallback starts the key afresh: 30 of its 40 calls
			// pass, less those it took before the kill.
			if got := counts.StoreFailures(sluice.FailLocal); allowed != 30-int(early) || got != early+40 {
				t.Errorf("local fallback allowed %d with %d failures seen, want %d and %d", allowed, got, 30-early, early+40)
			}
			_, err = closed.Allow(ctx, "k")
			var se *sluice.StoreError
			if !errors.As(err, &se) || !(errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrIndeterminate) || errors.Is(err, context.DeadlineExceeded)) {
				t.Errorf("failing closed after the kill = %v, want a *StoreError of an unavailable store", err)
			}
		})
	}
}

// TestRedact: a URL shown in messages, /api and the live page keeps
// everything but its passwords, wherever the URL holds them.
func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                                   "redis://127.0.0.1:6379/0",
		"redis://u:hunter2@h:6379/0":                                 "redis://u:xxxxx@h:6379/0",
		"rediss://u@h:6379/0?password_file=/run/secrets/redis":       "rediss://u@h:6379/0?password_file=/run/secrets/redis",
		"postgres://u@h/db?sslmode=verify-full&password=hunter2":     "postgres://u@h/db?sslmode=verify-full&password=xxxxx",
		"postgres://u:hunter2@h/db?pass%77ord=hunter2&sslpassword=x": "postgres://u:xxxxx@h/db?password=xxxxx&sslpassword=xxxxx",
		"postgres://u@h:port/db?password=hunter2":                    "(unparsable URL)",
		"mysql://u@h/db?password_env=MYSQL_PASSWORD":                 "mysql://u@h/db?password_env=MYSQL_PASSWORD",
		"redis+sentinel://h:26379/m?sentinel_password=hunter2":       "redis+sentinel://h:26379/m?sentinel_password=xxxxx",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}
