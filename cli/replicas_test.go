package cli_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testhaproxy"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
)

// slowTemplate's start build runs a command for two minutes; the marker in
// it lets the test find the process and the replica that runs it.
const slowTemplate = `
resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep 127.%d"
  }
}
`

// quickTemplate builds at once.
const quickTemplate = `resource "terraform_data" "quick" {}
`

// replicaProc is one `coder server` replica.
type replicaProc struct {
	name, url string
	proc      *proc
}

// startReplicas runs n `coder server` replicas on the database dbURL, each
// on a free loopback port with one built-in provisioner that takes
// providers from the test mirror, and with args; it returns once all of
// them answer /healthz.
func startReplicas(t *testing.T, n int, dbURL string, args ...string) []*replicaProc {
	t.Helper()
	mirror := testprovider.Mirror(t)
	replicas := make([]*replicaProc, n)
	for i := range replicas {
		addr := freeAddr(t)
		dir := t.TempDir()
		serverArgs := []string{"server", "--http-address", addr, "--postgres-url", dbURL,
			"--provisioner-daemons", "1", "--provider-mirror", mirror,
			"--global-config", filepath.Join(dir, "config"), "--cache-dir", filepath.Join(dir, "cache")}
		p := start(t, baseEnv(t), append(serverArgs, args...)...)
		replicas[i] = &replicaProc{name: fmt.Sprintf("r%d", i+1), url: "http://" + addr, proc: p}
	}
	for _, r := range replicas {
		waitHealthy(t, r.proc, r.url)
	}
	return replicas
}

// createOwner creates the first user, admin, of the deployment at baseURL
// (run by the binary) and returns its signed-in client.
func createOwner(t *testing.T, baseURL string) *codersdk.Client {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	c := codersdk.New(u)
	if _, err := c.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: password}); err != nil {
		t.Fatalf("create the first user: %v", err)
	}
	login, err := c.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: password})
	if err != nil {
		t.Fatalf("log in: %v", err)
	}
	c.SessionToken = login.SessionToken
	return c
}

// TestReplicasBehindHAProxy is issue 16's acceptance on loopback: three
// `coder server` replicas on one PostgreSQL behind HAProxy (the access
// URL), each with a built-in provisioner. The agent connects through the
// load balancer to one replica; coder ssh, coder port-forward and a dev URL
// work through each replica directly. A replica running a build is killed
// with SIGKILL: the build fails with a message within its heartbeat
// deadline and a new build succeeds; the agent's replica is killed: the
// agent is back on a live replica within 10 s and ssh through the load
// balancer works again.
func TestReplicasBehindHAProxy(t *testing.T) {
	t.Parallel()
	dbURL := coderdtest.NewDatabase(t)
	lbURL := fmt.Sprintf("http://127.0.0.1:%d", testport.Port(t))
	replicas := startReplicas(t, 3, dbURL, "--access-url", lbURL, "--provisioner-job-heartbeat-timeout", "5s")
	haproxy(t, lbURL, replicas)

	owner := createOwner(t, lbURL)
	envFor := func(base string) []string {
		return baseEnv(t, "CODER_URL="+base, "CODER_SESSION_TOKEN="+owner.SessionToken)
	}
	lb := envFor(lbURL)
	if out := mustRun(t, lb, "replicas"); strings.Count(out, "http://127.0.0.1:") != 3 {
		t.Errorf("coder replicas lists %d replicas, want 3:\n%s", strings.Count(out, "http://127.0.0.1:"), out)
	}

	mustRun(t, lb, "templates", "create", "process", "--directory", "../examples/templates/process", "-y", "--variable", "base_dir="+t.TempDir())
	mustRun(t, lb, "create", "dev", "--template", "process", "-y")
	t.Cleanup(func() {
		// The stop needs a live replica with a provisioner; give it a while.
		p := start(t, lb, "stop", "dev", "-y")
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
		}
	})
	mustRun(t, lb, "ssh", "dev", "--", "true")
	// A long session through each replica, to see how those through the
	// replicas that die end.
	sessions := map[*replicaProc]*proc{}
	for _, r := range replicas {
		sessions[r] = start(t, envFor(r.url), "ssh", "dev", "--", "sleep", "600")
	}

	// Through each replica directly: ssh, a forwarded port, a dev URL.
	echo := coderdtest.EchoServer(t)
	web := httpServer(t)
	for _, r := range replicas {
		env := envFor(r.url)
		if out := mustRun(t, env, "ssh", "dev", "--", "echo", "via", r.name); strings.TrimSpace(out) != "via "+r.name {
			t.Errorf("coder ssh through %s: %q", r.name, out)
		}
		local := testport.Port(t)
		pf := start(t, env, "port-forward", "dev", "--tcp", fmt.Sprintf("127.0.0.1:%d:%d", local, echo))
		pf.waitStderr(t, "Forwarding", 30*time.Second)
		if err := roundTrip(fmt.Sprintf("127.0.0.1:%d", local), "through "+r.name); err != nil {
			t.Errorf("coder port-forward through %s: %v", r.name, err)
		}
		_ = pf.cmd.Process.Kill()
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/@admin/dev/ports/%d/from-%s", r.url, web, r.name), nil)
		req.Header.Set(codersdk.SessionTokenHeader, owner.SessionToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("dev URL through %s: %v", r.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "/from-"+r.name) {
			t.Errorf("dev URL through %s: %d %s", r.name, resp.StatusCode, body)
		}
	}

	// A build runs on one replica's provisioner; that replica dies.
	marker := os.Getpid()%1000 + 1000
	slowDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(slowDir, "main.tf"), fmt.Appendf(nil, slowTemplate, marker), 0o644); err != nil {
		t.Fatal(err)
	}
	quickDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(quickDir, "main.tf"), []byte(quickTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, lb, "templates", "create", "slow", "--directory", slowDir, "-y")
	mustRun(t, lb, "templates", "create", "quick", "--directory", quickDir, "-y")
	slowCreate := start(t, lb, "create", "slow", "--template", "slow", "-y")
	sleepPID, builder := waitForProcess(t, fmt.Sprintf("sleep 127.%d", marker), replicas, time.Minute)
	t.Cleanup(func() { _ = syscall.Kill(sleepPID, syscall.SIGKILL) })
	t.Logf("the slow build runs on %s", builder.name)
	killed := time.Now()
	_ = builder.proc.cmd.Process.Signal(syscall.SIGKILL)
	code := slowCreate.wait(t, time.Minute)
	failedAfter := time.Since(killed)
	if code == 0 || !strings.Contains(slowCreate.stderr.String()+slowCreate.stdout.String(), "heartbeat") {
		t.Errorf("the build on the killed replica: exit %d, output %s %s; want a failure that says the provisioner stopped sending heartbeats", code, slowCreate.stdout, slowCreate.stderr)
	}
	if failedAfter > 15*time.Second {
		t.Errorf("the build on the killed replica ended %s after the kill, want within its 5s heartbeat deadline (and the reaper's interval)", failedAfter)
	}
	t.Logf("the build on the killed replica failed %s after the kill", failedAfter.Round(time.Millisecond))
	mustRun(t, lb, "create", "after", "--template", "quick", "-y")

	// The agent's replica dies: the agent is back within 10 s.
	holder := agentReplica(t, dbURL, replicas)
	if holder != builder {
		killed = time.Now()
		_ = holder.proc.cmd.Process.Signal(syscall.SIGKILL)
	}
	t.Logf("the agent was on %s", holder.name)
	testwait.For(t, time.Until(killed.Add(10*time.Second)), "the agent back on a live replica within 10 s of its replica's death", func() (bool, string) {
		h := agentReplica(t, dbURL, replicas)
		return h != nil && h != holder && h != builder, "not yet"
	})
	t.Logf("the agent reconnected %s after its replica died", time.Since(killed).Round(time.Millisecond))
	if out := mustRun(t, lb, "ssh", "dev", "--", "echo", "after"); strings.TrimSpace(out) != "after" {
		t.Errorf("coder ssh through the load balancer after failover: %q", out)
	}
	// The sessions that went through a replica that died ended, saying so.
	for _, r := range []*replicaProc{builder, holder} {
		p := sessions[r]
		if code := p.wait(t, 30*time.Second); code == 0 || !strings.Contains(p.stderr.String(), "was lost before the command ended") {
			t.Errorf("the ssh session through %s, which died: exit %d, stderr %q; want a failure that says the connection was lost", r.name, code, p.stderr)
		}
	}
}

// haproxy runs HAProxy on lbURL's port in front of the replicas, with
// health checks on /healthz, and waits until it answers.
func haproxy(t *testing.T, lbURL string, replicas []*replicaProc) {
	t.Helper()
	u, _ := url.Parse(lbURL)
	var servers strings.Builder
	for _, r := range replicas {
		ru, _ := url.Parse(r.url)
		fmt.Fprintf(&servers, "  server %s %s check inter 300ms fall 2 rise 2\n", r.name, ru.Host)
	}
	cfg := fmt.Sprintf(`global
  maxconn 2000
defaults
  mode http
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout tunnel 1h
  retries 3
  option redispatch
frontend coder
  bind %s
  default_backend replicas
backend replicas
  balance roundrobin
  option httpchk GET /healthz
  http-check expect status 200
%s`, u.Host, servers.String())
	out := testhaproxy.Start(t, cfg)
	waitHealthz(t, lbURL, 20*time.Second, nil, func() string { return "haproxy: " + out() })
}

// httpServer answers every request with its path, on a loopback port
// inside the process workspace (this host).
func httpServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// roundTrip sends msg to addr and expects it back.
func roundTrip(addr, msg string) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// waitForProcess finds the process whose command line is cmdline and the
// replica it descends from.
func waitForProcess(t *testing.T, cmdline string, replicas []*replicaProc, timeout time.Duration) (int, *replicaProc) {
	t.Helper()
	var (
		found   int
		replica *replicaProc
	)
	testwait.For(t, timeout, fmt.Sprintf("a process %q descending from a replica", cmdline), func() (bool, string) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil || strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " ")) != cmdline {
				continue
			}
			for p := pid; p > 1; p = parentPID(p) {
				for _, r := range replicas {
					if r.proc.cmd.Process.Pid == p {
						found, replica = pid, r
						return true, ""
					}
				}
			}
		}
		return false, "none yet"
	})
	return found, replica
}

// parentPID reads a process's parent from /proc (0 when it is gone).
func parentPID(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command may hold spaces and parentheses: fields start after the
	// last ')'.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// agentReplica is the replica whose relay the workspace's agent is
// connected to, by the agent's row and the replicas' relay addresses.
func agentReplica(t *testing.T, dbURL string, replicas []*replicaProc) *replicaProc {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var addr string
	err = conn.QueryRow(ctx, `SELECT r.relay_address FROM workspace_agents a JOIN replicas r ON r.id = a.connected_replica_id
		WHERE a.disconnected_at IS NULL ORDER BY a.last_connected_at DESC NULLS LAST LIMIT 1`).Scan(&addr)
	if err != nil {
		return nil
	}
	for _, r := range replicas {
		if r.url == addr {
			return r
		}
	}
	return nil
}
