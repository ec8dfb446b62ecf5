//go:build unix

package controlplane

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestRaiseFileLimit lowers the soft limit on open files and checks that
// raiseFileLimit puts it back at the hard limit and logs it.
func TestRaiseFileLimit(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	lowered := orig
	lowered.Cur = min(orig.Max, 512)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	raiseFileLimit(slog.New(slog.NewTextHandler(&out, nil)))
	var got syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &got); err != nil {
		t.Fatal(err)
	}
	if got.Cur != orig.Max {
		t.Errorf("got soft limit %d, want the hard limit %d", got.Cur, orig.Max)
	}
	if !strings.Contains(out.String(), "open file limit") {
		t.Errorf("got log %q, want the open file limit logged", out.String())
	}
}
