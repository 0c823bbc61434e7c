package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver"
)

// configMap is a directory laid out as the kubelet lays out a mounted
// config map (its AtomicWriter): the files in a timestamped directory
// ..TIMESTAMP, a link ..data to it, and a link per key to ..data/KEY.
type configMap struct {
	dir string
	n   int // directories written, for their names
}

// write publishes files as the kubelet does on each update: a new
// timestamped directory, a link ..data_tmp to it renamed over ..data in
// one step (so a reader sees the old files or the new, never a mix), the
// links of new keys, then the old directory removed.
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
		if _, err := os.Lstat(link); os.IsNotExist(err) {
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

// TestServeReloadsConfigMap: sluice serve --config on a file of a mounted
// config map reloads it when the kubelet swaps the map's ..data link to a
// new version, with no signal: the file's path stays, the file it leads
// to is new. The new files have the same size as the old, so only their
// modification times and contents tell them apart. The reload is waited
// for with a generous deadline (the server looks each second), not timed.
func TestServeReloadsConfigMap(t *testing.T) {
	cm := &configMap{dir: t.TempDir()}
	config := func(limit int) map[string]string {
		return map[string]string{"sluice.yaml": fmt.Sprintf("store: mem://\nlimiters:\n  api: {policy: fixed_window, limit: %d, interval: 1h}\n", limit)}
	}
	cm.write(t, config(1))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testserver.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", filepath.Join(cm.dir, "sluice.yaml"), "--http", "127.0.0.1:0", "--grpc", "off"},
			&stdout, &stderr)
	}()
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve printed %q, want the HTTP address; stderr:\n%s", stdout.String(), stderr.String())
		}
		if _, after, ok := strings.Cut(stdout.String(), "HTTP on "); ok && strings.Contains(after, "\n") {
			addr = strings.TrimSpace(strings.Split(after, "\n")[0])
		}
	}
	limit := func() int64 {
		t.Helper()
		resp, err := http.Get(addr + "/api/v1/limiters")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Limiters []struct{ Limit int64 } }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Limiters) != 1 {
			t.Fatalf("GET /api/v1/limiters: %v, %+v; want one limiter", err, body)
		}
		return body.Limiters[0].Limit
	}
	if got := limit(); got != 1 {
		t.Fatalf("limit before the swap = %d, want 1", got)
	}

	// Twice: the second swap comes after the server has looked at the
	// file of the first, so that it is seen as a change of that file.
	for _, want := range []int64{3, 7} {
		cm.write(t, config(int(want)))
		for deadline := time.Now().Add(30 * time.Second); limit() != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the limit is still %d 30s after the config map's ..data link moved to a file with limit %d; stderr:\n%s",
					limit(), want, stderr.String())
			}
		}
	}
	if !strings.Contains(stderr.String(), "config reloaded") {
		t.Errorf("stderr does not log the reload:\n%s", stderr.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve = %v", err)
	}
}
