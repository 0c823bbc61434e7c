package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// shCommands returns the commands of the ```sh blocks of a Markdown file,
// a line each (no block of the docs it reads continues a line).
func shCommands(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(data), "```sh\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("%s: unterminated sh block", path)
		}
		for _, line := range strings.Split(block, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, line)
			}
		}
	}
	return out
}

// TestKubernetesDocs checks every command of docs/kubernetes.md as far as
// it goes without a cluster: helm's run as written, from the repository's
// root, with the pinned Helm (install and upgrade as template, with the
// same chart, values and settings); kubectl's files exist and are among
// those the other tests decode; make's targets exist; podman pushes the
// tag make image builds.
func TestKubernetesDocs(t *testing.T) {
	cmds := shCommands(t, "../docs/kubernetes.md")
	if len(cmds) == 0 {
		t.Fatal("no commands in docs/kubernetes.md")
	}
	helmPath := helmBinary(t)
	makefile := readFile(t, "../Makefile")
	checked := map[string]bool{manifests: true} // the files decoded by TestManifests and the example tests
	for _, f := range []string{"examples/istio/ratelimit-config.yaml", "examples/istio/envoyfilter.yaml", "examples/envoy-gateway/envoypatchpolicy.yaml"} {
		checked[f] = true
	}
	for _, line := range cmds {
		if strings.ContainsAny(line, `|;&<>$"'\`+"`") {
			t.Errorf("%q: the test reads commands as plain words; keep them so", line)
			continue
		}
		args := strings.Fields(line)
		switch args[0] {
		case "helm":
			switch args[1] {
			case "install", "upgrade":
				args = slices.DeleteFunc(append([]string{"template"}, args[2:]...), func(a string) bool { return a == "--reuse-values" })
			case "lint", "template":
				args = args[1:]
			default:
				t.Errorf("%q: helm %s is not a command the test knows", line, args[1])
				continue
			}
			cmd := exec.Command(helmPath, args...)
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%q (as helm %s): %v\n%s", line, strings.Join(args, " "), err, out)
			}
		case "kubectl":
			for i, a := range args {
				if a != "-f" {
					continue
				}
				if i+1 == len(args) || !checked[strings.TrimPrefix(args[i+1], "deploy/")] {
					t.Errorf("%q: -f names no file that a test of deploy/ decodes", line)
				}
			}
		case "make":
			if len(args) != 2 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(args[1])+`:`).Match(makefile) {
				t.Errorf("%q: no such target in the Makefile", line)
			}
		case "podman":
			if len(args) != 4 || args[1] != "push" || args[2] != "localhost/sluice:"+chartAppVersion(t) {
				t.Errorf("%q: want podman push of the tag make image builds, localhost/sluice:%s", line, chartAppVersion(t))
			}
		case "deploy/sizing.sh":
			if fi, err := os.Stat("sizing.sh"); err != nil || fi.Mode()&0o111 == 0 {
				t.Errorf("%q: %v, want an executable script", line, err)
			}
		default:
			t.Errorf("%q: a command the test does not check", line)
		}
	}
}

// chartAppVersion is the chart's appVersion, the image tag it runs.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^appVersion: (\S+)$`).FindSubmatch(readFile(t, filepath.Join(chart, "Chart.yaml")))
	if m == nil {
		t.Fatal("no appVersion in Chart.yaml")
	}
	return string(m[1])
}

// TestVersionsAgree: the chart runs the image that make image tags, whose
// tag is the version sluice version prints from a clone.
func TestVersionsAgree(t *testing.T) {
	m := regexp.MustCompile(`(?m)^const devVersion = "(\S+)"$`).FindSubmatch(readFile(t, "../internal/app/cli/version.go"))
	if m == nil {
		t.Fatal("no devVersion in internal/app/cli/version.go")
	}
	if got := chartAppVersion(t); got != string(m[1]) {
		t.Errorf("Chart.yaml's appVersion %s, want sluice's version %s (image/build.sh tags the image with it)", got, m[1])
	}
}
