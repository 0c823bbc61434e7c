package storeurl

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/internal/app/conffile"
)

// A URL keeps its passwords out of itself (and so out of the config file,
// the logs and /api) by naming them instead: password_file=PATH, the
// contents of a file (a mounted Kubernetes Secret), or password_env=NAME,
// the value of an environment variable. The secret is read when the URL
// is parsed, which is how a bad reference stops the start or a reload,
// and again for each new connection, so that a rotated Secret takes
// effect without a restart; connections already open keep the password
// they logged in with. TLS files (tls_ca_file, tls_cert_file,
// tls_key_file, and PostgreSQL's sslrootcert, sslcert, sslkey) are read
// the same way. The one exception is a Sentinel's password, which
// go-redis takes once, when the store opens.

// ErrSecretTwice is matched by the *SecretError of a URL that gives one
// password two ways: inline (user:password@, or PostgreSQL's password=
// and passfile=) and by reference, or both by file and by variable.
var ErrSecretTwice = errors.New("the password is given twice: give it one way only")

// ErrSecretEmpty is matched by the *SecretError of a password file that
// holds nothing but line ends, or of a variable that is set but empty:
// an unset secret, not a password.
var ErrSecretEmpty = errors.New("empty")

// ErrSecretUnset is matched by the *SecretError of a variable that is not
// set.
var ErrSecretUnset = errors.New("not set in the environment")

// ErrNoCertificate is matched by the *SecretError of a tls_ca_file that
// holds no PEM certificate.
var ErrNoCertificate = conffile.ErrNoCertificate

// SecretError reports a secret or TLS file that a store URL names and
// that cannot be used. It never holds the secret itself.
type SecretError struct {
	// Param is the URL's parameter, e.g. "password_file", "tls_ca_file".
	Param string
	// Ref is what the parameter names: a file's path or a variable's name.
	Ref string
	// Err says what is wrong: ErrSecretTwice, ErrSecretEmpty,
	// ErrSecretUnset, ErrNoCertificate, or an error of reading the file
	// (conffile.Read) or of parsing the certificate.
	Err error
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("parameter %s=%s: %s", e.Param, e.Ref, conffile.Reason(e.Err))
}

func (e *SecretError) Unwrap() error { return e.Err }

// secret is a password named by a URL parameter rather than held in it.
type secret struct {
	param string // the URL's parameter: password_file, sentinel_password_env, ...
	ref   string // the file's path or the variable's name
	env   bool   // ref is a variable
}

// read returns the secret's value now: the variable's, or the file's
// contents without the line ends that end it (echo and editors add one;
// no password ends in one).
func (s *secret) read() (string, error) {
	var v string
	if s.env {
		var ok bool
		if v, ok = os.LookupEnv(s.ref); !ok {
			return "", &SecretError{Param: s.param, Ref: s.ref, Err: ErrSecretUnset}
		}
	} else {
		b, err := conffile.Read(s.ref)
		if err != nil {
			return "", &SecretError{Param: s.param, Ref: s.ref, Err: err}
		}
		v = strings.TrimRight(string(b), "\r\n")
	}
	if v == "" {
		return "", &SecretError{Param: s.param, Ref: s.ref, Err: ErrSecretEmpty}
	}
	return v, nil
}

// takeSecret removes prefix+"password_file" and prefix+"password_env"
// from q and returns the secret they name, nil if neither is there, after
// reading it once to check it. inline reports that the URL holds the
// password itself, which is then given twice.
func takeSecret(q url.Values, prefix string, inline bool) (*secret, error) {
	file, env := prefix+"password_file", prefix+"password_env"
	var s *secret
	switch {
	case q.Has(file) && q.Has(env):
		return nil, &SecretError{Param: env, Ref: q.Get(env), Err: fmt.Errorf("%w: %s is there too", ErrSecretTwice, file)}
	case q.Has(file):
		s = &secret{param: file, ref: q.Get(file)}
	case q.Has(env):
		s = &secret{param: env, ref: q.Get(env), env: true}
	default:
		return nil, nil
	}
	q.Del(file)
	q.Del(env)
	if inline {
		return nil, &SecretError{Param: s.param, Ref: s.ref, Err: fmt.Errorf("%w: the URL holds one inline", ErrSecretTwice)}
	}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s, nil
}

// credentials is a password: the URL's own, or one it names. A nil
// *credentials has neither.
type credentials struct {
	user     string
	password string  // the URL's own
	secret   *secret // nil: password is it
}

// get returns the user and the password now.
func (c *credentials) get() (user, password string, err error) {
	if c.secret == nil {
		return c.user, c.password, nil
	}
	p, err := c.secret.read()
	return c.user, p, err
}

// tlsFiles are a URL's TLS parameters. The files are read for each new
// connection.
type tlsFiles struct {
	ca, cert, key string // paths; "" for none
	serverName    string // the name to verify; "" for the host dialled
}

// tlsParams are the URL parameters of tlsFiles.
var tlsParams = []string{"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name"}

// takeTLS removes the TLS parameters from q and returns them, nil if
// there are none, after reading the files once to check them.
func takeTLS(q url.Values) (*tlsFiles, error) {
	t := &tlsFiles{ca: q.Get("tls_ca_file"), cert: q.Get("tls_cert_file"), key: q.Get("tls_key_file"), serverName: q.Get("tls_server_name")}
	if *t == (tlsFiles{}) {
		return nil, nil
	}
	for _, p := range tlsParams {
		q.Del(p)
	}
	switch {
	case t.cert != "" && t.key == "":
		return nil, &SecretError{Param: "tls_cert_file", Ref: t.cert, Err: errors.New("needs tls_key_file, the certificate's key")}
	case t.key != "" && t.cert == "":
		return nil, &SecretError{Param: "tls_key_file", Ref: t.key, Err: errors.New("needs tls_cert_file, the key's certificate")}
	}
	if _, err := t.config("localhost"); err != nil {
		return nil, err
	}
	return t, nil
}

// config reads the files and returns the configuration of a connection
// to host: verified against the CA (the system's roots without one), for
// t.serverName or else host, with the client certificate if there is
// one.
func (t *tlsFiles) config(host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cmp.Or(t.serverName, host)}
	if t.ca != "" {
		pool, err := conffile.CertPool(t.ca)
		if err != nil {
			return nil, &SecretError{Param: "tls_ca_file", Ref: t.ca, Err: err}
		}
		cfg.RootCAs = pool
	}
	if t.cert != "" {
		certPEM, err := conffile.Read(t.cert)
		if err != nil {
			return nil, &SecretError{Param: "tls_cert_file", Ref: t.cert, Err: err}
		}
		keyPEM, err := conffile.Read(t.key)
		if err != nil {
			return nil, &SecretError{Param: "tls_key_file", Ref: t.key, Err: err}
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, &SecretError{Param: "tls_cert_file", Ref: t.cert, Err: fmt.Errorf("with tls_key_file=%s: %w", t.key, err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// defaultDialTimeout is go-redis's DialTimeout, which a dialer of ours
// takes over.
const defaultDialTimeout = 5 * time.Second

// dialer returns a go-redis Dialer that connects over TLS as t says,
// reading the files again for each connection.
func (t *tlsFiles) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: cmp.Or(timeout, defaultDialTimeout)}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg, err := t.config(host)
		if err != nil {
			return nil, err
		}
		d := tls.Dialer{NetDialer: nd, Config: cfg}
		return d.DialContext(ctx, network, addr)
	}
}

// redis is c.get as a go-redis CredentialsProviderContext, which go-redis
// calls for each new connection.
func (c *credentials) redis(context.Context) (user, password string, err error) { return c.get() }

// pgFileParams are the libpq parameters that name files pgx reads.
var pgFileParams = []string{"sslrootcert", "sslcert", "sslkey"}

// pgFiles checks that the files q's libpq parameters name are regular
// files sluice would read (conffile.Read), before pgx reads them without
// a bound.
func pgFiles(q url.Values) error {
	for _, p := range pgFileParams {
		if path := q.Get(p); path != "" && !(p == "sslrootcert" && path == "system") {
			if _, err := conffile.Read(path); err != nil {
				return &SecretError{Param: p, Ref: path, Err: err}
			}
		}
	}
	return nil
}

// pgConnect is pgx's BeforeConnect for src, whose pgx connection string
// (without sluice's parameters) is connString: it reads the password that
// src names and, when it names TLS files, parses connString again so that
// pgx reads them for this connection.
func (src source) pgConnect(connString string) func(context.Context, *pgx.ConnConfig) error {
	q := src.q
	files := slices.ContainsFunc(pgFileParams, q.Has)
	return func(_ context.Context, cc *pgx.ConnConfig) error {
		if src.secret != nil {
			p, err := src.secret.read()
			if err != nil {
				return err
			}
			cc.Password = p
		}
		if files {
			if err := pgFiles(q); err != nil {
				return err
			}
			fresh, err := pgconn.ParseConfig(connString)
			if err != nil {
				return err
			}
			// Both: a TLS configuration left in a fallback would connect
			// with the old files.
			cc.TLSConfig, cc.Fallbacks = fresh.TLSConfig, fresh.Fallbacks
		}
		return nil
	}
}
