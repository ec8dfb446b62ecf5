package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is a pseudo-terminal pair.
type terminal struct {
	master *os.File
	slave  *os.File
}

// openTerminal opens a PTY of the given size through /dev/ptmx.
func openTerminal(cols, rows uint32) (*terminal, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var n uint32
	var ioctlErr error
	// Through SyscallConn, so the master stays non-blocking (deadlines work).
	rc, err := master.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			if ioctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioctlErr != nil {
				return
			}
			n, ioctlErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
		})
	}
	if err == nil {
		err = ioctlErr
	}
	if err != nil {
		_ = master.Close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		_ = master.Close()
		return nil, err
	}
	t := &terminal{master: master, slave: slave}
	_ = t.resize(cols, rows)
	return t, nil
}

// start runs cmd with the terminal as its controlling terminal, in a new
// session, and closes this process's copy of the slave.
func (t *terminal) start(cmd *exec.Cmd) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = t.slave, t.slave, t.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err := cmd.Start()
	_ = t.slave.Close()
	return err
}

func (t *terminal) resize(cols, rows uint32) error {
	if cols == 0 || rows == 0 {
		return nil
	}
	rc, err := t.master.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	err = rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if err != nil {
		return err
	}
	return ioctlErr
}

func (t *terminal) close() {
	_ = t.master.Close()
	_ = t.slave.Close()
}
