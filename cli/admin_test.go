package cli_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// The commands admins script (issue 35): whoami, users show|delete|
// edit-roles, templates versions list|promote|archive|unarchive, templates
// pull|delete|archive, restart, state pull|push and ping, each run as the
// built binary against a coderdtest deployment.

// adminCLI is a deployment with an owner, a member alice with a running
// workspace "dev" of template "tpl", a daemon the test drives, and the
// binary's environment for each of them.
type adminCLI struct {
	d                  *coderdtest.Deployment
	owner, alice       *codersdk.Client
	daemon             *coderdtest.Daemon
	tpl                codersdk.Template
	ws                 codersdk.Workspace
	ownerEnv, aliceEnv []string
}

func newAdminCLI(t *testing.T, opts coderdtest.Options) *adminCLI {
	t.Helper()
	opts.ProvisionerPSK = psk
	a := &adminCLI{d: coderdtest.New(t, opts)}
	a.owner, _ = a.d.CreateFirstUser(t)
	a.alice, _ = a.d.CreateUser(t, a.owner, "alice")
	pskClient := a.d.Client()
	pskClient.ProvisionerPSK = psk
	a.daemon = coderdtest.NewDaemon(t, pskClient, "admin-cli", nil)
	a.ownerEnv = signedInEnv(t, a.owner)
	a.aliceEnv = signedInEnv(t, a.alice)
	return a
}

// withWorkspace creates template "tpl" and alice's running workspace "dev".
func (a *adminCLI) withWorkspace(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	a.tpl = coderdtest.CreateTemplate(t, a.owner, a.daemon, "tpl", coderdtest.MinimalTemplate, nil)
	ws, err := a.alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: a.tpl.ID, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	a.daemon.RunOne(t)
	if a.ws, err = a.alice.Workspace(ctx, ws.ID); err != nil {
		t.Fatal(err)
	}
}

// refusal is a run of the binary that must fail with code, saying want on
// stderr and printing nothing on stdout.
type refusal struct {
	name string
	env  []string
	args []string
	code int
	want string
}

func checkRefusals(t *testing.T, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tc.env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("coder %s: got exit %d, stdout %q, stderr %q; want exit %d saying %q",
					strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestCLIWhoami(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{})
	want := "Coder is running at " + a.d.URL.String() + ", You're authenticated as alice !\n"
	if got := mustRun(t, a.aliceEnv, "whoami"); got != want {
		t.Errorf("coder whoami: got %q, want %q", got, want)
	}
	var row struct {
		URL      string              `json:"url"`
		Username string              `json:"username"`
		UserID   string              `json:"user_id"`
		Orgs     []string            `json:"organization_ids"`
		Roles    map[string][]string `json:"roles"`
	}
	decodeJSON(t, "coder whoami", mustRun(t, a.ownerEnv, "whoami", "-o", "json"), &row)
	if row.URL != a.d.URL.String() || row.Username != "admin" || row.UserID == "" || len(row.Orgs) != 1 ||
		!strings.Contains(strings.Join(row.Roles["*"], ","), codersdk.RoleOwner) {
		t.Errorf("coder whoami -o json: got %+v, want the owner admin at %s with the owner role", row, a.d.URL)
	}
	if got := mustRun(t, a.ownerEnv, "whoami", "-o", "table"); !rowHas(got, a.d.URL.String(), "admin") {
		t.Errorf("coder whoami -o table: got\n%s\nwant a row with the URL and admin", got)
	}
	checkRefusals(t, []refusal{
		{"bad output", a.ownerEnv, []string{"whoami", "-o", "yaml"}, 2, `unknown --output "yaml"`},
		{"argument", a.ownerEnv, []string{"whoami", "extra"}, 2, "takes no arguments"},
		{"bad token", baseEnv(t, "CODER_URL="+a.d.URL.String(), "CODER_SESSION_TOKEN=nope"), []string{"whoami"}, 1, "error:"},
	})
}

func TestCLIUsersShowEditRolesDelete(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{})
	a.withWorkspace(t)
	_, bob := a.d.CreateUser(t, a.owner, "bob")

	if got := mustRun(t, a.ownerEnv, "users", "show", "alice"); !rowHas(got, "alice", "member") || !rowHas(got, "alice", "active") {
		t.Errorf("coder users show alice: got\n%s\nwant alice, member, active", got)
	}
	var u codersdk.User
	decodeJSON(t, "coder users show", mustRun(t, a.aliceEnv, "users", "show", "me", "-o", "json"), &u)
	if u.Username != "alice" || u.Email != "alice@example.com" {
		t.Errorf("coder users show me -o json as alice: got %+v, want alice", u)
	}

	if got := mustRun(t, a.ownerEnv, "users", "edit-roles", "bob", "--roles", "template-admin", "-y"); got != "User bob now has the roles member,template-admin.\n" {
		t.Errorf("coder users edit-roles bob: got %q", got)
	}
	decodeJSON(t, "coder users show", mustRun(t, a.ownerEnv, "users", "show", bob.ID, "-o", "json"), &u)
	if !u.HasRole(codersdk.RoleTemplateAdmin) {
		t.Errorf("bob after edit-roles: got roles %v, want template-admin", u.Roles)
	}
	if got := mustRun(t, a.ownerEnv, "users", "edit-roles", "bob", "--roles", "", "-y"); got != "User bob now has the roles member.\n" {
		t.Errorf("coder users edit-roles bob --roles '': got %q", got)
	}

	if got := mustRun(t, a.ownerEnv, "users", "delete", "bob", "-y"); got != "User bob deleted.\n" {
		t.Errorf("coder users delete bob: got %q", got)
	}
	checkRefusals(t, []refusal{
		{"show gone user", a.ownerEnv, []string{"users", "show", "bob"}, 1, `User "bob" not found`},
		{"member shows another", a.aliceEnv, []string{"users", "show", "admin"}, 1, "Forbidden"},
		{"member edits roles", a.aliceEnv, []string{"users", "edit-roles", "alice", "--roles", "owner", "-y"}, 1, "Forbidden"},
		{"no --roles", a.ownerEnv, []string{"users", "edit-roles", "alice"}, 2, "--roles is required"},
		{"unknown role", a.ownerEnv, []string{"users", "edit-roles", "alice", "--roles", "root"}, 2, `unknown role "root"`},
		{"owner demotes self", a.ownerEnv, []string{"users", "edit-roles", "admin", "--roles", "member", "-y"}, 1, "cannot remove your own owner role"},
		{"user with a workspace", a.ownerEnv, []string{"users", "delete", "alice", "-y"}, 1, "User alice owns 1 workspace(s)"},
		{"self", a.ownerEnv, []string{"users", "delete", "admin", "-y"}, 1, "You cannot delete yourself"},
		{"member deletes", a.aliceEnv, []string{"users", "delete", "admin", "-y"}, 1, "Forbidden"},
		{"no user", a.ownerEnv, []string{"users", "delete"}, 2, "needs 1 argument(s): USER"},
	})
}

// tarNames lists the file names in a tar.
func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		names = append(names, h.Name)
	}
}

func TestCLITemplatesAdmin(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{})
	a.withWorkspace(t)
	ctx := context.Background()
	v1 := a.tpl.ActiveVersionID
	v2files := map[string]string{"main.tf": `resource "terraform_data" "v2" {}` + "\n", "README.md": "version two\n"}
	coderdtest.UploadVersionRequest(t, a.owner, v2files, codersdk.CreateTemplateVersionRequest{Name: "v2", TemplateID: a.tpl.ID})
	a.daemon.RunOne(t)
	coderdtest.UploadVersionRequest(t, a.owner, coderdtest.MinimalTemplate, codersdk.CreateTemplateVersionRequest{Name: "broken", TemplateID: a.tpl.ID})
	j := a.daemon.Acquire(t, 10*time.Second)
	if err := a.daemon.Client.FailJob(ctx, a.daemon.ID, j.JobID, codersdk.FailJobRequest{Error: "terraform init failed"}); err != nil {
		t.Fatal(err)
	}

	// versions list: a table with the active version marked, and JSON.
	got := mustRun(t, a.aliceEnv, "templates", "versions", "list", "tpl")
	if !rowHas(got, "v2", "Succeeded") || !rowHas(got, "broken", "Failed") || !strings.Contains(got, "Active") {
		t.Errorf("coder templates versions list tpl: got\n%s\nwant v2 succeeded, broken failed and an active version", got)
	}
	var rows []struct {
		ID       string `json:"id"`
		Name     string `json:"name"`
		Active   bool   `json:"active"`
		Archived bool   `json:"archived"`
	}
	decodeJSON(t, "coder templates versions list", mustRun(t, a.ownerEnv, "templates", "versions", "list", "tpl", "-o", "json"), &rows)
	if len(rows) != 3 || rows[0].Name != "broken" || rows[2].ID != v1 || !rows[2].Active || rows[1].Active {
		t.Errorf("coder templates versions list -o json: got %+v, want broken, v2, then the active first version", rows)
	}

	// promote, by Coder's flags and by its environment variables.
	if got := mustRun(t, a.ownerEnv, "templates", "versions", "promote", "--template", "tpl", "--template-version", "v2"); got != `Successfully promoted version "v2" to active for template "tpl"`+"\n" {
		t.Errorf("coder templates versions promote: got %q", got)
	}
	if tpl, err := a.owner.Template(ctx, a.tpl.ID); err != nil || tpl.ActiveVersionID != rows[1].ID {
		t.Errorf("active version after promote: got %s, %v, want v2 (%s)", tpl.ActiveVersionID, err, rows[1].ID)
	}

	// pull: the active version into a new folder, a named version, --tar.
	dir := filepath.Join(t.TempDir(), "pulled")
	if got := mustRun(t, a.ownerEnv, "templates", "pull", "tpl", dir); !strings.Contains(got, "version v2") {
		t.Errorf("coder templates pull tpl DIR: got %q, want it to name version v2", got)
	}
	for name, want := range v2files {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("pulled %s: got %q, %v, want %q", name, b, err, want)
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("pulled folder: got %v, %v, want mode 0755", st.Mode(), err)
	}
	stdout := mustRun(t, a.ownerEnv, "templates", "pull", "tpl", "--tar", "--version", "v2")
	if names := tarNames(t, []byte(stdout)); !strings.Contains(strings.Join(names, " "), "README.md") {
		t.Errorf("coder templates pull --tar: got entries %q, want README.md among them", names)
	}

	// archive: the failed version leaves the list; --include-archived
	// shows it; unarchive brings it back.
	if got := mustRun(t, a.ownerEnv, "templates", "archive", "tpl", "-y"); got != "Archived 1 version(s) of template tpl: broken.\n" {
		t.Errorf("coder templates archive tpl: got %q", got)
	}
	if got := mustRun(t, a.ownerEnv, "templates", "versions", "list", "tpl"); strings.Contains(got, "broken") {
		t.Errorf("versions list after archive: got\n%s\nwant broken left out", got)
	}
	if got := mustRun(t, a.ownerEnv, "templates", "versions", "list", "tpl", "--include-archived"); !rowHas(got, "broken", "Archived") || !strings.Contains(got, "ARCHIVED") {
		t.Errorf("versions list --include-archived: got\n%s\nwant broken marked archived", got)
	}
	if got := mustRun(t, a.ownerEnv, "templates", "versions", "unarchive", "tpl", "broken"); got != "Version broken unarchived.\n" {
		t.Errorf("coder templates versions unarchive: got %q", got)
	}
	if got := mustRun(t, a.ownerEnv, "templates", "versions", "archive", "tpl", "broken"); got != "Version broken archived.\n" {
		t.Errorf("coder templates versions archive: got %q", got)
	}

	// delete: a template nobody uses goes; one with a workspace stays.
	coderdtest.CreateTemplate(t, a.owner, a.daemon, "spare", coderdtest.MinimalTemplate, nil)
	if got := mustRun(t, a.ownerEnv, "templates", "delete", "spare", "-y"); got != "Template spare deleted.\n" {
		t.Errorf("coder templates delete spare: got %q", got)
	}

	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "keep.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkRefusals(t, []refusal{
		{"pull into a non-empty folder", a.ownerEnv, []string{"templates", "pull", "tpl", nonEmpty}, 1, "is not empty"},
		{"member pulls", a.aliceEnv, []string{"templates", "pull", "tpl", "--tar"}, 1, "Forbidden"},
		{"pull unknown version", a.ownerEnv, []string{"templates", "pull", "tpl", "--tar", "--version", "v9"}, 1, `no version "v9"`},
		{"pull --tar with DIR", a.ownerEnv, []string{"templates", "pull", "tpl", "--tar", dir}, 2, "--tar writes to stdout"},
		{"list unknown template", a.ownerEnv, []string{"templates", "versions", "list", "nope"}, 1, `no template "nope"`},
		{"promote without flags", a.ownerEnv, []string{"templates", "versions", "promote"}, 2, "--template and --template-version are required"},
		{"member promotes", a.aliceEnv, []string{"templates", "versions", "promote", "-t", "tpl", "--template-version", "v2"}, 1, "You may not administer template tpl"},
		{"member archives", a.aliceEnv, []string{"templates", "archive", "tpl", "-y"}, 1, "You may not administer template tpl"},
		{"promote an archived version", a.ownerEnv, []string{"templates", "versions", "promote", "-t", "tpl", "--template-version", "broken"}, 1, "Template version broken is archived"},
		{"archive the active version", a.ownerEnv, []string{"templates", "versions", "archive", "tpl", "v2"}, 1, "is the active version"},
		{"member deletes", a.aliceEnv, []string{"templates", "delete", "tpl", "-y"}, 1, "Forbidden"},
		{"delete a template in use", a.ownerEnv, []string{"templates", "delete", "tpl", "-y"}, 1, "used by 1 workspace(s)"},
		{"delete without NAME", a.ownerEnv, []string{"templates", "delete"}, 2, "needs at least one template NAME"},
	})
	if _, err := os.Stat(filepath.Join(nonEmpty, "keep.txt")); err != nil {
		t.Errorf("the non-empty folder after the refused pull: %v", err)
	}
}

// runBuilds completes n build jobs on the daemon while a command follows
// them, returning the jobs.
func (a *adminCLI) runBuilds(t *testing.T, n int) []*codersdk.AcquiredJob {
	t.Helper()
	var jobs []*codersdk.AcquiredJob
	for range n {
		jobs = append(jobs, a.daemon.RunOne(t))
	}
	return jobs
}

func TestCLIRestartAndState(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{})
	a.withWorkspace(t)
	ctx := context.Background()

	// restart: a stop build, then a start build, both streamed.
	p := start(t, a.aliceEnv, "restart", "dev", "-y")
	jobs := a.runBuilds(t, 2)
	if code := p.wait(t, time.Minute); code != 0 || p.stdout.String() != "Workspace dev restarted.\n" {
		t.Fatalf("coder restart dev: exit %d, stdout %q, stderr %s", code, p.stdout, p.stderr)
	}
	if jobs[0].Transition != codersdk.WorkspaceTransitionStop || jobs[1].Transition != codersdk.WorkspaceTransitionStart {
		t.Errorf("restart's builds: got %s then %s, want stop then start", jobs[0].Transition, jobs[1].Transition)
	}
	if !strings.Contains(p.stderr.String(), "working on "+jobs[1].JobID) {
		t.Errorf("restart's stderr: got %q, want the start build's log", p.stderr)
	}

	// state pull: the latest build's state, to stdout or a 0600 file.
	want := `{"build":3,"transition":"start"}`
	if got := mustRun(t, a.aliceEnv, "state", "pull", "dev"); got != want {
		t.Errorf("coder state pull dev: got %q, want %q", got, want)
	}
	if got := mustRun(t, a.ownerEnv, "state", "pull", "alice/dev", "--build", "2"); got != `{"build":2,"transition":"stop"}` {
		t.Errorf("coder state pull alice/dev --build 2: got %q, want build 2's state", got)
	}
	file := filepath.Join(t.TempDir(), "state.json")
	mustRun(t, a.ownerEnv, "state", "pull", "alice/dev", file)
	if b, err := os.ReadFile(file); err != nil || string(b) != want {
		t.Errorf("state file: got %q, %v, want %q", b, err, want)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("state file mode: got %v, %v, want 0600", st.Mode(), err)
	}

	// state push (owners): the state replaces the latest build's and a
	// new build of the same transition starts from it.
	pushed := `{"version":4,"serial":9,"resources":[]}`
	if err := os.WriteFile(file, []byte(pushed), 0o600); err != nil {
		t.Fatal(err)
	}
	p = start(t, a.ownerEnv, "state", "push", "alice/dev", file, "-y")
	j := a.runBuilds(t, 1)[0]
	if code := p.wait(t, time.Minute); code != 0 || !strings.Contains(p.stdout.String(), "Workspace dev built (#4, start) from the pushed state.") {
		t.Fatalf("coder state push: exit %d, stdout %q, stderr %s", code, p.stdout, p.stderr)
	}
	if string(j.State) != pushed || j.Transition != codersdk.WorkspaceTransitionStart {
		t.Errorf("the build after state push: got state %q (%s), want %q (start)", j.State, j.Transition, pushed)
	}
	// --no-build from stdin only replaces the state.
	stdout, stderr, code := runStdin(t, a.ownerEnv, `{"serial":10}`, "state", "push", "alice/dev", "-", "--no-build", "-y")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "Replaced the state of build #4") {
		t.Errorf("coder state push - --no-build: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if b, err := a.owner.WorkspaceBuildState(ctx, j.WorkspaceBuildID); err != nil || string(b) != `{"serial":10}` {
		t.Errorf("state after push --no-build: got %q, %v", b, err)
	}

	checkRefusals(t, []refusal{
		{"member pushes", a.aliceEnv, []string{"state", "push", "dev", file, "-y"}, 1, "Forbidden"},
		{"not JSON", a.ownerEnv, []string{"state", "push", "alice/dev", "/etc/hostname", "-y"}, 1, "must be Terraform state"},
		{"old build without --no-build", a.ownerEnv, []string{"state", "push", "alice/dev", file, "--build", "1", "-y"}, 2, "is not the latest build"},
		{"no such build", a.ownerEnv, []string{"state", "pull", "alice/dev", "--build", "9"}, 1, "has no build #9"},
		{"no such workspace", a.ownerEnv, []string{"restart", "nope", "-y"}, 1, `no such workspace "nope"`},
		{"push without FILE", a.ownerEnv, []string{"state", "push", "alice/dev"}, 2, "needs 2 argument(s): NAME FILE"},
	})
}

// runStdin runs the binary with stdin and returns stdout, stderr and the
// exit code.
func runStdin(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, coderBinary(t), args...)
	cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("run coder %s: %v", strings.Join(args, " "), err)
	return "", "", -1
}

// TestCLIPing: coder ping measures round trips through coderd's relay to
// a real agent, printing each and a summary; a stopped workspace and bad
// flags are refused.
func TestCLIPing(t *testing.T) {
	t.Parallel()
	a := newAdminCLI(t, coderdtest.Options{AgentHeartbeatInterval: 500 * time.Millisecond})
	token := uuid.NewString()
	w := coderdtest.CreateWorkspaceWithAgent(t, a.owner, a.alice, a.daemon, "dev", codersdk.ProvisionedAgent{Token: token, Directory: t.TempDir()})
	agentID := coderdtest.WorkspaceAgent(t, w).ID
	agent := start(t, baseEnv(t, "CODER_AGENT_URL="+a.d.URL.String(), "CODER_AGENT_TOKEN="+token), "agent")
	testwait.For(t, time.Minute, "the agent connected", func() (bool, string) {
		ag, err := a.alice.WorkspaceAgent(context.Background(), agentID)
		return err == nil && ag.Status == codersdk.AgentStatusConnected, fmt.Sprintf("%+v, %v\nagent stderr: %s", ag, err, agent.stderr)
	})

	got := mustRun(t, a.aliceEnv, "ping", "dev", "-n", "3", "--wait", "10ms")
	t.Logf("coder ping dev -n 3:\n%s", got)
	pong := regexp.MustCompile(`(?m)^pong from dev via coderd's relay in \d+\.\d{3}ms$`)
	if n := len(pong.FindAllString(got, -1)); n != 3 {
		t.Errorf("coder ping dev -n 3: got %d pong lines, want 3\n%s", n, got)
	}
	for _, want := range []string{
		"Connected to agent main of workspace dev through coderd's relay in ",
		"--- dev ping statistics ---\n3 packets transmitted, 3 packets received, 0.0% packet loss\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("coder ping dev: got\n%s\nwant %q", got, want)
		}
	}
	if !regexp.MustCompile(`(?m)^rtt min/avg/max/mdev = [\d.]+/[\d.]+/[\d.]+/[\d.]+ ms$`).MatchString(got) {
		t.Errorf("coder ping dev: got\n%s\nwant an rtt summary line", got)
	}
	// The owner pings alice's workspace as owner/name.
	if got := mustRun(t, a.ownerEnv, "ping", "alice/dev", "-n", "1"); !pong.MatchString(got) {
		t.Errorf("coder ping alice/dev as the owner: got\n%s", got)
	}

	if _, err := a.alice.CreateWorkspaceBuild(context.Background(), w.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err != nil {
		t.Fatal(err)
	}
	a.daemon.RunOne(t)
	checkRefusals(t, []refusal{
		{"stopped workspace", a.aliceEnv, []string{"ping", "dev"}, 1, "workspace dev is stopped"},
		{"zero pings", a.aliceEnv, []string{"ping", "dev", "-n", "0"}, 2, "send at least one ping"},
		{"bad wait", a.aliceEnv, []string{"ping", "dev", "--wait", "soon"}, 2, "--wait"},
		{"no name", a.aliceEnv, []string{"ping"}, 2, "needs 1 argument(s): NAME"},
	})
}
