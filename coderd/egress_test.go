package coderd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testwait"
)

// connectCall is one connect() that strace saw.
type connectCall struct {
	line   string
	family string // AF_UNIX, AF_INET, AF_INET6, ...
	addr   string // the IP for AF_INET/AF_INET6
}

var (
	connectRe = regexp.MustCompile(`connect\(\d+, \{sa_family=(AF_[A-Z0-9]+)`)
	inet4Re   = regexp.MustCompile(`sin_addr=inet_addr\("([^"]+)"\)`)
	inet6Re   = regexp.MustCompile(`inet_pton\(AF_INET6, "([^"]+)"`)
)

// parseConnects returns every connect() in an `strace -f -e trace=connect`
// log that names an address. Resumed halves of interrupted calls
// ("<... connect resumed>") carry no address and are skipped.
func parseConnects(log []byte) ([]connectCall, error) {
	var calls []connectCall
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "connect(") {
			continue
		}
		m := connectRe.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("unparsed connect() line: %s", line)
		}
		c := connectCall{line: line, family: m[1]}
		switch c.family {
		case "AF_INET":
			if m := inet4Re.FindStringSubmatch(line); m != nil {
				c.addr = m[1]
			}
		case "AF_INET6":
			if m := inet6Re.FindStringSubmatch(line); m != nil {
				c.addr = m[1]
			}
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

// allowed reports whether a connect() stays on the machine: a unix socket,
// or TCP/UDP to 127.0.0.0/8 or ::1.
func (c connectCall) allowed() bool {
	switch c.family {
	case "AF_UNIX":
		return true
	case "AF_INET", "AF_INET6":
		ip := net.ParseIP(c.addr)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

func TestParseConnectsEgress(t *testing.T) {
	t.Parallel()
	log := `101 connect(3, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT (No such file or directory)
102 connect(7, {sa_family=AF_INET, sin_port=htons(5432), sin_addr=inet_addr("127.0.0.1")}, 16 <unfinished ...>
102 <... connect resumed>) = -1 EINPROGRESS (Operation now in progress)
103 connect(8, {sa_family=AF_INET6, sin6_port=htons(3000), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0
104 connect(9, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.0.0.2")}, 16) = 0
105 connect(9, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2606:4700::1", &sin6_addr), sin6_scope_id=0}, 28) = 0
106 connect(9, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("127.9.9.9")}, 16) = 0
`
	calls, err := parseConnects([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%s %s %v", c.family, c.addr, c.allowed()))
	}
	want := []string{"AF_UNIX  true", "AF_INET 127.0.0.1 true", "AF_INET6 ::1 true", "AF_INET 10.0.0.2 false", "AF_INET6 2606:4700::1 false", "AF_INET 127.9.9.9 true"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("parsed: got %q, want %q", got, want)
	}
}

// TestEgressNone runs `coder server` with the built-in PostgreSQL and with
// telemetry and the update check off (the defaults) under strace, exercises
// it, stops it with SIGTERM, and fails on any connect() that leaves the
// machine: an air-gapped deployment must not even try.
func TestEgressNone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatalf("strace is required for this test and was not found (%v): install it (apt-get install strace)", err)
	}
	began := time.Now()
	bin := testbin.Coder(t)
	t.Logf("built in %s", time.Since(began))

	// The built-in PostgreSQL runs as nobody when tests run as root: every
	// folder up to its data must be reachable.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	baseURL := "http://" + addr
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(dir, "home")}

	traceFile := filepath.Join(t.TempDir(), "connect.trace")
	var serverOut syncbuf.Buffer
	cmd := exec.Command("strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-e", "signal=none", "-o", traceFile, "--",
		bin, "server", "--http-address", addr, "--global-config", filepath.Join(dir, "config"),
		"--cache-dir", filepath.Join(dir, "cache"))
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &serverOut, &serverOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
	})

	// Wait for /healthz.
	client := &http.Client{Timeout: 2 * time.Second}
	testwait.For(t, 2*time.Minute, "/healthz OK", func() (bool, string) {
		resp, err := client.Get(baseURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		select {
		case err := <-done:
			exited = true
			t.Fatalf("coder server exited before /healthz answered: %v\n%s", err, serverOut.String())
		default:
		}
		return false, serverOut.String()
	})

	t.Logf("healthy after %s", time.Since(began))
	u, _ := url.Parse(baseURL)
	if bi, err := codersdk.New(u).BuildInfo(context.Background()); err != nil || bi.Telemetry || bi.UpdateCheck {
		t.Fatalf("buildinfo: got %+v, %v; want telemetry and update_check off by default", bi, err)
	}
	// Exercise it with the CLI (a separate, untraced process): create the
	// first user and log in, then list workspaces.
	cliEnv := append(env, "CODER_CONFIG_DIR="+filepath.Join(dir, "cli"))
	for _, args := range [][]string{
		{"login", baseURL, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "password-for-tests"},
		{"list", "-o", "json"},
		{"templates", "list"},
	} {
		c := exec.Command(bin, args...)
		c.Env = cliEnv
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("coder %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// The server's pid is strace's child; SIGTERM goes to it, and strace
	// exits with its exit code.
	pid := traceeOf(t, cmd.Process.Pid)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("coder server after SIGTERM: %v, want exit code 0\n%s", err, serverOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("coder server did not exit within 30s of SIGTERM\n%s", serverOut.String())
	}

	trace, err := os.ReadFile(traceFile)
	if err != nil {
		t.Fatal(err)
	}
	calls, err := parseConnects(trace)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	loopback, unix := 0, 0
	for _, c := range calls {
		switch {
		case !c.allowed():
			bad = append(bad, c.line)
		case c.family == "AF_UNIX":
			unix++
		default:
			loopback++
		}
	}
	if len(bad) > 0 {
		t.Fatalf("coder server with telemetry and update check off connected off the machine (%d of %d connect() calls):\n%s",
			len(bad), len(calls), strings.Join(bad, "\n"))
	}
	if loopback == 0 {
		t.Fatalf("strace saw no loopback connect() (%d calls in all): it did not trace the server and its PostgreSQL", len(calls))
	}
	t.Logf("%d connect() calls, all loopback or unix (%d loopback, %d unix)", len(calls), loopback, unix)
}

// traceeOf returns the pid of the process strace (pid) started.
func traceeOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatalf("find strace's child: %v", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 1 {
		t.Fatalf("strace's children: got %q, want one", b)
	}
	child, err := strconv.Atoi(fields[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}
