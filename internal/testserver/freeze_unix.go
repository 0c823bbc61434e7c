//go:build unix

package testserver

import (
	"os"
	"syscall"
)

// freeze stops p with SIGSTOP, or continues it with SIGCONT.
func freeze(p *os.Process, frozen bool) error {
	if frozen {
		return p.Signal(syscall.SIGSTOP)
	}
	return p.Signal(syscall.SIGCONT)
}
