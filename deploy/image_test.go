package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The image's contract, as docs/deploy.md states it.
const (
	imageUser       = "65532:65532"
	imageStopSignal = "SIGTERM"
	// stopGrace is how long a stop may take: the config's drain timeout
	// (10s, below) is the most a drain takes, and the Deployment's
	// terminationGracePeriodSeconds, 30s, is what a stop is given.
	stopGrace = 30 * time.Second
)

// imageFiles are every file of the image: no shell, no libc, nothing
// but what sluice reads.
var imageFiles = []string{
	"etc/group", "etc/passwd", "etc/sluice/sluice.yaml", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/sluice",
}

// needPodman skips the test without podman, unless CI=true, where it
// fails: make test installs podman.
func needPodman(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but podman is not installed (scripts/test.sh installs it as root)")
		}
		t.Skip("podman is not installed")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but not root: the image test builds with podman's system storage flags and runs the image under chroot")
		}
		t.Skip("not root: chroot and podman's storage flags need root")
	}
}

// podman is the podman command on a storage of its own under dir, so
// that builds share no cache and the test leaves nothing behind.
type podman []string

func newPodman(dir string) podman {
	return podman{"podman", "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}
}

func (p podman) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.try(args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(p, " "), strings.Join(args, " "), err, out)
	}
	return out
}

func (p podman) try(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(p[0], append(p[1:len(p):len(p)], args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// buildImage runs make image's script with p and returns the image ID.
func buildImage(t *testing.T, p podman, tag string) string {
	t.Helper()
	cmd := exec.Command("./image/build.sh", tag)
	cmd.Env = append(os.Environ(), "PODMAN="+strings.Join(p, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("image/build.sh: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1]) // TAG ID SIZE bytes
	if len(f) != 4 || f[0] != tag {
		t.Fatalf("image/build.sh printed %q, want TAG ID SIZE bytes last", out)
	}
	t.Logf("image %s: ID sha256:%s, %s bytes", tag, f[1], f[2])
	return f[1]
}

type imageConfig struct {
	User         string
	ExposedPorts map[string]struct{}
	Env          []string
	Entrypoint   []string
	Cmd          []string
	StopSignal   string
	Labels       map[string]string
}

// TestImage builds the image twice, each time on a storage of its own,
// and checks both builds give the same image ID; then runs it, with
// podman run where this machine lets podman start containers, and from
// its exported files under chroot in any case, through the same checks:
// health, a decision over HTTP and over gRPC, a reload of its mounted
// config when the config map's link is swapped and on SIGHUP, and a stop
// on its stop signal within the grace period.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make check): builds and runs the image; make test runs it")
	}
	needPodman(t)
	dir := t.TempDir()
	const tag = "localhost/sluice:test"
	p1, p2 := newPodman(filepath.Join(dir, "1")), newPodman(filepath.Join(dir, "2"))
	id := buildImage(t, p1, tag)
	if again := buildImage(t, p2, tag); again != id {
		t.Errorf("two builds of one tree: image IDs %s and %s, want the same", id, again)
	}

	var cfg struct{ Config imageConfig }
	var inspect []json.RawMessage
	if err := json.Unmarshal([]byte(p1.run(t, "image", "inspect", tag)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	if err := json.Unmarshal(inspect[0], &cfg); err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	_, hasHTTP := c.ExposedPorts["8080/tcp"]
	_, hasGRPC := c.ExposedPorts["8081/tcp"]
	if c.User != imageUser || c.StopSignal != imageStopSignal || len(c.ExposedPorts) != 2 || !hasHTTP || !hasGRPC ||
		!slices.Equal(c.Cmd, []string{"--config", "/etc/sluice/sluice.yaml"}) || len(c.Labels) != 0 {
		t.Errorf("image config = %+v, want user %s, stop signal %s, ports 8080 and 8081, the config file as its argument, no label",
			c, imageUser, imageStopSignal)
	}
	ctr := p1.run(t, "create", tag)
	archive := filepath.Join(dir, "rootfs.tar")
	p1.run(t, "export", "-o", archive, ctr)
	p1.run(t, "rm", ctr)
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", rootfs).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	checkFiles(t, rootfs)
	checkVersion(t, rootfs)
	t.Run("chroot", func(t *testing.T) { exercise(t, startChroot(t, rootfs, c)) })
	t.Run("podman run", func(t *testing.T) {
		runArgs, err := podmanRunArgs(p1, tag)
		if err != nil {
			// The chroot subtest ran the same checks on the same files.
			t.Skipf("podman cannot start a container on this machine: %v", err)
		}
		exercise(t, startPodman(t, p1, tag, runArgs))
	})
}

// checkFiles checks that the image holds imageFiles and nothing else,
// and that everything in it belongs to root and only the binary is
// executable.
func checkFiles(t *testing.T, rootfs string) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(rootfs, path)
		files = append(files, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		want := fs.FileMode(0o644)
		if rel == "usr/local/bin/sluice" {
			want = 0o755
		}
		if st.Uid != 0 || st.Gid != 0 || fi.Mode() != want {
			t.Errorf("%s: %v owned by %d:%d, want %v owned by root", rel, fi.Mode(), st.Uid, st.Gid, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	if !slices.Equal(files, imageFiles) {
		t.Errorf("the image's files are %q, want %q", files, imageFiles)
	}
}

// checkVersion runs the image's sluice version and checks it names the
// commit it was built from, stamped by build.sh.
func checkVersion(t *testing.T, rootfs string) {
	t.Helper()
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git clone: %v", err)
	}
	cmd := exec.Command("/usr/local/bin/sluice", "version")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	want := regexp.MustCompile(`^sluice v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?\+` + string(rev[:12]) + `(\.dirty)?\nrevision ` + strings.TrimSpace(string(rev)) + ` `)
	if err != nil || !want.Match(out) {
		t.Errorf("sluice version in the image = %q, %v; want the version and the revision %s", out, err, rev)
	}
}

// instance is a running image.
type instance struct {
	http, grpc string       // addresses
	config     *configMap   // the mounted config directory
	signal     func(string) // sends a signal by name
	stop       func() (code int, logs string)
	logs       func() string
}

// config is the mounted config with api's limit.
func config(limit int) map[string]string {
	return map[string]string{"sluice.yaml": fmt.Sprintf(`store: mem://
server: {drain_timeout: 10s}
limiters:
  api: {policy: fixed_window, limit: %d, interval: 1h}
envoy:
  - domain: edge
    descriptors:
      - key: remote_address
        limiter: api
`, limit)}
}

func exercise(t *testing.T, in *instance) {
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + in.http + path)
		if err != nil {
			t.Fatalf("GET %s: %v\nlogs:\n%s", path, err, in.logs())
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path); code != 200 {
			t.Errorf("GET %s = %d %s, want 200", path, code, body)
		}
	}
	resp, err := http.Post("http://"+in.http+"/api/v1/consume", "application/json", strings.NewReader(`{"limiter":"api","key":"k","tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	var decision struct {
		Allowed          bool
		Remaining, Limit int64
	}
	err = json.NewDecoder(resp.Body).Decode(&decision)
	resp.Body.Close()
	if err != nil || !decision.Allowed || decision.Remaining != 4 || decision.Limit != 5 {
		t.Errorf("POST /api/v1/consume = %+v, %v; want allowed, 4 remaining of 5", decision, err)
	}

	conn, err := grpc.NewClient(in.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rl, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "k"}}}}})
	// The descriptor's key is not the HTTP API's: a key of its own.
	if err != nil || rl.GetOverallCode() != rlsv3.RateLimitResponse_OK || rl.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Errorf("ShouldRateLimit = %v, %v; want OK with 4 remaining of api's 5", rl, err)
	}

	limit := func() int64 {
		t.Helper()
		_, body := get("/api/v1/limiters")
		var l struct{ Limiters []struct{ Limit int64 } }
		if err := json.Unmarshal([]byte(body), &l); err != nil || len(l.Limiters) != 1 {
			t.Fatalf("GET /api/v1/limiters = %s, %v", body, err)
		}
		return l.Limiters[0].Limit
	}
	// The server looks at the file each second; the deadline is generous.
	waitLimit := func(want int64, after string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); limit() != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("api's limit is %d 30s after %s, want %d; logs:\n%s", limit(), after, want, in.logs())
			}
		}
	}
	in.config.write(t, config(7))
	waitLimit(7, "the config map's ..data link moved to a config with limit 7")

	// A change the watcher cannot see (the same size and time) is read on
	// SIGHUP.
	path := filepath.Join(in.config.dir, "sluice.yaml")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(config(9)["sluice.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	in.signal("HUP")
	waitLimit(9, "SIGHUP")
	if !strings.Contains(in.logs(), "reload signal") {
		t.Errorf("no reload signal logged after SIGHUP; logs:\n%s", in.logs())
	}

	start := time.Now()
	code, logs := in.stop()
	took := time.Since(start)
	t.Logf("stopped in %v", took)
	if code != 0 || !regexp.MustCompile(`(?m)^sluice serve: stopped$`).MatchString(logs) {
		t.Errorf("after its stop signal sluice exited %d, %v after it; want 0 and the line stopped; logs:\n%s", code, took, logs)
	}
}

// configMap is a directory laid out as the kubelet lays out a mounted
// config map (its AtomicWriter): the files in a timestamped directory
// ..TIMESTAMP, a link ..data to it, and a link per key to ..data/KEY.
type configMap struct {
	dir string
	n   int
}

// write publishes files as the kubelet does on each update: a new
// directory, a link ..data_tmp to it renamed over ..data, the links of
// new keys, then the old directory removed. Everything is readable by
// the image's user.
func (c *configMap) write(t *testing.T, files map[string]string) {
	t.Helper()
	c.n++
	ts := fmt.Sprintf("..2026_11_29_05_00_%02d.%09d", c.n, 123456789)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.dir, ts, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(c.dir, "..data"))
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func newConfigMap(t *testing.T, dir string) *configMap {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // t.TempDir's are 0700
		t.Fatal(err)
	}
	cm := &configMap{dir: dir}
	cm.write(t, config(5))
	return cm
}

// syncBuffer is a bytes.Buffer safe for a process to write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startChroot runs the image's entrypoint and arguments from its files,
// as its user, with the config directory mounted in its place; only the
// listen addresses are changed, to free loopback ports (the flags given
// last win), as the process shares this machine's network.
func startChroot(t *testing.T, rootfs string, c imageConfig) *instance {
	t.Helper()
	cfgDir := filepath.Join(rootfs, "etc", "sluice")
	if err := os.RemoveAll(cfgDir); err != nil {
		t.Fatal(err)
	}
	cm := newConfigMap(t, cfgDir)
	var uid, gid uint32
	if _, err := fmt.Sscanf(c.User, "%d:%d", &uid, &gid); err != nil {
		t.Fatalf("image user %q: %v", c.User, err)
	}
	args := append(slices.Clone(c.Entrypoint[1:]), c.Cmd...)
	args = append(args, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	cmd := exec.Command(c.Entrypoint[0], args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Dir, cmd.Env = "/", c.Env
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	logs := func() string { return stdout.String() + stderr.String() }
	var httpAddr, grpcAddr string
	for deadline := time.Now().Add(60 * time.Second); grpcAddr == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sluice printed no addresses in 60s:\n%s", logs())
		}
		out := stdout.String()
		if m := regexp.MustCompile(`HTTP on http://(\S+)\n`).FindStringSubmatch(out); m != nil {
			httpAddr = m[1]
		}
		if m := regexp.MustCompile(`gRPC on (\S+)\n`).FindStringSubmatch(out); m != nil {
			grpcAddr = m[1]
		}
	}
	return &instance{
		http: httpAddr, grpc: grpcAddr, config: cm, logs: logs,
		signal: func(name string) {
			if err := cmd.Process.Signal(map[string]syscall.Signal{"HUP": syscall.SIGHUP}[name]); err != nil {
				t.Fatal(err)
			}
		},
		stop: func() (int, string) {
			if err := cmd.Process.Signal(syscall.Signal(unixSignal(t, c.StopSignal))); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				done <- err // for the cleanup
				var ee *exec.ExitError
				switch {
				case err == nil:
					return 0, logs()
				case errors.As(err, &ee):
					return ee.ExitCode(), logs()
				}
				t.Fatal(err)
			case <-time.After(stopGrace):
				t.Fatalf("sluice still runs %v after its stop signal; logs:\n%s", stopGrace, logs())
			}
			return -1, ""
		},
	}
}

// unixSignal is the number of a signal named as in an image config.
func unixSignal(t *testing.T, name string) syscall.Signal {
	t.Helper()
	s, ok := map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT}[name]
	if !ok {
		t.Fatalf("stop signal %q: want SIGTERM or SIGINT, which sluice drains on", name)
	}
	return s
}

// podmanRunArgs returns the flags of podman run with which a container
// of the image starts on this machine, or why none does. Where crun
// cannot set the default limits of open files and processes above this
// process's, or does not run at all (cgroups in hybrid mode), runc with
// this process's limits may.
func podmanRunArgs(p podman, tag string) ([]string, error) {
	var nofile, nproc syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		return nil, err
	}
	if err := syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc); err != nil {
		return nil, err
	}
	// Processes (threads, for the kernel) are counted per user, and an
	// ancestor of the runtime may have a lower bound than this process:
	// 4096 is plenty for sluice.
	nprocs := min(nproc.Cur, 4096)
	limits := []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Cur, nofile.Cur), "--ulimit", fmt.Sprintf("nproc=%d:%d", nprocs, nprocs)}
	candidates := [][]string{nil, limits}
	if _, err := exec.LookPath("runc"); err == nil {
		candidates = append(candidates, append([]string{"--runtime", "runc"}, limits...))
	}
	var errs []error
	for _, args := range candidates {
		probe := append([]string{"run", "--rm", "--network", "none", "--entrypoint", "/usr/local/bin/sluice"}, args...)
		out, err := p.try(append(probe, tag, "version")...)
		if err == nil && strings.HasPrefix(out, "sluice v") {
			return args, nil
		}
		errs = append(errs, fmt.Errorf("podman run %s: %v: %s", strings.Join(args, " "), err, out))
	}
	return nil, errors.Join(errs...)
}

// startPodman runs the image with podman run as a Deployment would: its
// own entrypoint, arguments, user, ports and stop signal, on a read-only
// root file system, with the config directory mounted read-only.
func startPodman(t *testing.T, p podman, tag string, runArgs []string) *instance {
	t.Helper()
	cm := newConfigMap(t, filepath.Join(t.TempDir(), "config"))
	name := fmt.Sprintf("sluice-test-%d", time.Now().UnixNano())
	args := append([]string{"run", "--detach", "--name", name, "--read-only",
		"--volume", cm.dir + ":/etc/sluice:ro", "--publish", "127.0.0.1::8080", "--publish", "127.0.0.1::8081"}, runArgs...)
	p.run(t, append(args, tag)...)
	t.Cleanup(func() { p.try("rm", "--force", name) })
	logs := func() string { out, _ := p.try("logs", name); return out }
	var httpAddr, grpcAddr string
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(logs(), "gRPC on"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sluice printed no addresses in 60s:\n%s", logs())
		}
	}
	httpAddr = p.run(t, "port", name, "8080/tcp")
	grpcAddr = p.run(t, "port", name, "8081/tcp")
	return &instance{
		http: httpAddr, grpc: grpcAddr, config: cm, logs: logs,
		signal: func(sig string) { p.run(t, "kill", "--signal", sig, name) },
		stop: func() (int, string) {
			// podman stop sends the image's stop signal and kills the
			// container when it still runs after --time seconds.
			p.run(t, "stop", "--time", fmt.Sprint(int(stopGrace.Seconds())), name)
			var code int
			if _, err := fmt.Sscan(p.run(t, "inspect", "--format", "{{.State.ExitCode}}", name), &code); err != nil {
				t.Fatal(err)
			}
			return code, logs()
		},
	}
}
