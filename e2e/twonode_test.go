//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
)

// TestApplianceTwoNodes is the multi-node appliance: one bundle installed
// twice in a namespace with only loopback, both nodes on one external
// PostgreSQL (started in the namespace), the second node using the first
// node's CA (docs/multi-node.md). A workspace created through node 1 is
// reached with coder ssh through node 2, which relays to node 1.
func TestApplianceTwoNodes(t *testing.T) {
	e := newEnv(t, needsRoot, "coder-e2e2")
	work := e.work
	e.step("build coder", e.buildCoder)
	bundleFile := filepath.Join(work, "out", "two-2026.11.1.bundle")
	e.step("bundle build", func() {
		root, _ := filepath.Abs("..")
		cfg := fmt.Sprintf(`version: 1
name: two
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
		e.buildBundle(cfg)
	})
	e.step("create offline namespace", e.createNetns)

	// The site's PostgreSQL, which both nodes share.
	const pgPort = 55440
	pgURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/coder?sslmode=disable", pgPort)
	e.step("external PostgreSQL", func() { e.startPostgres(filepath.Join(work, "pg"), pgPort) })

	type node struct{ dir, url, http, mirror string }
	nodes := []node{
		{dir: filepath.Join(work, "node1"), url: "https://127.0.0.1:3443", http: "127.0.0.1:3000", mirror: "127.0.0.1:3444"},
		{dir: filepath.Join(work, "node2"), url: "https://127.0.0.2:3443", http: "127.0.0.2:3000", mirror: "127.0.0.2:3444"},
	}
	caFile := filepath.Join(nodes[0].dir, "certs", "ca.pem")
	for i, n := range nodes {
		e.step(fmt.Sprintf("node %d: install and up", i+1), func() {
			if i > 0 {
				// The second node issues its serving certificate from the
				// first node's CA, so that clients and the nodes trust one CA.
				e.shareCA(nodes[0].dir, n.dir)
			}
			host := strings.TrimPrefix(n.url, "https://")
			e.installWith(n.dir, fmt.Sprintf("tls-address: %s\nhttp-address: %s\nmirror-address: %s\naccess-url: %s\npostgres-url: %s\nprovisioner-daemons: 1\n",
				host, n.http, n.mirror, n.url, pgURL), bundleFile)
			logPath := filepath.Join(work, fmt.Sprintf("up%d.log", i+1))
			e.startUp(n.dir, logPath)
			e.waitHealthy(n.url, caFile, logPath, 3*time.Minute)
		})
	}

	one := []string{"CODER_CONFIG_DIR=" + filepath.Join(work, "cli1")}
	two := []string{"CODER_CONFIG_DIR=" + filepath.Join(work, "cli2")}
	e.step("first user through node 1", func() {
		e.coderEnv(one, "login", nodes[0].url, "--ca-file", caFile, "--first-user-username", "admin",
			"--first-user-email", "admin@example.com", "--first-user-password", "two-nodes-password")
	})
	e.step("log in through node 2", func() {
		e.coderEnv(two, "login", nodes[1].url, "--ca-file", caFile, "--email", "admin@example.com", "--password", "two-nodes-password")
	})
	e.step("node 2 lists both replicas", func() {
		out := e.coderEnv(two, "replicas")
		for _, n := range nodes {
			if !strings.Contains(out, n.url) {
				t.Fatalf("coder replicas through node 2 does not list %s:\n%s", n.url, out)
			}
		}
	})
	e.step("create workspace through node 1", func() {
		e.coderEnv(one, "create", "ws", "--template", "process", "-y")
		t.Cleanup(func() { _, _ = e.inNetnsEnv(one, e.bin, "stop", "ws", "-y").CombinedOutput() })
	})
	// The agent is connected to one node (whichever built the workspace
	// gave it its access URL); coder ssh works through both, so through
	// one of them it crosses from node to node.
	var holder string
	e.step("the agent's node", func() {
		testwait.For(t, 2*time.Minute, "the agent connected to either node", func() (bool, string) {
			psql := e.inNetns("runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/psql", "-h", "127.0.0.1", "-p", fmt.Sprint(pgPort),
				"-U", "postgres", "-d", "coder", "-Atc",
				"SELECT r.relay_address FROM workspace_agents a JOIN replicas r ON r.id = a.connected_replica_id")
			var stderr strings.Builder
			psql.Stderr = &stderr
			out, err := psql.Output()
			if err != nil {
				return false, fmt.Sprintf("psql: %v\n%s", err, stderr.String())
			}
			holder = strings.TrimSpace(string(out))
			return holder != "", "no agent has a connected replica"
		})
		fmt.Printf("e2e the agent is connected to %s\n", holder)
	})
	for i, cli := range [][]string{one, two} {
		e.step(fmt.Sprintf("coder ssh ws through node %d", i+1), func() {
			want := fmt.Sprintf("via-node-%d", i+1)
			if out := e.coderEnv(cli, "ssh", "ws", "--", "echo", want); strings.TrimSpace(out) != want {
				t.Fatalf("coder ssh through node %d (agent on %s): %q", i+1, holder, out)
			}
		})
	}
}

// coderEnv runs the coder binary in the namespace with extra environment.
func (e *env) coderEnv(extra []string, args ...string) string {
	e.t.Helper()
	out, err := e.inNetnsEnv(extra, append([]string{e.bin}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("(offline) coder %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) inNetnsEnv(extra []string, args ...string) *exec.Cmd {
	cmd := e.inNetns(args...)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

// startPostgres runs Debian's PostgreSQL 15 in the namespace on port, as
// the postgres user, with a database "coder"; it stops when the test ends.
func (e *env) startPostgres(dir string, port int) {
	e.t.Helper()
	const bin = "/usr/lib/postgresql/15/bin"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	if out, err := exec.Command("chown", "postgres:postgres", dir).CombinedOutput(); err != nil {
		e.t.Fatalf("chown: %v\n%s", err, out)
	}
	asPG := func(args ...string) *exec.Cmd {
		return e.inNetns(append([]string{"runuser", "-u", "postgres", "--"}, args...)...)
	}
	if out, err := asPG(bin+"/initdb", "-D", dir+"/data", "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput(); err != nil {
		e.t.Fatalf("initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off", port, dir)
	if out, err := asPG(bin+"/pg_ctl", "-D", dir+"/data", "-l", dir+"/log", "-w", "-t", "60", "-o", opts, "start").CombinedOutput(); err != nil {
		e.t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
	e.t.Cleanup(func() { _ = asPG(bin+"/pg_ctl", "-D", dir+"/data", "-m", "fast", "-w", "stop").Run() })
	if out, err := asPG(bin+"/createdb", "-h", "127.0.0.1", "-p", fmt.Sprint(port), "-U", "postgres", "coder").CombinedOutput(); err != nil {
		e.t.Fatalf("createdb: %v\n%s", err, out)
	}
}

// shareCA copies the appliance CA (certificate and key) of the node in
// from to the node in to, before to first starts.
func (e *env) shareCA(from, to string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Join(to, "certs"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"ca.pem", 0o644}, {"ca-key.pem", 0o600}} {
		b, err := os.ReadFile(filepath.Join(from, "certs", f.name))
		if err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, "certs", f.name), b, f.mode); err != nil {
			e.t.Fatal(err)
		}
	}
}
