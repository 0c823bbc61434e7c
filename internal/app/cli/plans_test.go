package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestPlans runs sluice serve with plans in process and writes, reads,
// lists, imports and deletes plans through sluice plans.
func TestPlans(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(`server:
  plans: {enabled: true}
  auth: {admin_tokens: {ops: admin-secret}}
limiters:
  api: {policy: fixed_window, limit: 100, interval: 1 minute}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout testserver.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "off"}, &stdout, io.Discard)
	}()
	defer func() { cancel(); <-done }()
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve printed %q, want the HTTP address", stdout.String())
		}
		if _, after, ok := strings.Cut(stdout.String(), "HTTP on "); ok && strings.Contains(after, "\n") {
			addr = strings.TrimSpace(strings.Split(after, "\n")[0])
		}
	}
	plans := func(args ...string) (string, error) {
		out, _, err := runCLI(t, append([]string{"plans", "--server", addr, "--token-file", tokenFile}, args...)...)
		return out, err
	}
	out, err := plans("set", "api", "tenant-7", `{"policy": "fixed_window", "limit": 3, "interval": "1s"}`)
	if err != nil || !strings.Contains(out, `"version"`) {
		t.Fatalf("plans set = %q, %v", out, err)
	}
	if out, err := plans("get", "api", "tenant-7"); err != nil || !strings.Contains(out, `"limit": 3`) {
		t.Errorf("plans get = %q, %v; want the plan", out, err)
	}
	file := filepath.Join(dir, "plans.yaml")
	if err := os.WriteFile(file, []byte(`plans:
  api:
    - {key: a, policy: fixed_window, limit: 5, interval: 1s}
    - {prefix: "paid:", policy: token_bucket, limit: 50, rate: {amount: 50, interval: 1s}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := plans("import", file); err != nil || out != "2 plans imported, 2 changed\n" {
		t.Errorf("plans import = %q, %v", out, err)
	}
	if out, err := plans("list", "api", "--limit", "2"); err != nil || !strings.Contains(out, `"next": "key:tenant-7"`) {
		t.Errorf("plans list --limit 2 = %q, %v; want a next page after tenant-7", out, err)
	}
	if _, err := plans("delete", "api", "tenant-7"); err != nil {
		t.Errorf("plans delete = %v", err)
	}
	if _, err := plans("get", "api", "tenant-7"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("plans get after delete = %v, want a 404", err)
	}
	// Without the admin token, a write is refused with the server's reason.
	_, _, err = runCLI(t, "plans", "--server", addr, "set", "api", "k", `{"policy": "no_limit"}`)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("plans set without a token = %v, want 403", err)
	}
	if _, _, err := runCLI(t, "plans", "frob"); !errors.Is(err, ErrUsage) {
		t.Errorf("plans frob = %v, want a usage error", err)
	}
}
