//go:build !unix

package testserver

import (
	"os/exec"
	"syscall"
)

// sysProcAttr has nothing to set outside Unix: servers run as the current
// user, which is never root, and outlive a test binary that dies without
// stopping them.
func sysProcAttr(user *runAs, deathSig syscall.Signal) *syscall.SysProcAttr {
	return nil
}

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
