package testserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// mariadbOptions make a small, fast server whose data need not survive a
// crash; mariadb-install-db passes them on to the server it bootstraps
// with. Native AIO is off because io_setup fails where many servers run
// at once or the container forbids it.
var mariadbOptions = []string{
	"--skip-name-resolve",
	"--skip-log-bin",
	"--innodb-buffer-pool-size=32M",
	"--innodb-log-file-size=8M",
	"--innodb-doublewrite=0",
	"--innodb-flush-log-at-trx-commit=0",
	"--innodb-use-native-aio=0",
}

// StartMariaDB installs a MariaDB data directory under os.TempDir, starts
// mariadbd on a free 127.0.0.1 port, logs in as root with an empty
// password and creates the database "sluice". It returns a DSN for
// github.com/go-sql-driver/mysql, "root@tcp(127.0.0.1:PORT)/sluice", and
// stop, which kills the server, waits for it and removes its directory.
// Start-up is bounded by ctx and by one minute. If mariadbd or
// mariadb-install-db is not installed, the error is a *MissingError.
func StartMariaDB(ctx context.Context) (dsn string, stop func() error, err error) {
	return startMariaDB(ctx, nil)
}

// startMariaDB is StartMariaDB, secured as sec says unless it is nil.
func startMariaDB(ctx context.Context, sec *SecureSQL) (dsn string, stop func() error, err error) {
	return startIn(ctx, "mariadb", func(ctx context.Context, dir string, own func(*process)) (string, error) {
		mariadbd, err := lookPath("mariadbd", "mariadb-server")
		if err != nil {
			return "", err
		}
		installDB, err := lookPath("mariadb-install-db", "mariadb-server")
		if err != nil {
			return "", err
		}
		// mariadbd refuses to run as root unless told to.
		var asRoot []string
		if os.Geteuid() == 0 {
			asRoot = []string{"--user=root"}
		}
		data := filepath.Join(dir, "data")
		args := append([]string{
			"--no-defaults", // must come first
			"--datadir=" + data,
			"--auth-root-authentication-method=normal",
			"--skip-test-db",
		}, asRoot...)
		// It creates the system tables, with root@127.0.0.1 and
		// root@localhost having an empty password.
		if err := setUp(exec.CommandContext(ctx, installDB, append(args, mariadbOptions...)...), "mariadb-install-db", dir, nil); err != nil {
			return "", err
		}
		srv := server{name: "mariadbd", ready: "ready for connections", stopSig: syscall.SIGKILL, deathSig: syscall.SIGKILL}
		p, port, err := startOnFreePort(ctx,
			func(port int) (*process, error) {
				args := append([]string{
					"--no-defaults", // must come first
					"--datadir=" + data,
					"--socket=" + filepath.Join(dir, "sock"),
					"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
					"--tmpdir=" + dir,
					"--port=" + strconv.Itoa(port),
					"--bind-address=127.0.0.1",
				}, asRoot...)
				if sec != nil {
					args = append(args, "--ssl-ca="+sec.TLS.CA, "--ssl-cert="+sec.TLS.ServerCert, "--ssl-key="+sec.TLS.ServerKey)
				}
				return srv.launch(exec.Command(mariadbd, append(args, mariadbOptions...)...), dir, port)
			},
			func(ctx context.Context, addr string) error {
				return mysqlRoot(ctx, addr, func(*mysqlConn) error { return nil })
			})
		if err != nil {
			return "", err
		}
		own(p)
		// Only now is it sure that the server on the port is this one.
		err = mysqlRoot(ctx, p.addr, func(c *mysqlConn) error {
			return c.command(comQuery, "CREATE DATABASE sluice")
		})
		if err != nil {
			return "", fmt.Errorf("testserver: create database sluice: %w%s", err, p.logTail())
		}
		if sec != nil {
			err = mysqlRoot(ctx, p.addr, func(c *mysqlConn) error {
				for _, q := range []string{
					fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s' REQUIRE X509", sec.User, sec.Password),
					fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %s", sec.User),
					fmt.Sprintf("GRANT ALL ON %[1]s.* TO '%[1]s'@'127.0.0.1'", sec.User),
				} {
					if err := c.command(comQuery, q); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return "", fmt.Errorf("testserver: create user %s: %w%s", sec.User, err, p.logTail())
			}
			return fmt.Sprintf("mysql://%[1]s@127.0.0.1:%[2]d/%[1]s", sec.User, port), nil
		}
		return fmt.Sprintf("root@tcp(127.0.0.1:%d)/sluice", port), nil
	})
}

// MySQL protocol commands.
const (
	comQuit   = 0x01
	comInitDB = 0x02
	comQuery  = 0x03
)

// mysqlConn is a logged-in MySQL protocol connection, enough of one to
// send simple commands.
type mysqlConn struct {
	conn net.Conn
	r    *bufio.Reader
	seq  byte // the sequence number of the next packet
}

// mysqlGreeting is what the server says first.
type mysqlGreeting struct {
	version string
	caps    uint32
}

// mysqlRoot logs in at addr as root with an empty password, runs f and
// quits.
func mysqlRoot(ctx context.Context, addr string, f func(*mysqlConn) error) error {
	nc, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	c := &mysqlConn{conn: nc, r: bufio.NewReader(nc)}
	if _, err := c.greeting(); err != nil {
		return err
	}
	if err := c.login("root"); err != nil {
		return err
	}
	if err := f(c); err != nil {
		return err
	}
	c.seq = 0
	return c.write([]byte{comQuit})
}

// greeting reads the server's initial handshake packet (protocol 10).
func (c *mysqlConn) greeting() (mysqlGreeting, error) {
	p, err := c.read()
	if err != nil {
		return mysqlGreeting{}, err
	}
	if len(p) > 0 && p[0] == 0xff {
		return mysqlGreeting{}, mysqlError(p)
	}
	if len(p) < 1 || p[0] != 10 {
		return mysqlGreeting{}, fmt.Errorf("mysql greeting %q: want protocol 10", p)
	}
	version, rest, ok := bytes.Cut(p[1:], []byte{0})
	// Then: connection ID (4), auth data (8), filler (1), capabilities
	// low (2), charset (1), status (2), capabilities high (2), ….
	if !ok || len(rest) < 4+8+1+2+1+2+2 {
		return mysqlGreeting{}, fmt.Errorf("short mysql greeting %q", p)
	}
	caps := uint32(binary.LittleEndian.Uint16(rest[13:])) | uint32(binary.LittleEndian.Uint16(rest[18:]))<<16
	return mysqlGreeting{version: string(version), caps: caps}, nil
}

// Capability flags of the client.
const (
	clientLongPassword     = 0x00000001
	clientProtocol41       = 0x00000200
	clientSecureConnection = 0x00008000
	clientPluginAuth       = 0x00080000
)

// login sends a HandshakeResponse41 for user with an empty password,
// which is an empty auth response whatever the plugin, and reads the
// result, answering an auth switch with another empty response.
func (c *mysqlConn) login(user string) error {
	var p []byte
	p = binary.LittleEndian.AppendUint32(p, clientLongPassword|clientProtocol41|clientSecureConnection|clientPluginAuth)
	p = binary.LittleEndian.AppendUint32(p, 1<<24) // max packet size
	p = append(p, 45)                              // utf8mb4_general_ci
	p = append(p, make([]byte, 23)...)             // reserved
	p = append(append(p, user...), 0)
	p = append(p, 0) // auth response of length 0
	p = append(append(p, "mysql_native_password"...), 0)
	if err := c.write(p); err != nil {
		return err
	}
	for range 3 {
		r, err := c.read()
		if err != nil {
			return err
		}
		switch {
		case len(r) > 0 && r[0] == 0x00:
			return nil
		case len(r) > 0 && r[0] == 0xfe: // auth switch request
			if err := c.write(nil); err != nil {
				return err
			}
		default:
			return fmt.Errorf("mysql login as %s: %w", user, mysqlError(r))
		}
	}
	return fmt.Errorf("mysql login as %s: too many auth switches", user)
}

// command sends a command with its argument and expects an OK packet.
func (c *mysqlConn) command(cmd byte, arg string) error {
	c.seq = 0
	if err := c.write(append([]byte{cmd}, arg...)); err != nil {
		return err
	}
	r, err := c.read()
	if err != nil {
		return err
	}
	if len(r) == 0 || r[0] != 0x00 {
		return fmt.Errorf("mysql command %#x %q: %w", cmd, arg, mysqlError(r))
	}
	return nil
}

// read reads one packet of less than 16 MiB: a 3-byte length, a sequence
// number and the payload.
func (c *mysqlConn) read() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	c.seq = hdr[3] + 1
	p := make([]byte, n)
	if _, err := io.ReadFull(c.r, p); err != nil {
		return nil, err
	}
	return p, nil
}

// write writes one packet of less than 16 MiB.
func (c *mysqlConn) write(p []byte) error {
	n := len(p)
	pkt := append([]byte{byte(n), byte(n >> 8), byte(n >> 16), c.seq}, p...)
	c.seq++
	_, err := c.conn.Write(pkt)
	return err
}

// mysqlError describes an ERR packet (0xff, code, '#', SQL state,
// message), or any other unexpected packet.
func mysqlError(p []byte) error {
	if len(p) < 3 || p[0] != 0xff {
		return fmt.Errorf("unexpected mysql packet %q", p)
	}
	code := binary.LittleEndian.Uint16(p[1:])
	msg := p[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		msg = msg[6:]
	}
	return errors.New("mysql error " + strconv.Itoa(int(code)) + ": " + string(msg))
}
