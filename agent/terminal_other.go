//go:build !linux

package agent

import (
	"errors"
	"os"
	"os/exec"
)

type terminal struct {
	master *os.File
}

func openTerminal(cols, rows uint32) (*terminal, error) {
	return nil, errors.New("terminals (PTYs) are supported by the agent on linux only; run a command instead")
}

func (t *terminal) start(cmd *exec.Cmd) error      { return errors.New("no terminal") }
func (t *terminal) resize(cols, rows uint32) error { return nil }
func (t *terminal) close()                         {}
