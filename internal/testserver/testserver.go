package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds the start of every server, from looking up its
// binaries to its first answer, and of the Redis Cluster as a whole.
const startTimeout = 60 * time.Second

// stopTimeout is how long stop waits for a server to exit after its stop
// signal before it sends SIGKILL, and again after SIGKILL.
const stopTimeout = 10 * time.Second

// MissingError reports that something a server needs is not installed:
// an executable, or the system user that Postgres runs as under root.
type MissingError struct {
	// What is missing, for example "redis-server".
	What string
	// Where it was looked for.
	Where string
	// Package is the Debian package that provides it, if one does.
	Package string
	// Install says how to install it when no Debian package does.
	Install string
}

// Error says what is missing and how to install it.
func (e *MissingError) Error() string {
	if e.Package == "" {
		return fmt.Sprintf("testserver: %s not found in %s; %s", e.What, e.Where, e.Install)
	}
	return fmt.Sprintf("testserver: %s not found in %s; install the Debian package %s", e.What, e.Where, e.Package)
}

// sbinDirs are searched after PATH, since a non-root PATH usually lacks
// them and mariadbd lives in /usr/sbin.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin"}

// pathDirs is PATH as a list, without empty entries (which would mean the
// current directory).
func pathDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// findInDirs returns the first directory of dirs that holds an
// executable for every one of names, and the paths of those executables.
func findInDirs(dirs []string, names ...string) ([]string, bool) {
	for _, d := range dirs {
		paths := make([]string, len(names))
		ok := true
		for i, n := range names {
			paths[i] = filepath.Join(d, n)
			if !isExecutable(paths[i]) {
				ok = false
				break
			}
		}
		if ok {
			return paths, true
		}
	}
	return nil, false
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// lookPath finds name in PATH or sbinDirs, or returns a *MissingError
// naming pkg.
func lookPath(name, pkg string) (string, error) {
	if p, ok := findInDirs(append(pathDirs(), sbinDirs...), name); ok {
		return p[0], nil
	}
	return "", &MissingError{What: name, Where: "PATH or " + strings.Join(sbinDirs, ", "), Package: pkg}
}

// freePorts returns n distinct TCP ports that are free on 127.0.0.1 and,
// with bus set, whose port+10000 (a Redis Cluster node's bus port) is
// free too. Nothing holds them afterwards: a server started on one may
// still lose it to another process, so callers retry on "Address already
// in use".
func freePorts(n int, bus bool) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100 {
			return nil, errors.New("testserver: no free port on 127.0.0.1")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: find a free port: %w", err)
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if bus {
			if port+10000 > 65535 {
				continue
			}
			lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
			if err != nil {
				continue
			}
			held = append(held, lb)
		}
		ports = append(ports, port)
	}
	return ports, nil
}

// addrInUse reports whether a server's log says that it lost its port to
// another process, which is worth another try on other ports.
func addrInUse(log string) bool {
	return strings.Contains(log, "Address already in use")
}

// runAs is the user a server runs as; nil is the current user.
type runAs struct{ uid, gid uint32 }

// process is a running server with its log file.
type process struct {
	name    string // the binary, for messages
	addr    string // host:port, for messages
	logPath string
	ready   string // in the log once the server listens on addr
	proc    *os.Process
	stopSig os.Signal

	done    chan struct{} // closed once the process has exited
	waitErr error         // cmd.Wait's error, set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// server says how a server's process runs.
type server struct {
	name  string // the executable, for messages and the name of its log
	ready string // a line it logs once it listens
	as    *runAs // nil: the current user
	// stopSig is what stop sends first; deathSig is what the process gets
	// when the test binary exits without stopping it (Linux only).
	stopSig, deathSig syscall.Signal
}

// launch starts cmd, a run of s on 127.0.0.1:port, in dir, with its output
// going to a log in dir, and returns at once.
func (s server) launch(cmd *exec.Cmd, dir string, port int) (*process, error) {
	cmd.Dir = dir
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", s.name, port))
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	defer f.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr(s.as, s.deathSig)
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("testserver: start %s: %w", s.name, err)
	}
	p := &process{name: s.name, addr: addr, logPath: logPath, ready: s.ready, proc: cmd.Process, stopSig: s.stopSig, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// setUp runs cmd, a command that prepares a server's data in dir (initdb,
// mariadb-install-db), as user to its end, with its output in a log in
// dir that its error quotes.
func setUp(cmd *exec.Cmd, name, dir string, user *runAs) error {
	cmd.Dir = dir
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr(user, syscall.SIGKILL)
	if err := startCmd(cmd); err != nil {
		return fmt.Errorf("testserver: start %s: %w", name, err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("testserver: %s: %w%s", name, err, logTail(name, logPath))
	}
	return nil
}

// startIn starts the servers of kind with start, in a directory of their
// own under os.TempDir, in at most startTimeout. start gives own each
// process it launches; the stop that startIn returns stops them, in the
// order given, and removes the directory. If start fails, startIn does
// that at once.
func startIn[T any](ctx context.Context, kind string, start func(ctx context.Context, dir string, own func(*process)) (T, error)) (v T, stop func() error, err error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-"+kind+"-") // short, for the Unix sockets in it (108 bytes)
	if err != nil {
		return v, nil, fmt.Errorf("testserver: %w", err)
	}
	var stops []func() error
	stop = func() error { return stopAll(dir, stops...) }
	if v, err = start(ctx, dir, func(p *process) { stops = append(stops, p.stop) }); err != nil {
		stop()
		var zero T
		return zero, nil, err
	}
	return v, stop, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop signals the process, waits for it to exit, and reports an exit
// that happened before stop was called, since that is a crash. It is
// idempotent.
func (p *process) stop() error {
	p.stopOnce.Do(func() {
		if p.exited() {
			p.stopErr = fmt.Errorf("testserver: %s on %s exited by itself: %v%s", p.name, p.addr, p.waitErr, p.logTail())
			return
		}
		for _, sig := range []os.Signal{p.stopSig, os.Kill} {
			p.proc.Signal(sig) // fails only if it has exited meanwhile
			select {
			case <-p.done:
				return
			case <-time.After(stopTimeout):
			}
		}
		p.stopErr = fmt.Errorf("testserver: %s on %s did not exit %v after SIGKILL", p.name, p.addr, stopTimeout)
	})
	return p.stopErr
}

// logTail returns the end of the log, prefixed with a newline, for an
// error message.
func (p *process) logTail() string {
	return logTail(p.name, p.logPath)
}

// logTail returns the last 4 KiB of the log at path, under a heading that
// names the server.
func logTail(name, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("\n(no log of %s: %v)", name, err)
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return fmt.Sprintf("\n--- end of the log of %s (%s) ---\n%s", name, path, strings.TrimRight(string(b), "\n"))
}

// waitReady calls probe until it succeeds and p has logged that it is
// ready, or until the process exits or ctx is done, and then reports why
// the server is not ready, with its log. The log shows that the server
// answering is p, not another process that took its port.
func waitReady(ctx context.Context, p *process, probe func(ctx context.Context) error) error {
	const interval = 20 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			if b, _ := os.ReadFile(p.logPath); strings.Contains(string(b), p.ready) {
				return nil
			}
			err = fmt.Errorf("%s answers, but its log does not say %q yet", p.addr, p.ready)
		}
		select {
		case <-p.done:
			return fmt.Errorf("testserver: %s on %s exited during start-up: %v%s", p.name, p.addr, p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("testserver: %s on %s not ready: %w (last try: %v)%s", p.name, p.addr, ctx.Err(), err, p.logTail())
		case <-time.After(interval):
		}
	}
}

// startOnFreePort starts a server on a free port and waits until probe
// succeeds on it, trying other ports when the server loses its port to
// another process. start returns the launched process; on failure
// startOnFreePort stops it.
func startOnFreePort(ctx context.Context, start func(port int) (*process, error), probe func(ctx context.Context, addr string) error) (*process, int, error) {
	var err error
	for try := 0; try < 3; try++ {
		var ports []int
		if ports, err = freePorts(1, false); err != nil {
			return nil, 0, err
		}
		var p *process
		if p, err = start(ports[0]); err != nil {
			return nil, 0, err
		}
		addr := p.addr
		err = waitReady(ctx, p, func(ctx context.Context) error { return probe(ctx, addr) })
		if err == nil {
			return p, ports[0], nil
		}
		p.stop()
		if !addrInUse(err.Error()) {
			break
		}
	}
	return nil, 0, err
}

// dial connects to addr on TCP, with ctx's deadline on the connection.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	return c, nil
}

// stopAll runs every stop function, even after an error, removes dir if
// it is not empty, and joins the errors.
func stopAll(dir string, stops ...func() error) error {
	var errs []error
	for _, s := range stops {
		errs = append(errs, s())
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("testserver: %w", err))
		}
	}
	return errors.Join(errs...)
}

// fail skips or fails tb for err from a Start function: a missing server
// skips the test, unless CI is "true".
func fail(tb testing.TB, err error) {
	tb.Helper()
	if me := (*MissingError)(nil); errors.As(err, &me) && os.Getenv("CI") != "true" {
		tb.Skip(err)
	}
	tb.Fatal(err)
}

// skipShort skips tb under go test -short, which make check uses to run
// only the tests that need no server; make test, which CI runs, never
// passes -short.
func skipShort(tb testing.TB, kind string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("testserver: -short (make check) skips the tests that need %s; make test runs them", kind)
	}
}

// forTest starts a server for tb with start and stops it in tb.Cleanup.
func forTest[T any](tb testing.TB, kind string, start func(context.Context) (T, func() error, error)) T {
	tb.Helper()
	skipShort(tb, kind)
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	t0 := time.Now()
	v, stop, err := start(ctx)
	if err != nil {
		fail(tb, err)
	}
	tb.Logf("testserver: %s %v ready in %v", kind, v, time.Since(t0).Round(time.Millisecond))
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Error(err)
		}
	})
	return v
}

// secured is start with the servers secured as sec says, for forTest.
func secured[S, T any](start func(context.Context, *S) (T, func() error, error), sec S) func(context.Context) (T, func() error, error) {
	return func(ctx context.Context) (T, func() error, error) { return start(ctx, &sec) }
}

// Redis starts a Redis server for tb, stops it when tb ends and returns
// its URL, "redis://127.0.0.1:PORT/0". The test is skipped if redis-server
// is not installed, or fails if CI is "true".
func Redis(tb testing.TB) string {
	tb.Helper()
	return forTest(tb, "redis", StartRedis)
}

// PausableRedis is Redis, and also returns pause, which freezes the server
// with SIGSTOP when given true, and thaws it with SIGCONT when given
// false. A frozen server keeps its connections and accepts new ones (the
// kernel does) but answers nothing, as a server that hangs; commands sent
// meanwhile are answered once it thaws. The server is thawed before it is
// stopped.
func PausableRedis(tb testing.TB) (url string, pause func(frozen bool)) {
	tb.Helper()
	var p *process
	url = forTest(tb, "redis", func(ctx context.Context) (string, func() error, error) {
		u, proc, stop, err := startRedisProcess(ctx, nil)
		if err != nil {
			return "", nil, err
		}
		p = proc
		return u, func() error {
			_ = freeze(p.proc, false) // a frozen server would not stop on SIGTERM
			return stop()
		}, nil
	})
	return url, func(frozen bool) {
		if err := freeze(p.proc, frozen); err != nil {
			tb.Errorf("testserver: freeze redis: %v", err)
		}
	}
}

// RedisCluster starts a Redis Cluster of three masters without replicas
// for tb, stops it when tb ends and returns the nodes' addresses,
// "127.0.0.1:PORT". The test is skipped if redis-server is not installed,
// or fails if CI is "true".
func RedisCluster(tb testing.TB) []string {
	tb.Helper()
	return forTest(tb, "redis cluster", StartRedisCluster)
}

// RedisClusterWithReplicas starts a Redis Cluster of three masters with
// a replica each for tb (see StartRedisClusterWithReplicas) and stops it
// when tb ends. The test is skipped if redis-server is not installed, or
// fails if CI is "true".
func RedisClusterWithReplicas(tb testing.TB) *ReplicatedCluster {
	tb.Helper()
	return forTest(tb, "redis cluster with replicas", StartRedisClusterWithReplicas)
}

// RedisSentinel starts a Redis master, a replica and a Sentinel for tb
// (see StartRedisSentinel), stops them when tb ends and returns the
// store URL "redis+sentinel://127.0.0.1:PORT/sluice". The test is skipped
// if redis-server is not installed, or fails if CI is "true".
func RedisSentinel(tb testing.TB) string {
	tb.Helper()
	return forTest(tb, "redis sentinel", StartRedisSentinel)
}

// SecureRedis is Redis, with the server secured as sec says. The URL
// starts with rediss:// when sec.TLS is set.
func SecureRedis(tb testing.TB, sec Secure) string {
	tb.Helper()
	return forTest(tb, "secure redis", func(ctx context.Context) (string, func() error, error) {
		url, _, stop, err := startRedisProcess(ctx, &sec)
		return url, stop, err
	})
}

// SecureRedisCluster is RedisCluster, with the nodes secured as sec says:
// with sec.TLS, the addresses are those of the nodes' TLS ports and the
// cluster bus runs over TLS.
func SecureRedisCluster(tb testing.TB, sec Secure) []string {
	tb.Helper()
	return forTest(tb, "secure redis cluster", secured(startClusterMasters, sec))
}

// SecureRedisSentinel is RedisSentinel, with the master, the replica and
// the Sentinel secured as sec says: with sec.TLS, the URL starts with
// rediss+sentinel:// and the Sentinel speaks TLS to its clients and to
// the servers it watches.
func SecureRedisSentinel(tb testing.TB, sec Secure) string {
	tb.Helper()
	return forTest(tb, "secure redis sentinel", secured(startSentinels, sec))
}

// Postgres starts a PostgreSQL server for tb, stops it when tb ends and
// returns its URL,
// "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable". The test
// is skipped if initdb or postgres is not installed, or fails if CI is
// "true".
func Postgres(tb testing.TB) string {
	tb.Helper()
	return forTest(tb, "postgres", StartPostgres)
}

// SecurePostgres is Postgres, with the server secured as sec says: it
// serves TLS, and sec.User may log in only over TLS, with sec.Password
// and a client certificate whose common name is sec.User (pg_hba.conf's
// scram-sha-256 clientcert=verify-full), while testserver logs in as
// postgres in the clear. It returns the URL of sec.User's database,
// "postgres://USER@127.0.0.1:PORT/USER", without TLS parameters.
func SecurePostgres(tb testing.TB, sec SecureSQL) string {
	tb.Helper()
	return forTest(tb, "secure postgres", secured(startPostgres, sec))
}

// SecureMariaDB is MariaDB, with the server secured as sec says: it
// serves TLS, and sec.User may log in only over TLS, with sec.Password
// and a client certificate (REQUIRE X509), while testserver logs in as
// root in the clear. It returns the sluice store URL of sec.User's
// database, "mysql://USER@127.0.0.1:PORT/USER", without TLS parameters.
func SecureMariaDB(tb testing.TB, sec SecureSQL) string {
	tb.Helper()
	return forTest(tb, "secure mariadb", secured(startMariaDB, sec))
}

// MariaDB starts a MariaDB server with an empty database "sluice" for tb,
// stops it when tb ends and returns a DSN for github.com/go-sql-driver/mysql,
// "root@tcp(127.0.0.1:PORT)/sluice". The test is skipped if MariaDB is not
// installed, or fails if CI is "true".
func MariaDB(tb testing.TB) string {
	tb.Helper()
	return forTest(tb, "mariadb", StartMariaDB)
}

// Dynamo starts dynalite, a DynamoDB-compatible server, for tb (see
// StartDynamo), stops it when tb ends and returns its endpoint,
// "http://127.0.0.1:PORT". The test is skipped if node or dynalite is not
// installed, or fails if CI is "true".
func Dynamo(tb testing.TB) string {
	tb.Helper()
	return forTest(tb, "dynamo", StartDynamo)
}

// mainRunning is set while Main runs the tests.
var mainRunning atomic.Bool

// sharedStops are the stop functions of the shared servers, guarded by
// sharedMu.
var (
	sharedMu    sync.Mutex
	sharedStops []func() error
)

// Main runs the tests of m and then stops the shared servers. A package
// that uses SharedRedis and the like calls it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }
//
// It returns m.Run's exit code, or 1 if stopping a server failed.
func Main(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	mainRunning.Store(false)
	sharedMu.Lock()
	err := stopAll("", sharedStops...)
	sharedStops = nil
	sharedMu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// shared is a server started once per test binary.
type shared[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get starts the server on first use and returns it to every caller,
// skipping or failing tb as Redis does if it could not start.
func (s *shared[T]) get(tb testing.TB, kind string, start func(context.Context) (T, func() error, error)) T {
	tb.Helper()
	skipShort(tb, kind)
	if !mainRunning.Load() {
		tb.Fatalf("testserver: a shared %s needs TestMain to call testserver.Main", kind)
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		t0 := time.Now()
		var stop func() error
		s.v, stop, s.err = start(ctx)
		if s.err != nil {
			return
		}
		tb.Logf("testserver: shared %s %v ready in %v", kind, s.v, time.Since(t0).Round(time.Millisecond))
		sharedMu.Lock()
		sharedStops = append(sharedStops, stop)
		sharedMu.Unlock()
	})
	if s.err != nil {
		fail(tb, s.err)
	}
	return s.v
}

// share returns the function that starts start's server once per test
// binary, on its first call, returns it to every call, and skips or
// fails tb as Redis does if it could not start.
func share[T any](kind string, start func(context.Context) (T, func() error, error)) func(testing.TB) T {
	var s shared[T]
	return func(tb testing.TB) T {
		tb.Helper()
		return s.get(tb, kind, start)
	}
}

// The shared servers: SharedRedis is Redis, and so on, but the server is
// started once per test binary and stopped by Main, which must be running
// the tests. They are safe to call from parallel tests.
var (
	// SharedRedis: tests that share it should use distinct keys.
	SharedRedis = share("redis", StartRedis)
	// SharedRedisCluster: the returned slice is shared; do not modify it.
	SharedRedisCluster = share("redis cluster", StartRedisCluster)
	// SharedRedisSentinel: tests that share it must not fail the master
	// over.
	SharedRedisSentinel = share("redis sentinel", StartRedisSentinel)
	SharedPostgres      = share("postgres", StartPostgres)
	SharedMariaDB       = share("mariadb", StartMariaDB)
	// SharedDynamo: tests that share it should use tables or keys of
	// their own.
	SharedDynamo = share("dynamo", StartDynamo)
)
