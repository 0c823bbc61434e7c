//go:build unix && !linux

package testserver

import (
	"os/exec"
	"syscall"
)

// sysProcAttr runs a server as user (nil for the current one). Outside
// Linux there is no parent-death signal, so deathSig is unused and a
// server outlives a test binary that dies without stopping it.
func sysProcAttr(user *runAs, deathSig syscall.Signal) *syscall.SysProcAttr {
	if user == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: user.uid, Gid: user.gid}}
}

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
