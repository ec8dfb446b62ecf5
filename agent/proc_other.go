//go:build !unix

package agent

import (
	"os"
	"os/exec"
	"syscall"
)

const (
	sigUSR1 = syscall.Signal(-1)
	sigUSR2 = syscall.Signal(-2)
)

func setProcessGroup(cmd *exec.Cmd) {}

func detach(cmd *exec.Cmd) {}

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	return p.Signal(sig)
}
