//go:build !unix

package testserver

import "testing"

// ClosedAddr is not supported outside Unix.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	t.Fatal("testserver: ClosedAddr needs Unix sockets")
	return ""
}
