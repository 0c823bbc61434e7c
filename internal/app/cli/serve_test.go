package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app/server"
	"github.com/sluicehq/sluice/internal/testserver"
)

func TestServeUsage(t *testing.T) {
	tests := [][]string{
		{"serve", "--log-format", "xml"},
		{"serve", "extra"},
		{"serve", "--nope"},
	}
	for _, args := range tests {
		if _, _, err := runCLI(t, args...); !errors.Is(err, ErrUsage) {
			t.Errorf("sluice %s = %v, want a usage error", strings.Join(args, " "), err)
		}
	}
	_, _, err := runCLI(t, "serve", "--config", t.TempDir()+"/missing.yaml")
	if err == nil || ExitCode(err) != 1 || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("sluice serve --config missing.yaml = %v, want an error naming the file", err)
	}
}

// TestServe runs the example in process: it says where it listens, serves
// the API and the simulator's charts there, and stops when its context ends.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout testserver.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "off"}, &stdout, io.Discard)
	}()

	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve printed %q, want the HTTP address", stdout.String())
		}
		_, after, ok := strings.Cut(stdout.String(), "HTTP on ")
		if ok && strings.Contains(after, "\n") {
			addr = strings.TrimSpace(strings.Split(after, "\n")[0])
		}
	}
	if strings.Contains(stdout.String(), "gRPC on") {
		t.Errorf("serve --grpc off printed %q, want no gRPC address", stdout.String())
	}
	resp, err := http.Get(addr + "/api/v1/limiters")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /api/v1/limiters = %d, want 200", resp.StatusCode)
	}
	// The live page's charts: a simulation of a configured limiter.
	resp, err = http.Get(addr + "/api/v1/simulate?limiter=api&traffic=steady+5%2Fs&duration=1m")
	if err != nil {
		t.Fatal(err)
	}
	svg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(svg, []byte(`id="panel-api"`)) || !bytes.Contains(svg, []byte("accepted 100")) {
		t.Errorf("GET /api/v1/simulate = %d %.200s, want a chart of api admitting 100", resp.StatusCode, svg)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after its context ended = %v, want nil", err)
	}
	if !strings.HasSuffix(stdout.String(), "sluice serve: stopped\n") {
		t.Errorf("serve printed %q, want it to end with stopped", stdout.String())
	}
}

// TestServeLogsJSON: with --log-format json every line on stderr is JSON,
// the lines go-redis writes on its own included (Sentinel's choice of
// master, logged as the store is checked at start), which it used to
// print as plain text on the process's stderr.
func TestServeLogsJSON(t *testing.T) {
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := "store: " + testserver.SharedRedisSentinel(t) + "\nlimiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n"
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testserver.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", config, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-format", "json"},
			&stdout, &stderr)
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String(), "gRPC on"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve printed %q, want the addresses; stderr:\n%s", stdout.String(), stderr.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve = %v", err)
	}
	var fromRedis int
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("stderr line %q is not JSON: %v", line, err)
		}
		if entry["lib"] == "go-redis" && strings.Contains(fmt.Sprint(entry["msg"]), "sentinel") {
			fromRedis++
		}
	}
	if fromRedis == 0 {
		t.Errorf("no line of go-redis's on stderr, want its Sentinel lines as JSON:\n%s", stderr.String())
	}
}

// TestTuneGC: the server's GOGC applies when the environment sets none, an
// empty GOGC included (Go's default too), and never over a value of the
// user's.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct {
		env  string
		want int
	}{{"", serveGCPercent}, {"150", 123}, {"off", 123}} {
		t.Setenv("GOGC", c.env)
		debug.SetGCPercent(123) // as the runtime would have set from the environment
		tuneGC()
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("GOGC=%q: GC percent %d after tuneGC, want %d", c.env, got, c.want)
		}
	}
	os.Unsetenv("GOGC")
	debug.SetGCPercent(123)
	tuneGC()
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("GOGC unset: GC percent %d after tuneGC, want %d", got, serveGCPercent)
	}
}

// TestLimitMemory: sluice serve sets Go's memory limit from the config's
// settings (docs/deploy.md: max_keys × 256 bytes + 128 MiB) when the
// environment sets no GOMEMLIMIT, an empty one included, and never over a
// value of the user's. Before, nothing bounded the heap that GOGC=400 let
// grow: a million keys took 619 MiB resident where the docs said 400.
func TestLimitMemory(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	cfg, err := server.LoadConfig([]byte("limiters:\n  l: {policy: no_limit}\nserver:\n  limits: {max_keys: 1000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	const user = 1 << 30 // as the runtime would have set from the environment
	for _, c := range []struct {
		env  string
		want int64
	}{{"", 1000*256 + 128<<20}, {"2GiB", user}, {"off", user}} {
		t.Setenv("GOMEMLIMIT", c.env)
		debug.SetMemoryLimit(user)
		var log bytes.Buffer
		limitMemory(cfg, slog.New(slog.NewTextHandler(&log, nil)))
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("GOMEMLIMIT=%q: memory limit %d after limitMemory, want %d", c.env, got, c.want)
		}
		if said := strings.Contains(log.String(), "GOMEMLIMIT=128MiB"); said != (c.env == "") {
			t.Errorf("GOMEMLIMIT=%q: logged %q", c.env, log.String())
		}
	}
}
