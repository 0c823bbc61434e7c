package server

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestStoreSecretReload: a store URL with its password in a file and a
// TLS Redis serves; a reload re-reads the file, and one that cannot read
// it fails, naming the parameter, while the old config keeps serving. The
// password shows nowhere: not in the log, not in /api.
func TestStoreSecretReload(t *testing.T) {
	dir := t.TempDir()
	certs, err := testserver.NewCerts(dir, "sluice")
	if err != nil {
		t.Fatal(err)
	}
	const password = "data-secret"
	addr := strings.TrimSuffix(strings.TrimPrefix(testserver.SecureRedis(t, testserver.Secure{
		TLS: certs, Password: "admin-secret", Users: []string{"sluice on >" + password + " ~* +@all"},
	}), "rediss://"), "/0")
	pwFile := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "rediss://sluice@" + addr + "/0?" + url.Values{"password_file": {pwFile}, "tls_ca_file": {certs.CA},
		"tls_cert_file": {certs.ClientCert}, "tls_key_file": {certs.ClientKey}}.Encode()
	path := filepath.Join(dir, "sluice.yaml")
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(limit int) {
		t.Helper()
		text := "store: " + store + "\nlimiters:\n  api: {policy: fixed_window, limit: " + string(rune('0'+limit)) + ", interval: 1 minute}\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		mtime = mtime.Add(time.Second) // a new stamp whatever the file system's resolution
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write(3)
	s, log := newFromFile(t, path)
	limit := func() any {
		t.Helper()
		code, got := call(t, s, "POST", "/api/v1/consume", `{"limiter": "api", "key": "k"}`)
		if code != 200 {
			t.Fatalf("consume = %d %v, want 200", code, got)
		}
		return got["limit"]
	}
	if got := limit(); got != 3.0 {
		t.Fatalf("limit = %v, want 3", got)
	}

	if err := os.Remove(pwFile); err != nil {
		t.Fatal(err)
	}
	write(4)
	s.reloadFile(false)
	if !strings.Contains(log.String(), "reload failed") || !strings.Contains(log.String(), "password_file="+pwFile) {
		t.Errorf("reload without the password file logged:\n%s\nwant a failed reload naming password_file", log.String())
	}
	if got := limit(); got != 3.0 {
		t.Errorf("limit after the failed reload = %v, want the old config's 3", got)
	}

	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(5)
	s.reloadFile(false)
	if got := limit(); got != 5.0 {
		t.Errorf("limit after the file came back = %v, want the new config's 5", got)
	}
	_, stats := call(t, s, "GET", "/api/v1/stats", "")
	if stats["store"] != store {
		t.Errorf("/api/v1/stats store = %v, want %s", stats["store"], store)
	}
	if strings.Contains(log.String(), password) {
		t.Errorf("the log shows the password:\n%s", log.String())
	}
}

// TestStorePasswordParamRedacted: a password that pgx takes as a
// parameter (password=) shows in /api as xxxxx, as one in the URL's user
// does. It showed as written.
func TestStorePasswordParamRedacted(t *testing.T) {
	s, _ := testServer(t, "store: postgres://u@"+testserver.ClosedAddr(t)+"/db?password=hunter2&connect_timeout=1\n"+
		"limiters:\n  api: {policy: fixed_window, limit: 3, interval: 1 minute}\n")
	_, stats := call(t, s, "GET", "/api/v1/stats", "")
	if got, _ := stats["store"].(string); strings.Contains(got, "hunter2") || !strings.Contains(got, "password=xxxxx") {
		t.Errorf("/api/v1/stats store = %q, want the password as xxxxx", got)
	}
}
