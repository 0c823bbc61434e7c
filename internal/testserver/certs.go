package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are the PEM files of a throwaway public key infrastructure that
// NewCerts makes for TLS tests: a CA, a certificate that the servers
// present and also use to reach each other, and a client certificate.
type Certs struct {
	// CA is the CA's certificate, which signed the other two.
	CA string
	// ServerCert and ServerKey are for 127.0.0.1, ::1 and localhost, good
	// for both server and client authentication: a Redis replica or
	// Sentinel presents it to the server it connects to.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client's, with the common name that
	// NewCerts was given (PostgreSQL maps it to the user).
	ClientCert, ClientKey string
}

// certValidity is how long the certificates are valid, from an hour
// before they are made so that a clock a little behind still takes them.
const certValidity = 24 * time.Hour

// NewCerts makes a CA and, signed by it, a server certificate and a
// client certificate whose common name is client, with ECDSA P-256 keys,
// and writes them as PEM files into dir: ca.pem, server.pem,
// server-key.pem, client.pem and client-key.pem, the keys readable by
// their owner only.
func NewCerts(dir, client string) (*Certs, error) {
	c := &Certs{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	ca := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := sign(ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	if err := writePEM(c.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}
	leaves := []struct {
		tmpl      x509.Certificate
		cert, key string
	}{
		{x509.Certificate{
			Subject:     pkix.Name{CommonName: "127.0.0.1"},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
			DNSNames:    []string{"localhost"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}, c.ServerCert, c.ServerKey},
		{x509.Certificate{
			Subject:     pkix.Name{CommonName: client},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, c.ClientCert, c.ClientKey},
	}
	for _, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		l.tmpl.NotBefore, l.tmpl.NotAfter = now.Add(-time.Hour), now.Add(certValidity)
		l.tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := sign(&l.tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		if err := writePEM(l.cert, "CERTIFICATE", der, 0o644); err != nil {
			return nil, err
		}
		if err := writePEM(l.key, "PRIVATE KEY", keyDER, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// sign makes tmpl a certificate of pub signed by parent's key, with a
// random serial number, and returns it in DER.
func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, parentKey *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("testserver: certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

func writePEM(path, typ string, der []byte, perm os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), perm); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	return nil
}

// clientTLS is the configuration with which testserver itself connects
// to its TLS servers: it trusts c's CA and presents the server
// certificate, which is good for client authentication too.
func (c *Certs) clientTLS() (*tls.Config, error) {
	ca, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("testserver: no certificate in %s", c.CA)
	}
	cert, err := tls.LoadX509KeyPair(c.ServerCert, c.ServerKey)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
