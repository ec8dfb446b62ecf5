package cli_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// TestServerLogFormatOnTerminal: with its stderr on a terminal, coder server
// logs text lines by default.
func TestServerLogFormatOnTerminal(t *testing.T) {
	t.Parallel()
	master, tty := newPTY(t)
	screen := &syncbuf.Buffer{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()

	addr := freeAddr(t)
	dir := t.TempDir()
	cmd := exec.Command(coderBinary(t), "server", "--http-address", addr, "--postgres-url", coderdtest.NewDatabase(t),
		"--provisioner-daemons", "0", "--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache"))
	cmd.Env = baseEnv(t)
	cmd.Stdout, cmd.Stderr = &syncbuf.Buffer{}, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	testwait.For(t, time.Minute, "coder server ready", func() (bool, string) {
		if strings.Contains(screen.String(), "coder server is ready") {
			return true, ""
		}
		select {
		case err := <-done:
			t.Fatalf("coder server exited (%v) before it was ready; terminal:\n%s", err, screen)
		default:
		}
		return false, "terminal:\n" + screen.String()
	})
	for _, line := range strings.Split(strings.TrimSpace(screen.String()), "\n") {
		line = strings.TrimRight(line, "\r")
		if !textLogLine.MatchString(line) {
			t.Errorf("on a terminal: got %q, want text lines", line)
		}
	}
}
