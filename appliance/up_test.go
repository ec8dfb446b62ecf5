package appliance_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"airgapcoder/appliance"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/testbin"
)

// TestUpFailsWhenMirrorPortTaken: a mirror port another process holds
// makes `appliance up` exit at once with the address named (it used to
// hang with nothing logged).
func TestUpFailsWhenMirrorPortTaken(t *testing.T) {
	dir := installedDir(t, "2026.11.1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// An external database that is never reached: the mirror starts first.
	cfg := "tls-address: 127.0.0.1:0\nhttp-address: 127.0.0.1:0\nmirror-address: " + ln.Addr().String() + "\npostgres-url: postgres://coder@127.0.0.1:1/coder\n"
	if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, testbin.Coder(t), "appliance", "up", "--dir", dir).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("appliance up still running after %s with the mirror port taken:\n%s", time.Since(start).Round(time.Second), out)
	}
	if err == nil || !strings.Contains(string(out), "mirror: listen") || !strings.Contains(string(out), ln.Addr().String()) {
		t.Fatalf("got %v:\n%s\nwant a failure naming the mirror address %s", err, out, ln.Addr())
	}
}

// TestUpStartFailureLeavesNothingRunning runs Up in this process: a step
// that fails makes it return promptly with an error naming the step and
// the cause, and what the steps before it started is stopped: no
// goroutine is left running and the mirror's port is free again.
func TestUpStartFailureLeavesNothingRunning(t *testing.T) {
	dir := installedDir(t, "2026.11.1")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name, step string
		config     func(t *testing.T, mirror string) string
	}{
		// An external database that is never reached: the mirror starts first.
		{"mirror port taken", "start mirror", func(_ *testing.T, _ string) string {
			return "tls-address: 127.0.0.1:0\nhttp-address: 127.0.0.1:0\nmirror-address: " + taken.Addr().String() + "\npostgres-url: postgres://coder@127.0.0.1:1/coder\n"
		}},
		// The mirror serves and the control plane migrates the database
		// before it fails to listen.
		{"HTTPS port taken", "start control plane", func(t *testing.T, mirror string) string {
			return "tls-address: " + taken.Addr().String() + "\nhttp-address: 127.0.0.1:0\nmirror-address: " + mirror + "\npostgres-url: " + coderdtest.NewDatabase(t) + "\n"
		}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			mirror := freePort(t)
			if err := os.WriteFile(filepath.Join(dir, appliance.ConfigFile), []byte(tc.config(t, mirror)), 0o644); err != nil {
				t.Fatal(err)
			}
			// Up installs its egress guard around the default transport.
			saved := http.DefaultTransport
			t.Cleanup(func() { http.DefaultTransport = saved })
			before := goleak.IgnoreCurrent()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			err := appliance.Up(ctx, appliance.UpOptions{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
			if ctx.Err() != nil {
				t.Fatalf("Up still running after %s", time.Since(start).Round(time.Second))
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.step+": ") || !strings.Contains(err.Error(), taken.Addr().String()) {
				t.Fatalf("Up: %v; want an error naming the step %q and the address %s", err, tc.step, taken.Addr())
			}
			// Keep-alive connections of Up's clients are not its goroutines.
			for _, tr := range []http.RoundTripper{http.DefaultTransport, saved} {
				if c, ok := tr.(interface{ CloseIdleConnections() }); ok {
					c.CloseIdleConnections()
				}
			}
			goleak.VerifyNone(t, append(coderdtest.LeakOptions(), before)...)
			ln, err := net.Listen("tcp", mirror)
			if err != nil {
				t.Fatalf("the mirror's address is still taken after Up returned: %v", err)
			}
			ln.Close()
		})
	}
}
