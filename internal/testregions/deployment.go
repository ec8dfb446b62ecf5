package testregions

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testtier"
)

// A Deployment is the topology of issue 34 on Regions: the primary
// (PostgreSQL and `coder server`) in region A; in region B a workspace
// proxy (`coder wsproxy server`), an external provisioner (`coder
// provisionerd start --tag region=b --agent-url <the proxy>`) that built
// the process workspace "ws" (so its agent runs in B and connects to the
// proxy), and the owner's CLI, logged in to the primary. Every process is
// the built coder binary, in its region's namespace, stopped when the test
// ends (the workspace first).
type Deployment struct {
	// Regions are the two regions; A holds the primary.
	*Regions
	// Dir is the deployment's work folder.
	Dir string
	// PrimaryURL is the primary's access URL (plain HTTP, on A's address).
	PrimaryURL string
	// ProxyURL is the proxy's access URL (plain HTTP, on B's address).
	ProxyURL string
	// ProxyName is the proxy's name ("b").
	ProxyName string
	// ProxyToken is the proxy's token, as `coder wsproxy create` gave it.
	ProxyToken string
	// PGPort is PostgreSQL's port, on A's loopback.
	PGPort int
	// AgentID is the workspace's agent.
	AgentID string
	// SessionToken is the owner's session token (the CLI's).
	SessionToken string
	// Server and Provisioner are the primary's and the provisioner's
	// processes.
	Server, Provisioner *Process

	t     testing.TB
	opts  DeploymentOptions
	proxy *Process
}

// DeploymentOptions configure NewDeployment.
type DeploymentOptions struct {
	// Coder is the built coder binary (testbin.Coder).
	Coder string
	// ProviderMirror is the filesystem mirror of the Coder provider
	// (testprovider.Mirror).
	ProviderMirror string
	// Template is the folder of the process template
	// (examples/templates/process).
	Template string
	// Delay is the link's one-way delay.
	Delay time.Duration
	// Prefix starts the namespaces' names (Options.Prefix).
	Prefix string
	// Postgres is Debian's PostgreSQL folder; empty means
	// /usr/lib/postgresql/15.
	Postgres string
	// Logf, when set, is told how long each step of the set-up took.
	Logf func(format string, args ...any)
}

// Ports the deployment listens on; each region is a namespace of its own,
// so fixed ports collide with nothing.
const (
	primaryPort  = 3000
	proxyPort    = 3001
	postgresPort = 5432
	// psk is the deployment's provisioner pre-shared key.
	psk = "regions-psk"
)

// NewDeployment sets the deployment up, up to the workspace's agent
// connected and ready, failing the test with the step that failed and the
// logs of the process concerned.
func NewDeployment(t testing.TB, opts DeploymentOptions) *Deployment {
	t.Helper()
	testtier.Heavy(t, "creates network namespaces")
	if opts.Postgres == "" {
		opts.Postgres = "/usr/lib/postgresql/15"
	}
	d := &Deployment{
		Regions:    New(t, Options{Prefix: opts.Prefix, Delay: opts.Delay}),
		Dir:        t.TempDir(),
		PrimaryURL: fmt.Sprintf("http://%s:%d", AddrA, primaryPort),
		ProxyURL:   fmt.Sprintf("http://%s:%d", AddrB, proxyPort),
		ProxyName:  "b",
		PGPort:     postgresPort,
		t:          t,
		opts:       opts,
	}
	// PostgreSQL runs as the postgres user, which must reach its folder.
	for _, p := range []string{filepath.Dir(d.Dir), d.Dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatalf("chmod %s: %v", p, err)
		}
	}
	d.step("PostgreSQL in A", d.startPostgres)
	d.step("coder server in A", d.startServer)
	d.step("first user (CLI in B)", func() {
		d.Run("login", d.PrimaryURL, "--first-user-username", "admin", "--first-user-email", "admin@example.com",
			"--first-user-password", "regions-password-1")
		b, err := os.ReadFile(filepath.Join(d.Dir, "cli", "session"))
		if err != nil {
			t.Fatalf("read the CLI's session: %v", err)
		}
		d.SessionToken = strings.TrimSpace(string(b))
	})
	d.step("coder wsproxy create b", func() {
		d.ProxyToken = strings.TrimSpace(d.Run("wsproxy", "create", d.ProxyName, "--display-name", "Region B", "--only-token"))
		if strings.Count(d.ProxyToken, ":") != 1 {
			t.Fatalf("coder wsproxy create --only-token: got %q, want <id>:<secret>", d.ProxyToken)
		}
	})
	d.step("coder wsproxy server in B", func() { d.StartProxy() })
	d.step("coder provisionerd start in B", d.startProvisioner)
	d.step("template (built in B)", func() {
		d.Run("templates", "create", "process", "--directory", opts.Template, "--provisioner-tag", "region=b",
			"--variable", "base_dir="+filepath.Join(d.Dir, "workspaces"), "-y")
	})
	d.step("workspace ws (built in B)", func() {
		// Registered first: a failed create may still have started the agent.
		t.Cleanup(d.stopWorkspace)
		d.Run("create", "ws", "--template", "process", "-y")
		d.WaitAgentReady()
	})
	return d
}

func (d *Deployment) step(name string, fn func()) {
	d.t.Helper()
	start := time.Now()
	fn()
	if d.opts.Logf != nil {
		d.opts.Logf("regions step %-30s %7.2fs", name, time.Since(start).Seconds())
	}
}

// startPostgres runs Debian's PostgreSQL in A on its loopback, as the
// postgres user, with a database "coder".
func (d *Deployment) startPostgres() {
	t := d.t
	dir := filepath.Join(d.Dir, "pg")
	bin := filepath.Join(d.opts.Postgres, "bin")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "postgres:postgres", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v\n%s", dir, err, out)
	}
	asPG := func(args ...string) *exec.Cmd {
		return d.A.Command(nil, append([]string{"runuser", "-u", "postgres", "--"}, args...)...)
	}
	if out, err := asPG(bin+"/initdb", "-D", dir+"/data", "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off", d.PGPort, dir)
	if out, err := asPG(bin+"/pg_ctl", "-D", dir+"/data", "-l", dir+"/log", "-w", "-t", "60", "-o", opts, "start").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = asPG(bin+"/pg_ctl", "-D", dir+"/data", "-m", "immediate", "-w", "stop").Run() })
	if out, err := asPG(bin+"/createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(d.PGPort), "-U", "postgres", "coder").CombinedOutput(); err != nil {
		t.Fatalf("createdb: %v\n%s", err, out)
	}
}

// startServer runs `coder server` in A with no built-in provisioner: every
// job goes to region B's.
func (d *Deployment) startServer() {
	dir := filepath.Join(d.Dir, "server")
	d.Server = d.start("server", d.A, []string{"HOME=" + dir},
		"server", "--http-address", fmt.Sprintf("%s:%d", AddrA, primaryPort), "--access-url", d.PrimaryURL,
		"--postgres-url", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/coder?sslmode=disable", d.PGPort),
		"--provisioner-daemons", "0", "--provisioner-daemon-psk", psk, "--provider-mirror", d.opts.ProviderMirror,
		"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache"),
		// The CLI calls of a test are one token's: no rate limit.
		"--api-rate-limit", "0")
	d.waitHTTP(d.PrimaryURL+"/healthz", d.Server, 2*time.Minute)
}

// StartProxy starts `coder wsproxy server` in B (again, after KillProxy)
// and waits until it answers /healthz (it registered with the primary).
func (d *Deployment) StartProxy() *Process {
	d.t.Helper()
	d.proxy = d.start("wsproxy", d.B, []string{"CODER_PROXY_SESSION_TOKEN=" + d.ProxyToken},
		"wsproxy", "server", "--primary-access-url", d.PrimaryURL, "--access-url", d.ProxyURL,
		"--http-address", fmt.Sprintf("%s:%d", AddrB, proxyPort))
	d.waitHTTP(d.ProxyURL+"/healthz", d.proxy, time.Minute)
	return d.proxy
}

// Proxy is the proxy's process (the last StartProxy's).
func (d *Deployment) Proxy() *Process { return d.proxy }

// startProvisioner runs the external provisioner of region B: it carries
// the tag region=b, and the agents of the workspaces it builds connect to
// the proxy.
func (d *Deployment) startProvisioner() {
	t := d.t
	if help, _ := d.CLI(nil, "provisionerd", "start", "--help").CombinedOutput(); !strings.Contains(string(help), "--agent-url") {
		t.Fatalf("coder provisionerd start has no --agent-url: the workspace's agent cannot be sent to the proxy\n%s", help)
	}
	dir := filepath.Join(d.Dir, "provisioner")
	d.Provisioner = d.start("provisionerd", d.B, []string{"HOME=" + dir, "CODER_URL=" + d.PrimaryURL},
		"provisionerd", "start", "--psk", psk, "--name", "region-b", "--tag", "region=b", "--agent-url", d.ProxyURL,
		"--provider-mirror", d.opts.ProviderMirror, "--cache-dir", filepath.Join(dir, "cache"))
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(d.Provisioner.Output(), "is waiting for jobs") {
		if d.Provisioner.Exited() || time.Now().After(deadline) {
			t.Fatalf("coder provisionerd start: not waiting for jobs (exited: %v)\n%s", d.Provisioner.Exited(), d.Provisioner.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CLI returns the owner's `coder` command in region B (the user's
// region), with env added to its environment (e.g. another
// CODER_SESSION_TOKEN).
func (d *Deployment) CLI(env []string, args ...string) *exec.Cmd {
	return d.CLIContext(context.Background(), env, args...)
}

// CLIContext is CLI with a context that kills the command.
func (d *Deployment) CLIContext(ctx context.Context, env []string, args ...string) *exec.Cmd {
	base := []string{"CODER_CONFIG_DIR=" + filepath.Join(d.Dir, "cli"), "HOME=" + filepath.Join(d.Dir, "home")}
	return d.B.CommandContext(ctx, append(base, env...), append([]string{d.opts.Coder}, args...)...)
}

// Run runs the owner's `coder args…` in B and returns its output, failing
// the test when it fails.
func (d *Deployment) Run(args ...string) string {
	d.t.Helper()
	out, err := d.CLI(nil, args...).CombinedOutput()
	if err != nil {
		d.t.Fatalf("coder %s (in B): %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// WaitAgentReady waits until ws's agent is connected and ready (as the
// primary sees it), and keeps its id.
func (d *Deployment) WaitAgentReady() {
	t := d.t
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var w struct {
			LatestBuild struct {
				Resources []struct {
					Agents []struct {
						ID             string `json:"id"`
						Status         string `json:"status"`
						LifecycleState string `json:"lifecycle_state"`
					} `json:"agents"`
				} `json:"resources"`
			} `json:"latest_build"`
		}
		out := d.Run("show", "ws", "-o", "json")
		if err := json.Unmarshal([]byte(out), &w); err != nil {
			t.Fatalf("coder show ws -o json: %v\n%s", err, out)
		}
		for _, r := range w.LatestBuild.Resources {
			for _, a := range r.Agents {
				if a.Status == "connected" && a.LifecycleState == "ready" {
					d.AgentID = a.ID
					return
				}
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(d.Dir, "workspaces", "admin", "ws", ".coder-agent.log"))
			t.Fatalf("ws: agent not connected and ready after 3m: %+v\n%s\nagent log:\n%s\nproxy:\n%s\nprovisioner:\n%s",
				w, d.Run("show", "ws"), tail(string(log), 30), d.proxy.Tail(20), d.Provisioner.Tail(20))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stopWorkspace stops ws through the provisioner, and kills its agent
// should that fail (the process template's agent outlives terraform).
func (d *Deployment) stopWorkspace() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = d.CLIContext(ctx, nil, "stop", "ws", "-y").Run()
	pidfile := filepath.Join(d.Dir, "workspaces", "admin", "ws", ".coder-agent.pid")
	if b, err := os.ReadFile(pidfile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// waitHTTP waits until url answers 200 from region B, failing with the
// end of p's output when p exits or timeout passes.
func (d *Deployment) waitHTTP(url string, p *Process, timeout time.Duration) {
	d.t.Helper()
	hc := d.B.HTTPClient()
	hc.Timeout = 2 * time.Second
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			d.t.Fatalf("%s: no 200 from %s within %s (exited: %v; last: %v)\n%s", p.Name, url, timeout, p.Exited(), err, p.Tail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// HTTPClient returns an HTTP client whose connections are made in the
// region.
func (reg *Region) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: reg.Dial}}
}

// Process is a long-running coder process of a Deployment.
type Process struct {
	// Name says which process it is, in failure messages.
	Name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

// start runs the coder binary with args in reg until the test ends
// (SIGTERM, then SIGKILL after 15 s).
func (d *Deployment) start(name string, reg *Region, env []string, args ...string) *Process {
	d.t.Helper()
	p := &Process{Name: name, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = reg.Command(env, append([]string{d.opts.Coder}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		d.t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	d.t.Cleanup(func() { p.Stop(15 * time.Second) })
	return p
}

// Pid is the process's id (nsenter executes the coder binary itself).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is everything the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Tail is the last n lines of Output, for failure messages.
func (p *Process) Tail(n int) string {
	if p == nil {
		return "(not started)"
	}
	return tail(p.Output(), n)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to end and returns its exit
// code (-1 when it did not end, or ended by a signal).
func (p *Process) Wait(timeout time.Duration) int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// Kill ends the process with SIGKILL and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, then SIGKILL when the process has not ended after
// grace.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.Wait(grace) == -1 && !p.Exited() {
		p.Kill()
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// SSHRoundTrips runs `coder ssh --stdio ws` in region B with extra
// arguments (e.g. --proxy b), speaks SSH to it from the test process
// (golang.org/x/crypto/ssh, as OpenSSH would through ProxyCommand), runs
// `cat` in the workspace and measures n round trips of one byte through
// it. It returns the round trips and what the CLI wrote on stderr.
func (d *Deployment) SSHRoundTrips(ctx context.Context, n int, env []string, args ...string) ([]time.Duration, string, error) {
	cmd := d.CLI(env, append(append([]string{"ssh", "--stdio"}, args...), "ws")...)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", fmt.Errorf("coder ssh --stdio: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", fmt.Errorf("coder ssh --stdio: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start coder ssh --stdio: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	fail := func(what string, err error) ([]time.Duration, string, error) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, stderr.String(), fmt.Errorf("%s through coder ssh --stdio %s: %w (stderr: %s)", what, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	conn, chans, reqs, err := ssh.NewClientConn(&pipeConn{r: stdout, w: stdin}, "ws", &ssh.ClientConfig{
		User: "coder", HostKeyCallback: ssh.InsecureIgnoreHostKey(),
	})
	if err != nil {
		return fail("SSH handshake", err)
	}
	client := ssh.NewClient(conn, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return fail("SSH session", err)
	}
	defer sess.Close()
	in, err := sess.StdinPipe()
	if err != nil {
		return fail("SSH stdin", err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		return fail("SSH stdout", err)
	}
	if err := sess.Start("cat"); err != nil {
		return fail("start cat", err)
	}
	r := bufio.NewReader(out)
	rtts := make([]time.Duration, 0, n)
	for i := range n + 1 {
		b := byte('a' + i%26)
		start := time.Now()
		if _, err := in.Write([]byte{b}); err != nil {
			return fail("write", err)
		}
		got, err := r.ReadByte()
		if err != nil {
			return fail("read", err)
		}
		if got != b {
			return fail("echo", fmt.Errorf("got %q, want %q", got, b))
		}
		if i > 0 { // the first one warms the path up
			rtts = append(rtts, time.Since(start))
		}
	}
	_ = in.Close()
	return rtts, stderr.String(), nil
}

// pipeConn is a net.Conn over a process's standard output and input.
type pipeConn struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (c *pipeConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *pipeConn) Write(b []byte) (int, error) { return c.w.Write(b) }
func (c *pipeConn) Close() error {
	c.w.Close()
	return c.r.Close()
}
func (c *pipeConn) LocalAddr() net.Addr                { return pipeAddr{} }
func (c *pipeConn) RemoteAddr() net.Addr               { return pipeAddr{} }
func (c *pipeConn) SetDeadline(t time.Time) error      { return nil }
func (c *pipeConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *pipeConn) SetWriteDeadline(t time.Time) error { return nil }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "coder ssh --stdio" }

// RemotePorts lists the remote ports of the TCP sockets process pid holds
// (its file descriptors, looked up in /proc/<pid>/net/tcp and tcp6: the
// tables of its own network namespace).
func RemotePorts(pid int) (map[int]bool, error) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, fmt.Errorf("read the fds of %d: %w", pid, err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	remote := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, fmt.Errorf("read the TCP table of %d: %w", pid, err)
		}
		lines := strings.Split(string(b), "\n")
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			_, hex, _ := strings.Cut(f[2], ":")
			if p, err := strconv.ParseInt(hex, 16, 32); err == nil {
				remote[int(p)] = true
			}
		}
	}
	return remote, nil
}
