package testbin_test

import (
	"os"
	"testing"
	"time"

	"airgapcoder/internal/testbin"
)

// TestProc: a started process's output is captured and its exit code
// returned; one still running is killed by Stop, its exit code then -1.
func TestProc(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=" + os.Getenv("PATH")}
	p := testbin.Start(t, "/bin/sh", env, "-c", "echo out; echo err >&2; exit 3")
	if code := p.Wait(t, 30*time.Second); code != 3 {
		t.Errorf("exit code: got %d, want 3", code)
	}
	if p.Stdout.String() != "out\n" || p.Stderr.String() != "err\n" {
		t.Errorf("output: got stdout %q, stderr %q; want %q, %q", p.Stdout, p.Stderr, "out\n", "err\n")
	}
	if got, want := p.String(), "sh -c echo out; echo err >&2; exit 3"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
	}

	long := testbin.Start(t, "/bin/sh", env, "-c", "exec sleep 600")
	long.Stop()
	select {
	case <-long.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	if code := long.ExitCode(); code != -1 {
		t.Errorf("after Stop: exit code %d, want -1 (killed)", code)
	}
}
