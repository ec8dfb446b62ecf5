package cli_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/testport"
)

// TestPortForwardFirstBytes: coder port-forward sends a new connection's
// first bytes behind its target without waiting for coderd's answer. A
// server that speaks first still does; a client that sends more than the
// CLI keeps before the answer gets all of it back, in order; and bytes
// sent while the agent is away (coderd refuses with 503) wait with the
// connection for the agent and then arrive, once.
func TestPortForwardFirstBytes(t *testing.T) {
	t.Parallel()
	r := newRelayCLI(t)
	echo := coderdtest.EchoServer(t)
	banner := coderdtest.BannerEchoServer(t, "220 ready\n")
	echoLocal, bannerLocal := testport.Port(t), testport.Port(t)
	pf := start(t, r.env, "port-forward", "dev", "--wait", "60s",
		"--tcp", fmt.Sprintf("127.0.0.1:%d:%d", echoLocal, echo),
		"--tcp", fmt.Sprintf("127.0.0.1:%d:%d", bannerLocal, banner))
	pf.waitStderr(t, "Forwarding", 30*time.Second)
	pf.waitStderr(t, fmt.Sprintf("to port %d", banner), 30*time.Second)
	echoAddr, bannerAddr := fmt.Sprintf("127.0.0.1:%d", echoLocal), fmt.Sprintf("127.0.0.1:%d", bannerLocal)

	t.Run("ServerSpeaksFirst", func(t *testing.T) {
		for i := range 3 { // the first on a connection prepared at start, then on those prepared after use
			c, err := net.DialTimeout("tcp", bannerAddr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			line := make([]byte, len("220 ready\n"))
			if _, err := io.ReadFull(c, line); err != nil || string(line) != "220 ready\n" {
				t.Fatalf("connection %d: banner %q, %v; want it without sending a byte\nstderr: %s", i, line, err, pf.stderr)
			}
			_ = c.Close()
		}
	})

	t.Run("MoreThanKept", func(t *testing.T) {
		// 1 MiB written before reading anything: more than the CLI keeps
		// before the answer (256 KiB), and more than the sockets buffer,
		// so the echo must flow while the client still writes.
		payload := make([]byte, 1<<20)
		_, _ = rand.Read(payload)
		c, err := net.DialTimeout("tcp", echoAddr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		errc := make(chan error, 1)
		go func() { _, err := c.Write(payload); errc <- err }()
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("echo of 1 MiB sent at once: %v, equal %v\nstderr: %s", err, bytes.Equal(got, payload), pf.stderr)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("AgentAway", func(t *testing.T) {
		if err := roundTrip(echoAddr, "warm"); err != nil { // connections are prepared again
			t.Fatal(err)
		}
		if err := r.agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := r.agent.wait(t, 15*time.Second); code != 0 {
			t.Fatalf("coder agent after SIGTERM: exit %d\n%s", code, r.agent.stderr)
		}
		c, err := net.DialTimeout("tcp", echoAddr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		const first = "sent while the agent was away"
		if _, err := io.WriteString(c, first); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // paces the client: bytes sent while the agent is away stay queued a while (refused, 503, by now), which the CLI must survive
		// The startup script runs again, and its web server's pid file
		// will name a server that could not listen: stop this one at the
		// end.
		if b, err := os.ReadFile(filepath.Join(r.dir, ".http.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			}
		}
		r.agent = start(t, baseEnv(t, "CODER_AGENT_URL="+r.d.URL.String(), "CODER_AGENT_TOKEN="+r.token), "agent")
		got := make([]byte, len(first))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != first {
			t.Fatalf("echo after the agent came back: %q, %v; want %q\nport-forward: %s", got, err, first, pf.stderr)
		}
		// Once: nothing more comes.
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := c.Read(make([]byte, 64)); n != 0 || !isTimeout(err) {
			t.Fatalf("after the echo: %d more bytes (%v), want none", n, err)
		}
		if strings.Contains(pf.stderr.String(), "forward 127.0.0.1") {
			t.Errorf("coder port-forward reported a failed connection:\n%s", pf.stderr)
		}
	})
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
