//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// TestApplianceProxy is the proxy role of the appliance (docs/wsproxy.md):
// one bundle installed twice in a namespace with only loopback, a primary
// (127.0.0.1) and a workspace proxy (127.0.0.2, role: proxy) trusting the
// primary's CA through primary-ca-file. The proxy registers and is listed
// ok on the primary; its process tree runs no PostgreSQL and connects to
// nothing but the primary's HTTPS listener; killed (SIGKILL) and started
// again it registers again; stopped (SIGTERM) it is unreachable at once.
func TestApplianceProxy(t *testing.T) {
	e := newEnv(t, needsRoot, "coder-e2ep")
	start, work := time.Now(), e.work
	e.step("build coder", e.buildCoder)
	bundleFile := filepath.Join(work, "out", "region-2026.11.1.bundle")
	e.step("bundle build", func() {
		// Neither node provisions: no terraform, providers or templates.
		e.buildBundle(`version: 1
name: region
release: 2026.11.1
platforms: [linux/amd64]
coder: {binary: self}
postgres: {path: /usr/lib/postgresql/15}
`)
	})
	e.step("create offline namespace", e.createNetns)

	const (
		primaryURL = "https://127.0.0.1:3443"
		proxyURL   = "https://127.0.0.2:3443"
	)
	primaryDir, proxyDir := filepath.Join(work, "primary"), filepath.Join(work, "proxy")
	primaryCA := filepath.Join(primaryDir, "certs", "ca.pem")
	cli := []string{"CODER_CONFIG_DIR=" + filepath.Join(work, "cli")}
	e.step("primary: install and up", func() {
		e.installWith(primaryDir, "tls-address: 127.0.0.1:3443\nhttp-address: 127.0.0.1:3000\nmirror-address: 127.0.0.1:3444\nprovisioner-daemons: 0\n", bundleFile)
		e.startUp(primaryDir, filepath.Join(work, "primary.log"))
		e.waitHealthy(primaryURL, primaryCA, filepath.Join(work, "primary.log"), 2*time.Minute)
	})
	var token string
	e.step("wsproxy create on the primary", func() {
		e.coderEnv(cli, "login", primaryURL, "--ca-file", primaryCA, "--first-user-username", "admin",
			"--first-user-email", "admin@example.com", "--first-user-password", "proxy-region-password")
		token = strings.TrimSpace(e.coderEnv(cli, "wsproxy", "create", "eu", "--only-token"))
	})

	// The proxy: its token in a file only the service user reads, the
	// primary's CA, its own appliance CA for its serving certificate.
	tokenFile := filepath.Join(work, "proxy-secrets", "proxy-token")
	e.step("proxy: install", func() {
		if err := os.MkdirAll(filepath.Dir(tokenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("role: proxy\ntls-address: 127.0.0.2:3443\nhttp-address: 127.0.0.2:3000\naccess-url: %s\nhosts: [127.0.0.2]\n"+
			"primary-access-url: %s\nproxy-session-token-file: %s\nprimary-ca-file: %s\n", proxyURL, primaryURL, tokenFile, primaryCA)
		e.installWith(proxyDir, conf, bundleFile)
		// install made the service user; the appliance runs as it.
		if out, err := exec.Command("chown", serviceUser, tokenFile).CombinedOutput(); err != nil {
			t.Fatalf("chown %s %s: %v\n%s", serviceUser, tokenFile, err, out)
		}
	})
	proxyLog := filepath.Join(work, "proxy.log")
	var proxy *exec.Cmd
	var upAt time.Time
	e.step("proxy: up (to registered)", func() {
		upAt = time.Now()
		proxy = e.startUp(proxyDir, proxyLog)
		e.waitHealthy(proxyURL, filepath.Join(proxyDir, "certs", "ca.pem"), proxyLog, time.Minute)
		fmt.Printf("e2e the proxy registered %.2fs after up started\n", time.Since(upAt).Seconds())
	})
	e.step("wsproxy ls: ok", func() { e.waitProxyStatus(cli, "eu", codersdk.ProxyHealthy, upAt, 10*time.Second) })
	e.step("appliance status of the proxy", func() {
		var st struct {
			Role       string `json:"role"`
			Components []struct {
				Name, State, Detail string
			} `json:"components"`
		}
		if err := json.Unmarshal([]byte(e.coder("appliance", "status", "--dir", proxyDir, "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range st.Components {
			names = append(names, c.Name)
			if c.Name == "wsproxy" && c.State != "ok" {
				t.Errorf("appliance status: wsproxy %s (%s), want ok", c.State, c.Detail)
			}
		}
		if st.Role != "proxy" || strings.Join(names, ",") != "wsproxy,egress" {
			t.Fatalf("appliance status: role %q, components %v; want proxy with only wsproxy and egress", st.Role, names)
		}
	})
	e.step("proxy runs no PostgreSQL", func() {
		pgPort := postgresPort(t, primaryDir)
		procs := processTree(proxy.Process.Pid)
		var outbound []string
		for _, p := range procs {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
			if strings.Contains(strings.ToLower(string(cmdline)+string(comm)), "postgres") {
				t.Errorf("process %d of the proxy's tree is PostgreSQL: %q", p, strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
			for _, c := range tcpConnections(t, p) {
				// Inbound: accepted on the proxy's own listeners.
				if c.local.Port() == 3443 || c.local.Port() == 3000 {
					continue
				}
				if c.remote.Port() == pgPort {
					t.Errorf("process %d of the proxy's tree is connected to PostgreSQL's port %d (%s)", p, pgPort, c.remote)
				}
				if c.remote.String() != "127.0.0.1:3443" {
					t.Errorf("process %d of the proxy's tree is connected to %s, not the primary's https 127.0.0.1:3443", p, c.remote)
				}
				outbound = append(outbound, c.remote.String())
			}
		}
		if len(procs) < 2 {
			t.Errorf("the proxy's process tree is %v: want root's process and the service user's", procs)
		}
		fmt.Printf("e2e the proxy's tree: %d processes, none PostgreSQL; outbound connections: %v (PostgreSQL on %d)\n", len(procs), outbound, pgPort)
	})
	e.step("SIGKILL, up again: ok", func() {
		// The whole tree at once, the service user's process first: no
		// chance to deregister.
		procs := processTree(proxy.Process.Pid)
		for i := len(procs) - 1; i >= 0; i-- {
			_ = syscall.Kill(procs[i], syscall.SIGKILL)
		}
		_ = proxy.Wait()
		restart := time.Now()
		proxy = e.startUp(proxyDir, proxyLog+".2")
		e.waitHealthy(proxyURL, filepath.Join(proxyDir, "certs", "ca.pem"), proxyLog+".2", time.Minute)
		// Seen after the restart: only the new process heartbeats.
		e.waitProxyStatus(cli, "eu", codersdk.ProxyHealthy, restart, 10*time.Second)
		fmt.Printf("e2e the restarted proxy is ok %.2fs after up started\n", time.Since(restart).Seconds())
	})
	e.step("SIGTERM: unreachable at once", func() {
		stopAt := time.Now()
		_ = proxy.Process.Signal(syscall.SIGTERM)
		exited := make(chan error, 1)
		go func() { exited <- proxy.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the proxy's appliance up exited with %v after SIGTERM, want 0", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the proxy's appliance up did not stop within 30 s of SIGTERM")
		}
		e.waitProxyStatus(cli, "eu", codersdk.ProxyUnreachable, time.Time{}, 2*time.Second)
		fmt.Printf("e2e the stopped proxy is unreachable %.2fs after SIGTERM\n", time.Since(stopAt).Seconds())
	})
	fmt.Printf("e2e TestApplianceProxy total %.1fs\n", time.Since(start).Seconds())
}

// installWith writes conf as dir's appliance.yaml and installs the bundle
// there (in the namespace).
func (e *env) installWith(dir, conf, bundleFile string) {
	e.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "appliance.yaml"), []byte(conf), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.coder("appliance", "install", bundleFile, "--dir", dir, "--public-key", filepath.Join(e.work, "keys", "bundle.pub"))
}

// startUp starts `coder appliance up --dir dir` as root in the namespace,
// its output in logPath; it is stopped (SIGTERM, then SIGKILL after 30 s)
// when the test ends unless it exited before.
func (e *env) startUp(dir, logPath string) *exec.Cmd {
	e.t.Helper()
	// nsenter enters the namespace and execs coder: up's pid is coder's.
	up := e.inNetns(e.bin, "appliance", "up", "--dir", dir)
	e.startLogged(up, logPath)
	e.t.Cleanup(func() {
		if up.ProcessState != nil {
			return
		}
		_ = up.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = up.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = up.Process.Kill()
		}
	})
	return up
}

// waitProxyStatus polls `coder wsproxy ls -o json` on the primary until
// proxy name has status want and was last seen after seenAfter (zero: any
// time), failing after timeout with what it last saw.
func (e *env) waitProxyStatus(cli []string, name string, want codersdk.ProxyHealthStatus, seenAfter time.Time, timeout time.Duration) {
	e.t.Helper()
	what := fmt.Sprintf("workspace proxy %s %s (last seen after %s)", name, want, seenAfter.Format(time.RFC3339Nano))
	testwait.For(e.t, timeout, what, func() (bool, string) {
		var proxies []codersdk.WorkspaceProxy
		out := e.coderEnv(cli, "wsproxy", "ls", "-o", "json")
		if err := json.Unmarshal([]byte(out), &proxies); err != nil {
			e.t.Fatalf("coder wsproxy ls -o json: %v\n%s", err, out)
		}
		for _, p := range proxies {
			if p.Name == name && p.Status.Status == want && p.LastSeenAt.After(seenAfter) {
				return true, ""
			}
		}
		return false, "coder wsproxy ls -o json:\n" + out
	})
}

// processTree is pid and its descendants, parents first.
func processTree(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// tcpConn is one established TCP connection.
type tcpConn struct{ local, remote procAddr }

// procAddr is an address and port from /proc/net/tcp.
type procAddr struct {
	ip   net.IP
	port int
}

func (a procAddr) Port() int      { return a.port }
func (a procAddr) String() string { return net.JoinHostPort(a.ip.String(), strconv.Itoa(a.port)) }

// tcpConnections are the established TCP connections whose sockets
// process pid holds (its /proc/PID/fd against its namespace's
// /proc/PID/net/tcp and tcp6).
func tcpConnections(t *testing.T, pid int) []tcpConn {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var out []tcpConn
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "01" || !inodes[fields[9]] {
				continue
			}
			out = append(out, tcpConn{local: parseProcAddr(t, fields[1]), remote: parseProcAddr(t, fields[2])})
		}
		f.Close()
	}
	return out
}

// parseProcAddr parses /proc/net/tcp's "0100007F:0D73" (the address in
// host byte order, 32-bit words).
func parseProcAddr(t *testing.T, s string) procAddr {
	t.Helper()
	hexIP, hexPort, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || len(hexIP)%8 != 0 {
		t.Fatalf("parse /proc/net/tcp address %q", s)
	}
	ip := make(net.IP, len(hexIP)/2)
	for w := 0; w < len(hexIP)/8; w++ {
		word, err := strconv.ParseUint(hexIP[w*8:w*8+8], 16, 32)
		if err != nil {
			t.Fatalf("parse /proc/net/tcp address %q: %v", s, err)
		}
		for b := 0; b < 4; b++ {
			ip[w*4+b] = byte(word >> (8 * b))
		}
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return procAddr{ip: ip, port: int(port)}
}

// postgresPort is the TCP port of the primary's bundled PostgreSQL, from
// DIR/run/postgres.json.
func postgresPort(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "run", "postgres.json"))
	if err != nil {
		t.Fatalf("the primary's PostgreSQL: %v", err)
	}
	var info struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(info.URL)
	if err != nil {
		t.Fatalf("the primary's PostgreSQL URL does not parse: %v", err)
	}
	port := u.Port()
	if port == "" {
		port = u.Query().Get("port")
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("the primary's PostgreSQL URL has no port (host %q)", u.Hostname())
	}
	return n
}
