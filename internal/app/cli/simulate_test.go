package cli

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/app/simulate"
)

var update = flag.Bool("update", false, "rewrite docs/charts/*.svg from docs/charts/charts.txt")

func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "l.yaml")
	if err := os.WriteFile(cfg, []byte("limiters:\n  a: {policy: fixed_window, limit: 10, interval: 1s}\n  b: {policy: sliding_window, limit: 10, interval: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "c.svg")
	out, _, err := runCLI(t, "simulate", "-config", cfg, "-limiter", "a", "-compare", "b", "-traffic", "steady 20/s", "-duration", "2s", "-out", svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"40 requests in 2s", "a  ", "fixed_window(limit=10", "20        20", "b  ", "chart written to " + svg} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg ")) {
		t.Errorf("chart: %v, %.40q", err, b)
	}

	// A server's config file, with its other sections, and without one,
	// serve's built-in example.
	server := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(server, []byte("store: mem://\nserver: {http: 127.0.0.1:0}\nlimiters:\n  a: {policy: fixed_window, limit: 10, interval: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-config", server, "-limiter", "a"}, {"-limiter", "api"}} {
		out, _, err := runCLI(t, append([]string{"simulate", "-traffic", "steady 20/s", "-duration", "2s"}, args...)...)
		if err != nil || !strings.Contains(out, "40 requests in 2s") {
			t.Errorf("simulate %q = %v\n%s", args, err, out)
		}
	}
}

func TestSimulateErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("limiters:\n  a: {policy: fixed_window, limit: 10, interval: 1s}\n"), 0o644)
	os.WriteFile(bad, []byte("limiters:\n  a: {policy: fixed_window, limit: 0, interval: 1s}\n"), 0o644)
	for _, tt := range []struct {
		args  []string
		usage bool
		check func(error) bool
		want  string
	}{
		{[]string{"-limiter", "a", "-traffic", "steady 1/s"}, false, nil, `no limiter "a"; the config names api`},
		{[]string{"-config", good, "-traffic", "steady 1/s"}, true, nil, "name a limiter"},
		{[]string{"-config", good, "-limiter", "a"}, true, nil, "-traffic is required"},
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "-duration", "-1s"}, true, nil, "must not be negative"},
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "extra"}, true, nil, "unexpected arguments"},
		// 0 is how the options ask for a default: given on the command
		// line, it ran 10s, as if no -duration had been given.
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "-duration", "0s"}, true, nil, "-duration 0s: want a positive duration"},
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "-slice", "0"}, true, nil, "-slice 0s: want a positive duration"},
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "-window", "0ms"}, true, nil, "-window 0s: want a positive duration"},
		// Each process is a limiter: a huge count ran the machine out of
		// memory before the first request.
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "-processes", "100000000"}, true, nil, "-processes must be 1 to 1000, got 100000000"},
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/s", "-processes", "0"}, true, nil, "-processes must be 1 to 1000, got 0"},
		{[]string{"-config", bad, "-limiter", "a", "-traffic", "steady 1/s"}, false,
			func(err error) bool { var e *config.Error; return errors.As(err, &e) && e.Line == 2 }, "limiters.a.limit (line 2)"},
		{[]string{"-config", good, "-limiter", "z", "-traffic", "steady 1/s"}, false,
			func(err error) bool { var e *simulate.UnknownLimiterError; return errors.As(err, &e) }, `no limiter "z"`},
		{[]string{"-config", good, "-limiter", "a", "-traffic", "steady 1/fortnight"}, false,
			func(err error) bool { var e *simulate.SpecError; return errors.As(err, &e) }, "bad period"},
	} {
		_, _, err := runCLI(t, append([]string{"simulate"}, tt.args...)...)
		switch {
		case err == nil:
			t.Errorf("simulate %q succeeded", tt.args)
		case errors.Is(err, ErrUsage) != tt.usage:
			t.Errorf("simulate %q: %v; usage error: %v, want %v", tt.args, err, errors.Is(err, ErrUsage), tt.usage)
		case tt.check != nil && !tt.check(err):
			t.Errorf("simulate %q: %v (%T) is not the error expected", tt.args, err, err)
		case !strings.Contains(err.Error(), tt.want):
			t.Errorf("simulate %q: %q does not say %q", tt.args, err, tt.want)
		}
	}
}

// TestDocCharts regenerates the charts of docs/choosing-a-policy.md from
// the commands in docs/charts/charts.txt and checks that the committed
// ones are what those commands draw: the guide's charts are made by
// sluice, not by hand, and stay true as sluice changes.
func TestDocCharts(t *testing.T) {
	t.Chdir("../../..")
	f, err := os.Open("docs/charts/charts.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, args, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("charts.txt: %q has no NAME:", line)
		}
		n++
		want := filepath.Join("docs/charts", name+".svg")
		got := filepath.Join(t.TempDir(), name+".svg")
		fields, err := splitArgs(args)
		if err != nil {
			t.Fatalf("charts.txt: %s: %v", name, err)
		}
		if _, _, err := runCLI(t, append(append([]string{"simulate"}, fields...), "-out", got)...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(want, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if committed, err := os.ReadFile(want); err != nil || !bytes.Equal(committed, b) {
			t.Errorf("%s is not what charts.txt draws (%v); run go test ./internal/app/cli -run TestDocCharts -update", want, err)
		}
	}
	if n == 0 {
		t.Error("charts.txt lists no charts")
	}
}

// splitArgs splits a command line on spaces, keeping double-quoted
// arguments whole.
func splitArgs(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				args, in = append(args, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quoted {
		return nil, errors.New("unclosed quote")
	}
	if in {
		args = append(args, cur.String())
	}
	return args, nil
}
