package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
	"airgapcoder/terraform"
)

// TestSSHThroughWorkspaceProxy runs `coder wsproxy server` as its own
// process and reaches the relayCLI workspace through it with the built
// binary: coder ssh --proxy eu, a remembered auto choice, coder ping and
// coder port-forward go through the proxy (its log shows the connections)
// and print nothing of the region on stdout. Once the proxy is killed, the
// same commands succeed through the primary, each saying once on stderr
// that the proxy is unreachable, and the remembered choice is forgotten.
// An unknown --proxy is a usage error listing the regions.
func TestSSHThroughWorkspaceProxy(t *testing.T) {
	t.Parallel()
	r := newRelayCLI(t)
	ctx := context.Background()
	created, err := r.admin.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: "eu", DisplayName: "Europe"})
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	proxy := start(t, baseEnv(t, "CODER_PRIMARY_ACCESS_URL="+r.d.URL.String(), "CODER_PROXY_SESSION_TOKEN="+created.ProxyToken),
		"wsproxy", "server", "--access-url", "http://"+addr, "--http-address", addr, "--log-format", "json")
	logs := func() string { return "proxy stderr:\n" + proxy.stderr.String() }
	waitHealthz(t, "http://"+addr, 30*time.Second, nil, logs)
	proxy.waitStderr(t, "relay session to the primary up", 30*time.Second)
	testwait.For(t, 15*time.Second, "eu among alice's regions", testwait.Bool(func() bool {
		regions, err := r.alice.Regions(ctx)
		return err == nil && slices.ContainsFunc(regions, func(reg codersdk.Region) bool { return reg.Name == "eu" && reg.Healthy })
	}))
	opened := func() int { return strings.Count(proxy.stderr.String(), "relay connection opened") }

	// --proxy eu: through the proxy, nothing but the command's output.
	before := opened()
	stdout, stderr, code := run(t, r.env, "ssh", "--proxy", "eu", "dev", "--", "echo", "hi")
	if code != 0 || stdout != "hi\n" || stderr != "" {
		t.Fatalf("coder ssh --proxy eu: exit %d, stdout %q, stderr %q; want 0, \"hi\\n\", nothing\n%s", code, stdout, stderr, logs())
	}
	if opened() == before {
		t.Errorf("coder ssh --proxy eu: the proxy logged no relay connection\n%s", logs())
	}
	// The same through the environment, with ping saying which way.
	env := append(slices.Clone(r.env), "CODER_WORKSPACE_PROXY=eu")
	if out := mustRun(t, env, "ping", "dev", "-n", "1"); !strings.Contains(out, "through workspace proxy eu in ") || !strings.Contains(out, "pong from dev via workspace proxy eu in ") {
		t.Errorf("coder ping with CODER_WORKSPACE_PROXY=eu:\n%s\nwant it through workspace proxy eu", out)
	}

	// An unknown name is a usage error listing the regions, for every
	// user (the regions list every proxy, with its health).
	ownerEnv := signedInEnv(t, r.admin)
	_, stderr, code = run(t, ownerEnv, "ping", "--proxy", "nope", "alice/dev", "-n", "1")
	if code != 2 || !strings.Contains(stderr, "--proxy nope") || !strings.Contains(stderr, "primary, eu") {
		t.Errorf("coder ping --proxy nope (owner): exit %d, stderr %q; want 2 listing primary, eu", code, stderr)
	}
	_, stderr, code = run(t, r.env, "ssh", "--proxy", "nope", "dev", "--", "echo", "hi")
	if code != 2 || !strings.Contains(stderr, "--proxy nope") || !strings.Contains(stderr, "primary, eu") {
		t.Errorf("coder ssh --proxy nope (member): exit %d, stderr %q; want 2 listing primary, eu", code, stderr)
	}

	// auto measures (both regions are on loopback: either may win) and
	// remembers; the choice is in the debug log (-v) only, never on stdout.
	cacheFile := filepath.Join(r.globalConfig, "region-choice.json")
	stdout, stderr, code = run(t, r.env, "ssh", "-v", "dev", "--", "echo", "hi")
	if code != 0 || stdout != "hi\n" || !strings.Contains(stderr, "region chosen by latency") {
		t.Fatalf("coder ssh -v (auto): exit %d, stdout %q, stderr %q; want 0, \"hi\\n\", the choice logged", code, stdout, stderr)
	}
	if b, err := os.ReadFile(cacheFile); err != nil || !strings.Contains(string(b), `"chosen_at"`) {
		t.Errorf("after auto chose, %s: %v\n%s", cacheFile, err, b)
	}
	if _, stderr, _ = run(t, r.env, "ssh", "dev", "--", "true"); stderr != "" {
		t.Errorf("coder ssh (auto) without -v wrote %q on stderr, want nothing", stderr)
	}

	// config-ssh --proxy eu writes it into the ProxyCommand; plain OpenSSH
	// then goes through the proxy.
	home := t.TempDir()
	sshConfig := filepath.Join(home, ".ssh", "config")
	mustRun(t, r.env, "config-ssh", "--proxy", "eu", "-y", "--ssh-config-file", sshConfig)
	if b, _ := os.ReadFile(sshConfig); !strings.Contains(string(b), " ssh --proxy eu --stdio %h\n") {
		t.Errorf("config-ssh --proxy eu wrote:\n%s\nwant ssh --proxy eu in the ProxyCommand", b)
	}
	before = opened()
	if out, code := tool(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, "", "ssh",
		"-F", sshConfig, "-o", "BatchMode=yes", "coder.dev", "echo", "via-proxy"); code != 0 || out != "via-proxy\n" {
		t.Errorf("OpenSSH through the proxy: exit %d, output %q", code, out)
	}
	if opened() == before {
		t.Errorf("OpenSSH with --proxy eu in the ProxyCommand: the proxy logged no relay connection\n%s", logs())
	}

	// auto with a remembered choice of eu: no measuring, through eu.
	rawURL, err := os.ReadFile(filepath.Join(r.globalConfig, "url"))
	if err != nil {
		t.Fatal(err)
	}
	deployment, _ := url.Parse(strings.TrimSpace(string(rawURL)))
	remember := func() {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"deployments": map[string]any{
			deployment.String(): map[string]any{"region": "eu", "url": "http://" + addr, "chosen_at": time.Now()},
		}})
		if err := os.WriteFile(cacheFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	remember()
	before = opened()
	stdout, stderr, code = run(t, r.env, "ssh", "-v", "dev", "--", "echo", "hi")
	if code != 0 || stdout != "hi\n" || !strings.Contains(stderr, "region remembered") || strings.Contains(stderr, "unreachable") {
		t.Fatalf("coder ssh -v (auto, eu remembered): exit %d, stdout %q, stderr %q\n%s", code, stdout, stderr, logs())
	}
	if opened() == before {
		t.Errorf("coder ssh (auto, eu remembered): the proxy logged no relay connection\n%s", logs())
	}

	// port-forward through eu; it keeps running across the proxy's death.
	local := freePort(t)
	pf := start(t, r.env, "port-forward", "--proxy", "eu", "dev", "--tcp", fmt.Sprintf("%d:%d", local, r.webPort))
	pf.waitStderr(t, "Forwarding", 30*time.Second)
	get := func() (string, error) {
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/hello.txt", local))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	before = opened()
	if body, err := get(); err != nil || body != webFile {
		t.Fatalf("GET through coder port-forward --proxy eu: %q, %v\nport-forward stderr: %s\n%s", body, err, pf.stderr, logs())
	}
	if opened() == before {
		t.Errorf("coder port-forward --proxy eu: the proxy logged no relay connection\n%s", logs())
	}

	// The proxy dies; the primary still lists it healthy for up to three
	// heartbeat intervals.
	if err := proxy.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-proxy.done
	const fellBack = `coder: workspace proxy "eu" is unreachable (`
	stdout, stderr, code = run(t, r.env, "ssh", "--proxy", "eu", "dev", "--", "echo", "hi")
	if code != 0 || stdout != "hi\n" || strings.Count(stderr, fellBack) != 1 || !strings.Contains(stderr, "connecting through the primary") {
		t.Errorf("coder ssh --proxy eu, proxy killed: exit %d, stdout %q, stderr %q; want 0, \"hi\\n\" and one line saying it fell back", code, stdout, stderr)
	}
	t.Logf("coder ssh --proxy eu after the proxy died, stderr: %s", stderr)

	// The remembered choice falls back too, and is forgotten.
	remember()
	stdout, stderr, code = run(t, r.env, "ssh", "dev", "--", "echo", "hi")
	if code != 0 || stdout != "hi\n" || strings.Count(stderr, fellBack) != 1 {
		t.Errorf("coder ssh (auto, eu remembered), proxy killed: exit %d, stdout %q, stderr %q; want 0, \"hi\\n\" and one fallback line", code, stdout, stderr)
	}
	if b, err := os.ReadFile(cacheFile); err != nil || strings.Contains(string(b), `"eu"`) {
		t.Errorf("after the fallback the cache still names eu (%v):\n%s", err, b)
	}

	// The running port-forward's next connection goes through the primary.
	if body, err := get(); err != nil || body != webFile {
		t.Fatalf("GET through coder port-forward after the proxy died: %q, %v\nport-forward stderr: %s", body, err, pf.stderr)
	}
	if body, err := get(); err != nil || body != webFile {
		t.Fatalf("second GET through coder port-forward after the proxy died: %q, %v\nport-forward stderr: %s", body, err, pf.stderr)
	}
	if n := strings.Count(pf.stderr.String(), fellBack); n != 1 {
		t.Errorf("port-forward stderr: %d fallback lines, want 1:\n%s", n, pf.stderr)
	}
}

// TestRegionProvisionerAgentOnProxy is how agents in a region connect to
// their proxy: the region's external provisioner (`coder provisionerd
// start --agent-url` the proxy) builds the process template, whose agent
// downloads itself from the proxy and connects to it. Users then reach it
// through the proxy, and through the primary, which relays over the
// proxy's session.
func TestRegionProvisionerAgentOnProxy(t *testing.T) {
	t.Parallel()
	const pskValue = "region-provisioner-psk"
	bin := coderBinary(t)
	bins := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(bins, "coder-"+runtime.GOOS+"-"+runtime.GOARCH)); err != nil {
		t.Fatal(err)
	}
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: pskValue, AgentBinariesDir: bins, AgentHeartbeatInterval: time.Second})
	admin, _ := d.CreateFirstUser(t)
	ctx := context.Background()
	env := signedInEnv(t, admin)

	created, err := admin.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	proxy := start(t, baseEnv(t, "CODER_PRIMARY_ACCESS_URL="+d.URL.String(), "CODER_PROXY_SESSION_TOKEN="+created.ProxyToken),
		"wsproxy", "server", "--access-url", "http://"+addr, "--http-address", addr, "--log-format", "json")
	logs := func() string { return "proxy stderr:\n" + proxy.stderr.String() }
	waitHealthz(t, "http://"+addr, 30*time.Second, nil, logs)
	proxy.waitStderr(t, "relay session to the primary up", 30*time.Second)

	tf, err := terraform.Find(ctx, terraform.Options{})
	if err != nil {
		t.Fatalf("the test needs terraform %s on the PATH: %v", terraform.DefaultVersion, err)
	}
	daemon := start(t, baseEnv(t, "CODER_PROVISIONER_DAEMON_AGENT_URL=http://"+addr),
		"provisionerd", "start", "--url", d.URL.String(), "--psk", pskValue, "--name", "eu-daemon",
		"--terraform-path", tf, "--provider-mirror", testprovider.Mirror(t), "--cache-dir", t.TempDir())
	daemon.waitStderr(t, "is waiting for jobs", 30*time.Second)

	base := t.TempDir()
	mustRun(t, env, "templates", "create", "process", "--directory", "../examples/templates/process", "-y", "--variable", "base_dir="+base)
	mustRun(t, env, "create", "dev", "--template", "process", "-y")
	t.Cleanup(func() {
		// Should a step fail, the agent process must not outlive the test.
		_, _, _ = run(t, env, "stop", "dev", "-y")
	})
	proxy.waitStderr(t, "workspace agent connected", time.Minute)

	home := filepath.Join(base, "admin", "dev")
	for _, region := range []string{"eu", "primary"} {
		if out := mustRun(t, env, "ssh", "--proxy", region, "dev", "--", `echo "$CODER_AGENT_URL"; pwd`); out != "http://"+addr+"\n"+home+"\n" {
			t.Errorf("coder ssh --proxy %s: got %q, want the agent's URL (the proxy) and its home", region, out)
		}
	}
}
