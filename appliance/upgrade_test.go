package appliance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/appliance"
	"airgapcoder/bundle"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
)

// newUpgradeEnv makes an appliance folder for the test, reachable by the
// service user (up as root runs the appliance as it), a signing key, and
// writes cfg as its appliance.yaml; the workspaces its appliance starts end
// with the test.
func newUpgradeEnv(t *testing.T, cfg string) *upgradeEnv {
	t.Helper()
	work := t.TempDir()
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := &upgradeEnv{t: t, bin: testbin.Coder(t), work: work, dir: filepath.Join(work, "appliance"), cache: filepath.Join(work, "cache"),
		keys: filepath.Join(work, "keys")}
	endWorkspacesAtCleanup(t, e.dir)
	if out, err := e.coder("bundle", "keygen", "--output", e.keys); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, appliance.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// runningAppliance is `coder appliance up` that a test started.
type runningAppliance struct {
	cmd    *exec.Cmd
	exited chan error
	log    string
}

// startAppliance starts `coder appliance up` (with env added), its output
// in work/up.log; SIGTERM stops it when the test ends.
func (e *upgradeEnv) startAppliance(env ...string) *runningAppliance {
	e.t.Helper()
	a := &runningAppliance{cmd: exec.Command(e.bin, "appliance", "up", "--dir", e.dir), exited: make(chan error, 1), log: filepath.Join(e.work, "up.log")}
	a.cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(a.log)
	if err != nil {
		e.t.Fatal(err)
	}
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	e.t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(90 * time.Second):
			_ = a.cmd.Process.Kill()
		}
	})
	return a
}

// waitHealthy waits for access/healthz to answer 200 within d and returns
// how long it took; it fails with the end of the log when up exits or d
// passes.
func (a *runningAppliance) waitHealthy(t *testing.T, dir, access, what string, d time.Duration) time.Duration {
	t.Helper()
	return testwait.For(t, d, what+": "+access+"/healthz 200", func() (bool, string) {
		if applianceHealthy(dir, access) {
			return true, ""
		}
		select {
		case err := <-a.exited:
			b, _ := os.ReadFile(a.log)
			t.Fatalf("%s: appliance up exited (%v):\n%s", what, err, b)
		default:
		}
		b, _ := os.ReadFile(a.log)
		return false, tailLines(string(b), 40)
	})
}

// endWorkspacesAtCleanup kills, when the test ends, every workspace
// process the appliance in dir started through its launcher (a test may
// end before deleting its workspaces, and an agent outlives coderd).
func endWorkspacesAtCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(dir, "launcher", "pids", "*", "*.pid"))
		for _, f := range pids {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

func freePort(t *testing.T) string {
	t.Helper()
	return testport.Addr(t)
}

type upgradeEnv struct {
	t      *testing.T
	bin    string
	work   string
	dir    string
	cache  string
	keys   string
	http   string
	tls    string
	client *codersdk.Client
}

// bundleFor builds a release from local sources; coderLine is the bundle.yaml
// coder entry; with against (an inventory file), a delta bundle.
func (e *upgradeEnv) bundleFor(release, coderLine string, against ...string) string {
	e.t.Helper()
	root, _ := filepath.Abs("..")
	cfg := fmt.Sprintf(`version: 1
name: upgrade
release: %s
platforms: [linux/amd64]
coder: %s
terraform: {version: 1.11.4, path: /usr/local/bin/terraform}
postgres: {path: /usr/lib/postgresql/15}
providers:
  - {path: %s}
templates:
  - %s/examples/templates/process
`, release, coderLine, testprovider.Mirror(e.t), root)
	yml := filepath.Join(e.work, "bundle-"+release+".yaml")
	if err := os.WriteFile(yml, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	out := filepath.Join(e.work, "out")
	args := []string{"bundle", "build", "-f", yml, "--output", out, "--sign-key", filepath.Join(e.keys, "bundle.key"), "--cache-dir", e.cache}
	name := "upgrade-" + release + ".bundle"
	for _, inv := range against {
		args = append(args, "--against", inv)
		base, err := bundle.ReadInventory(inv)
		if err != nil {
			e.t.Fatal(err)
		}
		name = bundle.DeltaFileName("upgrade", release, base.Release)
	}
	if o, err := exec.Command(e.bin, args...).CombinedOutput(); err != nil {
		e.t.Fatalf("bundle build %s: %v\n%s", release, err, o)
	}
	return filepath.Join(out, name)
}

func (e *upgradeEnv) coder(args ...string) (string, error) {
	out, err := exec.Command(e.bin, args...).CombinedOutput()
	return string(out), err
}

// up starts the appliance and returns a stop function.
func (e *upgradeEnv) up() func() {
	e.t.Helper()
	cmd := exec.Command(e.bin, "appliance", "up", "--dir", e.dir)
	// As systemd runs it (Type=notify): READY=1 once healthy.
	notify := e.notifySocket()
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.LocalAddr().String())
	log, _ := os.Create(filepath.Join(e.work, "up.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	if !testwait.Until(2*time.Minute, func() bool { return applianceHealthy(e.dir, "https://"+e.tls) }) {
		// SIGQUIT first: the Go runtime writes every goroutine's stack
		// to the log, which says where start-up hangs.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		b, _ := os.ReadFile(filepath.Join(e.work, "up.log"))
		e.t.Fatalf("appliance not healthy:\n%s", b)
	}
	// What it is doing (systemctl status shows STATUS=), then READY=1.
	before := readNotifyUntil(e.t, notify, "READY=1\n")
	if !slices.Contains(before, "STATUS=starting: start postgres") || !slices.Contains(before, "STATUS=starting: start control plane") {
		e.t.Errorf("systemd heard %q before READY=1, want the start-up's steps as STATUS= lines", before)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			e.t.Fatalf("appliance exit: %v", err)
		}
		readNotifyUntil(e.t, notify, "STOPPING=1")
		notify.Close()
	}
}

// readNotifyUntil reads what systemd hears until a message that starts
// with prefix, and returns the messages before it; only STATUS= lines may
// come first.
func readNotifyUntil(t *testing.T, c *net.UnixConn, prefix string) []string {
	t.Helper()
	var before []string
	for {
		msg := readNotify(t, c)
		if strings.HasPrefix(msg, prefix) {
			return before
		}
		if !strings.HasPrefix(msg, "STATUS=") {
			t.Fatalf("systemd heard %q (after %q), want %q", msg, before, prefix)
		}
		before = append(before, msg)
	}
}

// notifySocket is a datagram socket standing in for systemd's.
func (e *upgradeEnv) notifySocket() *net.UnixConn {
	e.t.Helper()
	path := filepath.Join(e.work, fmt.Sprintf("notify-%d.sock", time.Now().UnixNano()))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no message to systemd: %v", err)
	}
	return string(buf[:n])
}

// TestUpgradeAndRollback: upgrading keeps users, templates and workspaces; a
// release whose server cannot start is rolled back and the previous one
// serves again; a downgrade is refused unless forced.
func TestUpgradeAndRollback(t *testing.T) {
	http, tls := freePort(t), freePort(t)
	e := newUpgradeEnv(t, fmt.Sprintf("tls-address: %s\nhttp-address: %s\nmirror-address: %s\nprovisioner-daemons: 1\n", tls, http, freePort(t)))
	e.http, e.tls = http, tls
	work := e.work
	pub := filepath.Join(e.keys, "bundle.pub")
	a := e.bundleFor("2026.11.1", "{binary: self}")
	if out, err := e.coder("appliance", "install", a, "--dir", e.dir, "--public-key", pub); err != nil {
		t.Fatalf("install A: %v\n%s", err, out)
	}

	// Use release A: a user, the bundled template, a workspace.
	stop := e.up()
	u, _ := url.Parse("https://" + e.tls)
	ctx := context.Background()
	anon := applianceClient(t, e.dir, u)
	if _, err := anon.CreateFirstUser(ctx, codersdk.CreateFirstUserRequest{Email: "admin@example.com", Username: "admin", Password: "upgrade-password"}); err != nil {
		t.Fatal(err)
	}
	login := func() *codersdk.Client {
		resp, err := anon.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "admin@example.com", Password: "upgrade-password"})
		if err != nil {
			t.Fatal(err)
		}
		c := applianceClient(t, e.dir, u)
		c.SessionToken = resp.SessionToken
		return c
	}
	owner := login()
	var tpl codersdk.Template
	testwait.For(t, time.Minute, "the bundled template pushed", func() (bool, string) {
		var err error
		tpl, err = owner.TemplateByName(ctx, "default", "process")
		return err == nil, fmt.Sprint(err)
	})
	w, err := owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	waitBuild := func(c *codersdk.Client, id string) {
		testwait.For(t, 2*time.Minute, "the build to finish", func() (bool, string) {
			b, err := c.WorkspaceBuild(ctx, id)
			if err == nil && !b.Job.Status.Active() && b.Job.Status != codersdk.ProvisionerJobSucceeded {
				t.Fatalf("build: %s %s", b.Job.Status, b.Job.Error)
			}
			return err == nil && !b.Job.Status.Active(), fmt.Sprintf("%s %v", b.Job.Status, err)
		})
	}
	waitBuild(owner, w.LatestBuild.ID)
	sb, err := owner.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
	if err != nil {
		t.Fatal(err)
	}
	waitBuild(owner, sb.ID)
	// A backup while the appliance runs, with the bundle's own pg_dump.
	backup := filepath.Join(work, "db.backup")
	if out, err := e.coder("appliance", "backup", backup, "--dir", e.dir); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	stop()

	// Upgrade to B, a delta bundle built against the appliance's
	// inventory: B changes only the coder binary. Everything is still
	// there afterwards.
	b := e.deltaRelease(pub, "2026.11.2")
	if out, err := e.coder("appliance", "upgrade", b, "--dir", e.dir, "--public-key", pub); err != nil {
		t.Fatalf("upgrade to B: %v\n%s", err, out)
	}
	checkData := func(release, upgradeOutcome string) {
		t.Helper()
		stop := e.up()
		defer stop()
		c := login()
		checkOverview(t, c, release, upgradeOutcome)
		if _, err := c.TemplateByName(ctx, "default", "process"); err != nil {
			t.Fatalf("%s: template: %v", release, err)
		}
		ws, err := c.WorkspaceByOwnerAndName(ctx, codersdk.Me, "keep")
		if err != nil || ws.LatestBuild.Status != codersdk.WorkspaceStatusStopped {
			t.Fatalf("%s: workspace: %+v, %v", release, ws.LatestBuild.Status, err)
		}
		st, err := appliance.GetStatus(ctx, e.dir)
		if err != nil || st.Release != release {
			t.Fatalf("status: release %q, %v; want %s", st.Release, err, release)
		}
	}
	checkData("2026.11.2", "succeeded")

	// C's server cannot start: the upgrade rolls back to B, which serves.
	src := filepath.Join(work, "broken")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport \"os\"\n\nfunc main() {\n\tos.Stderr.WriteString(\"this coder cannot start\\n\")\n\tos.Exit(1)\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(work, "broken-coder")
	build := exec.Command("go", "build", "-o", broken, "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the broken coder: %v\n%s", err, out)
	}
	c := e.bundleFor("2026.11.3", "{path: "+broken+"}")
	out, err := e.coder("appliance", "upgrade", c, "--dir", e.dir, "--public-key", pub)
	if err == nil || !strings.Contains(out, "rolled back to 2026.11.2") {
		t.Fatalf("upgrade to a broken release: %v\n%s", err, out)
	}
	checkData("2026.11.2", "rolled back")

	// Restore the backup: a user created after it is gone again.
	stop = e.up()
	if _, err := login().CreateUser(ctx, codersdk.CreateUserRequest{Email: "later@example.com", Username: "later", Password: "upgrade-password"}); err != nil {
		t.Fatal(err)
	}
	if out, err := e.coder("appliance", "restore", backup, "--dir", e.dir); err == nil || !strings.Contains(out, "stop it") {
		t.Fatalf("restore while running: %v\n%s", err, out)
	}
	stop()
	if out, err := e.coder("appliance", "restore", backup, "--dir", e.dir); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	stop = e.up()
	users, err := login().Users(ctx)
	stop()
	if err != nil || users.Count != 1 || users.Users[0].Username != "admin" {
		t.Fatalf("users after restore: %+v, %v; want only admin", users.Users, err)
	}

	// A downgrade is refused unless forced.
	out, err = e.coder("appliance", "upgrade", a, "--dir", e.dir, "--public-key", pub)
	if err == nil || !strings.Contains(out, "refusing to downgrade") {
		t.Fatalf("downgrade: %v\n%s", err, out)
	}

	// The audit log holds what the appliance did while the server was
	// down, and the restore lost none of it: the user created after the
	// backup is gone, the record of its creation is not.
	stop = e.up()
	defer stop()
	audit, err := login().AuditLogs(ctx, codersdk.AuditLogsRequest{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	createdLater := false
	for _, l := range slices.Backward(audit.AuditLogs) {
		if strings.HasPrefix(l.UserAgent, "coder appliance") {
			var fields map[string]string
			if err := json.Unmarshal(l.AdditionalFields, &fields); err != nil || fields["os_user"] == "" || fields["host"] == "" {
				t.Errorf("%s record without who and where: %s", l.Action, l.AdditionalFields)
			}
			got = append(got, fmt.Sprintf("%s %s %s", l.Action, l.ResourceTarget, l.Outcome))
		}
		if l.Action == codersdk.AuditActionCreate && l.ResourceTarget == "later" {
			createdLater = true
		}
	}
	want := []string{
		"install 2026.11.1 success",
		"upgrade 2026.11.2 failure", // the damaged delta bundle
		"upgrade 2026.11.2 success",
		"upgrade 2026.11.3 failure",
		"rollback 2026.11.2 success",
		"restore 2026.11.2 success",
		"upgrade 2026.11.1 failure",
	}
	if !slices.Equal(got, want) {
		t.Errorf("appliance audit records, oldest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !createdLater {
		t.Error("the audit record of the user created after the backup was lost by the restore")
	}
}

// deltaRelease builds release, which changes only the coder binary, as a
// delta bundle against the appliance's inventory, and checks it: its size
// (goal: at most 1.1 times the binary compressed), that an appliance
// without its base refuses it with nothing written, and that a damaged
// copy is refused with the current release left as it was.
func (e *upgradeEnv) deltaRelease(pub, release string) string {
	t := e.t
	t.Helper()
	inv := filepath.Join(e.work, "inventory.json")
	if out, err := e.coder("appliance", "inventory", "--dir", e.dir, "-o", inv); err != nil {
		t.Fatalf("inventory: %v\n%s", err, out)
	}
	// A new coder binary: this one with bytes appended (still the same
	// program to run).
	self, err := os.ReadFile(e.bin)
	if err != nil {
		t.Fatal(err)
	}
	newCoder := filepath.Join(e.work, "coder-"+release)
	if err := os.WriteFile(newCoder, append(self, []byte("\nrelease "+release+"\n")...), 0o755); err != nil {
		t.Fatal(err)
	}
	delta := e.bundleFor(release, "{path: "+newCoder+"}", inv)

	m, info, err := bundle.Inspect(delta)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delta == nil || info.Delta.Base.Release != "2026.11.1" {
		t.Fatalf("%s: not a delta against 2026.11.1: %+v", delta, info.Delta)
	}
	var binary bundle.File
	for _, f := range m.Files {
		if f.Path == bundle.CoderPath("linux/amd64") {
			binary = f
		}
	}
	ratio := float64(info.TotalSize) / float64(binary.StoredSize)
	t.Logf("delta bundle %d bytes, the coder binary compressed %d bytes (%d raw): %.3fx; the full payload %d bytes",
		info.TotalSize, binary.StoredSize, binary.Size, ratio, info.Delta.PayloadSize)
	if binary.StoredSize == 0 || ratio > 1.1 {
		t.Errorf("delta bundle %d bytes, %.2f times the compressed coder binary (%d bytes); the goal is at most 1.1", info.TotalSize, ratio, binary.StoredSize)
	}
	if out, err := e.coder("bundle", "inspect", delta); err != nil || !strings.Contains(out, "Delta:") || !strings.Contains(out, "against upgrade 2026.11.1") {
		t.Errorf("bundle inspect of the delta does not say it is one: %v\n%s", err, out)
	}

	// An appliance without the base: refused, nothing written.
	empty := filepath.Join(e.work, "empty")
	out, err := e.coder("appliance", "install", delta, "--dir", empty, "--public-key", pub)
	if err == nil || !strings.Contains(out, "is a delta bundle against upgrade 2026.11.1, which is not installed") {
		t.Fatalf("install of a delta without its base: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(filepath.Join(empty, "releases")); len(entries) != 0 {
		t.Errorf("a refused delta left %d entries in releases/", len(entries))
	}

	// A damaged copy: refused, the appliance still on its release.
	data, err := os.ReadFile(delta)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-4096] ^= 0xff // inside the last payload member
	damaged := filepath.Join(e.work, "damaged", filepath.Base(delta))
	if err := os.MkdirAll(filepath.Dir(damaged), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(damaged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.coder("appliance", "upgrade", damaged, "--dir", e.dir, "--public-key", pub); err == nil {
		t.Fatalf("upgrade with a damaged delta succeeded:\n%s", out)
	}
	if cur, _ := (appliance.Layout{Dir: e.dir}).CurrentRelease(); cur != "2026.11.1" {
		t.Fatalf("after a refused delta: current release %q, want 2026.11.1", cur)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "releases", release)); err == nil {
		t.Fatalf("a refused delta left releases/%s", release)
	}
	return delta
}

// checkOverview reads GET /api/v2/appliance as the owner: the release, the
// components with their versions, what the mirror serves, the certificates
// with their expiry, the disk, and how the last upgrade ended.
func checkOverview(t *testing.T, c *codersdk.Client, release, upgradeOutcome string) {
	t.Helper()
	a, err := c.Appliance(context.Background())
	if err != nil {
		t.Fatalf("GET /api/v2/appliance: %v", err)
	}
	if a.Release != release || a.Bundle == "" || a.BuiltAt.IsZero() || a.DiskUsed <= 0 || a.DiskFree <= 0 {
		t.Errorf("appliance overview: release %q (want %s), bundle %q, built %s, disk %d used %d free", a.Release, release, a.Bundle, a.BuiltAt, a.DiskUsed, a.DiskFree)
	}
	versions := map[string]codersdk.ApplianceComponent{}
	for _, comp := range a.Components {
		versions[comp.Name] = comp
	}
	if versions["coderd"].State != "ok" || versions["coderd"].Version == "" || versions["mirror"].State != "ok" || versions["terraform"].Version != "1.11.4" || versions["postgres"].Version == "" {
		t.Errorf("appliance components: %+v", a.Components)
	}
	if len(a.Providers) == 0 || a.Providers[0].Source != "registry.terraform.io/coder/coder" || len(a.Templates) == 0 {
		t.Errorf("mirror contents: providers %+v, templates %q", a.Providers, a.Templates)
	}
	roles := map[string]bool{}
	for _, cert := range a.Certificates {
		roles[cert.Role] = true
		if cert.NotAfter.Before(time.Now()) || cert.ExpiresSoon || len(cert.SHA256) != 64 {
			t.Errorf("certificate %+v: want valid for more than 30 days", cert)
		}
	}
	if !roles["appliance CA"] || !roles["serving certificate"] {
		t.Errorf("certificates: %+v, want the appliance CA and the serving certificate", a.Certificates)
	}
	if a.LastUpgrade == nil || a.LastUpgrade.Outcome != upgradeOutcome || !strings.Contains(a.LastUpgrade.Description, "upgrade from") {
		t.Errorf("last upgrade: %+v, want outcome %q", a.LastUpgrade, upgradeOutcome)
	}
}
