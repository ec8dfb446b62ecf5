package cli_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(coderdtest.Main(m), coderdtest.LeakOptions()...) }

// testVersion is linked into the test binary, so that `coder --version`,
// `coder version` and /api/v2/buildinfo are checked against a value that only
// the link-time setting can produce.
const testVersion = "v2.99.0-clitest"

// coderBinary builds cmd/coder once per test binary and returns its path.
// Tests run the binary rather than cli.Main when they need their own
// environment (cli.Main reads os.Environ) or a server they can stop with
// SIGTERM.
func coderBinary(t testing.TB) string {
	t.Helper()
	return testbin.Build(t, "airgapcoder/cmd/coder", "-X airgapcoder/internal/buildinfo.version="+testVersion)
}

// proc is a running coder binary: a testbin.Proc, with the short names
// the CLI's tests use for its parts.
type proc struct {
	*testbin.Proc
	cmd            *exec.Cmd
	args           []string
	stdout, stderr *syncbuf.Buffer
	done           <-chan struct{}
}

// baseEnv is the environment every test run of the binary starts from: no
// CODER_* variable of the test's own environment leaks in, and HOME points at
// a temp dir so that defaults (~/.config/coderv2, ~/.cache) stay inside it.
func baseEnv(t testing.TB, kv ...string) []string {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	return append(env, kv...)
}

// signedInEnv is baseEnv for a run of the binary signed in as c: its
// deployment's URL and its session token, then kv.
func signedInEnv(t testing.TB, c *codersdk.Client, kv ...string) []string {
	t.Helper()
	return baseEnv(t, append([]string{"CODER_URL=" + c.URL.String(), "CODER_SESSION_TOKEN=" + c.SessionToken}, kv...)...)
}

// start runs the binary with env and args in the background; the process is
// killed when the test ends if it is still running.
func start(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	bp := testbin.Start(t, coderBinary(t), env, args...)
	return &proc{Proc: bp, cmd: bp.Cmd, args: bp.Args, stdout: bp.Stdout, stderr: bp.Stderr, done: bp.Done()}
}

// wait waits up to timeout for the process to exit and returns its exit
// code (testbin.Proc.Wait).
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	return p.Wait(t, timeout)
}

// waitStderr waits until the process's stderr contains want.
func (p *proc) waitStderr(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	testwait.For(t, timeout, fmt.Sprintf("coder %s printing %q on stderr", strings.Join(p.args, " "), want), func() (bool, string) {
		if strings.Contains(p.stderr.String(), want) {
			return true, ""
		}
		select {
		case <-p.done:
			if strings.Contains(p.stderr.String(), want) {
				return true, ""
			}
			t.Fatalf("coder %s exited (code %d) before printing %q\nstdout: %s\nstderr: %s", strings.Join(p.args, " "), p.ExitCode(), want, p.stdout, p.stderr)
		default:
		}
		return false, "stderr: " + p.stderr.String()
	})
}

// run runs the binary to completion (at most a minute) and returns stdout,
// stderr and the exit code.
func run(t testing.TB, env []string, args ...string) (string, string, int) {
	t.Helper()
	p := start(t, env, args...)
	code := p.wait(t, time.Minute)
	return p.stdout.String(), p.stderr.String(), code
}

// mustRun runs the binary and fails the test unless it exits 0.
func mustRun(t testing.TB, env []string, args ...string) string {
	t.Helper()
	stdout, stderr, code := run(t, env, args...)
	if code != 0 {
		t.Fatalf("coder %s: exit %d, want 0\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	return testport.Addr(t)
}

// waitHealthy polls baseURL/healthz until it answers 200 "OK", failing early
// when the server process exits.
func waitHealthy(t testing.TB, srv *proc, baseURL string) {
	t.Helper()
	waitHealthz(t, baseURL, time.Minute, func() string {
		select {
		case <-srv.done:
			return fmt.Sprintf("coder %s exited with %d before %s/healthz answered", strings.Join(srv.args, " "), srv.ExitCode(), baseURL)
		default:
			return ""
		}
	}, func() string { return "stderr: " + srv.stderr.String() })
}

// waitHealthz polls baseURL/healthz until it answers 200 "OK", failing
// after timeout, or at once when gone (optional) says why it never will;
// logs says what to show with a failure.
func waitHealthz(t testing.TB, baseURL string, timeout time.Duration, gone, logs func() string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	testwait.For(t, timeout, baseURL+"/healthz OK", func() (bool, string) {
		resp, err := client.Get(baseURL + "/healthz")
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && body.String() == "OK" {
				return true, ""
			}
		}
		if gone != nil {
			if why := gone(); why != "" {
				t.Fatalf("%s\n%s", why, logs())
			}
		}
		return false, fmt.Sprintf("last error %v\n%s", err, logs())
	})
}

// stopGracefully sends SIGTERM and wants exit code 0 within 30s.
func stopGracefully(t testing.TB, srv *proc) {
	t.Helper()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	began := time.Now()
	if code := srv.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("coder server after SIGTERM: exit %d, want 0 (graceful shutdown)\nstderr: %s", code, srv.stderr)
	}
	t.Logf("coder server stopped gracefully in %s", time.Since(began).Round(time.Millisecond))
}

// server is a `coder server` run by the binary over a fresh database.
type server struct {
	proc *proc
	URL  string
}

// psk is the provisioner pre-shared key of every test server.
const psk = "cli-test-psk"

// startServer runs `coder server` on a free loopback port over a fresh test
// database, waits for /healthz, and stops it with SIGTERM at the end of the
// test, wanting exit code 0. env (KEY=value) is added to the server's
// environment.
func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	addr := freeAddr(t)
	dir := t.TempDir()
	p := start(t, baseEnv(t, env...), "server",
		"--http-address", addr,
		"--postgres-url", coderdtest.NewDatabase(t),
		"--provisioner-daemons", "0",
		"--provisioner-daemon-psk", psk,
		"--global-config", filepath.Join(dir, "config"),
		"--cache-dir", filepath.Join(dir, "cache"),
	)
	s := &server{proc: p, URL: "http://" + addr}
	waitHealthy(t, p, s.URL)
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		stopGracefully(t, p)
	})
	return s
}
