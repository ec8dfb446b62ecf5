package agent

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// terminal is a pseudo-terminal pair (github.com/creack/pty).
type terminal struct {
	// master is the agent's side, read and written by the agent. It is
	// non-blocking, so its reads honour deadlines: drain stops reading a
	// while after the command exited even when a background process keeps
	// the terminal open.
	master *os.File
	// slave is the command's side. The agent's copy is closed once the
	// command started, so reads of master end (EIO) when the command's
	// last process closed it.
	slave *os.File
	// slaveName is the slave's path, opened again for each resize.
	slaveName string
}

// openTerminal opens a PTY of the given size.
func openTerminal(cols, rows uint32) (*terminal, error) {
	ptmx, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	master, err := nonBlocking(ptmx)
	if err != nil {
		_ = slave.Close()
		return nil, fmt.Errorf("open pty: %w", err)
	}
	t := &terminal{master: master, slave: slave, slaveName: slave.Name()}
	if err := t.resize(cols, rows); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// nonBlocking returns a non-blocking duplicate of f, and closes f. pty.Open
// hands out the master in blocking mode (its ioctls go through Fd, which
// switches the descriptor to blocking for good), where reads ignore
// deadlines; os.NewFile puts a non-blocking descriptor under the runtime's
// poller, where they work.
func nonBlocking(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate %s: %w", f.Name(), err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("make %s non-blocking: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// start runs cmd with the terminal as its controlling terminal, in a new
// session (so its own process group), and closes this process's copy of
// the slave.
func (t *terminal) start(cmd *exec.Cmd) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = t.slave, t.slave, t.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err := cmd.Start()
	_ = t.slave.Close()
	return err
}

// resize sets the terminal's size; a zero width or height is ignored. It
// goes through the slave, opened again by name, because pty.Setsize on the
// master would switch it back to blocking mode (see nonBlocking); the
// kernel signals the resize (SIGWINCH) to the terminal's foreground
// process group either way.
func (t *terminal) resize(cols, rows uint32) error {
	if cols == 0 || rows == 0 {
		return nil
	}
	slave, err := os.OpenFile(t.slaveName, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	defer slave.Close()
	if err := pty.Setsize(slave, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// close closes both sides.
func (t *terminal) close() {
	_ = t.master.Close()
	_ = t.slave.Close()
}
