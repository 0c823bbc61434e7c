package storeurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/internal/app/conffile"
	"github.com/sluicehq/sluice/internal/testserver"
)

// sluiceACL is the ACL of sluice's Redis user that docs/deploy.md gives:
// its keys only, and the commands redisstore sends (EVALSHA runs the
// compare-and-swap script, whose GET and SET the ACL checks too; SCRIPT
// LOAD after NOSCRIPT; DEL; PING and, on a cluster, CLUSTER INFO for
// /readyz; CLUSTER SLOTS and COMMAND, which go-redis's cluster client
// reads to route commands).
const sluiceACL = "~sluice:* resetchannels -@all +get +set +del +evalsha +script|load +ping +cluster|info +cluster|slots +command"

// sentinelACL is the ACL of sluice's user on a Sentinel that
// docs/deploy.md gives: what go-redis asks a Sentinel (the master's
// address, the other Sentinels), and the channels where a Sentinel
// announces a failover.
const sentinelACL = "resetchannels &+switch-master &+replica-reconf-done -@all +ping +sentinel|get-master-addr-by-name +sentinel|sentinels +subscribe"

// secureRedis is a TLS and ACL Redis of a kind, with what a URL needs to
// reach it.
type secureRedis struct {
	certs                      *testserver.Certs
	dir                        string
	passwordFile, sentinelFile string // sluice's passwords on the data nodes and on the Sentinel
}

const (
	dataPassword     = "data-secret"
	sentinelPassword = "sentinel-secret"
	adminPassword    = "admin-secret"
)

// newSecureRedis makes certificates and password files in a directory of
// the test's own.
func newSecureRedis(t *testing.T) *secureRedis {
	t.Helper()
	dir := t.TempDir()
	certs, err := testserver.NewCerts(dir, "sluice")
	if err != nil {
		t.Fatal(err)
	}
	s := &secureRedis{certs: certs, dir: dir, passwordFile: filepath.Join(dir, "redis-password"), sentinelFile: filepath.Join(dir, "sentinel-password")}
	// As echo writes them, with a line end that is not the password's.
	writeFile(t, s.passwordFile, dataPassword+"\n")
	writeFile(t, s.sentinelFile, sentinelPassword+"\r\n")
	return s
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	// As Kubernetes updates a mounted Secret: the new file replaces the
	// old one at once.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// secure is how the servers are secured: TLS only with client
// certificates, an admin password for the default user, and sluice's
// users with passwords of their own.
func (s *secureRedis) secure() testserver.Secure {
	return testserver.Secure{
		TLS:           s.certs,
		Password:      adminPassword,
		Users:         []string{"sluice on >" + dataPassword + " " + sluiceACL},
		SentinelUsers: []string{"sluice on >" + sentinelPassword + " " + sentinelACL},
	}
}

// tlsQuery is the TLS parameters of a URL of the servers.
func (s *secureRedis) tlsQuery() string {
	return url.Values{"tls_ca_file": {s.certs.CA}, "tls_cert_file": {s.certs.ClientCert}, "tls_key_file": {s.certs.ClientKey}}.Encode()
}

// admin returns a client of the server at addr as its default user, for
// the test to act as the operator.
func (s *secureRedis) admin(t *testing.T, addr string) *redis.Client {
	t.Helper()
	ca, err := os.ReadFile(s.certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(s.certs.ClientCert, s.certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Password: adminPassword,
		TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}})
	t.Cleanup(func() { c.Close() })
	return c
}

// openChecked opens rawURL and checks the store, failing t if either
// fails, and closes it when t ends.
func openChecked(t *testing.T, rawURL string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%q) = %v", rawURL, err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check(%q) = %v", rawURL, err)
	}
	return s
}

// TestSecureRedis runs the store suite on a Redis with TLS (a CA of the
// test's, client certificates required) and ACL users, reached through
// standalone, Sentinel and Cluster URLs with the passwords in files: the
// data nodes' for sluice's user, limited to its keys and commands, and
// the Sentinel's apart. Before the secrets and TLS parameters, only a
// standalone rediss:// URL with the system's roots and an inline password
// could reach such a server.
func TestSecureRedis(t *testing.T) {
	s := newSecureRedis(t)
	sec := s.secure()
	pw := "password_file=" + url.QueryEscape(s.passwordFile) + "&" + s.tlsQuery()
	standalone := strings.TrimPrefix(testserver.SecureRedis(t, sec), "rediss://")
	cluster := testserver.SecureRedisCluster(t, sec)
	sentinel := strings.TrimPrefix(testserver.SecureRedisSentinel(t, sec), "rediss+sentinel://")
	sentinelAddr, _, _ := strings.Cut(sentinel, "/")
	tests := []struct {
		name, url string
		servers   []string // whose ACL LOG must stay empty
	}{
		{"standalone", "rediss://sluice@" + strings.TrimSuffix(standalone, "/0") + "/0?" + pw, []string{strings.TrimSuffix(standalone, "/0")}},
		{"cluster", "rediss+cluster://sluice@" + strings.Join(cluster, ",") + "?" + pw, cluster},
		{"sentinel", "rediss+sentinel://sluice@" + sentinel + "?" + pw +
			"&sentinel_username=sluice&sentinel_password_file=" + url.QueryEscape(s.sentinelFile), []string{sentinelAddr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openChecked(t, tt.url)
			drivertest.RunConformanceTests(t, drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
				return st.Store, nil
			}))
			servers := tt.servers
			if tt.name == "sentinel" {
				master, err := s.admin(t, sentinelAddr).Do(t.Context(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", testserver.SentinelMaster).StringSlice()
				if err != nil || len(master) != 2 {
					t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME = %v, %v", master, err)
				}
				servers = append(servers, master[0]+":"+master[1])
			}
			// Nothing sluice sent was refused: the ACLs are enough.
			for _, addr := range servers {
				log, err := s.admin(t, addr).Do(t.Context(), "ACL", "LOG").Slice()
				if err != nil || len(log) > 0 {
					t.Errorf("ACL LOG of %s = %v, %v, want it empty", addr, log, err)
				}
			}
		})
	}
}

// TestSecureRedisRefused: what a TLS and ACL Redis refuses is an error
// that names the cause and that waiting will not cure (not
// ErrUnreachable, which would have sluice serve start and wait for the
// store): a certificate of another CA, another server name, no client
// certificate, a wrong password in the file.
func TestSecureRedisRefused(t *testing.T) {
	s := newSecureRedis(t)
	addr := strings.TrimPrefix(strings.TrimSuffix(testserver.SecureRedis(t, s.secure()), "/0"), "rediss://")
	other, err := testserver.NewCerts(t.TempDir(), "sluice")
	if err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(s.dir, "wrong-password")
	writeFile(t, wrong, "hunter2\n")
	base := "rediss://sluice@" + addr + "/0?password_file=" + url.QueryEscape(s.passwordFile)
	files := func(ca, cert, key string) string {
		return url.Values{"tls_ca_file": {ca}, "tls_cert_file": {cert}, "tls_key_file": {key}}.Encode()
	}
	c := s.certs
	tests := []struct {
		name, url string
		want      string // in the error
	}{
		{"another CA", base + "&" + files(other.CA, c.ClientCert, c.ClientKey), "certificate signed by unknown authority"},
		{"another name", base + "&" + s.tlsQuery() + "&tls_server_name=redis.example", "redis.example"},
		{"no client certificate", base + "&tls_ca_file=" + url.QueryEscape(c.CA), "certificate required"},
		{"wrong password", "rediss://sluice@" + addr + "/0?password_file=" + url.QueryEscape(wrong) + "&" + s.tlsQuery(), "WRONGPASS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			st, err := Open(ctx, tt.url)
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			defer st.Close()
			err = st.Check(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check(%q) = %v, want an error containing %q", tt.url, err, tt.want)
			}
			if errors.Is(err, ErrUnreachable) {
				t.Errorf("Check(%q) = %v, matches ErrUnreachable, want a refusal", tt.url, err)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), dataPassword) {
				t.Errorf("Check(%q) = %q shows a password", tt.url, err)
			}
		})
	}
}

// TestSecretRotated: the password file is read for each new connection,
// so a password rotated on the server and in the file (as a Kubernetes
// Secret is updated) is used without reopening the store.
func TestSecretRotated(t *testing.T) {
	s := newSecureRedis(t)
	addr := strings.TrimPrefix(strings.TrimSuffix(testserver.SecureRedis(t, s.secure()), "/0"), "rediss://")
	st := openChecked(t, "rediss://sluice@"+addr+"/0?password_file="+url.QueryEscape(s.passwordFile)+"&"+s.tlsQuery())
	admin := s.admin(t, addr)
	ctx := t.Context()
	// The operator rotates the password on the server and drops sluice's
	// connections, so that it must log in again.
	if err := admin.Do(ctx, "ACL", "SETUSER", "sluice", "resetpass", ">rotated-secret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "sluice").Err(); err != nil {
		t.Fatal(err)
	}
	// The first checks may take a killed connection from the pool.
	if err := checkUntil(ctx, st, func(err error) bool { return err != nil && strings.Contains(err.Error(), "WRONGPASS") }); err == nil ||
		!strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Check with the old password in the file = %v, want WRONGPASS", err)
	}
	writeFile(t, s.passwordFile, "rotated-secret\n")
	if err := checkUntil(ctx, st, func(err error) bool { return err == nil }); err != nil {
		t.Fatalf("Check with the rotated password in the file = %v", err)
	}
}

// checkUntil checks st until done says yes of its error, at most ten
// times, and returns the last error.
func checkUntil(ctx context.Context, st *Store, done func(error) bool) error {
	var err error
	for range 10 {
		if err = st.Check(ctx); done(err) {
			break
		}
	}
	return err
}

// TestSecretRefs: a URL that names a secret or TLS file that cannot be
// used is refused by Parse (which a config load and a reload call) and
// by Open, with a *SecretError naming the parameter and what it names,
// and never the password.
func TestSecretRefs(t *testing.T) {
	dir := t.TempDir()
	certs, err := testserver.NewCerts(dir, "sluice")
	if err != nil {
		t.Fatal(err)
	}
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, text)
		return url.QueryEscape(path)
	}
	pw, blank, notPEM := file("pw", "hunter2\n"), file("blank", "\r\n\n"), file("notpem", "hunter2")
	missing := url.QueryEscape(filepath.Join(dir, "missing"))
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_PASSWORD", "hunter2")
	t.Setenv("SLUICE_TEST_EMPTY", "")
	os.Unsetenv("SLUICE_TEST_UNSET")
	ca, cert, key := url.QueryEscape(certs.CA), url.QueryEscape(certs.ClientCert), url.QueryEscape(certs.ClientKey)
	tests := []struct {
		url   string
		param string // the *SecretError's; "" for another *Error
		is    error  // what the error matches; nil for nothing checked
		want  string // in the message
	}{
		{"redis://h:1/0?password_file=" + missing, "password_file", fs.ErrNotExist, "password_file=" + filepath.Join(dir, "missing") + ": stat: no such file"},
		{"redis://h:1/0?password_file=" + blank, "password_file", ErrSecretEmpty, "empty"},
		{"redis://h:1/0?password_file=" + url.QueryEscape(fifo), "password_file", conffile.ErrNotRegular, "named pipe"},
		{"redis://h:1/0?password_file=" + url.QueryEscape(dir), "password_file", conffile.ErrNotRegular, "directory"},
		{"redis://h:1/0?password_env=SLUICE_TEST_UNSET", "password_env", ErrSecretUnset, "password_env=SLUICE_TEST_UNSET: not set"},
		{"redis://h:1/0?password_env=SLUICE_TEST_EMPTY", "password_env", ErrSecretEmpty, "empty"},
		{"redis://:hunter2@h:1/0?password_file=" + pw, "password_file", ErrSecretTwice, "inline"},
		{"redis://h:1/0?password_file=" + pw + "&password_env=SLUICE_TEST_PASSWORD", "password_env", ErrSecretTwice, "password_file is there too"},
		{"postgres://u@h:1/db?password=hunter2&password_env=SLUICE_TEST_PASSWORD", "password_env", ErrSecretTwice, "twice"},
		{"postgres://u@h:1/db?passfile=" + pw + "&password_file=" + pw, "password_file", ErrSecretTwice, "twice"},
		{"mysql://u:hunter2@h:1/db?password_env=SLUICE_TEST_PASSWORD", "password_env", ErrSecretTwice, "twice"},
		{"redis+sentinel://h:1/m?sentinel_password_file=" + missing, "sentinel_password_file", fs.ErrNotExist, "no such file"},
		{"redis+sentinel://h:1/m?sentinel_username=u", "", nil, "sentinel_username needs sentinel_password_file or sentinel_password_env"},
		{"rediss+cluster://h:1?tls_ca_file=" + notPEM, "tls_ca_file", ErrNoCertificate, "no PEM certificate"},
		{"rediss://h:1/0?tls_ca_file=" + missing, "tls_ca_file", fs.ErrNotExist, "no such file"},
		{"rediss+sentinel://h:1/m?tls_cert_file=" + cert, "tls_cert_file", nil, "needs tls_key_file"},
		{"mysql://u@h:1/db?tls_key_file=" + key, "tls_key_file", nil, "needs tls_cert_file"},
		{"mysql://u@h:1/db?tls_cert_file=" + cert + "&tls_key_file=" + ca, "tls_cert_file", nil, "tls_key_file=" + certs.CA},
		{"redis://h:1/0?tls_ca_file=" + ca, "", nil, "parameter tls_ca_file needs TLS: start the URL with rediss://"},
		{"redis+cluster://h:1?tls_server_name=x", "", nil, "start the URL with rediss+cluster://"},
		{"postgres://u@h:1/db?tls_ca_file=" + ca, "", nil, "sslrootcert"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, perr := Parse(tt.url)
			s, err := Open(t.Context(), tt.url)
			if err == nil {
				s.Close()
			}
			for _, err := range []error{perr, err} {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Parse or Open(%q) = %v, want an *Error", tt.url, err)
				}
				var se *SecretError
				switch {
				case tt.param == "" && errors.As(err, &se):
					t.Errorf("Parse or Open(%q) = %v, want no *SecretError", tt.url, err)
				case tt.param != "" && (!errors.As(err, &se) || se.Param != tt.param):
					t.Errorf("Parse or Open(%q) = %v, want a *SecretError of %s", tt.url, err, tt.param)
				case tt.is != nil && !errors.Is(err, tt.is):
					t.Errorf("Parse or Open(%q) = %v, want it to match %v", tt.url, err, tt.is)
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Parse or Open(%q) = %q, want it to contain %q", tt.url, err, tt.want)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("Parse or Open(%q) = %q shows the password", tt.url, err)
				}
			}
		})
	}
}

// TestSecretRead: a password file loses the line ends that end it, and
// nothing else.
func TestSecretRead(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string]string{
		"pw":         "pw",
		"pw\n":       "pw",
		"pw\r\n":     "pw",
		"pw\n\n":     "pw",
		" pw \n":     " pw ",
		"p\nw\n":     "p\nw",
		"pässwörd\n": "pässwörd",
	} {
		path := filepath.Join(dir, "pw")
		writeFile(t, path, text)
		s := &secret{param: "password_file", ref: path}
		if got, err := s.read(); err != nil || got != want {
			t.Errorf("read of a file holding %q = %q, %v, want %q", text, got, err, want)
		}
	}
}

// TestSecureSQL runs the store suite on PostgreSQL and MariaDB servers
// that let sluice's user in only over TLS, with a client certificate of
// the test's CA and the password, which the URL names by file: pgx's
// sslmode=verify-full with sslrootcert, sslcert and sslkey, and
// mysql://'s tls_ca_file, tls_cert_file and tls_key_file. A URL without
// the client certificate, or that trusts another CA, is refused.
func TestSecureSQL(t *testing.T) {
	dir := t.TempDir()
	certs, err := testserver.NewCerts(dir, "sluice")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testserver.NewCerts(t.TempDir(), "sluice")
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "password")
	writeFile(t, pwFile, "sql_secret\n")
	sec := testserver.SecureSQL{TLS: certs, User: "sluice", Password: "sql_secret"}
	pg := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {certs.CA}, "sslcert": {certs.ClientCert}, "sslkey": {certs.ClientKey},
		"password_file": {pwFile}}
	my := url.Values{"tls_ca_file": {certs.CA}, "tls_cert_file": {certs.ClientCert}, "tls_key_file": {certs.ClientKey},
		"password_file": {pwFile}}
	without := func(q url.Values, params ...string) string {
		q2 := url.Values{}
		for k, v := range q {
			q2[k] = v
		}
		for _, p := range params {
			q2.Del(p)
		}
		return q2.Encode()
	}
	with := func(q url.Values, k, v string) string {
		q2 := url.Values{}
		for k, v := range q {
			q2[k] = v
		}
		q2.Set(k, v)
		return q2.Encode()
	}
	tests := []struct {
		name  string
		start func(testing.TB, testserver.SecureSQL) string
		q     url.Values
		// refused are queries the server or the client refuses, with a
		// word of the error.
		refused map[string]string
	}{
		{"postgres", testserver.SecurePostgres, pg, map[string]string{
			"no client certificate": without(pg, "sslcert", "sslkey") + "&connect_timeout=10",
			"another CA":            with(pg, "sslrootcert", other.CA),
			"in the clear":          with(pg, "sslmode", "disable"),
		}},
		{"mariadb", testserver.SecureMariaDB, my, map[string]string{
			"no client certificate": without(my, "tls_cert_file", "tls_key_file"),
			"another CA":            with(my, "tls_ca_file", other.CA),
			"in the clear":          without(my, "tls_ca_file", "tls_cert_file", "tls_key_file"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := tt.start(t, sec)
			st := openChecked(t, base+"?"+tt.q.Encode())
			drivertest.RunConformanceTests(t, drivertest.HarnessFunc(func(context.Context, *testing.T) (driver.Store, error) {
				return st.Store, nil
			}))
			for name, q := range tt.refused {
				t.Run(name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
					defer cancel()
					s, err := Open(ctx, base+"?"+q)
					if err != nil {
						t.Fatalf("Open = %v", err)
					}
					defer s.Close()
					err = s.Check(ctx)
					if err == nil {
						t.Fatalf("Check(%s?%s) = nil, want a refusal", base, q)
					}
					if errors.Is(err, ErrUnreachable) {
						t.Errorf("Check(%s?%s) = %v, matches ErrUnreachable, want a refusal", base, q, err)
					}
					if strings.Contains(err.Error(), "sql_secret") {
						t.Errorf("Check = %q shows the password", err)
					}
				})
			}
		})
	}
}

// TestDocumentedACL: the ACLs that docs/deploy.md gives operators are
// those TestSecureRedis proves enough.
func TestDocumentedACL(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, acl := range []string{sluiceACL, sentinelACL} {
		if want := "user sluice on >PASSWORD " + acl + "\n"; !strings.Contains(string(doc), want) {
			t.Errorf("docs/deploy.md does not give the ACL the tests use: %q", want)
		}
	}
}
