package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const envoyYAML = limitsYAML + `
envoy:
  - domain: d
    descriptors:
      - {key: k, limiter: three}
`

func rlRequest(entries ...string) *rlsv3.RateLimitRequest {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
}

// TestGRPCAuth: with auth tokens, Envoy's API wants one as HTTP does, in
// the authorization metadata; gRPC health checks stay open.
func TestGRPCAuth(t *testing.T) {
	_, gaddr := serve(t, envoyYAML+"server:\n  auth: {tokens: [s3cret]}\n", true)
	cc := mustInsecure(t, gaddr)
	rl := rlsv3.NewRateLimitServiceClient(cc)
	for _, tt := range []struct {
		auth string
		want codes.Code
	}{
		{"", codes.Unauthenticated},
		{"Bearer wrong", codes.Unauthenticated},
		{"s3cret", codes.Unauthenticated},
		{"Bearer s3cret", codes.OK},
		{"bearer s3cret", codes.OK},
	} {
		ctx := t.Context()
		if tt.auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tt.auth)
		}
		_, err := rl.ShouldRateLimit(ctx, rlRequest("k", "v"))
		if status.Code(err) != tt.want {
			t.Errorf("ShouldRateLimit with authorization %q = %v, want %v", tt.auth, err, tt.want)
		}
	}
	if _, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health check without a token = %v, want it answered", err)
	}
}

// pki is a certificate authority and certificates it issued, as PEM files.
type pki struct {
	dir              string
	ca               *x509.Certificate
	caKey            *ecdsa.PrivateKey
	caFile           string
	serverCert       string // for 127.0.0.1
	serverKey        string
	client, stranger tls.Certificate // by the CA, and self-signed
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.caKey, p.ca = p.issue(t, &x509.Certificate{
		Subject: pkixName("test CA"), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", p.ca.Raw)
	key, cert := p.issue(t, &x509.Certificate{Subject: pkixName("server"), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, p.ca, p.caKey)
	p.serverCert = p.write(t, "server.pem", "CERTIFICATE", cert.Raw)
	der, _ := x509.MarshalECPrivateKey(key)
	p.serverKey = p.write(t, "server.key", "EC PRIVATE KEY", der)
	key, cert = p.issue(t, &x509.Certificate{Subject: pkixName("envoy"),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, p.ca, p.caKey)
	p.client = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}
	key, cert = p.issue(t, &x509.Certificate{Subject: pkixName("stranger"),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, nil, nil)
	p.stranger = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}
	return p
}

// issue makes a key and a certificate of tmpl, signed by parent (nil:
// self-signed).
func (p *pki) issue(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := p.dir + "/" + name
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientTLS trusts the CA and presents certs.
func (p *pki) clientTLS(certs ...tls.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	return &tls.Config{RootCAs: roots, Certificates: certs}
}

// TestClientCertificates: with a client CA, both APIs want a client
// certificate it signed; health checks, which probes make without one,
// stay open; a certificate of another CA fails the handshake.
func TestClientCertificates(t *testing.T) {
	p := newPKI(t)
	s, gaddr := serve(t, envoyYAML+"server:\n  tls: {cert: "+p.serverCert+", key: "+p.serverKey+", client_ca: "+p.caFile+"}\n", true)
	get := func(path string, certs ...tls.Certificate) (int, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientTLS(certs...)}}
		resp, err := c.Get("https://" + s.addr + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, tt := range []struct {
		path  string
		certs []tls.Certificate
		want  int
	}{
		{"/healthz", nil, 200},
		{"/readyz", nil, 200},
		{"/api/v1/limiters", nil, 401},
		{"/api/v1/limiters", []tls.Certificate{p.client}, 200},
	} {
		if code, err := get(tt.path, tt.certs...); code != tt.want {
			t.Errorf("GET %s with %d client certificates = %d, %v, want %d", tt.path, len(tt.certs), code, err, tt.want)
		}
	}
	// Sent even though the server asks for its CA's (Go's client would
	// send none, and pass as a client without one).
	forced := p.clientTLS()
	forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &p.stranger, nil }
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: forced}}
	if resp, err := c.Get("https://" + s.addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("GET /healthz with a certificate of another CA succeeded, want a failed handshake")
	}

	rl := func(certs ...tls.Certificate) (*rlsv3.RateLimitResponse, error) {
		cc, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(certs...))))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if _, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil && len(certs) == 0 {
			t.Errorf("gRPC health check without a client certificate = %v, want it answered", err)
		}
		return rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(t.Context(), rlRequest("k", "v"))
	}
	if _, err := rl(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ShouldRateLimit without a client certificate = %v, want Unauthenticated", err)
	}
	if resp, err := rl(p.client); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit with a client certificate = %v, %v, want OK", resp, err)
	}
}

// TestTLSModernSuites: TLS 1.2 clients get only forward-secret AEAD
// suites; one that offers only CBC with SHA-1 fails the handshake.
func TestTLSModernSuites(t *testing.T) {
	p := newPKI(t)
	s, _ := serve(t, limitsYAML+"server:\n  tls: {cert: "+p.serverCert+", key: "+p.serverKey+"}\n", false)
	for _, tt := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
	} {
		c := p.clientTLS()
		c.MaxVersion, c.CipherSuites = tls.VersionTLS12, []uint16{tt.suite}
		conn, err := tls.Dial("tcp", s.addr, c)
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tt.ok {
			t.Errorf("TLS 1.2 with only %s: %v, want success %v", tls.CipherSuiteName(tt.suite), err, tt.ok)
		}
	}
}

// TestGRPCMessageSize: the largest request a real Envoy config plausibly
// makes fits the default max_recv_msg_bytes by far; a larger request is
// refused before it is read, ResourceExhausted.
func TestGRPCMessageSize(t *testing.T) {
	_, gaddr := serve(t, envoyYAML, true)
	rl := rlsv3.NewRateLimitServiceClient(mustInsecure(t, gaddr))
	// 64 descriptors (the most a request may have), each of 8 entries of
	// a 64-byte key and a 256-byte value (a long path, a user agent).
	large := &rlsv3.RateLimitRequest{Domain: "d"}
	for range 64 {
		d := &rlcommon.RateLimitDescriptor{}
		for range 8 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: strings.Repeat("k", 64), Value: strings.Repeat("v", 256)})
		}
		large.Descriptors = append(large.Descriptors, d)
	}
	size := proto.Size(large)
	t.Logf("a request of 64 descriptors of 8 entries of 64+256 bytes is %d bytes; max_recv_msg_bytes is %d by default",
		size, DefaultGRPCLimits.MaxRecvMsgBytes)
	if int64(size) > DefaultGRPCLimits.MaxRecvMsgBytes {
		t.Fatalf("the large request (%d bytes) does not fit the default max_recv_msg_bytes", size)
	}
	if _, err := rl.ShouldRateLimit(t.Context(), large); status.Code(err) != codes.OK {
		t.Errorf("ShouldRateLimit of %d bytes = %v, want OK", size, err)
	}
	huge := rlRequest("k", strings.Repeat("v", int(DefaultGRPCLimits.MaxRecvMsgBytes)))
	if _, err := rl.ShouldRateLimit(t.Context(), huge); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("ShouldRateLimit of %d bytes = %v, want ResourceExhausted", proto.Size(huge), err)
	}
}

// TestGRPCConnections: past max_connections new connections are closed at
// once, silent ones at the handshake timeout, and idle ones at
// max_connection_idle. Real time must pass for the timeouts: the waits are
// deadlines many times the timeout, not bounds; and "at once" is shown
// against a handshake timeout longer than the wait.
func TestGRPCConnections(t *testing.T) {
	t.Run("past max_connections", func(t *testing.T) {
		_, gaddr := serve(t, envoyYAML+`server:
  limits:
    grpc: {max_connections: 3, handshake_timeout: 1m}
`, true)
		silent := make([]net.Conn, 5)
		for i := range silent {
			silent[i] = dial(t, gaddr)
		}
		for i := 3; i < len(silent); i++ {
			if closed, _ := closedWithin(silent[i], 30*time.Second); !closed {
				t.Errorf("silent connection %d, past max_connections 3, still open after 30s: want it closed at once, not at the handshake timeout of 1m", i)
			}
		}
		for i := range 3 {
			if closed, _ := closedWithin(silent[i], 10*time.Millisecond); closed {
				t.Errorf("silent connection %d, within max_connections 3, closed before the handshake timeout of 1m", i)
			}
		}
	})
	t.Run("handshake timeout", func(t *testing.T) {
		_, gaddr := serve(t, envoyYAML+`server:
  limits:
    grpc: {handshake_timeout: 1s}
`, true)
		if closed, _ := closedWithin(dial(t, gaddr), 30*time.Second); !closed {
			t.Errorf("a silent connection still open after 30s with a handshake timeout of 1s")
		}
	})
	t.Run("max_connection_idle", func(t *testing.T) {
		_, gaddr := serve(t, envoyYAML+`server:
  limits:
    grpc: {max_connection_idle: 500ms}
`, true)
		cc := mustInsecure(t, gaddr)
		if _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(t.Context(), rlRequest("k", "v")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for cc.GetState() == connectivity.Ready && cc.WaitForStateChange(ctx, connectivity.Ready) {
		}
		if st := cc.GetState(); st == connectivity.Ready {
			t.Errorf("a connection idle for 30s with max_connection_idle 500ms is still %v", st)
		}
	})
}

func pkixName(cn string) pkix.Name { return pkix.Name{CommonName: cn} }
