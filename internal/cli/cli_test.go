package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// runCLI runs the command line args and returns its stdout, its stderr and
// the error.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Run(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1]
}

const vectorCase = `{"suite": "test", "cases": [{"name": "ten per second",
  "bucket": {"limits": [{"capacity": 10, "refill": {"kind": "greedy", "tokens": 10, "period": "1s"}}]},
  "steps": [{"op": "try_consume", "tokens": 4, "want": true}, {"op": "available", "want": %s}]},
  {"name": "limiter", "limiter": {"policy": "fixed_window", "limit": 2, "interval": "1s"},
  "steps": [{"op": "consume", "tokens": 2, "want": {"accepted": true, "remaining": 0}}]}]}`

func vectorDir(t *testing.T, want string) string {
	t.Helper()
	dir := t.TempDir()
	content := strings.Replace(vectorCase, "%s", want, 1)
	if err := os.WriteFile(filepath.Join(dir, "v.json"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestConformancePasses(t *testing.T) {
	out, _, err := runCLI(t, "conformance", vectorDir(t, "6"))
	if err != nil {
		t.Errorf("conformance = %v, want nil", err)
	}
	if got, want := out, "2 passed, 0 failed, 0 skipped\n"; got != want {
		t.Errorf("conformance printed %q, want %q", got, want)
	}
}

func TestConformanceRepositoryVectors(t *testing.T) {
	out, _, err := runCLI(t, "conformance", "../../conformance/vectors")
	if err != nil {
		t.Errorf("conformance ../../conformance/vectors = %v, want nil\n%s", err, out)
	}
	if !regexp.MustCompile(`^[1-9][0-9]* passed, 0 failed, 0 skipped$`).MatchString(lastLine(out)) {
		t.Errorf("conformance ended with %q, want N passed, 0 failed, 0 skipped", lastLine(out))
	}
}

func TestConformanceFails(t *testing.T) {
	dir := vectorDir(t, "7")
	out, _, err := runCLI(t, "conformance", "-v", dir)
	if err == nil || ExitCode(err) != 1 {
		t.Errorf("conformance of a failing vector = %v (exit %d), want an error with exit 1", err, ExitCode(err))
	}
	want := `FAIL ` + filepath.Join(dir, "v.json") + `: case "ten per second": step 1 (available): want 7, got 6`
	if !strings.Contains(out, want+"\n") {
		t.Errorf("conformance printed\n%s\nwant a line %q", out, want)
	}
	if !strings.Contains(out, `PASS `+filepath.Join(dir, "v.json")+`: case "limiter"`+"\n") {
		t.Errorf("conformance -v printed\n%s\nwant the passed limiter case", out)
	}
	if got, want := lastLine(out), "1 passed, 1 failed, 0 skipped"; got != want {
		t.Errorf("conformance ended with %q, want %q", got, want)
	}
}

func TestConformanceUnreadablePath(t *testing.T) {
	out, _, err := runCLI(t, "conformance", filepath.Join(t.TempDir(), "missing.json"))
	if err == nil {
		t.Error("conformance of a missing file: no error")
	}
	if got, want := lastLine(out), "0 passed, 1 failed, 0 skipped"; got != want {
		t.Errorf("conformance ended with %q, want %q", got, want)
	}
}

func TestConformanceUnknownStore(t *testing.T) {
	out, _, err := runCLI(t, "conformance", "--store", "ftp://localhost", vectorDir(t, "6"))
	if err == nil || !strings.Contains(err.Error(), "unknown scheme") || ExitCode(err) != 1 {
		t.Errorf("conformance --store ftp:// = %v, want an unknown scheme error", err)
	}
	if out != "" {
		t.Errorf("conformance --store ftp:// printed %q, want nothing", out)
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args     []string
		exit     int
		stdout   string // a substring of stdout, or "" for none
		stderr   string // a substring of stderr, or "" for none
		errorMsg string // a substring of the error
	}{
		{nil, 2, "", "Commands:", "no command given"},
		{[]string{"frobnicate"}, 2, "", "conformance", `unknown command "frobnicate"`},
		{[]string{"help"}, 0, "demo ", "", ""},
		{[]string{"help", "conformance"}, 0, "-store URL", "", ""},
		{[]string{"help", "help", "help"}, 2, "", "", "too many arguments"},
		{[]string{"conformance", "-h"}, 0, "", "Usage: sluice conformance", ""},
		{[]string{"conformance"}, 2, "", "Usage: sluice conformance", "no PATH given"},
		{[]string{"conformance", "--nope", "x"}, 2, "", "flag provided but not defined", "not defined"},
		{[]string{"demo", "-n", "0"}, 2, "", "", "-n must be positive"},
		{[]string{"demo", "extra"}, 2, "", "", "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, err := runCLI(t, tt.args...)
			if got := ExitCode(err); got != tt.exit {
				t.Errorf("exit code = %d (%v), want %d", got, err, tt.exit)
			}
			if tt.exit == 2 && !errors.Is(err, ErrUsage) {
				t.Errorf("error %v does not match ErrUsage", err)
			}
			if tt.errorMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.errorMsg)) {
				t.Errorf("error = %v, want one containing %q", err, tt.errorMsg)
			}
			if !strings.Contains(out, tt.stdout) || (tt.stdout == "" && out != "") {
				t.Errorf("stdout = %q, want it to contain %q", out, tt.stdout)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr = %q, want it to contain %q", errOut, tt.stderr)
			}
		})
	}
}

func TestDemoThrottlesABurst(t *testing.T) {
	clock := sluice.NewFakeClock(1_700_000_000_000_000_000)
	var out bytes.Buffer
	if err := demo(t.Context(), &out, clock, clock, 20, 100*time.Millisecond); err != nil {
		t.Fatalf("demo = %v", err)
	}
	// 5 tokens plus one every 200ms against one request every 100ms: the
	// first 9 pass (5 stored, 4 refilled by 800ms), then every other one.
	rows := regexp.MustCompile(`(?m)^ +(\d+)ms +(\d+)  (allowed|rejected) +(-?\d+)(?:  (\S+))?$`).FindAllStringSubmatch(out.String(), -1)
	if len(rows) != 20 {
		t.Fatalf("demo printed %d request lines, want 20:\n%s", len(rows), out.String())
	}
	for i, row := range rows {
		wantAllowed := i < 9 || i%2 == 0
		if got := row[3] == "allowed"; got != wantAllowed {
			t.Errorf("request %s at %sms: %s, want allowed = %v", row[2], row[1], row[3], wantAllowed)
		}
		if !wantAllowed && row[5] != "100ms" {
			t.Errorf("request %s: retry after %q, want 100ms", row[2], row[5])
		}
	}
	if got, want := rows[19][1], "1900"; got != want {
		t.Errorf("last request at %sms, want %sms", got, want)
	}
	if !strings.Contains(out.String(), "14 of 20 requests allowed") {
		t.Errorf("demo printed\n%s\nwant 14 of 20 requests allowed", out.String())
	}
	if got, want := clock.Slept(), 1900*time.Millisecond; got != want {
		t.Errorf("demo slept %v, want %v", got, want)
	}
}

func TestDemoRealTime(t *testing.T) {
	out, _, err := runCLI(t, "demo", "-n", "8", "-every", "1ms")
	if err != nil {
		t.Fatalf("demo = %v", err)
	}
	// 8 requests within a few milliseconds: the 5 stored tokens pass, and
	// unless the machine stalls for over half a second (3 refills of 200ms)
	// some of the rest are rejected.
	allowed, rejected := strings.Count(out, " allowed "), strings.Count(out, " rejected ")
	if allowed < 5 || rejected < 1 || allowed+rejected != 8 {
		t.Errorf("demo printed %d allowed and %d rejected lines, want 5 or a little more allowed, the rest of 8 rejected:\n%s",
			allowed, rejected, out)
	}
}

func TestDemoCancelled(t *testing.T) {
	clock := sluice.NewFakeClock(0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := demo(ctx, new(bytes.Buffer), clock, clock, 3, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("demo with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestVersion(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-24T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "sluice v0.4.0\nrevision 0123abcd 2026-11-24T09:00:00Z (modified)\ngo1.26.8 linux/amd64\n"
	if got := version(info); got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	out, _, err := runCLI(t, "version")
	if err != nil || !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("sluice version = %q, %v; want the version and %s", out, err, runtime.Version())
	}
}
