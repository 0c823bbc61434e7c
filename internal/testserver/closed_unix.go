//go:build unix

package testserver

import (
	"fmt"
	"syscall"
	"testing"
)

// ClosedAddr returns a loopback address, host:port, where every
// connection is refused until the test ends: its port is held by a
// socket that is bound but never listens. A server started and stopped
// for that purpose frees its port, which another server of the same test
// run may take at once, and then answers in its place.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testserver: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testserver: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testserver: getsockname: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
