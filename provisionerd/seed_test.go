package provisionerd_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testprovider"
	"airgapcoder/internal/testwait"
)

// proc is a coder process the test started.
type proc struct {
	cmd    *exec.Cmd
	output syncbuf.Buffer
	done   chan error
}

func (p *proc) Write(b []byte) (int, error) { return p.output.Write(b) }

func (p *proc) Output() string { return p.output.String() }

type seedEnv struct {
	t      *testing.T
	bin    string
	url    string
	env    []string
	config string
}

func (e *seedEnv) start(extraEnv []string, args ...string) *proc {
	e.t.Helper()
	p := &proc{cmd: exec.Command(e.bin, args...), done: make(chan error, 1)}
	p.cmd.Env = append(append(os.Environ(), e.env...), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	e.t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

// run runs a CLI command to completion and returns its exit code and output.
func (e *seedEnv) run(ctx context.Context, extraEnv []string, args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(append(os.Environ(), e.env...), extraEnv...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return code, string(out)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return testport.Addr(t)
}

func writeTemplate(t *testing.T, body string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSeedScenario runs shared/seeds/provisioners.txt as written, with the
// real coder binary: a server without built-in daemons, external daemons
// authenticated by PSK and by user tokens, and tag matching.
func TestSeedScenario(t *testing.T) {
	terraformPath(t)
	addr := freeAddr(t)
	e := &seedEnv{t: t, bin: testbin.Coder(t), url: "http://" + addr, config: t.TempDir()}
	e.env = []string{"CODER_URL=" + e.url, "CODER_CONFIG_DIR=" + e.config, "CODER_CACHE_DIRECTORY=" + t.TempDir(),
		"CODER_PROVIDER_MIRROR=" + testprovider.Mirror(t)}
	srv := e.start(nil, "server", "--http-address", addr, "--postgres-url", coderdtest.NewDatabase(t),
		"--provisioner-daemons=0", "--provisioner-daemon-psk", "seed-psk", "--provisioner-job-heartbeat-timeout", "4s")
	testwait.For(t, 60*time.Second, "coder server /healthz", testwait.Bool(func() bool {
		resp, err := http.Get(e.url + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}))
	ctx := context.Background()
	if code, out := e.run(ctx, nil, "login", e.url, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "password-for-tests"); code != 0 {
		t.Fatalf("login: %d %s\n%s", code, out, srv.Output())
	}
	u, _ := url.Parse(e.url)
	owner := codersdk.New(u)
	owner.SessionToken = strings.TrimSpace(readFile(t, filepath.Join(e.config, "session")))
	if _, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: "dev@example.com", Username: "dev", Password: "password-for-tests"}); err != nil {
		t.Fatal(err)
	}
	memberLogin, err := codersdk.New(u).LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "dev@example.com", Password: "password-for-tests"})
	if err != nil {
		t.Fatal(err)
	}
	member := codersdk.New(u)
	member.SessionToken = memberLogin.SessionToken

	// A wrong PSK fails at start with a clear message.
	code, out := e.run(ctx, nil, "provisionerd", "start", "--psk", "wrong", "--name", "bad")
	if code != 1 || !strings.Contains(out, "PSK") {
		t.Fatalf("wrong PSK: exit %d, output %q; want 1 and a message about the PSK", code, out)
	}

	chicago := e.start(nil, "provisionerd", "start", "--psk", "seed-psk", "--tag", "environment=on_prem", "--tag", "data_center=chicago", "--name", "chicago")
	daemonID := func(name string) string {
		ds, err := owner.ProvisionerDaemons(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Name == name {
				return d.ID
			}
		}
		return ""
	}
	testwait.For(t, 30*time.Second, "daemon chicago to register", testwait.Bool(func() bool { return daemonID("chicago") != "" }))

	// A template of the kind users push: the official provider tells it
	// which workspace it builds.
	tpl := writeTemplate(t, coderTF+`
data "coder_workspace" "me" {}
resource "terraform_data" "x" {
  input = data.coder_workspace.me.transition
}
`)
	jobOf := func(template string) codersdk.ProvisionerJob {
		tp, err := owner.TemplateByName(ctx, "default", template)
		if err != nil {
			t.Fatal(err)
		}
		v, err := owner.TemplateVersion(ctx, tp.ActiveVersionID)
		if err != nil {
			t.Fatal(err)
		}
		return v.Job
	}

	// The tagged daemon builds the on-prem template.
	if code, out := e.run(ctx, nil, "templates", "create", "on-prem", "--directory", tpl, "--provisioner-tag", "environment=on_prem", "-y"); code != 0 {
		t.Fatalf("templates create on-prem: %d\n%s\ndaemon:\n%s", code, out, chicago.Output())
	}
	if j := jobOf("on-prem"); j.WorkerID == nil || *j.WorkerID != daemonID("chicago") {
		t.Fatalf("on-prem was built by %v, want chicago", j.WorkerID)
	}
	// ...and, as the seed says, untagged templates too.
	if code, out := e.run(ctx, nil, "templates", "create", "generic", "--directory", tpl, "-y"); code != 0 {
		t.Fatalf("templates create generic: %d\n%s", code, out)
	}

	// A template tagged environment=cloud stays pending and says why.
	cctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	_, out = e.run(cctx, nil, "templates", "create", "cloud", "--directory", tpl, "--provisioner-tag", "environment=cloud", "-y")
	cancel()
	if !strings.Contains(out, "no provisioner matches the tags") {
		t.Fatalf("cloud template: output %q, want it to say no provisioner matches", out)
	}

	// User provisioners: the owner's and the member's, each with a token.
	ownerToken := owner.SessionToken
	e.start([]string{"CODER_SESSION_TOKEN=" + ownerToken}, "provisionerd", "start", "--tag", "scope=user", "--name", "owner-user")
	e.start([]string{"CODER_SESSION_TOKEN=" + member.SessionToken}, "provisionerd", "start", "--tag", "scope=user", "--name", "dev-user")
	testwait.For(t, 30*time.Second, "user daemons to register", testwait.Bool(func() bool { return daemonID("owner-user") != "" && daemonID("dev-user") != "" }))
	if code, out := e.run(ctx, nil, "templates", "create", "mine", "--directory", tpl, "--provisioner-tag", "scope=user", "-y"); code != 0 {
		t.Fatalf("templates create mine: %d\n%s", code, out)
	}
	if j := jobOf("mine"); j.WorkerID == nil || *j.WorkerID != daemonID("owner-user") {
		t.Fatalf("scope=user import was built by %v, want the owner's user daemon %s", j.WorkerID, daemonID("owner-user"))
	}
	mine, _ := owner.TemplateByName(ctx, "default", "mine")
	w, err := member.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: mine.ID, Name: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	var b codersdk.WorkspaceBuild
	testwait.For(t, 60*time.Second, "the member's scope=user build", testwait.Bool(func() bool {
		b, err = member.WorkspaceBuild(ctx, w.LatestBuild.ID)
		return err == nil && !b.Job.Status.Active()
	}))
	if b.Job.Status != codersdk.ProvisionerJobSucceeded || b.Job.WorkerID == nil || *b.Job.WorkerID != daemonID("dev-user") {
		t.Fatalf("member's build: %s by %v, want succeeded by dev-user %s", b.Job.Status, b.Job.WorkerID, daemonID("dev-user"))
	}

	// Kill the tagged daemon mid-apply: the job fails within the heartbeat
	// deadline, the logs up to the kill are kept, and the next build works.
	slow := writeTemplate(t, `resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "echo sleeping-now; sleep 15"
  }
}
`)
	if code, out := e.run(ctx, nil, "templates", "create", "slow", "--directory", slow, "--provisioner-tag", "environment=on_prem", "-y"); code != 0 {
		t.Fatalf("templates create slow: %d\n%s", code, out)
	}
	slowTpl, _ := owner.TemplateByName(ctx, "default", "slow")
	w, err = owner.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: slowTpl.ID, Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	logLines := func() []string {
		var lines []string
		_ = owner.WorkspaceBuildLogs(ctx, w.LatestBuild.ID, 0, false, func(l codersdk.ProvisionerJobLog) error {
			lines = append(lines, l.Output)
			return nil
		})
		return lines
	}
	testwait.For(t, 60*time.Second, "the slow build to reach its sleep", testwait.Bool(func() bool { return strings.Contains(strings.Join(logLines(), "\n"), "sleeping-now") }))
	if err := chicago.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testwait.For(t, 30*time.Second, "the job of the killed daemon to fail", testwait.Bool(func() bool {
		b, err = owner.WorkspaceBuild(ctx, w.LatestBuild.ID)
		return err == nil && b.Status == codersdk.WorkspaceStatusFailed
	}))
	t.Logf("job failed %s after the daemon was killed", time.Since(killed).Round(100*time.Millisecond))
	if !strings.Contains(b.Job.Error, "heartbeat") {
		t.Fatalf("error: %q, want it to name the missing heartbeats", b.Job.Error)
	}
	if !strings.Contains(strings.Join(logLines(), "\n"), "sleeping-now") {
		t.Fatal("the logs written before the kill are gone")
	}
	e.start(nil, "provisionerd", "start", "--psk", "seed-psk", "--tag", "environment=on_prem", "--tag", "data_center=chicago", "--name", "chicago-2")
	nb, err := owner.CreateWorkspaceBuild(ctx, w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 60*time.Second, "a build after the crash", testwait.Bool(func() bool {
		b, err = owner.WorkspaceBuild(ctx, nb.ID)
		return err == nil && !b.Job.Status.Active()
	}))
	if b.Job.Status != codersdk.ProvisionerJobSucceeded {
		t.Fatalf("build after the crash: %s (%s)", b.Job.Status, b.Job.Error)
	}

	// The cloud template's import is still pending: nobody carries its tags.
	code, out = e.run(ctx, nil, "provisioner", "list", "-o", "json")
	if code != 0 || !strings.Contains(out, "chicago-2") {
		t.Fatalf("provisioner list: %d %s", code, out)
	}
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
