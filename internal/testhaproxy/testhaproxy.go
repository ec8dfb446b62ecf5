// Package testhaproxy runs Debian's HAProxy for tests and benchmarks: a
// real load balancer or relay in front of what a test started. It is for
// tests only; the configs tests give it bind and connect on loopback.
package testhaproxy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testtier"
)

var configs atomic.Int64

// Start writes cfg to a file of the test's, runs `haproxy -f FILE -db` until
// the test ends, and returns what HAProxy has printed so far, for a
// failure message. It does not wait for HAProxy to listen.
func Start(t testing.TB, cfg string) (output func() string) {
	t.Helper()
	testtier.Heavy(t, "runs HAProxy")
	path := filepath.Join(t.TempDir(), fmt.Sprintf("haproxy%d.cfg", configs.Add(1)))
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", "-f", path, "-db")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("haproxy (installed by scripts/install-deps.sh): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return out.String
}
