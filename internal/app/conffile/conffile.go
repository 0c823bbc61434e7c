// Package conffile reads the files an operator points sluice serve at
// (its config file, envoyproxy/ratelimit's config files, token, CA and
// certificate files) without trusting what lies at the path: only a
// regular file, reached directly or through symbolic links (Kubernetes
// mounts config maps as links to links), of at most MaxBytes, is read.
// A named pipe would block the reader until some process wrote to it,
// holding the server's start, or its reloads, forever; a device such as
// /dev/zero would never end and exhaust the memory.
package conffile

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxBytes is the largest file Read reads: 4 MiB, four times what a
// Kubernetes config map may hold in all, and about 80,000 descriptors of
// envoyproxy/ratelimit's format.
const MaxBytes = 4 << 20

// ErrNotRegular is the error, wrapped in a *fs.PathError, of a path that
// is not a regular file once its links are followed: a directory, a named
// pipe, a socket, a device.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is the error, wrapped in a *fs.PathError, of a file larger
// than MaxBytes.
var ErrTooLarge = errors.New("file too large")

// ErrNoCertificate is the error, wrapped in a *fs.PathError, of a CA file
// that holds no PEM certificate.
var ErrNoCertificate = errors.New("no PEM certificate in the file")

// CertPool returns the certificates of the PEM file at path, read as Read
// reads, for verifying peers: the CA of a server, a store or a collector.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := Read(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &fs.PathError{Op: "read", Path: path, Err: ErrNoCertificate}
	}
	return pool, nil
}

// Read returns the contents of the regular file at path, following
// symbolic links. A path that is no regular file, or a file larger than
// MaxBytes, is an error that names the path and what is there, and
// nothing is read: Read never blocks on a named pipe, and never reads
// more than MaxBytes+1 bytes.
func Read(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should the file be swapped for a pipe since the Stat,
	// opening it does not wait for a writer; the Stat of the open file
	// below then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(path, fi); err != nil {
		return nil, err
	}
	// The size may change as the file is read: read one byte past the
	// bound to tell a file that grew past it.
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxBytes {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than %d MiB, the most sluice reads of a config file", ErrTooLarge, MaxBytes>>20)}
	}
	return data, nil
}

// check refuses fi, the file at path, unless it is a regular file of at
// most MaxBytes.
func check(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %s", ErrNotRegular, kind(fi.Mode()))}
	}
	if fi.Size() > MaxBytes {
		return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, more than %d MiB, the most sluice reads of a config file", ErrTooLarge, fi.Size(), MaxBytes>>20)}
	}
	return nil
}

// kind names what a file of mode m is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a file of mode " + m.String()
}

// Reason is what err, an error of Read, says of its path, without the
// path itself: for an error that names the path on its own, such as a
// *config.Error's File.
func Reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}
