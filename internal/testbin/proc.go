package testbin

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/syncbuf"
)

// Proc is a binary running in the background as its own process, its
// output captured.
type Proc struct {
	// Cmd is the process; Cmd.Process is set.
	Cmd *exec.Cmd
	// Args are the arguments it was started with (the binary not included).
	Args []string
	// Stdout and Stderr hold what it has written so far.
	Stdout, Stderr *syncbuf.Buffer

	done chan struct{}
	code int
}

// Start runs bin with exactly env and args, its standard input empty. It is
// killed when the test ends if it is still running.
func Start(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Args: args, Stdout: &syncbuf.Buffer{}, Stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = env
	p.Cmd.Stdin = strings.NewReader("")
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p, err)
	}
	go func() {
		defer close(p.done)
		err := p.Cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
	}()
	t.Cleanup(p.Stop)
	return p
}

// String is the command line, "coder wsproxy server ...", for messages.
func (p *Proc) String() string {
	return strings.Join(append([]string{filepath.Base(p.Cmd.Path)}, p.Args...), " ")
}

// Done is closed once the process has exited and its output is complete.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the process's exit status once Done is closed: -1 when it was
// ended by a signal or could not be waited for.
func (p *Proc) ExitCode() int {
	<-p.done
	return p.code
}

// Stop kills the process unless it has exited, and waits for it.
func (p *Proc) Stop() {
	select {
	case <-p.done:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// code; a process still running then is killed and fails the test with
// its output.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.Stop()
		t.Fatalf("%s did not exit within %s\nstdout: %s\nstderr: %s", p, timeout, p.Stdout, p.Stderr)
		return -1
	}
}
