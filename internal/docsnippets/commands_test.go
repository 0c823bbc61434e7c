package docsnippets

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// commandLine is a line of a shell block of the docs.
type commandLine struct {
	where string // file:line
	text  string
}

// commandLines returns the lines of path's shell blocks: ```sh, ```bash,
// ```console and bare ``` blocks, and indented blocks.
func commandLines(t *testing.T, path string) []commandLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []commandLine
	fenced, shell := false, false
	for i, line := range strings.Split(string(data), "\n") {
		if info, ok := strings.CutPrefix(line, "```"); ok {
			if fenced = !fenced; fenced {
				shell = info == "" || info == "sh" || info == "bash" || info == "console"
			}
			continue
		}
		if (fenced && shell) || (!fenced && strings.HasPrefix(line, "    ")) {
			out = append(out, commandLine{fmt.Sprintf("%s:%d", path, i+1), line})
		}
	}
	return out
}

// uninstalled is a command line that runs sluice other than by its
// installed name: go run or go build of ./cmd/sluice, or a binary in the
// working directory.
var uninstalled = regexp.MustCompile(`go (run|build)\b.*\./cmd/sluice|(^|[\s$;&|(])\./sluice\b`)

// TestDocsUseInstalledCommand: the docs' commands run the installed
// sluice, as a reader who followed the README's install step has it,
// except the README's set-up block, which runs it from a clone.
func TestDocsUseInstalledCommand(t *testing.T) {
	setup := regexp.MustCompile("(?s)## Set up\n.*?```sh\n(.*?)```").FindStringSubmatch(readFile(t, "../../README.md"))
	if setup == nil || !strings.Contains(setup[1], "go run ./cmd/sluice serve") {
		t.Fatal("README.md's Set up block no longer runs go run ./cmd/sluice serve")
	}
	for _, f := range docFiles(t) {
		for _, l := range commandLines(t, f) {
			if uninstalled.MatchString(l.text) && !strings.Contains(setup[1], l.text) {
				t.Errorf("%s: %q runs sluice other than as the installed sluice (README.md, Install)", l.where, strings.TrimSpace(l.text))
			}
		}
	}
	// The check can fail.
	for _, bad := range []string{"go run ./cmd/sluice simulate", "$ ./sluice serve", "go build -o sluice ./cmd/sluice"} {
		if !uninstalled.MatchString(bad) {
			t.Errorf("%q is not caught", bad)
		}
	}
}

// TestReadmeInstall runs the README's install block as written, in a
// shell at the root of the repository, with a GOPATH of its own (the
// module and build caches stay the machine's): sluice lands in its bin
// directory, on the PATH the block sets, and prints a semantic version.
func TestReadmeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sluice command")
	}
	m := regexp.MustCompile("(?s)## Install\n.*?```sh\n(.*?)```").FindStringSubmatch(readFile(t, "../../README.md"))
	if m == nil {
		t.Fatal("README.md has no Install section with a sh block")
	}
	gopath := t.TempDir()
	env := []string{"GOPATH=" + gopath, "GOBIN="}
	for _, v := range []string{"GOMODCACHE", "GOCACHE"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", m[1])
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README.md's install block: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(gopath, "bin", "sluice")); err != nil {
		t.Errorf("no sluice in GOPATH/bin after the install block: %v", err)
	}
	if !regexp.MustCompile(`(?m)^sluice v\d+\.\d+\.\d+(-dev)?(\+[0-9a-f]{12}(\.dirty)?)?$`).Match(out) {
		t.Errorf("the install block printed %q, want sluice's semantic version from a clone", out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
