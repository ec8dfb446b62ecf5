//go:build e2e

// Package e2e runs the product end to end the way a platform engineer
// would: build a bundle on the "connected" side, then install and run it in
// a network namespace that has only a loopback interface, and use it. Run
// with `make test-e2e` (root is required for the namespace).
package e2e

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/connecttrace"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
	"airgapcoder/internal/upstreamtest"
)

type env struct {
	t      *testing.T
	work   string
	bin    string
	netns  string
	cliEnv []string
}

// needsRoot is why an e2e test that runs in an offline network namespace
// must run as root.
const needsRoot = "the e2e test creates a network namespace: run it as root (make test-e2e)"

// newEnv is an env in a fresh work folder that the appliance's service user
// can enter, failing the test unless it runs as root (why says what for).
// A non-empty netns names the offline namespace, made unique with this
// process's pid; empty, the test runs on the host.
func newEnv(t *testing.T, why, netns string) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal(why)
	}
	work := t.TempDir()
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, work: work, bin: filepath.Join(work, "coder")}
	if netns != "" {
		e.netns = fmt.Sprintf("%s-%d", netns, os.Getpid())
	}
	return e
}

func (e *env) step(name string, fn func()) {
	e.t.Helper()
	start := time.Now()
	fn()
	fmt.Printf("e2e step %-28s %8.2fs\n", name, time.Since(start).Seconds())
}

// run runs the coder binary on the host side.
func (e *env) run(args ...string) string {
	e.t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), e.cliEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("coder %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// inNetns runs a command inside the offline namespace. nsenter enters the
// network namespace only: `ip netns exec` would also remount /sys, hiding
// the cgroup mounts that the container engine of the container workspace
// needs.
func (e *env) inNetns(args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + e.netns, "--"}, args...)...)
	cmd.Env = append(os.Environ(), e.cliEnv...)
	return cmd
}

// startLogged starts cmd with its standard output and error in a new file
// at logPath. The file is handed to the process as it is (no copying
// goroutine), so this process's copy is closed at once.
func (e *env) startLogged(cmd *exec.Cmd, logPath string) {
	e.t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) coder(args ...string) string {
	e.t.Helper()
	out, err := e.inNetns(append([]string{e.bin}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("(offline) coder %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// curlOK reports whether curl (inside the namespace) fetches url; args
// come first (e.g. --cacert FILE).
func (e *env) curlOK(url string, args ...string) bool {
	return e.inNetns(append(append([]string{"curl", "-sf", "-m", "2"}, args...), url)...).Run() == nil
}

// curl runs curl inside the namespace and returns its output, failing the
// test when curl fails.
func (e *env) curl(args ...string) string {
	e.t.Helper()
	out, err := e.inNetns(append([]string{"curl", "-sS", "-m", "10"}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("curl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestApplianceOffline(t *testing.T) {
	e := newEnv(t, needsRoot, "coder-e2e")
	work := e.work
	// The appliance serves the API on https://127.0.0.1:3443 with its own
	// CA; plain HTTP on 127.0.0.1:3000 only redirects.
	const accessURL = "https://127.0.0.1:3443"
	e.cliEnv = []string{"CODER_CONFIG_DIR=" + filepath.Join(work, "cli"), "CODER_URL=" + accessURL}

	var bundleFile string
	e.step("build coder", e.buildCoder)
	e.step("bundle build (connected side)", func() {
		root, _ := filepath.Abs("..")
		// The connected side's registry, with a runnable workspace image,
		// and the container template twice: as written (image by tag)
		// and pinned by the image's digest.
		up := upstreamtest.New(t, upstreamtest.Options{WorkspaceImage: true})
		templates := filepath.Join(work, "templates")
		pinned := strings.TrimSuffix(upstreamtest.WorkspaceRef, ":1") + "@" + up.Workspace.Digest.String()
		for name, image := range map[string]string{"container": upstreamtest.WorkspaceRef, "pinned": pinned} {
			copyTemplate(t, filepath.Join(root, "examples", "templates", "container"), filepath.Join(templates, name),
				`"docker.io/library/debian:12"`, `"`+image+`"`)
		}
		// A template calling a registry module, unchanged, that calls
		// another (module registry of the upstream; modules: below).
		writeModularTemplate(t, filepath.Join(templates, "modular"))
		cfg := fmt.Sprintf(`version: 1
name: e2e
release: 2026.11.1
platforms: [linux/amd64]
coder: {binary: self}
terraform: {version: 1.11.4, path: /usr/local/bin/terraform}
postgres: {path: /usr/lib/postgresql/15}
providers:
  - {path: %s}
images:
  - %s
modules:
  - {source: %s, version: "~> 1.0"}
  - {source: %s, version: "2.0.0"}
templates:
  - %s/examples/templates/process
  - %s/container
  - %s/pinned
  - %s/modular
certs:
  - %s
registries:
  images.test: %s
  %s: %s
`, testprovider.Mirror(t), upstreamtest.WorkspaceRef, upstreamtest.HelloModule, upstreamtest.GreetingModule, root, templates, templates, templates,
			up.CAFile, up.URL, upstreamtest.ModuleHost, up.URL)
		e.buildBundle(cfg)
		bundleFile = filepath.Join(work, "out", "e2e-2026.11.1.bundle")
		// Templates run against the official Coder provider, carried in
		// the bundle's mirror.
		if inspect := e.run("bundle", "inspect", bundleFile); !strings.Contains(inspect, "registry.terraform.io/coder/coder") {
			t.Fatalf("the bundle does not carry the official coder/coder provider:\n%s", inspect)
		}
	})

	e.step("create offline namespace", e.createNetns)

	dir := filepath.Join(work, "appliance")
	caFile := filepath.Join(dir, "certs", "ca.pem")
	e.step("appliance install", func() {
		e.coder("appliance", "install", bundleFile, "--dir", dir, "--public-key", filepath.Join(work, "keys", "bundle.pub"))
	})

	trace := filepath.Join(work, "connect.trace")
	var up *exec.Cmd
	e.step("appliance up (to healthy)", func() {
		// -q, not -qq: the trace records each process's exit status.
		up = e.inNetns("strace", "-f", "-q", "-e", "trace=connect", "-o", trace, e.bin, "appliance", "up", "--dir", dir)
		e.startLogged(up, filepath.Join(work, "up.log"))
		t.Cleanup(func() {
			// Should a step fail: the appliance first (killing strace would
			// leave what it traces running), then strace.
			signalAppliance(dir, up.Process.Pid, syscall.SIGTERM)
			testwait.Until(2*time.Second, func() bool { return len(signalAppliance(dir, up.Process.Pid, 0)) == 0 })
			signalAppliance(dir, up.Process.Pid, syscall.SIGKILL)
			_ = up.Process.Kill()
			// Rootless podman's pause process, which outlives the
			// appliance by design, in the service user's namespaces of
			// this test's appliance.
			_ = exec.Command("pkill", "-u", serviceUser, "-x", "podman").Run()
		})
		e.waitHealthy(accessURL, caFile, filepath.Join(work, "up.log"), 3*time.Minute)
	})

	e.step("plain HTTP redirects to HTTPS", func() {
		if got := e.curl("-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "http://127.0.0.1:3000/api/v2/buildinfo?x=1"); got != "308 "+accessURL+"/api/v2/buildinfo?x=1" {
			t.Fatalf("plain HTTP: got %q, want a 308 to %s", got, accessURL)
		}
		if out := e.curl("-D", "-", "-o", "/dev/null", "--cacert", caFile, accessURL+"/api/v2/buildinfo"); !strings.Contains(strings.ToLower(out), "strict-transport-security: max-age=") {
			t.Fatalf("no Strict-Transport-Security on HTTPS:\n%s", out)
		}
	})
	e.step("CLI without the CA: x509", func() {
		cmd := e.inNetns(e.bin, "login", accessURL, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "e2e-password-1")
		cmd.Env = append(cmd.Env, "CODER_CONFIG_DIR="+filepath.Join(work, "cli-no-ca"))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "x509: certificate signed by unknown authority") {
			t.Fatalf("coder login without the CA: %v, want an x509 error:\n%s", err, out)
		}
	})
	e.step("first user (login --ca-file)", func() {
		e.coder("login", accessURL, "--ca-file", caFile, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "e2e-password-1")
	})
	// Right after login, as a person pastes the commands make run prints:
	// create waits while the bundled templates are still being imported.
	e.step("create workspace", func() {
		e.coder("create", "ws", "--template", "process", "-y")
	})
	e.step("agent connected and ready", func() { e.waitAgentReady("ws") })
	e.step("coder ssh ws -- echo ok", func() {
		if out := e.coder("ssh", "ws", "--", "echo", "ok"); strings.TrimSpace(out) != "ok" {
			t.Fatalf("ssh: got %q, want ok", out)
		}
		if out := e.coder("ssh", "ws", "--", "sh", "-c", "echo $CODER_AGENT_URL"); strings.TrimSpace(out) != accessURL {
			t.Fatalf("the agent's CODER_AGENT_URL: %q, want %s", out, accessURL)
		}
	})
	e.step("OpenSSH ProxyCommand coder ssh --stdio", func() {
		proxy := fmt.Sprintf("ProxyCommand=%s --global-config %s ssh --stdio %%h", e.bin, filepath.Join(work, "cli"))
		out, err := e.inNetns("ssh", "-F", "/dev/null", "-o", proxy, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "ws", "echo", "via-openssh").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "via-openssh" {
			t.Fatalf("ssh -o ProxyCommand=...: %v\n%s", err, out)
		}
	})
	e.step("dev URL, coder port-forward", func() {
		root := filepath.Join(dir, "workspaces", "admin", "ws")
		if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello over https\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(e.coder("ssh", "ws", "--", "sh", "-c", "busybox httpd -f -p 127.0.0.1:18080 -h "+root+" </dev/null >/dev/null 2>&1 & echo $!"))
		defer func() { _ = exec.Command("kill", pid).Run() }()
		token, err := os.ReadFile(filepath.Join(work, "cli", "session"))
		if err != nil {
			t.Fatal(err)
		}
		devURL := accessURL + "/@admin/ws/ports/18080/hello.txt"
		testwait.For(t, 30*time.Second, "curl --cacert "+devURL, func() (bool, string) {
			out, err := e.inNetns("curl", "-sSf", "-m", "5", "--cacert", caFile, "-H", "Coder-Session-Token: "+string(token), devURL).CombinedOutput()
			return err == nil && string(out) == "hello over https\n", fmt.Sprintf("%v\n%s", err, out)
		})

		// coder port-forward over HTTPS: every curl is a new connection,
		// made on one prepared ahead, its request sent before coderd answers.
		pf := e.inNetns(e.bin, "port-forward", "ws", "--tcp", "127.0.0.1:18081:18080")
		var pfErr syncbuf.Buffer
		pf.Stderr = &pfErr
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
		testwait.For(t, 30*time.Second, "coder port-forward to start", func() (bool, string) {
			return strings.Contains(pfErr.String(), "Forwarding"), pfErr.String()
		})
		for i := range 5 {
			if out := e.curl("http://127.0.0.1:18081/hello.txt"); out != "hello over https\n" {
				t.Fatalf("curl %d through coder port-forward: %q\nport-forward: %s", i, out, pfErr.String())
			}
		}
	})
	e.step("member's workspace: its own account, the appliance closed to it", func() { e.checkMemberIsolation(dir, accessURL, caFile) })
	e.step("audit log (coder audit -o json)", func() {
		var login struct {
			SessionToken string `json:"session_token"`
		}
		out := e.curl("--cacert", caFile, "-H", "Content-Type: application/json",
			"-d", `{"email":"bob@example.com","password":"bob-password-1"}`, accessURL+"/api/v2/users/login")
		if err := json.Unmarshal([]byte(out), &login); err != nil || login.SessionToken == "" {
			t.Fatalf("bob's login: %v\n%s", err, out)
		}
		var ws struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(e.coder("show", "ws", "-o", "json")), &ws); err != nil {
			t.Fatal(err)
		}
		// A member may not stop the admin's workspace.
		code := e.curl("-o", "/dev/null", "-w", "%{http_code}", "--cacert", caFile, "-H", "Coder-Session-Token: "+login.SessionToken,
			"-H", "Content-Type: application/json", "-d", `{"transition":"stop"}`, accessURL+"/api/v2/workspaces/"+ws.ID+"/builds")
		if code != "404" && code != "403" {
			t.Fatalf("bob stopping admin's workspace: HTTP %s, want 403 or 404", code)
		}
		var logs []codersdk.AuditLog
		if err := json.Unmarshal([]byte(e.coder("audit", "-o", "json", "--limit", "500")), &logs); err != nil {
			t.Fatal(err)
		}
		has := func(user string, action codersdk.AuditAction, resource codersdk.AuditResourceType, outcome string) bool {
			for _, l := range logs {
				if l.Actor() == user && l.Action == action && l.ResourceType == resource && l.Outcome == outcome {
					return true
				}
			}
			return false
		}
		for _, want := range []struct {
			user     string
			action   codersdk.AuditAction
			resource codersdk.AuditResourceType
			outcome  string
		}{
			{"admin", codersdk.AuditActionCreate, codersdk.AuditResourceUser, codersdk.AuditOutcomeSuccess},
			{"bob", codersdk.AuditActionLogin, codersdk.AuditResourceUser, codersdk.AuditOutcomeSuccess},
			{"admin", codersdk.AuditActionCreate, codersdk.AuditResourceWorkspace, codersdk.AuditOutcomeSuccess},
			{"admin", codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent, codersdk.AuditOutcomeSuccess},
			{"bob", codersdk.AuditActionStop, codersdk.AuditResourceWorkspaceBuild, codersdk.AuditOutcomeFailure},
		} {
			if !has(want.user, want.action, want.resource, want.outcome) {
				t.Errorf("the audit log has no %s %s %s (%s); it has %d records", want.user, want.action, want.resource, want.outcome, len(logs))
			}
		}
		if t.Failed() {
			t.Fatalf("audit log:\n%s", e.coder("audit"))
		}
	})
	e.step("stop workspace", func() { e.coder("stop", "ws", "-y") })
	e.step("delete workspace", func() { e.coder("delete", "ws", "-y") })

	// Container workspaces: the bundled test image run with podman, pulled
	// from the appliance's registry with its CA trusted, offline.
	e.step("create container workspace", func() {
		e.coder("create", "cws", "--template", "container", "-y")
		e.waitAgentReady("cws")
	})
	e.step("coder ssh cws -- cat /etc/os-release", func() {
		if out := e.coder("ssh", "cws", "--", "cat", "/etc/os-release"); out != upstreamtest.WorkspaceOSRelease {
			t.Fatalf("os-release in the container workspace: got %q, want the image's %q", out, upstreamtest.WorkspaceOSRelease)
		}
		e.coder("ssh", "cws", "--", "sh", "-c", "echo kept > /home/coder/kept.txt")
	})
	e.step("stop and start container workspace", func() {
		e.coder("stop", "cws", "-y")
		if out := e.podman(dir, "ps", "-a", "-q", "--filter", "name=^coder-admin-cws$"); out != "" {
			t.Fatalf("stopped workspace: container still there: %q", out)
		}
		e.coder("start", "cws", "-y")
		e.waitAgentReady("cws")
		if out := e.coder("ssh", "cws", "--", "cat", "/home/coder/kept.txt"); out != "kept\n" {
			t.Fatalf("home volume after stop and start: got %q, want kept", out)
		}
	})
	e.step("image pinned by digest", func() {
		e.coder("create", "pws", "--template", "pinned", "-y")
		e.waitAgentReady("pws")
		if out := e.coder("ssh", "pws", "--", "cat", "/etc/os-release"); out != upstreamtest.WorkspaceOSRelease {
			t.Fatalf("os-release in the digest-pinned workspace: got %q", out)
		}
		e.coder("delete", "pws", "-y")
	})
	e.step("delete container workspace", func() {
		e.coder("delete", "cws", "-y")
		if out := e.podman(dir, "ps", "-a", "-q", "--filter", "name=^coder-admin-cws$"); out != "" {
			t.Fatalf("deleted workspace: container still there: %q", out)
		}
		if out := e.podman(dir, "volume", "ls", "-q"); out != "" {
			t.Fatalf("deleted workspaces: the service user's podman still has volumes %q", out)
		}
	})
	// Registry modules, resolved offline against the appliance's mirror.
	e.step("workspace from a template with registry modules", func() {
		e.coder("create", "mws", "--template", "modular", "-y")
		var w struct {
			LatestBuild struct {
				Resources []struct {
					Metadata []struct {
						Key   string `json:"key"`
						Value string `json:"value"`
					} `json:"metadata"`
				} `json:"resources"`
			} `json:"latest_build"`
		}
		if err := json.Unmarshal([]byte(e.coder("show", "mws", "-o", "json")), &w); err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, r := range w.LatestBuild.Resources {
			for _, m := range r.Metadata {
				if m.Key == "message" {
					got = m.Value
				}
			}
		}
		if want := upstreamtest.HelloMessage("e2e"); got != want {
			t.Fatalf("the registry module's output: got %q, want %q", got, want)
		}
		e.coder("delete", "mws", "-y")
	})
	// A template as people bring them from Coder's registry, naming what
	// the bundle lacks: refused with everything named, before terraform
	// could look anything up (the trace below covers it).
	e.step("template that needs what the bundle lacks", func() { e.checkRefusedTemplate(caFile, accessURL) })
	e.step("appliance stop (SIGTERM)", func() {
		// Signal the appliance itself (root's process and the service
		// user's), not strace (which traces it), and read their exit
		// statuses from the trace: strace itself goes on while anything it
		// traces runs, and rootless podman keeps a pause process (which
		// holds the service user's namespaces) after the appliance stops.
		pids := signalAppliance(dir, up.Process.Pid, syscall.SIGTERM)
		if len(pids) != 2 {
			t.Fatalf("appliance up processes: %v, want root's and the service user's", pids)
		}
		testwait.For(t, 90*time.Second, "appliance to stop", func() (bool, string) {
			left := signalAppliance(dir, up.Process.Pid, 0)
			return len(left) == 0, fmt.Sprintf("appliance up processes still running: %v", left)
		})
		_ = up.Process.Kill() // strace blocks every other signal (-o FILE: -I 3); what it traced runs on
		_ = up.Wait()
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			if !regexp.MustCompile(`(?m)^` + strconv.Itoa(pid) + ` +\+\+\+ exited with 0 \+\+\+$`).Match(b) {
				t.Errorf("appliance up (pid %d) did not exit with 0; its trace ends:\n%s", pid, tail(grepLines(string(b), strconv.Itoa(pid)+" "), 5))
			}
		}
	})

	e.step("appliance warm restart (to healthy)", func() {
		again := e.inNetns(e.bin, "appliance", "up", "--dir", dir)
		e.startLogged(again, filepath.Join(work, "up2.log"))
		defer func() {
			// Should the restart not become healthy: not left running.
			if again.ProcessState == nil {
				_ = again.Process.Kill()
				_ = again.Wait()
			}
		}()
		e.waitHealthy(accessURL, caFile, filepath.Join(work, "up2.log"), 2*time.Minute)
		_ = again.Process.Signal(syscall.SIGTERM)
		if err := again.Wait(); err != nil {
			t.Fatalf("restarted appliance exited with %v", err)
		}
	})

	// Zero egress: every connect() the appliance's processes made went to
	// loopback or a unix socket.
	r, err := connecttrace.Read(trace)
	if err != nil {
		t.Fatal(err)
	}
	if r.Total == 0 {
		t.Fatal("strace recorded no connect() at all: the trace did not see the appliance")
	}
	if len(r.Offenders) > 0 {
		t.Fatalf("%d of %d connect() calls left the machine:\n%s", len(r.Offenders), r.Total, strings.Join(r.Offenders, "\n"))
	}
	fmt.Printf("e2e egress: %d connect() calls, all to loopback or unix sockets: zero egress\n", r.Total)
}

// signalAppliance sends sig (0: none) to every `appliance up --dir dir`
// process (the root one and its service user's child) but except
// (strace's pid), and returns their pids.
func signalAppliance(dir string, except int, sig syscall.Signal) []int {
	out, _ := exec.Command("pgrep", "-f", "appliance up --dir "+dir+"$").Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != except {
			pids = append(pids, pid)
			if sig != 0 {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
	return pids
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// buildCoder builds the coder binary as make build does: static, so that
// it runs as the agent in any image.
func (e *env) buildCoder() {
	e.t.Helper()
	build := exec.Command("go", "build", "-o", e.bin, "airgapcoder/cmd/coder")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		e.t.Fatalf("go build: %v\n%s", err, out)
	}
	bin, err := elf.Open(e.bin)
	if err != nil {
		e.t.Fatal(err)
	}
	defer bin.Close()
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			e.t.Fatal("the coder binary is dynamically linked: it would not run as the agent in an image without glibc")
		}
	}
}

// createNetns creates the test's network namespace with only a loopback
// interface, removed when the test ends.
func (e *env) createNetns() {
	e.t.Helper()
	if out, err := exec.Command("ip", "netns", "add", e.netns).CombinedOutput(); err != nil {
		e.t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	e.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", e.netns).Run() })
	if out, err := exec.Command("ip", "netns", "exec", e.netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		e.t.Fatalf("lo up: %v\n%s", err, out)
	}
	out, _ := exec.Command("ip", "netns", "exec", e.netns, "ip", "-o", "link").CombinedOutput()
	if n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; n != 1 {
		e.t.Fatalf("the namespace must have only a loopback interface, got:\n%s", out)
	}
}

// buildBundle builds the bundle bundle.yaml cfg describes into work/out on
// the connected side, signed with a key made for the test (work/keys).
func (e *env) buildBundle(cfg string) {
	e.t.Helper()
	e.run("bundle", "keygen", "--output", filepath.Join(e.work, "keys"))
	if err := os.WriteFile(filepath.Join(e.work, "bundle.yaml"), []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.run("bundle", "build", "-f", filepath.Join(e.work, "bundle.yaml"), "--output", filepath.Join(e.work, "out"),
		"--sign-key", filepath.Join(e.work, "keys", "bundle.key"), "--cache-dir", filepath.Join(e.work, "cache"))
}

// waitHealthy waits until the appliance at url answers /healthz (checked
// with the CA in caFile), failing with the end of its log after timeout.
func (e *env) waitHealthy(url, caFile, logPath string, timeout time.Duration) {
	e.t.Helper()
	testwait.For(e.t, timeout, "appliance "+url+" healthy", func() (bool, string) {
		if e.curlOK(url+"/healthz", "--cacert", caFile) {
			return true, ""
		}
		b, _ := os.ReadFile(logPath)
		return false, "its log ends:\n" + tail(string(b), 40)
	})
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitAgentReady waits until the workspace's agent is connected and ready
// (with the CLI environment env, the admin's when empty).
func (e *env) waitAgentReady(workspace string, env ...string) {
	e.t.Helper()
	testwait.For(e.t, 2*time.Minute, workspace+": agent connected and ready", func() (bool, string) {
		var w struct {
			LatestBuild struct {
				Job struct {
					Status string `json:"status"`
					Error  string `json:"error"`
				} `json:"job"`
				Resources []struct {
					Agents []struct {
						Status         string `json:"status"`
						LifecycleState string `json:"lifecycle_state"`
					} `json:"agents"`
				} `json:"resources"`
			} `json:"latest_build"`
		}
		if err := json.Unmarshal([]byte(e.coderEnv(env, "show", workspace, "-o", "json")), &w); err != nil {
			e.t.Fatal(err)
		}
		for _, r := range w.LatestBuild.Resources {
			for _, a := range r.Agents {
				if a.Status == "connected" && a.LifecycleState == "ready" {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v", w)
	})
}

// podman runs podman as the appliance's service user, as its provisioners
// do (rootless, storage in the service user's home under dir), and returns
// its trimmed output.
func (e *env) podman(dir string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command("runuser", append([]string{"-u", serviceUser, "--", "env",
		"HOME=" + filepath.Join(dir, "data", "home"), "XDG_RUNTIME_DIR=" + filepath.Join(dir, "run", "user"), "podman"}, args...)...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("podman %s (as %s): %v\n%s", strings.Join(args, " "), serviceUser, err, out)
	}
	return strings.TrimSpace(string(out))
}

// checkRefusedTemplate pushes a template with the shapes of Coder's Docker
// quickstart (kreuzwerker/docker, hashicorp/external and the module
// registry.coder.com/coder/code-server/coder, none of them bundled): the
// owner's CLI refuses it before uploading (it sees the appliance's
// mirror), and a template admin's push, which cannot see it, is refused by
// the provisioner's import preflight; both name all three and the
// bundle.yaml lines.
func (e *env) checkRefusedTemplate(caFile, accessURL string) {
	t := e.t
	dir := filepath.Join(e.work, "quickstart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(upstreamtest.QuickstartTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"provider registry.terraform.io/kreuzwerker/docker", "provider registry.terraform.io/hashicorp/external",
		"module registry.coder.com/coder/code-server/coder ~> 1.0",
		"providers:\n  - source: registry.terraform.io/hashicorp/external", "  - source: registry.terraform.io/kreuzwerker/docker",
		"modules:\n  - source: registry.coder.com/coder/code-server/coder\n    version: \"~> 1.0\"",
		"--against inventory.json",
	}
	check := func(who string, out []byte, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s's push of the quickstart template succeeded:\n%s", who, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s's refused push does not say %q:\n%s", who, w, out)
			}
		}
	}
	out, err := e.inNetns(e.bin, "templates", "push", "quickstart", "--directory", dir, "-y").CombinedOutput()
	check("the owner", out, err)
	if strings.Contains(string(out), "Importing") {
		t.Errorf("the owner's CLI uploaded the template before refusing it:\n%s", out)
	}
	e.coder("users", "create", "--username", "tadmin", "--email", "tadmin@example.com", "--password", "tadmin-password-1", "--role", "template-admin")
	ta := []string{"CODER_CONFIG_DIR=" + filepath.Join(e.work, "cli-tadmin")}
	e.coderEnv(ta, "login", accessURL, "--ca-file", caFile, "--email", "tadmin@example.com", "--password", "tadmin-password-1")
	out, err = e.inNetnsEnv(ta, e.bin, "templates", "push", "quickstart", "--directory", dir, "-y").CombinedOutput()
	check("the template admin", out, err)
	if strings.Contains(string(out), "Initializing terraform") {
		t.Errorf("terraform ran on the refused template:\n%s", out)
	}
}

// serviceUser is the appliance's service user (appliance.yaml's default).
const serviceUser = "coder"

// checkMemberIsolation: a member's process workspace runs as an account of
// its own (not root, not the service user); from the member's coder ssh
// session the appliance's secrets and another user's agent are closed; the
// admin's agent token is nowhere the member can read. The appliance itself
// runs as the service user, root keeping only the workspace launcher.
func (e *env) checkMemberIsolation(dir, accessURL, caFile string) {
	t := e.t
	t.Helper()
	svc, err := user.Lookup(serviceUser)
	if err != nil {
		t.Fatalf("install did not make the service user: %v", err)
	}
	// The appliance's processes.
	if out, _ := exec.Command("pgrep", "-u", serviceUser, "-f", "appliance up --dir "+dir).Output(); len(strings.Fields(string(out))) != 1 {
		t.Errorf("appliance up as %s: pids %q, want one", serviceUser, out)
	}
	pm, err := os.ReadFile(filepath.Join(dir, "data", "postgres", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _, _ := strings.Cut(string(pm), "\n")
	if out, _ := exec.Command("ps", "-o", "user=", "-p", pid).Output(); strings.TrimSpace(string(out)) != serviceUser {
		t.Errorf("the appliance's PostgreSQL (pid %s) runs as %q, want %s", pid, out, serviceUser)
	}
	for _, p := range []string{filepath.Join(dir, "data"), filepath.Join(dir, "cache"), filepath.Join(dir, "run")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(int(st.Sys().(*syscall.Stat_t).Uid)); got != svc.Uid || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: owner uid %s mode %o, want the service user's (%s), 0700", p, got, st.Mode().Perm(), svc.Uid)
		}
	}

	e.coder("users", "create", "--username", "bob", "--email", "bob@example.com", "--password", "bob-password-1")
	bob := []string{"CODER_CONFIG_DIR=" + filepath.Join(e.work, "cli-bob")}
	e.coderEnv(bob, "login", accessURL, "--ca-file", caFile, "--email", "bob@example.com", "--password", "bob-password-1")
	e.coderEnv(bob, "create", "bws", "--template", "process", "--parameter", "startup_script=id -un > started-as.txt", "-y")
	e.waitAgentReady("bws", bob...)
	t.Cleanup(func() { _, _ = e.inNetnsEnv(bob, e.bin, "delete", "bws", "-y").CombinedOutput() })
	ssh := func(script string, stdin string) (string, error) {
		cmd := e.inNetnsEnv(bob, e.bin, "ssh", "bws", "--", "sh", "-c", script)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := ssh("id -un; id -u; cat started-as.txt", "")
	if err != nil {
		t.Fatalf("bob's coder ssh: %v\n%s", err, out)
	}
	f := strings.Fields(out)
	if len(f) != 3 || f[0] != "ws-bob" || f[1] == "0" || f[1] == svc.Uid || f[2] != "ws-bob" {
		t.Fatalf("bob's workspace runs as %q, want the account ws-bob (not root, not %s uid %s), its startup script too", out, serviceUser, svc.Uid)
	}

	// Each agent's token, read as root from its environment.
	agentToken := func(account string) (pid, token string) {
		out, _ := exec.Command("pgrep", "-u", account, "-f", "coder agent").Output()
		for _, p := range strings.Fields(string(out)) {
			env, _ := os.ReadFile("/proc/" + p + "/environ")
			for _, kv := range strings.Split(string(env), "\x00") {
				if v, ok := strings.CutPrefix(kv, "CODER_AGENT_TOKEN="); ok && v != "" {
					return p, v
				}
			}
		}
		t.Fatalf("no agent of %s with CODER_AGENT_TOKEN in its environment (pgrep: %q)", account, out)
		return "", ""
	}
	adminPID, adminToken := agentToken("ws-admin")
	bobPID, bobToken := agentToken("ws-bob")
	if env, _ := os.ReadFile("/proc/" + adminPID + "/environ"); strings.Contains(string(env), "CODER_WORKSPACE_OWNER_SESSION_TOKEN") {
		t.Error("the admin's agent has the owner's session token in its environment")
	}

	for _, path := range []string{
		filepath.Join(dir, "certs", "ca-key.pem"), filepath.Join(dir, "certs", "server-key.pem"),
		filepath.Join(dir, "data", "password"), filepath.Join(dir, "data", "postgres", "PG_VERSION"),
		filepath.Join(dir, "data", "audit-journal.jsonl"),
		"/proc/" + adminPID + "/environ",
	} {
		out, err := e.inNetnsEnv(bob, e.bin, "ssh", "bws", "--", "cat", path).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("bob reading %s: %v %q, want Permission denied", path, err, out)
		}
	}

	// The admin's agent token, searched for where bob can read: the
	// appliance, the temporary folders and every process's environment and
	// command line. The pattern comes on standard input (not in argv or the
	// environment, which /proc shows). Bob's own token, in his own agent's
	// environment, shows that the search finds what is readable.
	search := `timeout 300 grep -rslF -f - "$0" /tmp /var/tmp /dev/shm /proc/[0-9]*/environ /proc/[0-9]*/cmdline; true`
	if out, err := ssh(strings.Replace(search, `"$0"`, shellQuote(dir), 1), bobToken); err != nil || !strings.Contains(out, "/proc/"+bobPID+"/environ") {
		t.Fatalf("bob searching for his own token: %v %q, want his agent's environment", err, out)
	}
	if out, err := ssh(strings.Replace(search, `"$0"`, shellQuote(dir), 1), adminToken); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("the admin's agent token is readable by bob in: %v %q", err, out)
	}
	// The launcher stops it as it started it (and strace, which traces the
	// appliance's whole tree, waits for every workspace process to end).
	e.coderEnv(bob, "delete", "bws", "-y")
	if st, err := os.ReadFile("/proc/" + bobPID + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("bob's workspace deleted, yet its agent (pid %s) still runs: %s", bobPID, st)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// copyTemplate copies the template folder src to dst with old replaced by
// new in its main.tf, and fails the test when old is not there.
func copyTemplate(t *testing.T, src, dst, old, new string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dst, "main.tf")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %s to replace", p, old)
	}
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), old, new)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeModularTemplate writes a template that calls the upstream's hello
// module from its registry, as a Coder template calls a registry module,
// and shows the module's output as resource metadata.
func writeModularTemplate(t *testing.T, dir string) {
	t.Helper()
	tf := `terraform {
  required_providers {
    coder = {
      source = "coder/coder"
    }
  }
}

module "hello" {
  source  = "` + upstreamtest.HelloModule + `"
  version = "~> 1.0"
  name    = "e2e"
}

resource "terraform_data" "note" {}

resource "coder_metadata" "note" {
  resource_id = terraform_data.note.id
  item {
    key   = "message"
    value = module.hello.message
  }
}
`
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tf), 0o644); err != nil {
		t.Fatal(err)
	}
}
