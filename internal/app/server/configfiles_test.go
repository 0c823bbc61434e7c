//go:build linux

package server

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/app/conffile"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/sluicetest"
)

// within runs f and fails the test if it has not returned after a
// generous minute: what it guards against is a read that never ends (a
// named pipe), not slowness.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s still running after a minute", what)
	}
}

// badFiles puts at name in dir each thing that is no config file: a named
// pipe, a link to /dev/zero, a file past conffile.MaxBytes (sparse) and a
// link to a directory... of which the test picks one.
var badFiles = []struct {
	name string
	make func(t *testing.T, path string)
	says string
}{
	{"fifo", func(t *testing.T, path string) { mustDo(t, syscall.Mkfifo(path, 0o644)) }, "named pipe"},
	{"dev zero", func(t *testing.T, path string) { mustDo(t, os.Symlink("/dev/zero", path)) }, "character device"},
	{"oversize", func(t *testing.T, path string) {
		f, err := os.Create(path)
		mustDo(t, err)
		mustDo(t, f.Truncate(conffile.MaxBytes+1))
		mustDo(t, f.Close())
	}, "file too large"},
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRuntimeDirectoryBadFiles: a named pipe, a link to /dev/zero or an
// oversized file among envoyproxy/ratelimit's config files is refused with
// an error naming it, at start and at a reload, where the pipe hung the
// start (and, at a reload, every later reload) and /dev/zero ran the
// process out of memory. The old config keeps serving, and the next good
// change is reloaded.
func TestRuntimeDirectoryBadFiles(t *testing.T) {
	for _, bad := range badFiles {
		t.Run(bad.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "ratelimit", "config")
			mustDo(t, os.MkdirAll(dir, 0o755))
			good := func(rpu string) {
				data := "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: " + rpu + "}}\n"
				mustDo(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(data), 0o644))
			}
			good("1")
			cfg, err := LoadConfig([]byte("ratelimit: {runtime_root: " + root + ", runtime_subdirectory: ratelimit}\n"))
			mustDo(t, err)

			// At start.
			path := filepath.Join(dir, "pipe.yaml")
			bad.make(t, path)
			within(t, "New", func() {
				s, err := New(t.Context(), cfg)
				var ce *config.Error
				if !errors.As(err, &ce) || ce.File != path || !strings.Contains(err.Error(), bad.says) {
					t.Errorf("New with %s = %v, want a *config.Error naming %s and saying %q", bad.name, err, path, bad.says)
				}
				if err == nil {
					s.Close()
				}
			})
			mustDo(t, os.Remove(path))

			// At a reload.
			var log testserver.Buffer
			clock := fakeTime{sluicetest.NewFakeClock(time.Unix(1000000, 0).UnixNano())}
			s, err := New(t.Context(), cfg, withClock(clock, clock.now), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
			mustDo(t, err)
			client := serveGRPC(t, s)
			limit := func() uint32 {
				t.Helper()
				resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
			}
			bad.make(t, path)
			good("2") // an edit beside the bad file: not loaded while it is there
			within(t, "a reload", s.reloadEnvoyFiles)
			if got := limit(); got != 1 {
				t.Errorf("after a reload with %s beside: limit %d, want 1, the old config", bad.name, got)
			}
			if !strings.Contains(log.String(), path) || !strings.Contains(log.String(), bad.says) {
				t.Errorf("the reload's log does not name %s and say %q:\n%s", path, bad.says, log.String())
			}
			mustDo(t, os.Remove(path))
			within(t, "the next reload", s.reloadEnvoyFiles)
			if got := limit(); got != 2 {
				t.Errorf("once %s is gone: limit %d, want 2 from the edit", bad.name, got)
			}
		})
	}
}

// TestRuntimeDirectoryNamedYAML: a directory named like a config file is
// walked into, as envoyproxy/ratelimit's loader does, never read as a
// file; a link to a directory (Kubernetes' ..data) is passed over.
func TestRuntimeDirectoryNamedYAML(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	mustDo(t, os.MkdirAll(filepath.Join(dir, "sub.yaml"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(dir, "sub.yaml", "d.yaml"),
		[]byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 7}}\n"), 0o644))
	mustDo(t, os.Symlink("sub.yaml", filepath.Join(dir, "link.yaml")))
	cfg, err := LoadConfig([]byte("ratelimit: {runtime_root: " + root + ", runtime_subdirectory: ratelimit}\n"))
	mustDo(t, err)
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New with a directory named sub.yaml = %v, want its files loaded", err)
	}
	s.Close()
}

// TestConfigFileBadFiles: --config naming a named pipe, a link to
// /dev/zero, an oversized file or a directory is refused at start with an
// error naming it; a config file replaced by one of them is refused at
// the next reload, the old config staying, where the pipe hung the
// reload and every one after it.
func TestConfigFileBadFiles(t *testing.T) {
	cases := append(badFiles[:len(badFiles):len(badFiles)], struct {
		name string
		make func(t *testing.T, path string)
		says string
	}{"directory", func(t *testing.T, path string) { mustDo(t, os.Mkdir(path, 0o755)) }, "directory"})
	for _, bad := range cases {
		t.Run(bad.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sluice.yaml")
			bad.make(t, path)
			within(t, "LoadConfigFile", func() {
				_, err := LoadConfigFile(path)
				var ce *config.Error
				if !errors.As(err, &ce) || ce.File != path || !strings.Contains(err.Error(), bad.says) {
					t.Errorf("LoadConfigFile of %s = %v, want a *config.Error naming %s and saying %q", bad.name, err, path, bad.says)
				}
			})
			mustDo(t, os.Remove(path))

			good := "limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n"
			mustDo(t, os.WriteFile(path, []byte(good), 0o644))
			s, log := newFromFile(t, path)
			mustDo(t, os.Remove(path))
			bad.make(t, path)
			within(t, "a reload", func() { s.reloadFile(true) })
			if !strings.Contains(log.String(), path) || !strings.Contains(log.String(), bad.says) {
				t.Errorf("the reload's log does not name %s and say %q:\n%s", path, bad.says, log.String())
			}
			if _, ok := s.cur.Load().limiters["api"]; !ok {
				t.Error("the old config is gone after a failed reload")
			}
			mustDo(t, os.RemoveAll(path))
			mustDo(t, os.WriteFile(path, []byte(strings.Replace(good, "api", "api2", 1)), 0o644))
			within(t, "the next reload", func() { s.reloadFile(false) })
			if _, ok := s.cur.Load().limiters["api2"]; !ok {
				t.Errorf("the good file after the bad one was not reloaded:\n%s", log.String())
			}
		})
	}
}

// TestAuthAndTLSFilesBadFiles: the token file and the TLS files are read
// the same way: a named pipe is refused at once.
func TestAuthAndTLSFilesBadFiles(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	mustDo(t, syscall.Mkfifo(pipe, 0o644))
	cert, key := selfSigned(t)
	for _, tt := range []struct{ name, yaml string }{
		{"token_file", "server: {auth: {token_file: " + pipe + "}}\n"},
		{"tls cert", "server: {tls: {cert: " + pipe + ", key: " + key + "}}\n"},
		{"tls key", "server: {tls: {cert: " + cert + ", key: " + pipe + "}}\n"},
		{"client_ca", "server: {tls: {cert: " + cert + ", key: " + key + ", client_ca: " + pipe + "}}\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfig([]byte(tt.yaml + "limiters:\n  api: {policy: no_limit}\n"))
			mustDo(t, err)
			within(t, "New", func() {
				s, err := New(t.Context(), cfg)
				if !errors.Is(err, conffile.ErrNotRegular) || !strings.Contains(err.Error(), pipe) {
					t.Errorf("New with %s a named pipe = %v, want ErrNotRegular naming it", tt.name, err)
				}
				if err == nil {
					s.Close()
				}
			})
		})
	}
}

// newFromFile starts a server on the config file at path, reloading it,
// with its log in the returned buffer; the server is closed when t ends.
func newFromFile(t *testing.T, path string) (*Server, *testserver.Buffer) {
	t.Helper()
	cfg, err := LoadConfigFile(path)
	mustDo(t, err)
	log := new(testserver.Buffer)
	s, err := New(t.Context(), cfg, WithConfigFile(path, nil), WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	mustDo(t, err)
	t.Cleanup(func() { s.Close() })
	return s, log
}
