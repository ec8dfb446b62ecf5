package cli_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testwait"
)

// TestAgentRemovesBinaryDir: `coder agent`, started from the folder the
// init script downloaded it into (CODER_AGENT_BINARY_DIR), removes that
// folder when SIGTERM stops it, so that a workspace running on its host
// does not keep a copy of the agent per start; a value that names another
// folder removes nothing.
func TestAgentRemovesBinaryDir(t *testing.T) {
	t.Parallel()
	src, err := os.Open(coderBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "coder.Ab12Cd")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "coder")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "coder.Other1")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}

	runAgent := func(binaryDir string) string {
		t.Helper()
		cmd := exec.Command(bin, "agent")
		// A deployment nobody serves: the agent keeps retrying until stopped.
		cmd.Env = []string{"HOME=" + tmp, "PATH=" + os.Getenv("PATH"), "CODER_AGENT_URL=http://" + freeAddr(t),
			"CODER_AGENT_TOKEN=some-token", "CODER_AGENT_BINARY_DIR=" + binaryDir}
		var stderr syncbuf.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Its first log line (a failed attempt to reach the deployment)
		// says it runs, with its signal handling and exit cleanup in place.
		testwait.For(t, 30*time.Second, "the agent's first log line", testwait.Bool(func() bool { return stderr.Len() > 0 }))
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("coder agent after SIGTERM: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("coder agent did not stop on SIGTERM\n%s", stderr.String())
		}
		return stderr.String()
	}

	stderr := runAgent(other)
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a folder the agent does not run from was touched: %v", err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the agent's own folder went with the wrong value: %v", err)
	}
	if !strings.Contains(stderr, "not the init script's download folder") {
		t.Errorf("no warning about the other folder in stderr:\n%s", stderr)
	}

	runAgent(dir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the agent's download folder after it stopped: %v, want it removed", err)
	}
}
