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

	"github.com/sluicehq/sluice/sluicetest"
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
	out, _, err := runCLI(t, "conformance", "../../../conformance/vectors")
	if err != nil {
		t.Errorf("conformance ../../../conformance/vectors = %v, want nil\n%s", err, out)
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

// runMain runs the command line args through Main and returns its
// stdout, its stderr and the exit status.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args   []string
		exit   int
		stdout string // a substring of stdout, or "" for none
		stderr string // a substring of stderr, or "" for none
	}{
		{nil, 2, "", "Commands:"},
		{[]string{"frobnicate"}, 2, "", "sluice: unknown command \"frobnicate\"\nusage: sluice COMMAND [flags] [arguments]\n"},
		{[]string{"help"}, 0, "demo ", ""},
		{[]string{"help", "conformance"}, 0, "-store URL", ""},
		{[]string{"help", "help", "help"}, 2, "", "sluice help: too many arguments\n"},
		{[]string{"conformance", "-h"}, 0, "", "Usage: sluice conformance"},
		{[]string{"version", "extra"}, 2, "", `sluice version: unexpected arguments ["extra"]`},
		// A flag error is the one-line error and the usage line, not the whole help.
		{[]string{"conformance"}, 2, "", "sluice conformance: no PATH given\n" +
			"usage: sluice conformance [--store URL [--store-timeout D]] [-v] PATH...\n(sluice help conformance shows the flags)\n"},
		{[]string{"conformance", "--nope", "x"}, 2, "", "sluice conformance: flag provided but not defined: -nope\n" +
			"usage: sluice conformance [--store URL [--store-timeout D]] [-v] PATH...\n(sluice help conformance shows the flags)\n"},
		{[]string{"demo", "-n", "0"}, 2, "", "sluice demo: -n must be positive"},
		{[]string{"demo", "extra"}, 2, "", "sluice demo: unexpected arguments"},
		{[]string{"demo", "-every", "soon"}, 2, "", `sluice demo: invalid value "soon" for flag -every: `},
		{[]string{"simulate", "-limiter", "api"}, 2, "", "sluice simulate: -traffic is required"},
		{[]string{"simulate", "-limiter", "nope", "-traffic", "steady 1/s"}, 1, "", "sluice simulate: "},
		{[]string{"simulate", "-config", "/nonexistent.yaml", "-limiter", "api", "-traffic", "steady 1/s"}, 1, "", "sluice simulate: "},
		{[]string{"simulate", "-limiter", "api", "-traffic", "trickle"}, 1, "", "sluice simulate: "},
		{[]string{"simulate", "-limiter", "api", "-traffic", "steady 1/s", "-slice", "1ns"}, 1, "", "sluice simulate: 10s in slices of 1ns"},
		{[]string{"simulate", "-limiter", "api", "-traffic", "steady 1/s", "-duration", "0s"}, 2, "", "sluice simulate: -duration 0s: want a positive duration"},
		{[]string{"check-store", "ftp://x"}, 1, "", `sluice check-store: store ftp://x: unknown scheme "ftp"`},
		{[]string{"check-store", "mem://", "extra"}, 2, "", "sluice check-store: want exactly one URL, got 2 arguments\nusage: sluice check-store"},
		{[]string{"serve", "--log-format", "xml"}, 2, "", "sluice serve: --log-format \"xml\": want text or json"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := runMain(t, tt.args...)
			if code != tt.exit {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.exit, errOut)
			}
			if !strings.Contains(out, tt.stdout) || (tt.stdout == "" && out != "") {
				t.Errorf("stdout = %q, want it to contain %q", out, tt.stdout)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr = %q, want it to contain %q", errOut, tt.stderr)
			}
			if tt.exit != 0 && len(tt.args) > 0 && strings.Contains(errOut, "Flags") {
				t.Errorf("stderr = %q, want no help dump on an error", errOut)
			}
			if tt.exit != 0 && len(tt.args) > 0 && (strings.Count(errOut, "sluice "+tt.args[0]+": ") > 1 ||
				strings.Contains(errOut, "sluice "+tt.args[0]+": "+tt.args[0]+": ")) {
				t.Errorf("stderr = %q names the command twice", errOut)
			}
		})
	}
}

// TestHelpFlag: sluice --help and -h print the usage, as sluice help
// does, rather than refusing an unknown command "--help".
func TestHelpFlag(t *testing.T) {
	for _, arg := range []string{"--help", "-help", "-h", "--h"} {
		out, errOut, code := runMain(t, arg)
		if code != 0 || !strings.Contains(out, "Commands:") || errOut != "" {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout", arg, code, out, errOut)
		}
	}
}

// TestSynopsisNamesEveryFlag: a command's usage line names each of its
// flags, or says [flags]; serve's omitted --log-format.
func TestSynopsisNamesEveryFlag(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, c := range commands() {
		if c.name == "help" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			_, help, err := runCLI(t, c.name, "-h")
			if err != nil {
				t.Fatalf("%s -h = %v", c.name, err)
			}
			synopsis, _, _ := strings.Cut(help, "\n")
			if strings.Contains(synopsis, "[flags]") {
				return
			}
			for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
				if !regexp.MustCompile(`(^|[\s\[(|])--?` + m[1] + `\b`).MatchString(synopsis) {
					t.Errorf("usage %q does not name the flag -%s", synopsis, m[1])
				}
			}
		})
	}
}

// TestFlagsAfterArguments: flags may follow the positional arguments in
// every command; conformance DIR --store URL took --store and the URL as
// paths and ran the vectors locally.
func TestFlagsAfterArguments(t *testing.T) {
	dir := vectorDir(t, "6")
	_, _, err := runCLI(t, "conformance", dir, "--store", "ftp://nowhere")
	if err == nil || !strings.Contains(err.Error(), `unknown scheme "ftp"`) {
		t.Errorf("conformance DIR --store ftp:// = %v, want the store's unknown scheme", err)
	}
	out, _, err := runCLI(t, "conformance", dir, "-v")
	if err != nil || !strings.Contains(out, "PASS ") {
		t.Errorf("conformance DIR -v = %v\n%s\nwant the passed cases listed", err, out)
	}
	out, _, err = runCLI(t, "conformance", dir, "--store", "mem://", "-v")
	if err != nil || !strings.Contains(out, "PASS ") {
		t.Errorf("conformance DIR --store mem:// -v = %v\n%s", err, out)
	}
	// After "--", everything is an argument.
	out, _, err = runCLI(t, "conformance", dir, "--", "-v")
	if err == nil || strings.Contains(out, "PASS ") || !strings.Contains(out, "-v") {
		t.Errorf("conformance DIR -- -v = %v\n%s\nwant -v read as a path", err, out)
	}
}

// TestDurationFlags: the commands read durations as config files do.
func TestDurationFlags(t *testing.T) {
	out, _, err := runCLI(t, "simulate", "-limiter", "api", "-traffic", "steady 5/s", "-duration", "3 minutes", "-slice", "30 seconds")
	if err != nil || !strings.Contains(out, "900 requests in 3m0s, slices of 30s") {
		t.Errorf("simulate -duration '3 minutes' -slice '30 seconds' = %v\n%s\nwant slices up to 3 minutes", err, out)
	}
	if _, _, err := runCLI(t, "check-store", "--timeout", "2 fortnights", "mem://"); err == nil || !strings.Contains(err.Error(), `unknown unit "fortnights"`) {
		t.Errorf("check-store --timeout '2 fortnights' = %v, want the unit refused", err)
	}
}

func TestDemoThrottlesABurst(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	var out bytes.Buffer
	if err := demo(t.Context(), &out, clock, 20, 100*time.Millisecond); err != nil {
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
	clock := sluicetest.NewFakeClock(0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := demo(ctx, new(bytes.Buffer), clock, 3, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("demo with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestVersion(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		out := []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	info := func(version string, s []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluicehq/sluice", Version: version}, Settings: s}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	goVCS := settings("vcs.revision", rev, "vcs.time", "2026-11-24T09:00:00Z", "vcs.modified", "true")
	tests := []struct {
		name string
		info *debug.BuildInfo
		ld   stamp
		want string
	}{
		{"go install @version", info("v0.1.0", settings()), stamp{},
			"sluice v0.1.0\ngo1.26.8 linux/amd64\n"},
		{"go install @latest before a tag", info("v0.0.0-20261124090000-0123456789ab", settings()), stamp{},
			"sluice v0.0.0-20261124090000-0123456789ab\ngo1.26.8 linux/amd64\n"},
		{"a clone, Go's VCS stamp", info("v0.0.0-20261124090000-0123456789ab+dirty", goVCS), stamp{},
			"sluice " + devVersion + "+0123456789ab.dirty\nrevision " + rev + " 2026-11-24T09:00:00Z (modified)\ngo1.26.8 linux/amd64\n"},
		{"a clone, -ldflags stamp", info("(devel)", settings()), stamp{rev, "2026-11-24T09:00:00Z", "false"},
			"sluice " + devVersion + "+0123456789ab\nrevision " + rev + " 2026-11-24T09:00:00Z\ngo1.26.8 linux/amd64\n"},
		{"Go's stamp wins over -ldflags", info("(devel)", goVCS), stamp{"fedcba", "", ""},
			"sluice " + devVersion + "+0123456789ab.dirty\nrevision " + rev + " 2026-11-24T09:00:00Z (modified)\ngo1.26.8 linux/amd64\n"},
		{"a clone without a stamp", info("(devel)", settings()), stamp{},
			"sluice " + devVersion + "\nrevision unknown: built without VCS information (-buildvcs=false, a git worktree, or not in a git clone; make image's build stamps it)\ngo1.26.8 linux/amd64\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describe(tt.info, tt.ld); got != tt.want {
				t.Errorf("describe = %q, want %q", got, tt.want)
			}
		})
	}
	out, _, err := runCLI(t, "version")
	if err != nil || !semver.MatchString(strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "sluice ")) || !strings.Contains(out, runtime.Version()) {
		t.Errorf("sluice version = %q, %v; want a semantic version and %s", out, err, runtime.Version())
	}
}

// semver is a semantic version with Go's leading v (semver.org's grammar,
// simplified: any pre-release and build identifiers of its characters).
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func TestDevVersionIsSemantic(t *testing.T) {
	if !semver.MatchString(devVersion) || !strings.HasSuffix(devVersion, "-dev") {
		t.Errorf("devVersion = %q, want a semantic version ending in -dev", devVersion)
	}
}
