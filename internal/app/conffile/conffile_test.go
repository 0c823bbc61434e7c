//go:build linux

package conffile

import (
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestRead: a regular file is read, through links as Kubernetes mounts a
// config map; anything else at the path is refused at once, naming it,
// where reading a named pipe blocked forever and /dev/zero ran the
// process out of memory.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	// A config map: name -> ..data/name, ..data -> ..2026_01_01/.
	if err := os.Mkdir(filepath.Join(dir, "..2026_01_01"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..2026_01_01", "config.yaml"), []byte("domain: d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink("..2026_01_01", filepath.Join(dir, "..data")))
	must(t, os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(dir, "config.yaml")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644))
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")))
	must(t, os.Mkdir(filepath.Join(dir, "dir.yaml"), 0o755))
	big, err := os.Create(filepath.Join(dir, "big.yaml"))
	must(t, err)
	must(t, big.Truncate(MaxBytes+1)) // sparse: no disk taken
	big.Close()
	must(t, os.WriteFile(filepath.Join(dir, "max.yaml"), make([]byte, MaxBytes), 0o644))

	if data, err := Read(filepath.Join(dir, "config.yaml")); err != nil || string(data) != "domain: d\n" {
		t.Errorf("Read of a config map's link = %q, %v, want its file", data, err)
	}
	if data, err := Read(filepath.Join(dir, "max.yaml")); err != nil || len(data) != MaxBytes {
		t.Errorf("Read of MaxBytes = %d bytes, %v, want them all", len(data), err)
	}
	for _, tt := range []struct {
		name string
		want error
		says string
	}{
		{"pipe.yaml", ErrNotRegular, "named pipe"},
		{"zero.yaml", ErrNotRegular, "character device"},
		{"dir.yaml", ErrNotRegular, "directory"},
		{"big.yaml", ErrTooLarge, "4194305 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			data, err := Read(path)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Read(%s) = %d bytes, %v; want %v naming the path and %q", tt.name, len(data), err, tt.want, tt.says)
			}
		})
	}
}

// TestReadNeverBlocksOnAPipe: a path that is a pipe by the time it is
// opened (swapped after the Stat) is opened without waiting for a writer
// and refused.
func TestReadNeverBlocksOnAPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pipe")
	must(t, syscall.Mkfifo(path, 0o644))
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	if err := check(path, fi); !errors.Is(err, ErrNotRegular) {
		t.Errorf("check of an open pipe = %v, want ErrNotRegular", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCertPool: a PEM CA file gives a pool with its certificate; a file
// without one is ErrNoCertificate at its path, and a missing file Read's
// error.
func TestCertPool(t *testing.T) {
	dir := t.TempDir()
	certs, err := testserver.NewCerts(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := CertPool(certs.CA)
	if err != nil || pool == nil || pool.Equal(x509.NewCertPool()) {
		t.Fatalf("CertPool(%s) = %v, %v; want the CA's certificate", certs.CA, pool, err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var pe *fs.PathError
	if _, err := CertPool(notPEM); !errors.Is(err, ErrNoCertificate) || !errors.As(err, &pe) || pe.Path != notPEM {
		t.Errorf("CertPool of a file without a certificate = %v, want ErrNoCertificate at %s", err, notPEM)
	}
	if _, err := CertPool(filepath.Join(dir, "missing.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CertPool of a missing file = %v, want fs.ErrNotExist", err)
	}
}
