package docsnippets

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/testserver"
)

// TestReadmeQuickStart builds and runs the README's quick start as a
// newcomer would: its Go block as main.go of a new module that requires
// sluice (here replaced by this clone, with the clone's go.sum, as go get
// would write them), run with go run. The program's Redis address is
// pointed at a Redis the test starts, the one change to the block.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program and starts Redis")
	}
	readme := readFile(t, "../../README.md")
	m := regexp.MustCompile("(?s)## Quick start\n.*?```go\n(.*?)```").FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no Quick start section with a go block")
	}
	const addr = `"localhost:6379"`
	if !strings.Contains(m[1], addr) {
		t.Fatalf("the quick start no longer dials %s; update this test", addr)
	}
	redisURL, stop, err := testserver.StartRedis(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(m[1], addr, `"`+u.Host+`"`, 1)

	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := readFile(t, filepath.Join(root, "go.mod"))
	requires := gomod[strings.Index(gomod, "require"):]
	write(t, filepath.Join(dir, "go.mod"), "module example\n\ngo 1.26.0\n\n"+
		"require github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => "+root+"\n\n"+requires)
	write(t, filepath.Join(dir, "go.sum"), readFile(t, filepath.Join(root, "go.sum")))
	write(t, filepath.Join(dir, "main.go"), src)

	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's quick start: %v\n%s", err, out)
	}
	for _, want := range []string{"allowed: true, 99 left", "shared: allowed true, 99 left"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start printed\n%s\nwant a line with %q", out, want)
		}
	}
	// The shared limiter decided on Redis, not on its local fallback.
	rdb := redis.NewClient(&redis.Options{Addr: u.Host})
	defer rdb.Close()
	if n, err := rdb.DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Errorf("Redis holds %d keys after the quick start (%v), want the shared limiter's", n, err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
