//go:build e2e

// Package e2e runs the product end to end the way a platform engineer
// would: build a bundle on the "connected" side, then install and run it in
// a network namespace that has only a loopback interface, and use it. Run
// with `make test-e2e` (root is required for the namespace).
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/internal/testprovider"
)

type env struct {
	t      *testing.T
	work   string
	bin    string
	netns  string
	cliEnv []string
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

// inNetns runs a command inside the offline namespace.
func (e *env) inNetns(args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", e.netns}, args...)...)
	cmd.Env = append(os.Environ(), e.cliEnv...)
	return cmd
}

func (e *env) coder(args ...string) string {
	e.t.Helper()
	out, err := e.inNetns(append([]string{e.bin}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("(offline) coder %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) curlOK(url string) bool {
	return e.inNetns("curl", "-sf", "-m", "2", url).Run() == nil
}

func TestApplianceOffline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the e2e test creates a network namespace: run it as root (make test-e2e)")
	}
	work := t.TempDir()
	if err := os.Chmod(filepath.Dir(work), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, work: work, bin: filepath.Join(work, "coder"), netns: fmt.Sprintf("coder-e2e-%d", os.Getpid())}
	e.cliEnv = []string{"CODER_CONFIG_DIR=" + filepath.Join(work, "cli"), "CODER_URL=http://127.0.0.1:3000"}

	var bundleFile string
	e.step("build coder", func() {
		out, err := exec.Command("go", "build", "-o", e.bin, "airgapcoder/cmd/coder").CombinedOutput()
		if err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	})
	e.step("bundle build (connected side)", func() {
		e.run("bundle", "keygen", "--output", filepath.Join(work, "keys"))
		root, _ := filepath.Abs("..")
		cfg := fmt.Sprintf(`version: 1
name: e2e
release: 2026.11.1
platforms: [linux/amd64]
coder: {binary: self}
terraform: {version: 1.11.4, path: /usr/local/bin/terraform}
postgres: {path: /usr/lib/postgresql/15}
providers:
  - {path: %s}
templates:
  - %s/examples/templates/process
`, testprovider.Mirror(t), root)
		if err := os.WriteFile(filepath.Join(work, "bundle.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		e.run("bundle", "build", "-f", filepath.Join(work, "bundle.yaml"), "--output", filepath.Join(work, "out"),
			"--sign-key", filepath.Join(work, "keys", "bundle.key"), "--cache-dir", filepath.Join(work, "cache"))
		bundleFile = filepath.Join(work, "out", "e2e-2026.11.1.bundle")
		// Templates run against the official Coder provider, carried in
		// the bundle's mirror.
		if inspect := e.run("bundle", "inspect", bundleFile); !strings.Contains(inspect, "registry.terraform.io/coder/coder") {
			t.Fatalf("the bundle does not carry the official coder/coder provider:\n%s", inspect)
		}
	})

	e.step("create offline namespace", func() {
		if out, err := exec.Command("ip", "netns", "add", e.netns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", e.netns).Run() })
		if out, err := exec.Command("ip", "netns", "exec", e.netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("lo up: %v\n%s", err, out)
		}
		out, _ := exec.Command("ip", "netns", "exec", e.netns, "ip", "-o", "link").CombinedOutput()
		if n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; n != 1 {
			t.Fatalf("the namespace must have only a loopback interface, got:\n%s", out)
		}
	})

	dir := filepath.Join(work, "appliance")
	e.step("appliance install", func() {
		e.coder("appliance", "install", bundleFile, "--dir", dir, "--public-key", filepath.Join(work, "keys", "bundle.pub"))
	})

	trace := filepath.Join(work, "connect.trace")
	var up *exec.Cmd
	e.step("appliance up (to healthy)", func() {
		up = e.inNetns("strace", "-f", "-qq", "-e", "trace=connect", "-o", trace, e.bin, "appliance", "up", "--dir", dir)
		logf, err := os.Create(filepath.Join(work, "up.log"))
		if err != nil {
			t.Fatal(err)
		}
		up.Stdout, up.Stderr = logf, logf
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = up.Process.Kill() })
		deadline := time.Now().Add(3 * time.Minute)
		for !e.curlOK("http://127.0.0.1:3000/healthz") {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(work, "up.log"))
				t.Fatalf("appliance not healthy after 3m:\n%s", tail(string(b), 40))
			}
			time.Sleep(250 * time.Millisecond)
		}
	})

	e.step("first user", func() {
		e.coder("login", "http://127.0.0.1:3000", "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "e2e-password-1")
	})
	e.step("bundled template pushed", func() {
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(e.coder("templates", "list"), "process") {
			if time.Now().After(deadline) {
				t.Fatal("the bundled process template was not pushed on first boot")
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	e.step("create workspace", func() {
		e.coder("create", "ws", "--template", "process", "--parameter", "base_dir="+filepath.Join(work, "workspaces"), "-y")
	})
	e.step("agent connected and ready", func() {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var w struct {
				LatestBuild struct {
					Resources []struct {
						Agents []struct {
							Status         string `json:"status"`
							LifecycleState string `json:"lifecycle_state"`
						} `json:"agents"`
					} `json:"resources"`
				} `json:"latest_build"`
			}
			if err := json.Unmarshal([]byte(e.coder("show", "ws", "-o", "json")), &w); err != nil {
				t.Fatal(err)
			}
			ok := false
			for _, r := range w.LatestBuild.Resources {
				for _, a := range r.Agents {
					ok = ok || (a.Status == "connected" && a.LifecycleState == "ready")
				}
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent not connected and ready after 2m: %+v", w)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	e.step("coder ssh ws -- echo ok", func() {
		if out := e.coder("ssh", "ws", "--", "echo", "ok"); strings.TrimSpace(out) != "ok" {
			t.Fatalf("ssh: got %q, want ok", out)
		}
	})
	e.step("stop workspace", func() { e.coder("stop", "ws", "-y") })
	e.step("delete workspace", func() { e.coder("delete", "ws", "-y") })
	e.step("appliance stop (SIGTERM)", func() {
		// Signal the appliance itself, not strace (which traces it).
		out, _ := exec.Command("pgrep", "-f", "appliance up --dir "+dir).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != up.Process.Pid {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		done := make(chan error, 1)
		go func() { done <- up.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("appliance up exited with %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("appliance did not stop within 90s")
		}
	})

	e.step("appliance warm restart (to healthy)", func() {
		again := e.inNetns(e.bin, "appliance", "up", "--dir", dir)
		logf, err := os.Create(filepath.Join(work, "up2.log"))
		if err != nil {
			t.Fatal(err)
		}
		again.Stdout, again.Stderr = logf, logf
		if err := again.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for !e.curlOK("http://127.0.0.1:3000/healthz") {
			if time.Now().After(deadline) {
				_ = again.Process.Kill()
				t.Fatal("no healthy restart within 2m")
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = again.Process.Signal(syscall.SIGTERM)
		if err := again.Wait(); err != nil {
			t.Fatalf("restarted appliance exited with %v", err)
		}
	})

	// Zero egress: every connect() the appliance's processes made went to
	// loopback or a unix socket.
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inet := regexp.MustCompile(`inet_addr\("([^"]+)"\)`)
	inet6 := regexp.MustCompile(`inet_pton\(AF_INET6, "([^"]+)"`)
	var total, bad int
	var offenders []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "connect(") || !strings.Contains(line, "sa_family=") {
			continue
		}
		total++
		var addr string
		switch {
		case strings.Contains(line, "sa_family=AF_INET6"):
			if m := inet6.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
		case strings.Contains(line, "sa_family=AF_INET"):
			if m := inet.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
		default: // AF_UNIX, AF_NETLINK, AF_UNSPEC: not a network connection
			continue
		}
		if !strings.HasPrefix(addr, "127.") && addr != "::1" && addr != "::ffff:127.0.0.1" {
			bad++
			offenders = append(offenders, line)
		}
	}
	if total == 0 {
		t.Fatal("strace recorded no connect() at all: the trace did not see the appliance")
	}
	if bad > 0 {
		t.Fatalf("%d of %d connect() calls left the machine:\n%s", bad, total, strings.Join(offenders, "\n"))
	}
	fmt.Printf("e2e egress: %d connect() calls, all to loopback or unix sockets: zero egress\n", total)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
