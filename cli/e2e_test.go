package cli_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

const password = "password-for-cli-tests"

// decodeJSON parses out as JSON into v, failing the test with the output.
func decodeJSON(t *testing.T, what, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s -o json: %v\noutput: %s", what, err, out)
	}
}

// sendLog streams one log line for a job the daemon holds.
func sendLog(t *testing.T, d *coderdtest.Daemon, jobID, stage, line string) {
	t.Helper()
	if _, err := d.Client.UpdateJob(context.Background(), d.ID, jobID, codersdk.UpdateJobRequest{Logs: []codersdk.ProvisionerJobLogInput{
		{CreatedAt: time.Now(), Source: codersdk.LogSourceProvisioner, Level: codersdk.LogLevelInfo, Stage: stage, Output: line},
	}}); err != nil {
		t.Fatalf("send log %q: %v", line, err)
	}
}

// acquire waits for the next job and checks it is of the given type.
func acquire(t *testing.T, d *coderdtest.Daemon, typ codersdk.ProvisionerJobType) *codersdk.AcquiredJob {
	t.Helper()
	j := d.Acquire(t, 20*time.Second)
	if j == nil {
		t.Fatalf("daemon %s: no job within 20s", d.ID)
	}
	if j.Type != typ {
		t.Fatalf("acquired job type: got %s, want %s", j.Type, typ)
	}
	return j
}

// workspaces runs `coder list -o json`.
func workspaces(t *testing.T, env []string) []codersdk.Workspace {
	t.Helper()
	out := mustRun(t, env, "list", "-o", "json")
	var ws []codersdk.Workspace
	decodeJSON(t, "coder list", out, &ws)
	if ws == nil && strings.TrimSpace(out) != "[]" {
		t.Fatalf("coder list -o json: got %q, want a JSON array", out)
	}
	return ws
}

// showWorkspace runs `coder show NAME -o json`.
func showWorkspace(t *testing.T, env []string, name string) codersdk.Workspace {
	t.Helper()
	var w codersdk.Workspace
	decodeJSON(t, "coder show "+name, mustRun(t, env, "show", name, "-o", "json"), &w)
	if w.Name != name {
		t.Fatalf("coder show %s: got workspace %q", name, w.Name)
	}
	return w
}

// TestCLIEndToEnd drives the user CLI (the built binary) against a `coder
// server` run by the same binary, with the test acting as the provisioner
// daemon: login, users, tokens, templates, and a workspace through all its
// transitions, including a failed build and a job no provisioner can take.
func TestCLIEndToEnd(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := context.Background()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	anon := codersdk.New(u)

	// coder --version, coder version and the server's buildinfo agree.
	bi, err := anon.BuildInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flagVersion := mustRun(t, baseEnv(t), "--version")
	cmdVersion := mustRun(t, baseEnv(t), "version")
	if flagVersion != testVersion+"\n" || cmdVersion != flagVersion || bi.Version != testVersion {
		t.Fatalf("versions: coder --version %q, coder version %q, /api/v2/buildinfo %q; want all %q", flagVersion, cmdVersion, bi.Version, testVersion)
	}

	// The first user logs in and the session is stored privately.
	adminDir := filepath.Join(t.TempDir(), "admin")
	admin := baseEnv(t, "CODER_CONFIG_DIR="+adminDir)
	mustRun(t, admin, "login", srv.URL, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", password)
	if b, err := os.ReadFile(filepath.Join(adminDir, "url")); err != nil || strings.TrimSpace(string(b)) != srv.URL {
		t.Fatalf("url file: got %q, %v; want %q", b, err, srv.URL)
	}
	st, err := os.Stat(filepath.Join(adminDir, "session"))
	if err != nil {
		t.Fatalf("session file: %v", err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() == 0 {
		t.Fatalf("session file: got mode %v size %d, want 0600 and non-empty", st.Mode().Perm(), st.Size())
	}

	// A template admin, who logs in with a password and makes a token.
	var tadmin codersdk.User
	decodeJSON(t, "coder users create", mustRun(t, admin, "users", "create", "--username", "tadmin", "--email", "tadmin@example.com",
		"--password", password, "--role", "template-admin", "-o", "json"), &tadmin)
	if tadmin.Username != "tadmin" || !tadmin.HasRole(codersdk.RoleTemplateAdmin) {
		t.Fatalf("users create: got %+v, want tadmin with role %s", tadmin, codersdk.RoleTemplateAdmin)
	}
	tadminLogin := baseEnv(t, "CODER_CONFIG_DIR="+filepath.Join(t.TempDir(), "tadmin"))
	mustRun(t, tadminLogin, "login", srv.URL, "--email", "tadmin@example.com", "--password", password)
	tokenOut := mustRun(t, tadminLogin, "tokens", "create", "--lifetime", "1h")
	token := strings.TrimSuffix(tokenOut, "\n")
	if token == "" || strings.ContainsAny(token, " \t\n") {
		t.Fatalf("tokens create: got %q, want only a token on one line", tokenOut)
	}
	// The token alone, with no stored session, is enough.
	tok := baseEnv(t, "CODER_URL="+srv.URL, "CODER_SESSION_TOKEN="+token, "CODER_CONFIG_DIR="+t.TempDir())
	var keys []codersdk.APIKey
	decodeJSON(t, "coder tokens list", mustRun(t, tok, "tokens", "list", "-o", "json"), &keys)
	var found bool
	for _, k := range keys {
		if left := time.Until(k.ExpiresAt); k.LifetimeSeconds == 3600 && left > 50*time.Minute && left <= time.Hour+time.Minute {
			found = true
		}
	}
	if !found {
		t.Fatalf("tokens list: got %+v, want a token expiring in about an hour", keys)
	}

	// The test is the provisioner daemon, authenticated by the PSK.
	pskClient := codersdk.New(u)
	pskClient.ProvisionerPSK = psk
	daemon := coderdtest.NewDaemon(t, pskClient, "cli-test-daemon", map[string]string{"env": "test"})

	tplDir := t.TempDir()
	for name, content := range coderdtest.MinimalTemplate {
		if err := os.WriteFile(filepath.Join(tplDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("TemplatesCreateStreamsLogs", func(t *testing.T) {
		p := start(t, tok, "templates", "create", "demo", "--directory", tplDir, "--provisioner-tag", "env=test")
		job := acquire(t, daemon, codersdk.ProvisionerJobTypeTemplateVersionImport)
		if job.Tags["env"] != "test" {
			t.Fatalf("import job tags: got %v, want env=test", job.Tags)
		}
		// Each line must show up while the job is still running.
		for _, line := range []string{"terraform init (import)", "terraform plan (import)"} {
			sendLog(t, daemon, job.JobID, "Planning", line)
			p.waitStderr(t, line, 15*time.Second)
		}
		daemon.Complete(t, job.JobID, codersdk.CompleteJobRequest{})
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("templates create: exit %d, want 0\nstdout: %s\nstderr: %s", code, p.stdout, p.stderr)
		}
		if !strings.Contains(p.stdout.String(), "demo") {
			t.Fatalf("templates create stdout: got %q, want it to name the template", p.stdout)
		}

		var ts []codersdk.Template
		decodeJSON(t, "coder templates list", mustRun(t, tok, "templates", "list", "-o", "json"), &ts)
		if len(ts) != 1 || ts[0].Name != "demo" || ts[0].CreatedByName != "tadmin" {
			t.Fatalf("templates list: got %+v, want demo created by tadmin", ts)
		}
	})

	t.Run("CreateWorkspace", func(t *testing.T) {
		p := start(t, admin, "create", "ws", "--template", "demo")
		job := acquire(t, daemon, codersdk.ProvisionerJobTypeWorkspaceBuild)
		if job.WorkspaceName != "ws" || job.Transition != codersdk.WorkspaceTransitionStart || job.WorkspaceOwner != "admin" {
			t.Fatalf("build job: got %s %s of %s, want start of ws by admin", job.Type, job.Transition, job.WorkspaceName)
		}
		sendLog(t, daemon, job.JobID, "Applying", "terraform apply (ws)")
		p.waitStderr(t, "terraform apply (ws)", 15*time.Second)
		daemon.Complete(t, job.JobID, codersdk.CompleteJobRequest{
			State: []byte(`{"serial":1}`),
			Resources: []codersdk.ProvisionedResource{{Type: "terraform_data", Name: "box", Agents: []codersdk.ProvisionedAgent{
				{Name: "main", Token: "0b7b7c55-32f1-4a4c-9d64-3d6f0f2b9a11", OperatingSystem: "linux", Architecture: "amd64"},
			}}},
		})
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("create ws: exit %d, want 0\nstdout: %s\nstderr: %s", code, p.stdout, p.stderr)
		}
	})

	t.Run("FailedBuildExits1", func(t *testing.T) {
		p := start(t, admin, "create", "broken", "--template", "demo")
		job := acquire(t, daemon, codersdk.ProvisionerJobTypeWorkspaceBuild)
		sendLog(t, daemon, job.JobID, "Applying", "terraform apply (broken)")
		p.waitStderr(t, "terraform apply (broken)", 15*time.Second)
		if err := daemon.Client.FailJob(ctx, daemon.ID, job.JobID, codersdk.FailJobRequest{Error: "terraform apply: quota exceeded"}); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 1 {
			t.Fatalf("create broken with a failing build: exit %d, want 1\nstdout: %s\nstderr: %s", code, p.stdout, p.stderr)
		}
		var errLines []string
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.HasPrefix(l, "error: ") {
				errLines = append(errLines, l)
			}
		}
		if len(errLines) != 1 || !strings.Contains(errLines[0], "quota exceeded") {
			t.Fatalf("stderr: got error lines %q, want one naming the build error\n%s", errLines, p.stderr)
		}
	})

	t.Run("ListAndShow", func(t *testing.T) {
		status := map[string]codersdk.WorkspaceStatus{}
		for _, w := range workspaces(t, admin) {
			status[w.Name] = w.LatestBuild.Status
		}
		if len(status) != 2 || status["ws"] != codersdk.WorkspaceStatusRunning || status["broken"] != codersdk.WorkspaceStatusFailed {
			t.Fatalf("list: got %v, want ws running and broken failed", status)
		}
		w := showWorkspace(t, admin, "ws")
		if w.LatestBuild.Status != codersdk.WorkspaceStatusRunning || w.TemplateName != "demo" || len(w.LatestBuild.Resources) != 1 ||
			len(w.LatestBuild.Resources[0].Agents) != 1 || w.LatestBuild.Resources[0].Agents[0].Name != "main" {
			t.Fatalf("show ws: got %s from %s with resources %+v, want running from demo with agent main", w.LatestBuild.Status, w.TemplateName, w.LatestBuild.Resources)
		}
		table := mustRun(t, admin, "show", "ws")
		if !strings.Contains(table, "running") || !strings.Contains(table, "main") {
			t.Fatalf("show ws: got\n%s\nwant the status and the agent", table)
		}
	})

	t.Run("Transitions", func(t *testing.T) {
		steps := []struct {
			verb, name string
			transition codersdk.WorkspaceTransition
			want       codersdk.WorkspaceStatus
		}{
			{"stop", "ws", codersdk.WorkspaceTransitionStop, codersdk.WorkspaceStatusStopped},
			{"start", "ws", codersdk.WorkspaceTransitionStart, codersdk.WorkspaceStatusRunning},
			{"delete", "ws", codersdk.WorkspaceTransitionDelete, ""},
			{"delete", "broken", codersdk.WorkspaceTransitionDelete, ""},
		}
		for _, s := range steps {
			p := start(t, admin, s.verb, s.name, "-y")
			job := daemon.RunOne(t)
			if job.WorkspaceName != s.name || job.Transition != s.transition {
				t.Fatalf("coder %s %s: daemon got %s of %s", s.verb, s.name, job.Transition, job.WorkspaceName)
			}
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("coder %s %s: exit %d, want 0\nstdout: %s\nstderr: %s", s.verb, s.name, code, p.stdout, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), "working on "+job.JobID) {
				t.Errorf("coder %s %s: the build's log line is not on stderr:\n%s", s.verb, s.name, p.stderr)
			}
			if s.want != "" {
				if w := showWorkspace(t, admin, s.name); w.LatestBuild.Status != s.want {
					t.Fatalf("after coder %s %s: got status %s, want %s", s.verb, s.name, w.LatestBuild.Status, s.want)
				}
			}
		}
		if ws := workspaces(t, admin); len(ws) != 0 {
			t.Fatalf("list after deleting everything: got %d workspaces, want none", len(ws))
		}
	})

	t.Run("NoProvisionerMatches", func(t *testing.T) {
		// tadmin's own scope=user daemon imports a scope=user template;
		// admin's builds of it need a daemon of admin's, and there is none.
		tadminClient := codersdk.New(u)
		tadminClient.SessionToken = token
		own := coderdtest.NewDaemon(t, tadminClient, "tadmin-own", map[string]string{codersdk.TagScope: codersdk.ProvisionerScopeUser})
		p := start(t, tok, "templates", "create", "personal", "--directory", tplDir, "--provisioner-tag", "scope=user")
		own.RunOne(t)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("templates create personal: exit %d\nstderr: %s", code, p.stderr)
		}

		p = start(t, admin, "create", "lonely", "--template", "personal")
		p.waitStderr(t, "no provisioner matches the tags", 15*time.Second)
		_ = p.cmd.Process.Kill()
		p.wait(t, 10*time.Second)

		out := mustRun(t, admin, "show", "lonely")
		if !strings.Contains(out, "no provisioner matches the tags") {
			t.Fatalf("show lonely: got\n%s\nwant it to say no provisioner matches the tags", out)
		}
		w := showWorkspace(t, admin, "lonely")
		if m := w.LatestBuild.Job.MatchedProvisioners; w.LatestBuild.Status != codersdk.WorkspaceStatusPending || m == nil || m.Count != 0 {
			t.Fatalf("show lonely -o json: got status %s, matched %+v; want pending with 0 matched provisioners", w.LatestBuild.Status, m)
		}
	})
}
