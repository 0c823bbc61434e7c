//go:build unix

package testserver

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Chromium runs Debian's headless Chromium on url with args added (such as
// --dump-dom or --screenshot=FILE) and returns its standard output. Like a
// missing server, a missing chromium skips tb, unless CI is "true". The
// run is bounded by a minute: on timeout the whole process group (the
// browser and its renderer and GPU helpers) is killed.
//
// The flags keep Chromium off the network, which the test machines close:
// without them it retries its background connections many times at once.
func Chromium(tb testing.TB, url string, args ...string) []byte {
	tb.Helper()
	skipShort(tb, "chromium")
	bin, err := lookPath("chromium", "chromium")
	if err != nil {
		fail(tb, err)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	defer cancel()
	argv := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-proxy-server", "--lang=en-US",
		"--user-data-dir=" + tb.TempDir(),
		"--virtual-time-budget=5000",
	}, args...)
	cmd := exec.CommandContext(ctx, bin, append(argv, url)...)
	cmd.SysProcAttr = sysProcAttr(nil, syscall.SIGKILL)
	cmd.SysProcAttr.Setpgid = true // so that a timeout reaches the helpers too
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := startCmd(cmd); err != nil {
		tb.Fatalf("chromium: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		tb.Fatalf("chromium %s: %v (context: %v)\nstderr:\n%s", strings.Join(args, " "), err, ctx.Err(), stderr.Bytes())
	}
	return stdout.Bytes()
}
