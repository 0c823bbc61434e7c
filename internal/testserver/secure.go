package testserver

import (
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
)

// Secure says how SecureRedis, SecureRedisCluster and SecureRedisSentinel
// secure the servers they start. The zero value secures nothing.
type Secure struct {
	// TLS, when not nil, makes every server listen on TLS only (redis-server
	// --port 0 --tls-port PORT) with TLS's server certificate, require
	// of each client a certificate that TLS's CA signed, and speak TLS to
	// the others: replicas to their master, the cluster bus, the Sentinel
	// to the servers it watches.
	TLS *Certs
	// Password, when not "", is the default user's password on every
	// server, the Sentinel included. testserver logs in with it, and so
	// do replicas (masterauth) and the Sentinel (auth-pass).
	Password string
	// Users are more ACL users of the data nodes (not the Sentinel), each
	// a line of an ACL file without its "user ", such as
	// "sluice on >secret ~sluice:* +get". Their words are split at spaces.
	Users []string
	// SentinelUsers are ACL users of the Sentinel, written as Users.
	SentinelUsers []string
}

// redisAccess is how testserver itself reaches the Redis servers it
// started: over TLS or not, logged in as the default user or not. A nil
// *redisAccess connects in the clear and does not log in.
type redisAccess struct {
	tls      *tls.Config // nil: in the clear
	password string      // "": no AUTH
}

// redis returns the redis-server binary, and the access to the servers
// secured as s says; s may be nil.
func (s *Secure) redis() (bin string, a *redisAccess, err error) {
	if bin, err = lookPath("redis-server", "redis-server"); err != nil {
		return "", nil, err
	}
	a, err = s.access()
	return bin, a, err
}

// access is how testserver reaches servers secured as s says.
func (s *Secure) access() (*redisAccess, error) {
	if s == nil {
		return nil, nil
	}
	a := &redisAccess{password: s.Password}
	if s.TLS != nil {
		var err error
		if a.tls, err = s.TLS.clientTLS(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// scheme is the scheme of a URL of servers secured as s says: base, or
// its TLS form ("redis" → "rediss", "redis+sentinel" →
// "rediss+sentinel"), followed by "://".
func (s *Secure) scheme(base string) string {
	if s != nil && s.TLS != nil {
		base = strings.Replace(base, "redis", "rediss", 1)
	}
	return base + "://"
}

// args are redis-server's arguments for listening on port as s says.
func (s *Secure) args(port int) []string {
	p := strconv.Itoa(port)
	if s == nil {
		return []string{"--port", p}
	}
	var a []string
	if s.TLS != nil {
		a = append(a,
			"--port", "0", "--tls-port", p,
			"--tls-cert-file", s.TLS.ServerCert, "--tls-key-file", s.TLS.ServerKey, "--tls-ca-cert-file", s.TLS.CA,
			"--tls-auth-clients", "yes", "--tls-replication", "yes", "--tls-cluster", "yes")
	} else {
		a = append(a, "--port", p)
	}
	if s.Password != "" {
		a = append(a, "--requirepass", s.Password, "--masterauth", s.Password)
	}
	for _, u := range s.Users {
		// redis-server quotes each word of an option on its own.
		a = append(append(a, "--user"), strings.Fields(u)...)
	}
	return a
}

// sentinelConf is the start of a Sentinel's config file for listening on
// port as s says.
func (s *Secure) sentinelConf(port int) string {
	if s == nil {
		return fmt.Sprintf("port %d\n", port)
	}
	var b strings.Builder
	if s.TLS != nil {
		fmt.Fprintf(&b, "port 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"+
			"tls-auth-clients yes\ntls-replication yes\n", port, s.TLS.ServerCert, s.TLS.ServerKey, s.TLS.CA)
	} else {
		fmt.Fprintf(&b, "port %d\n", port)
	}
	if s.Password != "" {
		fmt.Fprintf(&b, "requirepass %s\n", s.Password)
	}
	for _, u := range s.SentinelUsers {
		fmt.Fprintf(&b, "user %s\n", u)
	}
	return b.String()
}

// SecureSQL says how SecurePostgres and SecureMariaDB secure the server
// they start: it serves TLS with TLS's server certificate, and
// has a user User, with Password, who owns a database of the same name
// and may log in only over TLS, with a client certificate that TLS's CA
// signed. User and Password must be SQL identifiers' and strings'
// characters only: letters, digits, underscores.
type SecureSQL struct {
	TLS            *Certs
	User, Password string
}
