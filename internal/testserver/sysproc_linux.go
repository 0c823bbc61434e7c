package testserver

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr runs a server as user (nil for the current one) and has the
// kernel send it deathSig when the thread that started it exits. startCmd
// makes that the exit of the test binary. Go sets the signal after the
// user, so the change of credentials does not clear it.
func sysProcAttr(user *runAs, deathSig syscall.Signal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: deathSig}
	if user != nil {
		a.Credential = &syscall.Credential{Uid: user.uid, Gid: user.gid}
	}
	return a
}

// starts carries the starts of commands to the goroutine of startCmd.
var (
	startsOnce sync.Once
	starts     chan func()
)

// startCmd starts cmd from a goroutine locked to its OS thread for the
// life of the test binary. The parent-death signal fires when the thread
// that forked the child exits, and the runtime ends the thread of a
// locked goroutine that returns: started from an arbitrary goroutine, a
// server could die under a test that used runtime.LockOSThread.
func startCmd(cmd *exec.Cmd) error {
	startsOnce.Do(func() {
		starts = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must live on
			for f := range starts {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	starts <- func() { errc <- cmd.Start() }
	return <-errc
}
