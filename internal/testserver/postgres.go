package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// StartPostgres initializes a PostgreSQL cluster under os.TempDir, with
// trust authentication and the superuser "postgres", starts it on a free
// 127.0.0.1 port with fsync off, and waits until it accepts a session. It
// returns the server's URL,
// "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable", and stop,
// which shuts the server down (immediate mode), waits for it and removes
// its directory. Start-up is bounded by ctx and by one minute.
//
// As root, initdb and postgres run as the system user "postgres". If they
// or that user are missing, the error is a *MissingError.
func StartPostgres(ctx context.Context) (url string, stop func() error, err error) {
	return startPostgres(ctx, nil)
}

// startPostgres is StartPostgres, secured as sec says unless it is nil.
func startPostgres(ctx context.Context, sec *SecureSQL) (url string, stop func() error, err error) {
	return startIn(ctx, "postgres", func(ctx context.Context, dir string, own func(*process)) (string, error) {
		initdb, postgres, err := lookPostgres()
		if err != nil {
			return "", err
		}
		var as *runAs
		if os.Geteuid() == 0 {
			if as, err = postgresUser(); err != nil {
				return "", err
			}
			if err := os.Chown(dir, int(as.uid), int(as.gid)); err != nil {
				return "", fmt.Errorf("testserver: %w", err)
			}
		}
		data := filepath.Join(dir, "data")
		cmd := exec.CommandContext(ctx, initdb, "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
		cmd.Env = postgresEnv()
		if err := setUp(cmd, "initdb", dir, as); err != nil {
			return "", err
		}
		var tlsArgs []string
		if sec != nil {
			if tlsArgs, err = sec.postgres(dir, data, as); err != nil {
				return "", err
			}
		}
		// SIGQUIT is the immediate shutdown: the postmaster stops its
		// children, waits for them and frees its shared memory.
		srv := server{name: "postgres", ready: "database system is ready to accept connections", as: as, stopSig: syscall.SIGQUIT, deathSig: syscall.SIGQUIT}
		p, port, err := startOnFreePort(ctx,
			func(port int) (*process, error) {
				cmd := exec.Command(postgres,
					"-D", data,
					"-k", dir,
					"-p", strconv.Itoa(port),
					"-c", "listen_addresses=127.0.0.1",
					"-c", "fsync=off",
					"-c", "full_page_writes=off",
					"-c", "synchronous_commit=off",
				)
				cmd.Args = append(cmd.Args, tlsArgs...)
				cmd.Env = postgresEnv()
				return srv.launch(cmd, dir, port)
			},
			startPostgresSession)
		if err != nil {
			return "", err
		}
		own(p)
		if sec != nil {
			// Only now is it sure that the server on the port is this one.
			err := postgresQuery(ctx, p.addr,
				fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s", sec.User, sqlString(sec.Password)),
				fmt.Sprintf("CREATE DATABASE %[1]s OWNER %[1]s", sec.User))
			if err != nil {
				return "", fmt.Errorf("testserver: create user %s: %w%s", sec.User, err, p.logTail())
			}
			return fmt.Sprintf("postgres://%[1]s@127.0.0.1:%[2]d/%[1]s", sec.User, port), nil
		}
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), nil
	})
}

// postgres secures the cluster in data, which runs as user (nil: the
// current user), as s says: it copies the certificates into dir, where
// Postgres requires its key to be its own and private, writes
// pg_hba.conf, and returns the server's TLS arguments.
func (s *SecureSQL) postgres(dir, data string, user *runAs) ([]string, error) {
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	files := map[string]string{"server.pem": s.TLS.ServerCert, "server-key.pem": s.TLS.ServerKey, "ca.pem": s.TLS.CA}
	for name, from := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		to := filepath.Join(tlsDir, name)
		if err := os.WriteFile(to, b, 0o600); err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		files[name] = to
	}
	hba := "local all all trust\n" +
		"hostnossl all postgres 127.0.0.1/32 trust\n" + // testserver's own sessions
		"hostssl all " + s.User + " 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	if user != nil {
		for _, p := range []string{tlsDir, files["server.pem"], files["server-key.pem"], files["ca.pem"], filepath.Join(data, "pg_hba.conf")} {
			if err := os.Chown(p, int(user.uid), int(user.gid)); err != nil {
				return nil, fmt.Errorf("testserver: %w", err)
			}
		}
	}
	return []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + files["server.pem"], "-c", "ssl_key_file=" + files["server-key.pem"],
		"-c", "ssl_ca_file=" + files["ca.pem"]}, nil
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// lookPostgres finds initdb and postgres in one directory, so they are of
// one version: in PATH, or else in /usr/lib/postgresql/*/bin, the newest
// version first.
func lookPostgres() (initdb, postgres string, err error) {
	lib, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		major, _, _ := strings.Cut(filepath.Base(filepath.Dir(dir)), ".")
		v, _ := strconv.Atoi(major)
		return v
	}
	slices.SortFunc(lib, func(a, b string) int { return version(b) - version(a) })
	if p, ok := findInDirs(append(pathDirs(), lib...), "initdb", "postgres"); ok {
		return p[0], p[1], nil
	}
	return "", "", &MissingError{What: "initdb and postgres", Where: "PATH or /usr/lib/postgresql/*/bin", Package: "postgresql"}
}

// postgresUser is the user "postgres", for running Postgres as root.
func postgresUser() (*runAs, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, &MissingError{What: `user "postgres" (Postgres refuses to run as root)`, Where: "the user database", Package: "postgresql"}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("testserver: user postgres: %w", err)
	}
	return &runAs{uid: uint32(uid), gid: uint32(gid)}, nil
}

// postgresEnv is the environment without the PG variables that would
// override the command line or the locale.
func postgresEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_") && !strings.HasPrefix(kv, "LANG") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C")
}

// startPostgresSession opens a session as postgres on database postgres
// at addr, reads up to ReadyForQuery and ends it. It fails while the
// server is still starting up (SQLSTATE 57P03).
func startPostgresSession(ctx context.Context, addr string) error {
	return postgresQuery(ctx, addr)
}

// postgresQuery opens a session as postgres on database postgres at addr,
// runs each of queries, a statement without results, and ends it.
func postgresQuery(ctx context.Context, addr string, queries ...string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	// StartupMessage: length, protocol 3.0, then name/value pairs.
	var msg []byte
	msg = binary.BigEndian.AppendUint32(msg, 0)
	msg = binary.BigEndian.AppendUint32(msg, 3<<16)
	for _, s := range []string{"user", "postgres", "database", "postgres", ""} {
		msg = append(append(msg, s...), 0)
	}
	binary.BigEndian.PutUint32(msg, uint32(len(msg)))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	for {
		typ, body, err := readPostgresMessage(r)
		if err != nil {
			return err
		}
		switch typ {
		case 'R': // Authentication…: 0 is AuthenticationOk
			if len(body) < 4 || binary.BigEndian.Uint32(body) != 0 {
				return fmt.Errorf("postgres asks for authentication %x, want trust", body)
			}
		case 'E':
			return fmt.Errorf("postgres: %s", postgresError(body))
		case 'Z': // ReadyForQuery
			if len(queries) == 0 {
				_, err := c.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
				return err
			}
			q := append([]byte{'Q', 0, 0, 0, 0}, queries[0]...)
			q = append(q, 0)
			binary.BigEndian.PutUint32(q[1:], uint32(len(q)-1))
			if _, err := c.Write(q); err != nil {
				return err
			}
			queries = queries[1:]
		}
		// ParameterStatus, BackendKeyData, NoticeResponse and
		// CommandComplete are skipped.
	}
}

// readPostgresMessage reads one backend message: a type byte, a length
// that counts itself, and the body.
func readPostgresMessage(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > 1<<20 {
		return 0, nil, fmt.Errorf("bad postgres message length %d", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[0], body, nil
}

// postgresError formats the fields of an ErrorResponse as "SQLSTATE
// message".
func postgresError(body []byte) string {
	var code, text string
	for _, f := range strings.Split(string(body), "\x00") {
		if f == "" {
			continue
		}
		switch f[0] {
		case 'C':
			code = f[1:]
		case 'M':
			text = f[1:]
		}
	}
	return code + " " + text
}
