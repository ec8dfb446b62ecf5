package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// relayCLI is a deployment with a workspace "dev" of alice's whose agent
// runs as the built coder binary (`coder agent`), and an HTTP server in the
// workspace: python3's, started by the startup script, or one of the test's
// when python3 is missing.
type relayCLI struct {
	d                   *coderdtest.Deployment
	opts                coderdtest.Options
	admin, alice        *codersdk.Client
	member              *codersdk.Client
	agentID, token, dir string
	webPort             int
	env                 []string // alice's CLI environment
	globalConfig        string
	agent               *proc
}

// webFile is what the workspace's web server serves at /hello.txt.
const webFile = "hello from the workspace\n"

func newRelayCLI(t *testing.T) *relayCLI {
	t.Helper()
	r := &relayCLI{token: uuid.NewString(), dir: t.TempDir()}
	r.opts = coderdtest.Options{ProvisionerPSK: psk, AgentHeartbeatInterval: 500 * time.Millisecond, AgentKeepAliveInterval: 2 * time.Second}
	r.d = coderdtest.New(t, r.opts)
	r.admin, _ = r.d.CreateFirstUser(t)
	r.alice, _ = r.d.CreateUser(t, r.admin, "alice")
	r.member, _ = r.d.CreateUser(t, r.admin, "member")
	if err := os.WriteFile(filepath.Join(r.dir, "hello.txt"), []byte(webFile), 0o644); err != nil {
		t.Fatal(err)
	}
	r.webPort = freePort(t)
	script := "echo workspace starting\n"
	if _, err := exec.LookPath("python3"); err == nil {
		pidFile := filepath.Join(r.dir, ".http.pid")
		script += fmt.Sprintf(`python3 -m http.server %d --bind 127.0.0.1 --directory %s >%s/.http.log 2>&1 &
echo $! > %s
i=0; until curl -fsS -o /dev/null http://127.0.0.1:%d/hello.txt; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done
echo web server up on %d
`, r.webPort, r.dir, r.dir, pidFile, r.webPort, r.webPort)
		t.Cleanup(func() {
			if b, err := os.ReadFile(pidFile); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	} else {
		t.Logf("python3 is not installed: the test serves the workspace's web server itself")
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", r.webPort))
		if err != nil {
			t.Fatal(err)
		}
		srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.FileServer(http.Dir(r.dir))}}
		srv.Start()
		t.Cleanup(srv.Close)
	}
	pskClient := r.d.Client()
	pskClient.ProvisionerPSK = psk
	daemon := coderdtest.NewDaemon(t, pskClient, "test", nil)
	w := coderdtest.CreateWorkspaceWithAgent(t, r.admin, r.alice, daemon, "dev", codersdk.ProvisionedAgent{
		Token: r.token, Directory: r.dir,
		Scripts: []codersdk.AgentScript{{DisplayName: codersdk.ScriptStartupDisplayName, Script: script, RunOnStart: true}},
		Apps:    []codersdk.ProvisionedApp{{Slug: "web", Port: int32(r.webPort)}},
	})
	r.agentID = coderdtest.WorkspaceAgent(t, w).ID
	r.globalConfig = filepath.Join(t.TempDir(), "config")
	r.env = baseEnv(t, "CODER_CONFIG_DIR="+r.globalConfig)
	mustRun(t, r.env, "login", r.d.URL.String(), "--token", r.alice.SessionToken)
	r.agent = start(t, baseEnv(t, "CODER_AGENT_URL="+r.d.URL.String(), "CODER_AGENT_TOKEN="+r.token), "agent")
	r.waitReady(t, r.alice)
	return r
}

func (r *relayCLI) waitReady(t *testing.T, c *codersdk.Client) {
	t.Helper()
	testwait.For(t, time.Minute, "the agent ready", func() (bool, string) {
		a, err := c.WorkspaceAgent(context.Background(), r.agentID)
		return err == nil && a.Status == codersdk.AgentStatusConnected && a.LifecycleState == codersdk.AgentLifecycleReady,
			fmt.Sprintf("%+v, %v\nagent stderr: %s", a, err, r.agent.stderr)
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	return testport.Port(t)
}

// tool runs a program that is not ours (ssh, scp, curl, script) with env
// and stdin, and returns its combined output and exit code.
func tool(t *testing.T, env []string, stdin string, name string, args ...string) (string, int) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (scripts/install-deps.sh installs it): %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out), code
}

// negotiatedCipher finds the cipher in the output of ssh -v ("debug1: kex:
// server->client cipher: aes128-ctr MAC: ...").
func negotiatedCipher(out string) string {
	_, rest, ok := strings.Cut(out, "server->client cipher: ")
	if !ok {
		return ""
	}
	cipher, _, _ := strings.Cut(rest, " ")
	return cipher
}

// sshArgs are the OpenSSH options that reach a workspace through coder.
func (r *relayCLI) sshArgs(t *testing.T) []string {
	return []string{"-F", "/dev/null", "-o", "ProxyCommand=" + coderBinary(t) + " ssh --stdio %h",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}
}

// TestCLIWorkspaceAccess drives coder ssh, OpenSSH (ssh, scp), coder
// port-forward with curl, dev URLs with curl, coder config-ssh and coder show
// against an agent run by the built binary.
func TestCLIWorkspaceAccess(t *testing.T) {
	t.Parallel()
	r := newRelayCLI(t)

	t.Run("CoderSSH", func(t *testing.T) {
		if out := mustRun(t, r.env, "ssh", "dev", "--", "echo", "hello"); out != "hello\n" {
			t.Errorf("coder ssh dev -- echo hello: got %q", out)
		}
		if _, stderr, code := run(t, r.env, "ssh", "dev", "--", "sh", "-c", "exit 7"); code != 7 || stderr != "" {
			t.Errorf("coder ssh dev -- sh -c 'exit 7': got exit %d, stderr %q; want 7 and nothing", code, stderr)
		}
		if out := mustRun(t, r.env, "ssh", "dev", "--", "echo $((6*7)) | tr 4 X"); out != "X2\n" {
			t.Errorf("one argument runs as a shell command: got %q", out)
		}
		if out := mustRun(t, r.env, "ssh", "alice/dev", "ls", "-a", "hello.txt"); out != "hello.txt\n" {
			t.Errorf("flags after NAME go to the command: got %q", out)
		}
		// Megabytes of output on both streams, read many packets at a time,
		// arrive whole and in order.
		var want strings.Builder
		for i := 1; i <= 300_000; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		stdout, stderr, code := run(t, r.env, "ssh", "dev", "--", "seq 1 300000; seq 1 300000 >&2")
		if code != 0 || stdout != want.String() || stderr != want.String() {
			t.Errorf("coder ssh of seq 1 300000 on stdout and stderr: exit %d, %d and %d bytes, want 0 and %d bytes each, equal to seq's",
				code, len(stdout), len(stderr), want.Len())
		}
		_, stderr, code = run(t, r.env, "ssh", "nope")
		if code != 1 || !strings.Contains(stderr, "nope") {
			t.Errorf("coder ssh to a missing workspace: got %d %q", code, stderr)
		}
	})

	t.Run("Interactive", func(t *testing.T) {
		// script(1) gives coder ssh a terminal on stdin.
		out, code := tool(t, r.env, "echo tty=$(tty | cut -c1-9) cols=$(tput cols 2>/dev/null || stty size)\nexit 5\n",
			"script", "-qfec", coderBinary(t)+" ssh dev", "/dev/null")
		if code != 5 || !strings.Contains(out, "tty=/dev/pts/") {
			t.Errorf("interactive coder ssh: exit %d, output %q; want 5 and a terminal", code, out)
		}
	})

	t.Run("OpenSSH", func(t *testing.T) {
		env := append(r.env, "CODER_URL="+r.d.URL.String(), "CODER_SESSION_TOKEN="+r.alice.SessionToken)
		out, code := tool(t, env, "", "ssh", append(r.sshArgs(t), "dev", "uname", "-a")...)
		if code != 0 || !strings.Contains(out, "Linux") {
			t.Fatalf("ssh dev uname -a: exit %d, output %q", code, out)
		}
		out, code = tool(t, env, "", "ssh", append(r.sshArgs(t), "coder.dev", "exit 9")...)
		if code != 9 {
			t.Errorf("ssh coder.dev 'exit 9': exit %d, output %q", code, out)
		}
		// OpenSSH asks for chacha20-poly1305 first; the agent does not
		// offer it (agent.SSHCiphers), so OpenSSH takes an AES cipher.
		out, code = tool(t, env, "", "ssh", append(r.sshArgs(t), "-v", "dev", "true")...)
		if cipher := negotiatedCipher(out); code != 0 || !strings.HasPrefix(cipher, "aes") {
			t.Errorf("ssh -v dev true: exit %d, cipher %q; want an AES cipher\n%s", code, cipher, out)
		}
	})

	t.Run("SCP", func(t *testing.T) {
		env := append(r.env, "CODER_URL="+r.d.URL.String(), "CODER_SESSION_TOKEN="+r.alice.SessionToken)
		local := t.TempDir()
		payload := bytes.Repeat([]byte("scp through the relay\n"), 50000)
		if err := os.WriteFile(filepath.Join(local, "up.bin"), payload, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []struct{ name, flag string }{{"sftp", "-s"}, {"legacy", "-O"}} {
			remote := "dev:" + mode.name + "-up.bin"
			if out, code := tool(t, env, "", "scp", append(r.sshArgs(t), mode.flag, filepath.Join(local, "up.bin"), remote)...); code != 0 {
				t.Fatalf("scp %s upload: exit %d: %s", mode.name, code, out)
			}
			got, err := os.ReadFile(filepath.Join(r.dir, mode.name+"-up.bin"))
			if err != nil || !bytes.Equal(got, payload) {
				t.Errorf("scp %s upload: the workspace has %d bytes (%v), want %d", mode.name, len(got), err, len(payload))
			}
			down := filepath.Join(local, mode.name+"-down.txt")
			if out, code := tool(t, env, "", "scp", append(r.sshArgs(t), mode.flag, "dev:hello.txt", down)...); code != 0 {
				t.Fatalf("scp %s download: exit %d: %s", mode.name, code, out)
			}
			if got, _ := os.ReadFile(down); string(got) != webFile {
				t.Errorf("scp %s download: got %q", mode.name, got)
			}
		}
	})

	t.Run("PortForward", func(t *testing.T) {
		local := freePort(t)
		pf := start(t, r.env, "port-forward", "dev", "--tcp", fmt.Sprintf("%d:%d", local, r.webPort))
		pf.waitStderr(t, "Forwarding", 30*time.Second)
		url := fmt.Sprintf("http://127.0.0.1:%d/hello.txt", local)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				out, code := tool(t, r.env, "", "curl", "-fsS", url, url, url)
				if code != 0 || out != webFile+webFile+webFile {
					t.Errorf("curl %d through coder port-forward: exit %d, output %q", i, code, out)
				}
			})
		}
		wg.Wait()
		if err := pf.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if code := pf.wait(t, 10*time.Second); code != 0 {
			t.Errorf("coder port-forward after SIGINT: exit %d\nstderr: %s", code, pf.stderr)
		}
	})

	t.Run("DevURLs", func(t *testing.T) {
		for _, tc := range []struct {
			name, path, token string
			want              int
		}{
			{"port, owner", fmt.Sprintf("/@alice/dev/ports/%d/hello.txt", r.webPort), r.alice.SessionToken, 200},
			{"app, owner", "/@alice/dev/apps/web/hello.txt", r.alice.SessionToken, 200},
			{"no token", fmt.Sprintf("/@alice/dev/ports/%d/hello.txt", r.webPort), "", 401},
			{"another member", "/@alice/dev/apps/web/hello.txt", r.member.SessionToken, 404},
		} {
			args := []string{"-sS", "-o", "/dev/stderr", "-w", "%{http_code}", r.d.URL.String() + tc.path}
			if tc.token != "" {
				args = append(args, "-H", codersdk.SessionTokenHeader+": "+tc.token)
			}
			out, code := tool(t, r.env, "", "curl", args...)
			if code != 0 || !strings.HasSuffix(out, strconv.Itoa(tc.want)) {
				t.Errorf("%s: curl %s: exit %d, output %q; want status %d", tc.name, tc.path, code, out, tc.want)
			}
			if tc.want == 200 && !strings.HasPrefix(out, webFile) {
				t.Errorf("%s: got %q, want the file", tc.name, out)
			}
		}
		// The dashboard's cookie works as well as the header.
		out, _ := tool(t, r.env, "", "curl", "-sS", "--cookie", codersdk.SessionTokenCookie+"="+r.alice.SessionToken,
			r.d.URL.String()+"/@alice/dev/apps/web/hello.txt")
		if out != webFile {
			t.Errorf("dev URL with the session cookie: got %q", out)
		}
	})

	t.Run("ConfigSSH", func(t *testing.T) {
		home := t.TempDir()
		env := append(append([]string{}, r.env...), "HOME="+home)
		sshDir := filepath.Join(home, ".ssh")
		if err := os.MkdirAll(sshDir, 0o700); err != nil {
			t.Fatal(err)
		}
		mine := "Host mine\n\tHostName example.invalid\n"
		if err := os.WriteFile(filepath.Join(sshDir, "config"), []byte(mine), 0o600); err != nil {
			t.Fatal(err)
		}
		mustRun(t, env, "config-ssh", "-y")
		first, _ := os.ReadFile(filepath.Join(sshDir, "config"))
		_, stderr, code := run(t, env, "config-ssh", "-y")
		second, _ := os.ReadFile(filepath.Join(sshDir, "config"))
		if code != 0 || !bytes.Equal(first, second) || !strings.Contains(stderr, "up to date") {
			t.Errorf("a second config-ssh changed the file or failed (exit %d, %q):\n%s\n---\n%s", code, stderr, first, second)
		}
		s := string(first)
		if !strings.HasPrefix(s, mine) || strings.Count(s, "START-CODER") != 1 || !strings.Contains(s, "Host coder.dev\n") ||
			!strings.Contains(s, "StrictHostKeyChecking no") || !strings.Contains(s, "UserKnownHostsFile /dev/null") {
			t.Errorf("ssh config:\n%s", s)
		}
		if st, _ := os.Stat(filepath.Join(sshDir, "config")); st.Mode().Perm() != 0o600 {
			t.Errorf("ssh config mode %v, want 0600", st.Mode().Perm())
		}
		// Plain OpenSSH with the written config, and no CODER_* variables.
		out, code := tool(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, "", "ssh",
			"-F", filepath.Join(sshDir, "config"), "-o", "BatchMode=yes", "coder.dev", "echo", "via-config")
		if code != 0 || out != "via-config\n" {
			t.Errorf("ssh coder.dev with the written config: exit %d, output %q", code, out)
		}
		// The written config asks for AES-GCM, the fastest the agent offers.
		out, code = tool(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, "", "ssh",
			"-F", filepath.Join(sshDir, "config"), "-o", "BatchMode=yes", "-v", "coder.dev", "true")
		if cipher := negotiatedCipher(out); code != 0 || cipher != "aes128-gcm@openssh.com" {
			t.Errorf("ssh -v coder.dev true with the written config: exit %d, cipher %q, want aes128-gcm@openssh.com\n%s", code, cipher, out)
		}
	})

	t.Run("Show", func(t *testing.T) {
		out := mustRun(t, r.env, "show", "dev")
		for _, want := range []string{"Listening ports:", strconv.Itoa(r.webPort), "workspace starting", "App web:", "/@alice/dev/apps/web/"} {
			if !strings.Contains(out, want) {
				t.Errorf("coder show dev lacks %q:\n%s", want, out)
			}
		}
		w := showWorkspace(t, r.env, "dev")
		if len(w.LatestBuild.Resources) == 0 || len(w.LatestBuild.Resources[0].Agents) == 0 ||
			len(w.LatestBuild.Resources[0].Agents[0].ListeningPorts) == 0 {
			t.Errorf("coder show -o json has no listening ports: %+v", w.LatestBuild.Resources)
		}
	})
}

// TestCLIAgentSurvivesCoderdRestart stops coderd and starts it again on the
// same address and database: the agent (the built binary) reconnects within
// seconds and coder ssh works again. A coder port-forward running across
// the restart forwards new connections again (the connection it prepared
// ahead died with coderd).
func TestCLIAgentSurvivesCoderdRestart(t *testing.T) {
	t.Parallel()
	r := newRelayCLI(t)
	if out := mustRun(t, r.env, "ssh", "dev", "--", "echo", "before"); out != "before\n" {
		t.Fatalf("before the restart: %q", out)
	}
	echo, local := coderdtest.EchoServer(t), testport.Port(t)
	pf := start(t, r.env, "port-forward", "dev", "--wait", "30s", "--tcp", fmt.Sprintf("127.0.0.1:%d:%d", local, echo))
	pf.waitStderr(t, "Forwarding", 30*time.Second)
	forwarded := fmt.Sprintf("127.0.0.1:%d", local)
	if err := roundTrip(forwarded, "before"); err != nil {
		t.Fatalf("coder port-forward before the restart: %v", err)
	}
	time.Sleep(time.Second) // paces the client: idle, as users leave it, so the next connection is prepared before the restart
	addr := r.d.URL.Host
	r.d.Close()
	opts := r.opts
	opts.DatabaseURL, opts.Address = r.d.DatabaseURL, addr
	began := time.Now()
	d2 := coderdtest.New(t, opts)
	alice := d2.Client()
	alice.SessionToken = r.alice.SessionToken
	// coder ssh waits (--wait) for an agent that has not reconnected yet.
	out, stderr, code := run(t, r.env, "ssh", "--wait", "30s", "dev", "--", "echo", "after")
	took := time.Since(began)
	if code != 0 || out != "after\n" {
		t.Fatalf("after the restart: exit %d, output %q, stderr %q\nagent: %s", code, out, stderr, r.agent.stderr)
	}
	t.Logf("coder ssh worked %s after coderd came back", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the agent took %s to come back, want seconds", took)
	}
	if err := roundTrip(forwarded, "after"); err != nil {
		t.Errorf("coder port-forward started before the restart: %v\nstderr: %s", err, pf.stderr)
	}
	r.waitReady(t, alice)
	// The agent stops cleanly and says so.
	if err := r.agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.agent.wait(t, 15*time.Second); code != 0 {
		t.Errorf("coder agent after SIGTERM: exit %d\nstderr: %s", code, r.agent.stderr)
	}
	a, err := alice.WorkspaceAgent(context.Background(), r.agentID)
	if err != nil || a.LifecycleState != codersdk.AgentLifecycleOff {
		t.Errorf("after SIGTERM: lifecycle %q (%v), want off", a.LifecycleState, err)
	}
}
