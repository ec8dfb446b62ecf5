//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testregions"
	"airgapcoder/internal/testwait"
)

// regionDelay is the one-way delay between the two regions: a round trip
// across is 80 ms.
const regionDelay = 40 * time.Millisecond

// revocationBound is how long a proxy may keep honouring a session token
// after the primary revoked it: the primary's answer to the proxy's
// authorization request is valid this long (ValidFor).
const revocationBound = coderd.DefaultWorkspaceProxyAuthTTL

// proxyHeartbeatInterval is the primary's heartbeat interval for proxies:
// a deleted proxy learns it within one (docs/wsproxy.md).
const proxyHeartbeatInterval = coderd.DefaultWorkspaceProxyHeartbeatInterval

// TestWorkspaceProxyRegions is issue 34's acceptance test. Two regions,
// network namespaces joined by a link with 40 ms of delay each way
// (testregions): the primary and its PostgreSQL in A; in B a workspace
// proxy, the external provisioner that built the workspace (its agent
// connects to the proxy) and the user's CLI. It checks that coder ssh
// through the proxy round-trips at in-region latency and through the
// primary at no less than the link's round trip; that port-forward and a
// dev URL work through the proxy; that the proxy holds no connection to
// PostgreSQL; that with the proxy killed coder ssh falls back to the
// primary, saying so, and that a restarted proxy is listed ok; that a
// token revoked at the primary stops working at the proxy within the
// documented bound; and that a deleted proxy stops and its token is
// refused.
func TestWorkspaceProxyRegions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the e2e test creates network namespaces: run it as root (make test-e2e)")
	}
	began := time.Now()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	d := testregions.NewDeployment(t, testregions.DeploymentOptions{
		Coder: testbin.Coder(t), ProviderMirror: testprovider.Mirror(t),
		Template: filepath.Join(root, "examples", "templates", "process"),
		Delay:    regionDelay, Prefix: "coder-e2e-wsproxy", Logf: logf,
	})
	step := func(name string, fn func()) {
		t.Helper()
		start := time.Now()
		fn()
		logf("e2e step %-44s %7.2fs", name, time.Since(start).Seconds())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	step("the link: 80 ms across, ~0 within", func() {
		across, err := testregions.RoundTrip(ctx, d.B, d.A, 10)
		if err != nil {
			t.Fatal(err)
		}
		within, err := testregions.RoundTrip(ctx, d.B, d.B, 10)
		if err != nil {
			t.Fatal(err)
		}
		logf("e2e TCP round trip B→A %s, within B %s", across.Round(10*time.Microsecond), within.Round(time.Microsecond))
		if across < 2*regionDelay || across > 2*regionDelay+20*time.Millisecond {
			t.Fatalf("round trip across the link: got %s, want about %s", across, 2*regionDelay)
		}
		if within > 5*time.Millisecond {
			t.Fatalf("round trip within region B: got %s, want well under 5ms", within)
		}
	})

	step("the agent connects to the proxy", func() {
		out, err := d.CLI(nil, "ssh", "--proxy", d.ProxyName, "ws", "--", "sh", "-c", "echo $CODER_AGENT_URL").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != d.ProxyURL {
			t.Fatalf("coder ssh --proxy b ws -- echo $CODER_AGENT_URL: %v %q, want the proxy's URL %s\nproxy:\n%s", err, out, d.ProxyURL, d.Proxy().Tail(30))
		}
	})

	step("coder ssh round trips: proxy vs primary", func() {
		const n = 50
		via := map[string]time.Duration{}
		for _, region := range []string{d.ProxyName, "primary"} {
			rtts, stderr, err := d.SSHRoundTrips(ctx, n, nil, "--proxy", region)
			if err != nil {
				t.Fatalf("%v\nproxy:\n%s", err, d.Proxy().Tail(30))
			}
			if strings.Contains(stderr, "unreachable") {
				t.Errorf("coder ssh --stdio --proxy %s fell back: %s", region, stderr)
			}
			via[region] = testregions.Median(rtts)
		}
		proxy, primary := via[d.ProxyName], via["primary"]
		logf("e2e coder ssh round trip (median of %d): through the proxy %s, through the primary %s, ratio %.1f",
			n, proxy.Round(10*time.Microsecond), primary.Round(10*time.Microsecond), float64(primary)/float64(proxy))
		if proxy >= regionDelay {
			t.Errorf("coder ssh round trip through the proxy (in region B): got %s, want under %s (the link's one-way delay)", proxy, regionDelay)
		}
		if primary < 2*regionDelay {
			t.Errorf("coder ssh round trip through the primary (region A): got %s, want at least the link's round trip %s", primary, 2*regionDelay)
		}
	})

	step("coder port-forward through the proxy", func() { checkRegionPortForward(t, ctx, d) })
	step("dev URL through the proxy", func() { checkRegionDevURL(t, ctx, d) })

	step("the proxy holds no connection to PostgreSQL", func() {
		proxy, err := testregions.RemotePorts(d.Proxy().Pid())
		if err != nil {
			t.Fatal(err)
		}
		server, err := testregions.RemotePorts(d.Server.Pid())
		if err != nil {
			t.Fatal(err)
		}
		if proxy[d.PGPort] {
			t.Errorf("the proxy (pid %d) holds a connection to PostgreSQL's port %d: %v", d.Proxy().Pid(), d.PGPort, proxy)
		}
		primaryURL, err := url.Parse(d.PrimaryURL)
		if err != nil {
			t.Fatal(err)
		}
		primaryPort, err := strconv.Atoi(primaryURL.Port())
		if err != nil {
			t.Fatalf("the primary's URL %s: %v", d.PrimaryURL, err)
		}
		if !proxy[primaryPort] {
			t.Errorf("the proxy (pid %d) holds no connection to the primary's port %d (%v): the socket check sees nothing", d.Proxy().Pid(), primaryPort, proxy)
		}
		if !server[d.PGPort] {
			t.Errorf("the primary (pid %d) holds no connection to PostgreSQL's port %d (%v): the socket check sees nothing", d.Server.Pid(), d.PGPort, server)
		}
	})

	step("a revoked token stops working at the proxy", func() { checkRegionRevocation(t, ctx, d, logf) })

	step("proxy killed: coder ssh falls back to the primary", func() {
		d.Proxy().Kill()
		killed := time.Now()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
		defer ccancel()
		// The agent moves to its fallback URL, the primary, after 2
		// failed attempts to reach the proxy (about 3 s); the CLI waits
		// for it.
		cmd := d.CLIContext(cctx, nil, "ssh", "--proxy", d.ProxyName, "--wait", "60s", "ws", "--", "echo", "ok")
		var stdout, stderr syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		logf("e2e coder ssh --proxy b after SIGKILL of the proxy: %v after %s", err, time.Since(killed).Round(time.Millisecond))
		if err != nil || strings.TrimSpace(stdout.String()) != "ok" {
			// Errorf: the restart and delete steps below do not depend on it.
			t.Errorf("coder ssh --proxy b ws -- echo ok with the proxy killed: %v, stdout %q, want ok\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		for _, want := range []string{`workspace proxy "b" is unreachable`, "connecting through the primary"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("coder ssh --proxy b with the proxy killed: stderr %q, want %q", stderr.String(), want)
			}
		}
	})

	step("proxy restarted: wsproxy ls shows it ok", func() {
		d.StartProxy()
		restarted := time.Now()
		took := testwait.For(t, 30*time.Second, "restarted proxy ok", func() (bool, string) {
			p := regionProxyStatus(t, d)
			return p.Status.Status == codersdk.ProxyHealthy, fmt.Sprintf("status %q (%v)\n%s", p.Status.Status, p.Status.Report.Errors, d.Proxy().Tail(30))
		})
		logf("e2e restart -> ok in %s\n%s", took.Round(time.Millisecond), d.Run("wsproxy", "ls"))
		// The agent, on the primary meanwhile, comes back to the proxy
		// once the proxy's /healthz answers 200 (it asks every 5 s), and
		// coder ssh goes through it again: within 30 s of the restart.
		back, backCancel := context.WithDeadline(ctx, restarted.Add(30*time.Second))
		defer backCancel()
		testwait.ForCtx(back, t, "the agent back on the restarted proxy (30s after the restart)", func() (bool, string) {
			if strings.Contains(d.Proxy().Output(), "workspace agent connected") {
				return true, ""
			}
			agentLog, _ := os.ReadFile(filepath.Join(d.Dir, "workspaces", "admin", "ws", ".coder-agent.log"))
			return false, fmt.Sprintf("agent log:\n%s\nproxy:\n%s", agentLog, d.Proxy().Tail(20))
		})
		d.WaitAgentReady()
		logf("e2e the agent is connected to the proxy again %s after the restart", time.Since(restarted).Round(time.Millisecond))
		if agentLog, err := os.ReadFile(filepath.Join(d.Dir, "workspaces", "admin", "ws", ".coder-agent.log")); err == nil {
			for _, line := range strings.Split(string(agentLog), "\n") {
				if strings.Contains(line, "fallback URL") || strings.Contains(line, "connected to coderd") {
					logf("e2e agent: %s", line)
				}
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
		defer ccancel()
		cmd := d.CLIContext(cctx, nil, "ssh", "--proxy", d.ProxyName, "--wait", "60s", "ws", "--", "echo", "ok")
		var stdout, stderr syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || strings.TrimSpace(stdout.String()) != "ok" || strings.Contains(stderr.String(), "unreachable") {
			t.Errorf("coder ssh --proxy b ws -- echo ok after the restart: %v, stdout %q, want ok without a fallback\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		logf("e2e coder ssh --proxy b works through it again %s after the restart", time.Since(restarted).Round(time.Millisecond))
	})

	step("proxy deleted: it stops, its token is refused", func() {
		d.Run("wsproxy", "delete", d.ProxyName)
		deleted := time.Now()
		if code := d.Proxy().Wait(proxyHeartbeatInterval + 5*time.Second); code != 1 {
			t.Errorf("proxy after coder wsproxy delete: exit code %d (-1: still running), want 1 within one heartbeat interval (%s)\n%s",
				code, proxyHeartbeatInterval, d.Proxy().Tail(20))
		}
		logf("e2e delete -> proxy stopped in %s", time.Since(deleted).Round(time.Millisecond))
		status, body := regionRegister(t, ctx, d)
		if status != http.StatusUnauthorized {
			t.Errorf("register with the deleted proxy's token: HTTP %d %s, want 401", status, body)
		}
	})
	logf("e2e TestWorkspaceProxyRegions took %s", time.Since(began).Round(time.Second))
}

// regionEchoServer listens on loopback in region B (the workspace's
// loopback: the process workspace runs there) and echoes what it reads;
// it returns the port.
func regionEchoServer(t *testing.T, d *testregions.Deployment) int {
	t.Helper()
	l, err := d.B.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen in region B: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// checkRegionPortForward runs `coder port-forward --proxy b` in region B to
// an echo server in the workspace, and checks that round trips through it
// stay in the region.
func checkRegionPortForward(t *testing.T, ctx context.Context, d *testregions.Deployment) {
	t.Helper()
	remote := regionEchoServer(t, d)
	const local = 18081
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	pf := d.CLIContext(cctx, nil, "port-forward", "--proxy", d.ProxyName, "ws", "--tcp", fmt.Sprintf("127.0.0.1:%d:%d", local, remote))
	var stderr syncbuf.Buffer
	pf.Stderr = &stderr
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ccancel(); _ = pf.Wait() }()
	testwait.For(t, 30*time.Second, "coder port-forward --proxy b to start", func() (bool, string) {
		return strings.Contains(stderr.String(), "Forwarding"), stderr.String()
	})
	c, err := d.B.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", local))
	if err != nil {
		t.Fatalf("dial coder port-forward: %v\n%s", err, stderr.String())
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var rtts []time.Duration
	b := make([]byte, 1)
	for i := range 21 {
		start := time.Now()
		if _, err := c.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatalf("write through coder port-forward: %v\n%s", err, stderr.String())
		}
		if _, err := io.ReadFull(c, b); err != nil || b[0] != byte('a'+i) {
			t.Fatalf("echo %d through coder port-forward: %q %v\n%s", i, b, err, stderr.String())
		}
		if i > 0 {
			rtts = append(rtts, time.Since(start))
		}
	}
	rtt := testregions.Median(rtts)
	fmt.Printf("e2e coder port-forward --proxy b round trip (median of 20): %s\n", rtt.Round(10*time.Microsecond))
	if rtt >= regionDelay {
		t.Errorf("round trip through coder port-forward --proxy b: got %s, want under %s (the link's one-way delay)", rtt, regionDelay)
	}
	if strings.Contains(stderr.String(), "unreachable") {
		t.Errorf("coder port-forward --proxy b fell back: %s", stderr.String())
	}
}

// checkRegionDevURL serves a file in the workspace (region B) and fetches
// it through the proxy's dev URL of the port, with the owner's token.
func checkRegionDevURL(t *testing.T, ctx context.Context, d *testregions.Deployment) {
	t.Helper()
	l, err := d.B.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen in region B: %v", err)
	}
	const body = "hello from region b\n"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hello.txt" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, body)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	devURL := fmt.Sprintf("%s/@admin/ws/ports/%d/hello.txt", d.ProxyURL, port)
	hc := d.B.HTTPClient()
	hc.Timeout = 10 * time.Second
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	defer hc.CloseIdleConnections()
	get := func() (int, string, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, devURL, nil)
		if err != nil {
			return 0, "", 0, err
		}
		req.Header.Set(codersdk.SessionTokenHeader, d.SessionToken)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start), err
	}
	var took time.Duration
	testwait.For(t, 30*time.Second, "GET "+devURL+" through the proxy", func() (bool, string) {
		code, got, rt, err := get()
		if err == nil && code == http.StatusOK && got == body {
			took = rt
			return true, ""
		}
		return false, fmt.Sprintf("HTTP %d %v, body %q, want 200 %q\nproxy:\n%s", code, err, got, body, d.Proxy().Tail(30))
	})
	// Once more, with the proxy's authorization cached.
	code, got, again, err := get()
	if err != nil || code != http.StatusOK || got != body {
		t.Fatalf("GET %s again (through the proxy): HTTP %d %v, body %q, want 200 %q", devURL, code, err, got, body)
	}
	fmt.Printf("e2e dev URL through the proxy: %s in %s, again in %s\n", devURL, took.Round(10*time.Microsecond), again.Round(10*time.Microsecond))
}

// checkRegionRevocation makes an API token, connects with it through the
// proxy, revokes it at the primary and waits until the proxy refuses it:
// within revocationBound (and the poll's slack).
func checkRegionRevocation(t *testing.T, ctx context.Context, d *testregions.Deployment, logf func(string, ...any)) {
	t.Helper()
	key := strings.TrimSpace(d.Run("tokens", "create", "--name", "revoke-me", "--lifetime", "1h"))
	var keys []codersdk.APIKey
	if err := json.Unmarshal([]byte(d.Run("tokens", "list", "-o", "json")), &keys); err != nil {
		t.Fatalf("coder tokens list -o json: %v", err)
	}
	id := ""
	for _, k := range keys {
		if k.TokenName == "revoke-me" {
			id = k.ID
		}
	}
	if id == "" {
		t.Fatalf("coder tokens list: no token revoke-me in %+v", keys)
	}
	proxyURL, err := url.Parse(d.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	client := &codersdk.Client{URL: proxyURL, SessionToken: key, HTTPClient: d.B.HTTPClient()}
	dial := func() error {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		c, err := client.DialWorkspaceAgent(dctx, d.AgentID, codersdk.DialOptions{Kind: codersdk.RelayKindSSH})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("connect through the proxy with a new API token: %v\nproxy:\n%s", err, d.Proxy().Tail(30))
	}
	d.Run("tokens", "remove", id)
	took := testwait.For(t, revocationBound+5*time.Second, fmt.Sprintf("the proxy refusing the token revoked at the primary (bound %s)", revocationBound), func() (bool, string) {
		err := dial()
		return codersdk.IsStatus(err, http.StatusUnauthorized), fmt.Sprintf("last answer %v", err)
	})
	logf("e2e revoked token refused by the proxy after %s (bound %s)", took.Round(time.Millisecond), revocationBound)
	if took > revocationBound+time.Second {
		t.Errorf("the proxy refused the revoked token after %s, want within %s", took, revocationBound)
	}
}

// regionProxyStatus is the proxy's entry in `coder wsproxy ls -o json`.
func regionProxyStatus(t *testing.T, d *testregions.Deployment) codersdk.WorkspaceProxy {
	t.Helper()
	var ps []codersdk.WorkspaceProxy
	out := d.Run("wsproxy", "ls", "-o", "json")
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("coder wsproxy ls -o json: %v\n%s", err, out)
	}
	for _, p := range ps {
		if p.Name == d.ProxyName {
			return p
		}
	}
	return codersdk.WorkspaceProxy{}
}

// regionRegister calls the primary's register endpoint with the proxy's
// token, from region B, and returns the status and body.
func regionRegister(t *testing.T, ctx context.Context, d *testregions.Deployment) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.PrimaryURL+"/api/v2/workspaceproxies/me/register",
		strings.NewReader(fmt.Sprintf(`{"access_url":%q,"hostname":"b","version":"v0","replica_id":"00000000-0000-0000-0000-000000000001"}`, d.ProxyURL)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(codersdk.ExternalProxyAuthTokenHeader, d.ProxyToken)
	hc := d.B.HTTPClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST register: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
