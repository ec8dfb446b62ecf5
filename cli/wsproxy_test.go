package cli_test

import (
	"bufio"
	"fmt"
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

	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// proxyPrimary is a coderd over a fresh database, serving HTTPS on
// loopback, with a short workspace proxy heartbeat interval. Its CA file is
// what the CLI and the proxy trust.
type proxyPrimary struct {
	URL    string
	CAFile string
	PGPort int
	owner  *codersdk.Client
}

func startProxyPrimary(t *testing.T, interval time.Duration) *proxyPrimary {
	t.Helper()
	d := coderdtest.New(t, coderdtest.Options{TLS: true, WorkspaceProxyHeartbeatInterval: interval})
	owner, _ := d.CreateFirstUser(t)
	pgURL, err := url.Parse(d.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	pgPort, err := strconv.Atoi(pgURL.Port())
	if err != nil {
		t.Fatalf("database URL %q: port: %v", pgURL.Redacted(), err)
	}
	return &proxyPrimary{URL: d.URL.String(), CAFile: d.CAFile, PGPort: pgPort, owner: owner}
}

// proxyStatus is the status `coder wsproxy ls -o json` gives the proxy
// called name ("" when it is not listed).
func proxyStatus(t *testing.T, env []string, name string) codersdk.WorkspaceProxy {
	t.Helper()
	var ps []codersdk.WorkspaceProxy
	decodeJSON(t, "coder wsproxy ls", mustRun(t, env, "wsproxy", "ls", "-o", "json"), &ps)
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	return codersdk.WorkspaceProxy{}
}

// waitProxyStatus polls `coder wsproxy ls` until the proxy has status want
// and returns how long that took.
func waitProxyStatus(t *testing.T, env []string, name string, want codersdk.ProxyHealthStatus, timeout time.Duration, logs func() string) time.Duration {
	t.Helper()
	return testwait.For(t, timeout, fmt.Sprintf("proxy %s: status %q", name, want), func() (bool, string) {
		p := proxyStatus(t, env, name)
		return p.Status.Status == want, fmt.Sprintf("status %q (%v)\n%s", p.Status.Status, p.Status.Report.Errors, logs())
	})
}

// tcpPeers lists the remote ports of the TCP sockets process pid holds
// (from /proc/<pid>/fd and /proc/<pid>/net/tcp{,6}), and the local ports.
func tcpPeers(t *testing.T, pid int) (remote, local map[int]bool) {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("read the fds of %d: %v", pid, err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	remote, local = map[int]bool{}, map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatalf("read the TCP table of %d: %v", pid, err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			port := func(addr string) int {
				_, hex, _ := strings.Cut(addr, ":")
				p, _ := strconv.ParseInt(hex, 16, 32)
				return int(p)
			}
			local[port(fields[1])], remote[port(fields[2])] = true, true
		}
		f.Close()
	}
	return remote, local
}

// TestWorkspaceProxyProcess runs `coder wsproxy server` as its own process
// against a primary and watches its status through `coder wsproxy ls`:
// ok, unreachable after SIGKILL within the bound, ok again after a
// restart, unreachable at once after a clean stop, and stopped by the
// primary's refusal after `coder wsproxy delete`. The proxy never holds a
// connection to PostgreSQL.
func TestWorkspaceProxyProcess(t *testing.T) {
	t.Parallel()
	const interval = time.Second
	primary := startProxyPrimary(t, interval)
	env := signedInEnv(t, primary.owner, "CODER_CA_FILE="+primary.CAFile)

	// create prints the token once, with how to start the proxy.
	out := mustRun(t, env, "wsproxy", "create", "eu", "--display-name", "Europe")
	var token string
	for _, f := range strings.Fields(out) {
		if strings.Count(f, ":") == 1 && len(f) > 60 && !strings.Contains(f, "=") {
			token = f
			break
		}
	}
	if token == "" || !strings.Contains(out, "coder wsproxy server") || !strings.Contains(out, "--primary-access-url "+primary.URL) {
		t.Fatalf("wsproxy create: got %q, want the token and how to start the proxy", out)
	}
	if p := proxyStatus(t, env, "eu"); p.Status.Status != codersdk.ProxyUnregistered || p.DisplayName != "Europe" {
		t.Fatalf("new proxy: got %+v, want unregistered Europe", p)
	}

	// The proxy's certificate comes from an appliance CA (package certs).
	applianceDir := t.TempDir()
	if _, err := certs.Generate(applianceDir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	certDir := certs.CertsDir(applianceDir)
	addr := freeAddr(t)
	proxyEnv := baseEnv(t, "CODER_PRIMARY_ACCESS_URL="+primary.URL, "CODER_PROXY_SESSION_TOKEN="+token)
	startProxy := func() *proc {
		return start(t, proxyEnv, "wsproxy", "server", "--access-url", "https://"+addr, "--http-address", addr,
			"--tls-cert-file", filepath.Join(certDir, "server.pem"), "--tls-key-file", filepath.Join(certDir, "server-key.pem"),
			"--ca-file", primary.CAFile, "--log-format", "json")
	}
	proxy := startProxy()
	logs := func() string { return "proxy stderr: " + proxy.stderr.String() }
	tookOK := waitProxyStatus(t, env, "eu", codersdk.ProxyHealthy, 30*time.Second, logs)
	t.Logf("proxy started and listed ok in %s", tookOK.Round(time.Millisecond))
	p := proxyStatus(t, env, "eu")
	if p.PathAppURL != "https://"+addr || p.Version != testVersion || p.LastSeenAt.IsZero() {
		t.Errorf("registered proxy: got %+v, want its access URL, version %s and a last-seen time", p, testVersion)
	}
	table := mustRun(t, env, "wsproxy", "ls")
	t.Logf("coder wsproxy create:\n%s\ncoder wsproxy ls:\n%s", out, table)
	if !strings.Contains(table, "eu") || !strings.Contains(table, "ok") || !strings.Contains(table, "https://"+addr) {
		t.Errorf("wsproxy ls: got\n%s\nwant eu, its URL and ok", table)
	}

	// It serves HTTPS with the CA's certificate.
	store, err := certs.Load(applianceDir)
	if err != nil {
		t.Fatal(err)
	}
	hc := store.HTTPClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET the proxy's /healthz over HTTPS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("proxy /healthz: got %d, want 200", resp.StatusCode)
	}

	// No connection to PostgreSQL from the proxy; the test process (with
	// coderd in it) has some, which shows the check sees them.
	_, primaryPort, _ := net.SplitHostPort(strings.TrimPrefix(primary.URL, "https://"))
	pp, _ := strconv.Atoi(primaryPort)
	testwait.For(t, 15*time.Second, "the proxy's connection to the primary", testwait.Bool(func() bool { r, _ := tcpPeers(t, proxy.cmd.Process.Pid); return r[pp] }))
	remote, _ := tcpPeers(t, proxy.cmd.Process.Pid)
	if remote[primary.PGPort] {
		t.Errorf("the proxy (pid %d) holds a connection to PostgreSQL's port %d: %v", proxy.cmd.Process.Pid, primary.PGPort, remote)
	}
	if own, _ := tcpPeers(t, os.Getpid()); !own[primary.PGPort] {
		t.Errorf("the test process holds no connection to PostgreSQL's port %d (%v): the socket check sees nothing", primary.PGPort, own)
	}

	// SIGKILL: unreachable once three intervals have passed since its last
	// heartbeat, so at most three intervals after the kill (plus the time
	// the listing takes).
	if err := proxy.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-proxy.done
	waitProxyStatus(t, env, "eu", codersdk.ProxyUnreachable, 10*interval, logs)
	tookUnreachable := time.Since(killed)
	t.Logf("SIGKILL -> unreachable in %s (heartbeat interval %s, bound %s)", tookUnreachable.Round(time.Millisecond), interval, 3*interval)
	if tookUnreachable > 3*interval+2*time.Second {
		t.Errorf("unreachable %s after SIGKILL, want within 3 intervals (%s) and the listing's poll", tookUnreachable, 3*interval)
	}
	if p := proxyStatus(t, env, "eu"); !strings.Contains(strings.Join(p.Status.Report.Errors, " "), "No heartbeat since") {
		t.Errorf("unreachable proxy: got errors %v, want the time of its last heartbeat", p.Status.Report.Errors)
	}

	// Restarted on the same address: ok again.
	proxy = startProxy()
	restarted := time.Now()
	waitProxyStatus(t, env, "eu", codersdk.ProxyHealthy, 30*time.Second, logs)
	t.Logf("restart -> ok in %s", time.Since(restarted).Round(time.Millisecond))

	// A clean stop deregisters: unreachable at once, saying it shut down.
	stopGracefully(t, proxy)
	if p := proxyStatus(t, env, "eu"); p.Status.Status != codersdk.ProxyUnreachable || !strings.Contains(strings.Join(p.Status.Report.Errors, " "), "shut down") {
		t.Errorf("after SIGTERM: got %+v, want unreachable at once, saying it shut down", p.Status)
	}

	// Deleted while it runs: its relay session is closed and refused (or
	// its next heartbeat is), and it stops saying why.
	proxy = startProxy()
	waitProxyStatus(t, env, "eu", codersdk.ProxyHealthy, 30*time.Second, logs)
	mustRun(t, env, "wsproxy", "delete", "eu")
	deleted := time.Now()
	if code := proxy.wait(t, 3*interval+10*time.Second); code != 1 {
		t.Errorf("proxy after delete: exit %d, want 1\n%s", code, logs())
	}
	t.Logf("delete -> proxy stopped in %s", time.Since(deleted).Round(time.Millisecond))
	if s := proxy.stderr.String(); !strings.Contains(s, "refused this workspace proxy's") || !strings.Contains(s, "eu was deleted") {
		t.Errorf("proxy stderr after delete: want the refusal and why\n%s", s)
	}
	if p := proxyStatus(t, env, "eu"); p.Name != "" {
		t.Errorf("wsproxy ls after delete: got %+v, want eu gone", p)
	}
	// Started without trusting the primary's CA: stops at once, saying
	// what to pass.
	stdout, stderr, code := run(t, proxyEnv, "wsproxy", "server", "--access-url", "http://"+addr, "--http-address", addr)
	if code != 1 || !strings.Contains(stderr, "certificate signed by unknown authority") || !strings.Contains(stderr, "--ca-file") {
		t.Errorf("wsproxy server without the primary's CA: exit %d, want 1 naming --ca-file\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// Started again with the deleted proxy's token: refused at once.
	stdout, stderr, code = run(t, proxyEnv, "wsproxy", "server", "--access-url", "http://"+addr, "--http-address", addr, "--ca-file", primary.CAFile)
	if code != 1 || !strings.Contains(stderr, "eu was deleted") {
		t.Errorf("wsproxy server with a deleted proxy's token: exit %d, want 1 saying eu was deleted\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}
