package dynamostore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// newClient returns a client of the DynamoDB-compatible server at
// endpoint, with made-up credentials (dynalite checks that a request is
// signed, not by whom).
func newClient(endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "sluice", SecretAccessKey: "sluice"}, nil
		}),
	}, opts...)
}

// newTable returns the name of a table of the test's own.
func newTable() string { return fmt.Sprintf("sluice_test_%016x", rand.Uint64()) }

// newStore returns a Store of a fresh table on the shared server, migrated.
func newStore(t testing.TB, c Client, opts ...Option) *Store {
	t.Helper()
	s, err := New(c, append([]Option{WithTable(newTable())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

func incr(state []byte) ([]byte, time.Duration, bool) {
	return binary.BigEndian.AppendUint64(nil, count(state)+1), time.Hour, true
}

func count(state []byte) uint64 {
	if len(state) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(state)
}

// read returns key's state.
func read(t testing.TB, s *Store, key string) []byte {
	t.Helper()
	var got []byte
	err := s.Update(t.Context(), key, func(state []byte) ([]byte, time.Duration, bool) {
		got = bytes.Clone(state)
		return nil, 0, false
	})
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return got
}

// TestConformance runs the shared store suite with the state cache and
// without it. States expire in whole seconds, up to one late.
func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"cache", nil},
		{"no cache", []Option{WithStateCache(0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, newClient(testserver.SharedDynamo(t)), tt.opts...)
			drivertest.RunConformanceTests(t, wholeSeconds{drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
				return s, nil
			})})
		})
	}
}

// wholeSeconds is a harness whose stores expire states up to a second
// late: DynamoDB's time to live is in whole seconds.
type wholeSeconds struct{ drivertest.Harness }

func (wholeSeconds) TTLGranularity() time.Duration { return time.Second }

// countingClient counts the requests of each operation a Store sends.
type countingClient struct {
	Client
	gets, puts atomic.Int64
}

func (c *countingClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.Client.GetItem(ctx, in, o...)
}

func (c *countingClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	return c.Client.PutItem(ctx, in, o...)
}

// TestRoundTrips counts the requests of an uncontended decision on a key
// that has state: with the cache, one conditional write when the state
// changes, one read when it does not.
func TestRoundTrips(t *testing.T) {
	tests := []struct {
		name                    string
		opts                    []Option
		changedGets, changedPut int64
	}{
		{"cache", nil, 0, 1},
		{"no cache", []Option{WithStateCache(0)}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &countingClient{Client: newClient(testserver.SharedDynamo(t))}
			s := newStore(t, c, tt.opts...)
			for range 3 {
				if err := s.Update(t.Context(), "k", incr); err != nil {
					t.Fatal(err)
				}
			}
			c.gets.Store(0)
			c.puts.Store(0)
			if err := s.Update(t.Context(), "k", incr); err != nil {
				t.Fatal(err)
			}
			if g, p := c.gets.Swap(0), c.puts.Swap(0); g != tt.changedGets || p != tt.changedPut {
				t.Errorf("a changing update sent %d GetItem and %d PutItem, want %d and %d", g, p, tt.changedGets, tt.changedPut)
			}
			if got := count(read(t, s, "k")); got != 4 {
				t.Errorf("count after 4 updates = %d, want 4", got)
			}
			if g, p := c.gets.Load(), c.puts.Load(); g != 1 || p != 0 {
				t.Errorf("an unchanged update sent %d GetItem and %d PutItem, want 1 and 0", g, p)
			}
		})
	}
}

// TestExpiredItemReadsAsAbsent: DynamoDB deletes expired items days
// later, if ever (dynalite never does); an item past its expiry must read
// as no state, and a write must replace it as it would a missing item.
func TestExpiredItemReadsAsAbsent(t *testing.T) {
	c := newClient(testserver.SharedDynamo(t))
	s := newStore(t, c, WithStateCache(0))
	now := time.Unix(1_700_000_000, 250_000_000)
	s.now = func() time.Time { return now }
	ctx := t.Context()
	if err := s.Update(ctx, "k", incr); err != nil { // expires at now+1h
		t.Fatal(err)
	}
	// Kept at least its TTL, rounded up to a whole second: until
	// 1_700_003_601.
	now = time.Unix(1_700_003_600, 999_999_999)
	if got := count(read(t, s, "k")); got != 1 {
		t.Fatalf("count just before expiry = %d, want 1", got)
	}
	now = time.Unix(1_700_003_601, 0)
	if got := read(t, s, "k"); got != nil {
		t.Errorf("state at its expiry = %x, want none", got)
	}
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()), Key: keyOf(itemKey("k"))})
	if err != nil || out.Item == nil {
		t.Fatalf("GetItem of the expired item = %v, %v, want it still in the table", out, err)
	}
	if err := s.Update(ctx, "k", incr); err != nil {
		t.Fatal(err)
	}
	if got := count(read(t, s, "k")); got != 1 {
		t.Errorf("count after an update of an expired state = %d, want 1 (a fresh start)", got)
	}
}

func TestExpiresAt(t *testing.T) {
	base := time.Unix(1000, 0)
	tests := []struct {
		now  time.Time
		ttl  time.Duration
		want int64
	}{
		{base, time.Second, 1001},
		{base, time.Nanosecond, 1001},
		{base, 300 * time.Millisecond, 1001},
		{base.Add(700 * time.Millisecond), 300 * time.Millisecond, 1001},
		{base.Add(700 * time.Millisecond), 300*time.Millisecond + 1, 1002},
		{base, time.Hour, 4600},
	}
	for _, tt := range tests {
		if got := expiresAt(tt.now, tt.ttl); got != tt.want {
			t.Errorf("expiresAt(%v, %v) = %d, want %d", tt.now, tt.ttl, got, tt.want)
		}
	}
}

// TestEmptyAndHugeKeys: DynamoDB refuses an empty key value and binary
// keys over 2048 bytes; every key is accepted all the same.
func TestEmptyAndHugeKeys(t *testing.T) {
	s := newStore(t, newClient(testserver.SharedDynamo(t)))
	keys := []string{"", "\x00", strings.Repeat("k", 2047), strings.Repeat("k", 2048), strings.Repeat("k", 5000)}
	for i, k := range keys {
		for range i + 1 {
			if err := s.Update(t.Context(), k, incr); err != nil {
				t.Fatalf("Update(key %d, %d bytes) = %v", i, len(k), err)
			}
		}
	}
	for i, k := range keys {
		if got := count(read(t, s, k)); got != uint64(i+1) {
			t.Errorf("count of key %d (%d bytes) = %d, want %d", i, len(k), got, i+1)
		}
	}
}

// dropFirstPut is a proxy in front of a server that forwards every
// request, but answers the first PutItem by closing the connection after
// the server has handled it: a write whose answer is lost.
type dropFirstPut struct {
	proxy   *httputil.ReverseProxy
	puts    atomic.Int64
	dropped atomic.Bool
}

func (d *dropFirstPut) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutItem") {
		d.proxy.ServeHTTP(w, r)
		return
	}
	d.puts.Add(1)
	if d.dropped.Swap(true) {
		d.proxy.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	d.proxy.ServeHTTP(rec, r) // the server writes
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// TestLostAnswerIsIndeterminate: a conditional write whose answer is lost
// is driver.ErrIndeterminate, and is not sent again. Sent again (the
// SDK's default retryer), the copy failed its condition against the
// state the first one wrote, and the update ran again on it: two
// increments for one Update, and no error.
func TestLostAnswerIsIndeterminate(t *testing.T) {
	target, err := url.Parse(testserver.SharedDynamo(t))
	if err != nil {
		t.Fatal(err)
	}
	d := &dropFirstPut{proxy: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	direct := newStore(t, newClient(target.String()))
	s, err := New(newClient(srv.URL), WithTable(direct.Table()))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(t.Context(), "k", incr)
	if !errors.Is(err, driver.ErrIndeterminate) {
		t.Errorf("Update with its answer lost = %v, want driver.ErrIndeterminate", err)
	}
	if n := d.puts.Load(); n != 1 {
		t.Errorf("PutItem sent %d times, want once", n)
	}
	if got := count(read(t, direct, "k")); got != 1 {
		t.Errorf("count after one Update whose answer was lost = %d, want 1", got)
	}
}

// fakeDynamo answers each operation (the X-Amz-Target after the dot) with
// the next of its scripted answers, the last one again once they run
// out, and counts the requests.
type fakeDynamo struct {
	mu      sync.Mutex
	answers map[string][]fakeAnswer
	calls   map[string]int
}

type fakeAnswer struct {
	status int
	body   string
}

func (f *fakeDynamo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	f.mu.Lock()
	f.calls[op]++
	as := f.answers[op]
	a := fakeAnswer{http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#UnknownOperationException"}`}
	if n := f.calls[op]; len(as) > 0 {
		a = as[min(n, len(as))-1]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func (f *fakeDynamo) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// apiError is the body of a DynamoDB error of type code.
func apiError(code string) string {
	return fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected"}`, code)
}

// Answers of the fake.
var (
	okEmpty  = fakeAnswer{http.StatusOK, `{}`}
	getStale = fakeAnswer{http.StatusOK, `{"Item":{"key":{"B":"YQ=="},"state":{"B":"c3RhbGU="}}}`} // "stale"
)

// TestErrors maps DynamoDB's answers to the driver's errors, and takes the
// state a failed condition returns without reading it again, as
// DynamoDB answers (dynalite returns no item).
func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		put     []fakeAnswer
		want    error
		puts    int
		fnSaw   []string
		retries int // RetryMaxAttempts of the client
	}{
		{
			name:  "condition failed returns the current state",
			put:   []fakeAnswer{{http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed","Item":{"key":{"B":"YQ=="},"state":{"B":"Y3Vy"}}}`}, okEmpty},
			puts:  2,
			fnSaw: []string{"stale", "cur"},
		},
		{
			name: "throttled is unavailable, after a retry",
			put:  []fakeAnswer{{http.StatusBadRequest, apiError("ProvisionedThroughputExceededException")}},
			want: driver.ErrUnavailable, puts: 2, retries: 2,
			fnSaw: []string{"stale"},
		},
		{
			name: "transaction conflict is a conflict",
			put:  []fakeAnswer{{http.StatusBadRequest, apiError("TransactionConflictException")}},
			want: driver.ErrConflict, puts: 1, retries: 1,
			fnSaw: []string{"stale"},
		},
		{
			name: "a server error on a write is indeterminate, never resent",
			put:  []fakeAnswer{{http.StatusInternalServerError, apiError("InternalServerError")}},
			want: driver.ErrIndeterminate, puts: 1,
			fnSaw: []string{"stale"},
		},
		{
			name: "a refused write is unavailable",
			put:  []fakeAnswer{{http.StatusBadRequest, apiError("ValidationException")}},
			want: driver.ErrUnavailable, puts: 1,
			fnSaw: []string{"stale"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeDynamo{answers: map[string][]fakeAnswer{"GetItem": {getStale}, "PutItem": tt.put}, calls: map[string]int{}}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			c := newClient(srv.URL, func(o *dynamodb.Options) { o.RetryMaxAttempts = tt.retries })
			s, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			var saw []string
			err = s.Update(t.Context(), "a", func(state []byte) ([]byte, time.Duration, bool) {
				saw = append(saw, string(state))
				return []byte("next"), time.Minute, true
			})
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Update = %v, want %v", err, tt.want)
			}
			if got := f.count("PutItem"); got != tt.puts {
				t.Errorf("PutItem sent %d times, want %d", got, tt.puts)
			}
			if got := f.count("GetItem"); got != 1 {
				t.Errorf("GetItem sent %d times, want 1", got)
			}
			if fmt.Sprint(saw) != fmt.Sprint(tt.fnSaw) {
				t.Errorf("fn saw %q, want %q", saw, tt.fnSaw)
			}
		})
	}
}

// TestUnavailable: a server that cannot be reached is
// driver.ErrUnavailable, for a read and for a write that was never sent.
func TestUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := New(newClient("http://"+addr, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Update(ctx, "k", incr); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Update on a closed port = %v, want driver.ErrUnavailable", err)
	}
	if err := s.Delete(ctx, "k"); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Delete on a closed port = %v, want driver.ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Ping on a closed port = %v, want driver.ErrUnavailable", err)
	}
}

func TestMigrate(t *testing.T) {
	c := newClient(testserver.SharedDynamo(t))
	ctx := t.Context()
	t.Run("concurrently", func(t *testing.T) {
		s, err := New(c, WithTable(newTable()))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := s.Migrate(ctx); err != nil {
					t.Errorf("Migrate = %v", err)
				}
			})
		}
		wg.Wait()
		if err := s.Migrate(ctx); err != nil {
			t.Errorf("Migrate again = %v", err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Errorf("Ping after Migrate = %v", err)
		}
		if err := s.Update(ctx, "k", incr); err != nil {
			t.Errorf("Update after Migrate = %v", err)
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		table := newTable()
		_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            aws.String(table),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("key"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("key"), KeyType: types.KeyTypeHash}},
			BillingMode:          types.BillingModePayPerRequest,
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(c, WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Migrate(ctx)
		if err == nil || !strings.Contains(err.Error(), `want partition key "key" of type B`) {
			t.Errorf("Migrate of a table keyed by a string = %v, want an error about its key", err)
		}
	})
	t.Run("missing table", func(t *testing.T) {
		s, err := New(c, WithTable(newTable()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(ctx); !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("Ping of a missing table = %v, want driver.ErrUnavailable", err)
		}
		if err := s.Update(ctx, "k", incr); !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("Update on a missing table = %v, want driver.ErrUnavailable", err)
		}
	})
}

// TestMigrateTTL: Migrate turns time to live on for expires_at, accepts
// it on, and refuses it on for another attribute.
func TestMigrateTTL(t *testing.T) {
	describe := func(status, attr string) fakeAnswer {
		return fakeAnswer{http.StatusOK, fmt.Sprintf(`{"TimeToLiveDescription":{"TimeToLiveStatus":%q,"AttributeName":%q}}`, status, attr)}
	}
	active := fakeAnswer{http.StatusOK, `{"Table":{"TableStatus":"ACTIVE","KeySchema":[{"AttributeName":"key","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"key","AttributeType":"B"}]}}`}
	tests := []struct {
		name      string
		describe  fakeAnswer
		wantErr   string
		wantCalls int // UpdateTimeToLive
	}{
		{"off", describe("DISABLED", ""), "", 1},
		{"on", describe("ENABLED", ExpiresAttribute), "", 0},
		{"enabling", describe("ENABLING", ExpiresAttribute), "", 0},
		{"on for another attribute", describe("ENABLED", "ttl"), `time to live is on for attribute "ttl"`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeDynamo{answers: map[string][]fakeAnswer{
				"DescribeTable":      {active},
				"DescribeTimeToLive": {tt.describe},
				"UpdateTimeToLive":   {okEmpty},
			}, calls: map[string]int{}}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			s, err := New(newClient(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Migrate(t.Context())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Migrate = %v, want %q", err, tt.wantErr)
			}
			if got := f.count("UpdateTimeToLive"); got != tt.wantCalls {
				t.Errorf("UpdateTimeToLive sent %d times, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestInvalidOptions(t *testing.T) {
	c := newClient("http://127.0.0.1:1")
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"short table", []Option{WithTable("ab")}, "not a DynamoDB table name"},
		{"table with a space", []Option{WithTable("a b c")}, "not a DynamoDB table name"},
		{"long table", []Option{WithTable(strings.Repeat("t", 256))}, "not a DynamoDB table name"},
		{"negative cache", []Option{WithStateCache(-1)}, "must not be negative"},
		{"negative attempts", []Option{WithMaxAttempts(-1)}, "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(c, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, %v, want an error containing %q", s, err, tt.want)
			}
		})
	}
	var tne *TableNameError
	if _, err := New(c, WithTable("x")); !errors.As(err, &tne) || tne.Name != "x" {
		t.Errorf("New(WithTable(%q)) = %v, want a *TableNameError", "x", err)
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded, want an error")
	}
}

// TestClassifyTransportErrors: a request cut short while it was written
// never reached DynamoDB whole, so a write that failed so is
// driver.ErrUnavailable and may be sent again; a connection reset after
// the request was written is indeterminate. net/http reported the first
// as a broken pipe when dynalite closed kept-alive connections, which
// failed the suite's updates as indeterminate.
func TestClassifyTransportErrors(t *testing.T) {
	wrap := func(err error) error {
		return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "PutItem",
			Err: &smithyhttp.RequestSendError{Err: &url.Error{Op: "Post", URL: "http://127.0.0.1:1/", Err: err}}}
	}
	brokenPipe := wrap(&net.OpError{Op: "readfrom", Net: "tcp", Err: &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}})
	reset := wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	refused := wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	tests := []struct {
		name       string
		err        error
		write      bool
		want       error
		resendable bool
	}{
		{"broken pipe writing a write", brokenPipe, true, driver.ErrUnavailable, true},
		{"reset after a write was sent", reset, true, driver.ErrIndeterminate, false},
		{"reset after a read was sent", reset, false, driver.ErrUnavailable, false},
		{"refused", refused, true, driver.ErrUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(t.Context(), tt.err, tt.write); !errors.Is(got, tt.want) {
				t.Errorf("classify(%v, write %v) = %v, want %v", tt.err, tt.write, got, tt.want)
			}
			if got := resendable(tt.err); got != tt.resendable {
				t.Errorf("resendable(%v) = %v, want %v", tt.err, got, tt.resendable)
			}
		})
	}
}
