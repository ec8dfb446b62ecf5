package appliance_test

import (
	"archive/zip"
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// postmaster returns the pid of the appliance's PostgreSQL.
func postmaster(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postgres", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestPostgresCrashRecovers is the chaos test of the built-in PostgreSQL,
// on the built binary run as root (as CI runs it): with a workspace
// running, kill -9 of the postmaster (a crash, the OOM killer) and then
// SIGSTOP (a hang) each leave the appliance healthy again by itself, with
// its users, workspaces and audit log, and coder ssh and a new build
// working; a PostgreSQL that fails on every start makes up exit non-zero,
// naming it, so that systemd restarts the appliance.
func TestPostgresCrashRecovers(t *testing.T) {
	http, tls := freePort(t), freePort(t)
	e := newUpgradeEnv(t, fmt.Sprintf("tls-address: %s\nhttp-address: %s\nmirror-address: %s\nprovisioner-daemons: 1\nwildcard-access-url: \"*.apps.test\"\n", tls, http, freePort(t)))
	e.http, e.tls = http, tls
	work := e.work
	if out, err := e.coder("appliance", "install", e.bundleFor("2026.11.1", "{binary: self}"), "--dir", e.dir, "--public-key", filepath.Join(e.keys, "bundle.pub")); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	// As systemd runs it with WatchdogSec=2: WATCHDOG=1 every second while
	// healthy.
	notify := e.notifySocket()
	heard := &notifications{}
	go heard.collect(notify)
	t.Cleanup(func() { notify.Close() })
	up := e.startAppliance("NOTIFY_SOCKET="+notify.LocalAddr().String(), "WATCHDOG_USEC=2000000")
	access := "https://" + e.tls
	waitHealthy := func(what string, within time.Duration) time.Duration {
		t.Helper()
		return up.waitHealthy(t, e.dir, access, what, within)
	}
	logPath := up.log
	waitHealthy("first start", 3*time.Minute)
	if !heard.waitFor("WATCHDOG=1", time.Now(), 10*time.Second) {
		t.Fatalf("no WATCHDOG=1 within 10 s of a healthy start; systemd heard %q", heard.all())
	}

	// A user, the CLI logged in, a running workspace.
	ctx := context.Background()
	u, _ := url.Parse(access)
	anon := applianceClient(t, e.dir, u)
	if _, err := anon.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: "chaos-password"}); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "CODER_CONFIG_DIR="+filepath.Join(work, "cli"))
	coder := func(args ...string) (string, error) {
		cmd := exec.Command(e.bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustCoder := func(args ...string) string {
		t.Helper()
		out, err := coder(args...)
		if err != nil {
			t.Fatalf("coder %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mustCoder("login", access, "--ca-file", caFile(e.dir), "--email", "admin@example.com", "--password", "chaos-password")
	testwait.For(t, time.Minute, "the bundled template pushed", func() (bool, string) {
		out := mustCoder("templates", "list")
		return strings.Contains(out, "process"), out
	})
	mustCoder("create", "dev", "--template", "process", "-y")
	sshOK := func(what string) {
		t.Helper()
		testwait.For(t, 30*time.Second, what+": coder ssh", func() (bool, string) {
			out, err := coder("ssh", "dev", "--", "echo", "still-here")
			return err == nil && strings.TrimSpace(out) == "still-here", fmt.Sprintf("%v\n%s", err, out)
		})
	}
	sshOK("before")
	checkSupportBundle(t, e, work, mustCoder)
	checkAppHost(t, e.dir, access, "web--main--dev--admin.apps.test")

	// When PostgreSQL dies: an open ssh session, and a build in progress
	// (a template whose apply takes a while).
	session := openSSHSession(t, e.bin, env, "dev")
	session.echo("before the crash")
	slowDir, release := slowTemplate(t, work)
	mustCoder("templates", "push", "slow", "-d", slowDir, "-y")
	token, err := os.ReadFile(filepath.Join(work, "cli", "session"))
	if err != nil {
		t.Fatal(err)
	}
	api := applianceClient(t, e.dir, u)
	api.SessionToken = strings.TrimSpace(string(token))
	creating := exec.Command(e.bin, "create", "slow1", "--template", "slow", "-y")
	creating.Env = env
	if err := creating.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = creating.Process.Kill(); _ = creating.Wait() })
	testwait.For(t, time.Minute, "the build of slow1 running", func() (bool, string) {
		ws, err := api.WorkspaceByOwnerAndName(ctx, "admin", "slow1")
		return err == nil && ws.LatestBuild.Job.Status == codersdk.ProvisionerJobRunning, fmt.Sprintf("%+v %v", ws.LatestBuild.Job, err)
	})

	// A crash: kill -9 of the postmaster.
	pid := postmaster(t, e.dir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The build's apply ends now, while PostgreSQL is down: its completion
	// (terraform state and all) must reach coderd once it is back.
	release()
	// Healthy again within 15 s, on a new postmaster (coderd may answer
	// from its pool for a moment after the kill).
	killed := time.Now()
	waitNewPostmaster(t, e.dir, pid, 15*time.Second, logPath)
	waitHealthy("after kill -9 of PostgreSQL", 15*time.Second-time.Since(killed))
	t.Logf("a new postmaster and healthy %s after kill -9 of the old one (pid %d)", time.Since(killed).Round(time.Millisecond), pid)
	if out := mustCoder("list"); !strings.Contains(out, "dev") {
		t.Errorf("coder list after the crash does not show the workspace:\n%s", out)
	}
	if out := mustCoder("audit", "--limit", "200"); !strings.Contains(out, "login") {
		t.Errorf("the audit log after the crash lost the login:\n%s", out)
	}
	sshOK("after kill -9")
	session.echo("after the crash")
	// The interrupted build ends, and its end reached coderd: it
	// succeeded (a failure would say why, but the workspace's state would
	// then be lost).
	var job codersdk.ProvisionerJob
	testwait.For(t, 2*time.Minute, "the end of the build in progress during the crash", func() (bool, string) {
		ws, err := api.WorkspaceByOwnerAndName(ctx, "admin", "slow1")
		job = ws.LatestBuild.Job
		st := job.Status
		return err == nil && (st == codersdk.ProvisionerJobSucceeded || st == codersdk.ProvisionerJobFailed || st == codersdk.ProvisionerJobCanceled),
			fmt.Sprintf("%+v %v", job, err)
	})
	if job.Status != codersdk.ProvisionerJobSucceeded {
		// The appliance's log says what the provisioner and coderd did
		// with the job while PostgreSQL was away.
		var jobLines []string
		if b, err := os.ReadFile(logPath); err == nil {
			for line := range strings.Lines(string(b)) {
				if strings.Contains(line, job.ID) || strings.Contains(line, "report job") || strings.Contains(line, "provisioner") {
					jobLines = append(jobLines, strings.TrimSpace(line))
				}
			}
		}
		t.Errorf("the build whose apply ended while PostgreSQL was down ended %s %q, want succeeded; the appliance's log about it:\n%s",
			job.Status, job.Error, strings.Join(jobLines[max(0, len(jobLines)-60):], "\n"))
	}
	t.Logf("the build in progress during the crash ended %s %s after the kill", job.Status, time.Since(killed).Round(time.Second))

	// A hang: SIGSTOP of the postmaster, for longer than the supervisor's
	// deadline.
	pid = postmaster(t, e.dir)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// coderd's pool may still answer on its open connections: what counts
	// is that a new postmaster replaces the stopped one (the supervisor's
	// deadline is 5 s), and then health.
	stopped := time.Now()
	waitNewPostmaster(t, e.dir, pid, time.Minute, logPath)
	waitHealthy("after SIGSTOP of PostgreSQL", time.Minute)
	t.Logf("a new postmaster and healthy %s after SIGSTOP of the old one", time.Since(stopped).Round(time.Millisecond))
	sshOK("after SIGSTOP")
	if out := mustCoderRoot(t, e, "appliance", "status", "--dir", e.dir); !regexp.MustCompile(`postgres +ok .*restarted [2-5] times`).MatchString(out) {
		t.Errorf("coder appliance status does not say PostgreSQL was restarted (twice or more):\n%s", out)
	}
	// A new build works (the stop of the running workspace).
	mustCoder("stop", "dev", "-y")

	// The admin lost the password: reset on the host, as root.
	reset := func(user, password string) (string, error) {
		cmd := exec.Command(e.bin, "appliance", "reset-password", user, "--dir", e.dir)
		cmd.Stdin = strings.NewReader(password + "\n")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := reset("nobody-here", "whatever-password"); err == nil || !strings.Contains(out, `no user "nobody-here"`) {
		t.Errorf("reset of an unknown user: %v %q", err, out)
	}
	if out, err := reset("admin@example.com", "a-new-password-1"); err != nil {
		t.Fatalf("reset-password: %v\n%s", err, out)
	}
	if out, err := coder("list"); err == nil {
		t.Errorf("the session from before the reset still works:\n%s", out)
	}
	mustCoder("login", access, "--ca-file", caFile(e.dir), "--email", "admin@example.com", "--password", "a-new-password-1")
	// The server copies the journal's new records every few seconds.
	var audit string
	if !testwait.Until(20*time.Second, func() bool {
		audit = mustCoder("audit", "--limit", "50", "-o", "json")
		return strings.Contains(audit, "password reset of user admin@example.com")
	}) {
		t.Errorf("the audit log does not show the reset within 20 s:\n%s", audit)
	}

	// A PostgreSQL that dies on every start: up gives up, naming it.
	if err := os.WriteFile(filepath.Join(e.dir, "data", "postgres", "PG_VERSION"), []byte("9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := time.Now()
	if err := syscall.Kill(postmaster(t, e.dir), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Unhealthy: the watchdog goes unfed (systemd would kill and restart
	// the appliance WatchdogSec later), and says why.
	if !heard.waitFor("STATUS=unhealthy", broken, 30*time.Second) {
		t.Errorf("systemd heard no STATUS=unhealthy once PostgreSQL failed: %q", heard.all())
	}
	time.Sleep(4 * time.Second) // proves a negative: no WATCHDOG=1 from the real appliance process over four of its (wall-clock) watchdog intervals
	if last := heard.last("WATCHDOG=1"); time.Since(last) < 3*time.Second {
		t.Errorf("WATCHDOG=1 %s ago, while /healthz fails", time.Since(last).Round(time.Millisecond))
	}
	select {
	case err := <-up.exited:
		b, _ := os.ReadFile(logPath)
		if err == nil || !strings.Contains(string(b), "postgres keeps failing") {
			t.Fatalf("appliance up exited with %v, want a failure naming postgres:\n%s", err, tailLines(string(b), 30))
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("appliance up still runs 3 minutes after PostgreSQL began failing on every start")
	}
}

// checkSupportBundle: `coder support bundle dev` writes what a person
// diagnosing the appliance needs, and none of its secrets: the CLI's
// session token, the agent's token, the database password, the CA's
// private key.
func checkSupportBundle(t *testing.T, e *upgradeEnv, work string, coder func(...string) string) {
	t.Helper()
	file := filepath.Join(work, "support.zip")
	coder("support", "bundle", "dev", "--output-file", file)
	z, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var all strings.Builder
	names := map[string]bool{}
	for _, f := range z.File {
		names[f.Name] = true
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		r.Close()
		all.Write(b)
		if f.Name == "logs.txt" && !strings.Contains(string(b), "mirror ready") {
			t.Errorf("the support bundle's logs.txt lacks the appliance's own log lines (mirror ready):\n%s", tailLines(string(b), 20))
		}
	}
	for _, want := range []string{"buildinfo.json", "health.json", "appliance.json", "replicas.json", "audit.json",
		"logs.txt", "system.json", "postgres.json", "appliance/status.txt", "appliance/manifest.json", "appliance/config.json",
		"appliance/certificates.pem", "tls/chain.pem", "tls/connection.json",
		"workspace/workspace.json", "workspace/build.log", "workspace/agent-main-logs.json"} {
		if !names[want] {
			t.Errorf("the support bundle has no %s (it has %v)", want, names)
		}
	}
	secrets := map[string]string{}
	read := func(name, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = strings.TrimSpace(string(b))
	}
	read("session token", filepath.Join(work, "cli", "session"))
	read("database password", filepath.Join(e.dir, "data", "password"))
	read("CA private key", filepath.Join(e.dir, "certs", "ca-key.pem"))
	read("server private key", filepath.Join(e.dir, "certs", "server-key.pem"))
	// The keys' base64 bodies, not their PEM armour.
	for _, k := range []string{"CA private key", "server private key"} {
		secrets[k] = strings.Split(secrets[k], "\n")[1]
	}
	out, _ := exec.Command("pgrep", "-u", "ws-admin", "-f", "coder agent").Output()
	for _, p := range strings.Fields(string(out)) {
		env, _ := os.ReadFile("/proc/" + p + "/environ")
		if !strings.Contains(string(env), "HOME="+filepath.Join(e.dir, "workspaces")) {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "CODER_AGENT_TOKEN="); ok {
				secrets["agent token"] = v
			}
		}
	}
	if secrets["agent token"] == "" {
		t.Fatal("found no agent token of the workspace to look for")
	}
	for name, secret := range secrets {
		if len(secret) < 8 {
			t.Fatalf("%s %q is too short to look for", name, secret)
		}
		if strings.Contains(all.String(), secret) {
			t.Errorf("the support bundle holds the %s", name)
		}
	}
}

// checkAppHost: with wildcard-access-url set, the appliance's serving
// certificate covers an app host (verified with the appliance CA as that
// name) and a request there is sent to sign in on the access URL (the
// session cookie of the access URL never reaches the app's origin).
func checkAppHost(t *testing.T, dir, access, host string) {
	t.Helper()
	u, _ := url.Parse(access)
	pem, err := os.ReadFile(caFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host},
			// The site's wildcard DNS record, here: every app host is
			// this appliance.
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, u.Host)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Get("https://" + net.JoinHostPort(host, u.Port()) + "/")
	if err != nil {
		t.Fatalf("an app host on the appliance: %v", err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(loc, access+"/api/v2/applications/auth-redirect?") {
		t.Errorf("GET an app host without its cookie: %s to %q, want 307 to %s/api/v2/applications/auth-redirect", resp.Status, loc, access)
	}
}

// sshSession is an open `coder ssh` session running an echo loop.
type sshSession struct {
	t     *testing.T
	in    io.WriteCloser
	lines chan string
}

// openSSHSession opens `coder ssh WORKSPACE` running a loop that echoes
// each line it reads; the session ends with the test.
func openSSHSession(t *testing.T, bin string, env []string, workspace string) *sshSession {
	t.Helper()
	cmd := exec.Command(bin, "ssh", workspace, "--", "sh", "-c", `while read -r l; do echo "echo:$l"; done`)
	cmd.Env = env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sshSession{t: t, in: in, lines: make(chan string, 16)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return s
}

// echo sends what through the session and waits for it back.
func (s *sshSession) echo(what string) {
	s.t.Helper()
	if _, err := fmt.Fprintln(s.in, what); err != nil {
		s.t.Fatalf("the open ssh session, %s: write: %v", what, err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("the open ssh session ended (%s)", what)
			}
			if l == "echo:"+what {
				return
			}
		case <-timeout:
			s.t.Fatalf("the open ssh session did not echo %q within 30 s", what)
		}
	}
}

// slowTemplate is the process template with an apply that waits until
// the test calls release: a build that is surely in progress when
// PostgreSQL dies, and ends when the test says.
func slowTemplate(t *testing.T, work string) (dir string, release func()) {
	t.Helper()
	dir = filepath.Join(work, "slow-template")
	root, _ := filepath.Abs("..")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples", "templates", "process"))); err != nil {
		t.Fatal(err)
	}
	// Where the provisioners (the service user) can see the signal.
	gate, err := os.MkdirTemp("", "chaos-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(gate) })
	if err := os.Chmod(gate, 0o755); err != nil {
		t.Fatal(err)
	}
	signal := filepath.Join(gate, "go")
	slow := fmt.Sprintf(`
resource "terraform_data" "slow" {
  count = data.coder_workspace.me.start_count
  provisioner "local-exec" {
    command = "for i in $(seq 1 600); do [ -e %s ] && exit 0; sleep 0.1; done; exit 1"
  }
}
`, signal)
	if err := os.WriteFile(filepath.Join(dir, "slow.tf"), []byte(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, func() {
		if err := os.WriteFile(signal, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// notifications collects what the appliance tells systemd, with when.
type notifications struct {
	mu   sync.Mutex
	msgs []string
	at   []time.Time
}

func (n *notifications) collect(c *net.UnixConn) {
	buf := make([]byte, 4096)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return
		}
		n.mu.Lock()
		n.msgs, n.at = append(n.msgs, string(buf[:k])), append(n.at, time.Now())
		n.mu.Unlock()
	}
}

// waitFor waits up to within for a message holding s heard after since.
func (n *notifications) waitFor(s string, since time.Time, within time.Duration) bool {
	return testwait.Until(within, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		for i, m := range n.msgs {
			if n.at[i].After(since) && strings.Contains(m, s) {
				return true
			}
		}
		return false
	})
}

// last is when a message holding s was last heard.
func (n *notifications) last(s string) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.msgs) - 1; i >= 0; i-- {
		if strings.Contains(n.msgs[i], s) {
			return n.at[i]
		}
	}
	return time.Time{}
}

func (n *notifications) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// mustCoderRoot runs the coder binary as the test (root), failing on error.
func mustCoderRoot(t *testing.T, e *upgradeEnv, args ...string) string {
	t.Helper()
	out, err := e.coder(args...)
	if err != nil {
		t.Fatalf("coder %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// waitNewPostmaster waits for a postmaster other than old to run.
func waitNewPostmaster(t *testing.T, dir string, old int, within time.Duration, logPath string) {
	t.Helper()
	testwait.For(t, within, fmt.Sprintf("the postmaster (pid %d) replaced", old), func() (bool, string) {
		if now := postmasterOrZero(dir); now != old && now != 0 {
			return true, ""
		}
		b, _ := os.ReadFile(logPath)
		return false, tailLines(string(b), 30)
	})
}

// postmasterOrZero is the postmaster's pid, 0 while there is none.
func postmasterOrZero(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postgres", "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
