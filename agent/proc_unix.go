//go:build unix

package agent

import (
	"os"
	"os/exec"
	"syscall"
)

const (
	sigUSR1 = syscall.SIGUSR1
	sigUSR2 = syscall.SIGUSR2
)

// setProcessGroup puts cmd in a process group of its own, so that signals
// reach the command and its children.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// detach puts cmd in a session of its own: the startup script and what it
// starts in the background outlive a signal to the agent's group.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// signalGroup signals p's process group (p leads it), else p.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err == nil {
		return nil
	}
	return p.Signal(sig)
}
