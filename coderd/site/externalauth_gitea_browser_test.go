package site_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testbin"
	"airgapcoder/internal/testgitea"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// giteaTemplateTF is added to the process template (examples/templates/
// process) by TestBrowserExternalAuthGitea: the template declares the
// provider and holds no token. The build's token reaches only the data
// source, which the template reduces to "yes" or "no"; git in the workspace
// trusts the Git server through the trust store the test made with `coder
// certs import` (GIT_SSL_CAINFO, as an appliance's template would name its
// trust.pem).
const giteaTemplateTF = `
variable "git_ca_file" {
  type        = string
  description = "PEM bundle git trusts for the site's Git server."
}

data "coder_external_auth" "gitea" {
  id = "gitea"
}

resource "coder_env" "git_ssl_cainfo" {
  agent_id = coder_agent.main.id
  name     = "GIT_SSL_CAINFO"
  value    = var.git_ca_file
}

resource "coder_env" "gitea_token_seen" {
  agent_id = coder_agent.main.id
  name     = "GITEA_TOKEN_SEEN"
  value    = nonsensitive(data.coder_external_auth.gitea.access_token != "" ? "yes" : "no")
}
`

// giteaTokenLifetime is how long Gitea's OAuth2 access tokens live here
// ([oauth2] ACCESS_TOKEN_EXPIRATION_TIME): short, so that the test sees a
// token expire and coderd refresh it.
const giteaTokenLifetime = 30 * time.Second

// TestBrowserExternalAuthGitea is issue 33's acceptance test: a real Gitea
// over HTTPS from a test CA (imported with the built `coder certs import`
// into a trust store that holds nothing else, which coderd's provider
// client and the workspace's git both use), a private repository, and an
// OAuth2 application for the deployment. A Coder user cannot create a
// workspace from a template that declares data "coder_external_auth"
// before linking (the refusal names Gitea and the link page); headless
// Chromium links her Gitea account on the dashboard's page through Gitea's
// own login and authorize pages; in the workspace, with the built binary,
// `git clone` and `git push` just work with no token typed or stored;
// after the access token expires at Gitea the next pull and clone work
// with a token coderd refreshed; and once she unlinks on the page, a clone
// prints the link URL instead. The audit log has the link, the unlink and
// the tokens handed out, and no token.
func TestBrowserExternalAuthGitea(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newGiteaFixture(t)
	base := t.TempDir()
	files := coderdtest.TemplateFiles(t, "../../examples/templates/process")
	files["gitea.tf"] = giteaTemplateTF
	tpl := pushTemplate(t, f.admin, "gitea", files, []codersdk.VariableValue{
		{Name: "base_dir", Value: base}, {Name: "git_ca_file", Value: f.trust.CertFile()},
	})

	// Not linked: the create is refused before any build, naming the
	// provider and the page that links it.
	_, err := f.alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "ws"})
	var sdkErr *codersdk.Error
	if !errors.As(err, &sdkErr) || sdkErr.StatusCode != http.StatusForbidden ||
		!strings.Contains(sdkErr.Message, "Gitea") || !strings.Contains(sdkErr.Message, f.pageURL) {
		t.Fatalf("create before linking: got %v; want 403 naming Gitea and %s", err, f.pageURL)
	}
	if ws, err := f.alice.WorkspaceByOwnerAndName(ctx, codersdk.Me, "ws"); err == nil {
		t.Fatalf("the refused create made workspace %s", ws.ID)
	}

	b := newBrowser(t, f.d.URL, chromedp.Flag("ignore-certificate-errors", true))
	f.linkInBrowser(b)

	// The workspace, built with the link: the template's data source saw a
	// token (which the template only reduces to "yes").
	w, err := f.alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "ws"})
	if err != nil {
		t.Fatalf("create once linked: %v", err)
	}
	home := filepath.Join(base, "alice", "ws")
	t.Cleanup(func() { stopProcessWorkspace(f.alice, w.ID, home) })
	agent := waitWorkspaceAgent(t, f.alice, w.ID, filepath.Join(home, ".coder-agent.log"))
	if agent.Env["GITEA_TOKEN_SEEN"] != "yes" || agent.Env["GIT_SSL_CAINFO"] != f.trust.CertFile() {
		t.Errorf("the agent's template environment: %v; want GITEA_TOKEN_SEEN=yes and GIT_SSL_CAINFO=%s", agent.Env, f.trust.CertFile())
	}
	f.loginCLI()

	// Clone and push with nothing typed: git asks GIT_ASKPASS, the agent's
	// binary, which asks coderd for alice's token.
	f.ssh("clone", "git clone "+f.repo+" first")
	if readme := f.ssh("read the clone", "cat first/README.md"); !strings.Contains(readme, "private") {
		t.Errorf("the cloned README.md: %q, want the repository's", readme)
	}
	f.ssh("commit and push", "cd first && echo from-the-workspace >> README.md && "+
		"git -c user.name=Alice -c user.email=alice@corp.example commit -qam 'from the workspace' && git push -q origin main")
	if msg := f.latestCommit("alice/private"); msg != "from the workspace" {
		t.Errorf("Gitea's latest commit on main after the push: %q, want %q", msg, "from the workspace")
	}
	first := f.accessToken()
	if status := f.apiStatus(first); status != http.StatusOK {
		t.Fatalf("Gitea answers the token coderd hands out with %d, want 200", status)
	}
	for _, where := range []struct{ name, out string }{
		{"the workspace's environment", f.ssh("read the environment", "env")},
		{"the clone's git config", f.ssh("read the clone's config", "cat first/.git/config")},
	} {
		if strings.Contains(where.out, first) {
			t.Errorf("%s holds the token:\n%s", where.name, where.out)
		}
	}

	// The token expires at Gitea; the next git operations get a refreshed
	// one from coderd.
	testwait.For(t, giteaTokenLifetime+30*time.Second, "Gitea to refuse the expired token", func() (bool, string) {
		status := f.apiStatus(first)
		return status == http.StatusUnauthorized, fmt.Sprintf("Gitea answers %d", status)
	})
	f.ssh("pull after the expiry", "cd first && git pull -q")
	f.ssh("clone after the expiry", "git clone -q "+f.repo+" second && grep -q from-the-workspace second/README.md")
	if second := f.accessToken(); second == first || f.apiStatus(second) != http.StatusOK {
		t.Errorf("after the expiry coderd hands out the same token or one Gitea refuses (same: %t)", second == first)
	}

	// Unlink on the page: the next clone waits for a link, printing the
	// URL (naming the provider by its ID, as TestGitAskpass shows).
	b.do("open the external auth page", chromedp.Navigate(f.pageURL), chromedp.WaitVisible(chromedp.CSS("#external-auth-unlink")))
	b.do("click Unlink", chromedp.Click(chromedp.CSS("#external-auth-unlink")), chromedp.WaitVisible(chromedp.CSS("#external-auth-connect")))
	if ea, err := f.alice.ExternalAuthByID(ctx, "gitea"); err != nil || ea.Authenticated {
		t.Errorf("after Unlink the API says %+v, %v; want not authenticated", ea, err)
	}
	clone := startCoder(t, f.env, "ssh", "ws", "--", "git clone "+f.repo+" third")
	want := "You must authenticate with gitea to clone this repository. Open: " + f.pageURL
	testwait.For(t, time.Minute, "the unlinked clone to print the link URL", func() (bool, string) {
		select {
		case <-clone.Done():
			return true, ""
		default:
		}
		return strings.Contains(clone.Stderr.String(), want), "stderr: " + clone.Stderr.String()
	})
	select {
	case <-clone.Done():
		t.Errorf("the unlinked clone ended (exit %d) instead of waiting for a link\nstdout: %s\nstderr: %s", clone.ExitCode(), clone.Stdout, clone.Stderr)
	default:
	}
	if !strings.Contains(clone.Stderr.String(), want) {
		t.Errorf("the unlinked clone's stderr: %q, want %q", clone.Stderr.String(), want)
	}
	clone.Stop()
	if out := f.ssh("look for the unlinked clone", "test -e third/.git && echo cloned || echo absent"); strings.TrimSpace(out) != "absent" {
		t.Errorf("the unlinked clone made a repository: %s", out)
	}
	b.check(f.giteaHost)
	checkExternalAuthAudit(t, f.admin, first)
}

// giteaFixture is TestBrowserExternalAuthGitea's world: Gitea with alice's
// private repository, the trust store that holds Gitea's CA, and a
// deployment with real provisioners whose provider "gitea" is that Gitea,
// with a Coder user alice.
type giteaFixture struct {
	t         *testing.T
	g         *testgitea.Gitea
	user      testgitea.User // alice at Gitea
	giteaHost string         // host:port
	repo      string         // the private repository's clone URL
	apiToken  string         // a personal token of alice's: the test's own view of Gitea
	trust     *certs.Store
	d         *coderdtest.Deployment
	admin     *codersdk.Client
	alice     *codersdk.Client
	pageURL   string   // the external auth page of "gitea"
	env       []string // the built binary's, signed in as alice after loginCLI
}

func newGiteaFixture(t *testing.T) *giteaFixture {
	t.Helper()
	f := &giteaFixture{t: t, user: testgitea.User{Username: "alice", Email: "alice@corp.example", Password: "alice-gitea-password", FullName: "Alice Liddell"}}
	f.g = testgitea.Start(t, testgitea.Options{AccessTokenExpiration: giteaTokenLifetime})
	f.giteaHost = strings.TrimSuffix(strings.TrimPrefix(f.g.URL, "https://"), "/")
	f.g.AddUser(t, f.user)
	f.repo = f.g.CreateRepo(t, "alice", "private", true)
	if want := f.g.URL + "alice/private.git"; f.repo != want {
		t.Fatalf("clone URL %q, want %q", f.repo, want)
	}
	f.apiToken = f.g.AddToken(t, "alice", "read:repository", "read:user")

	// The deployment's trust store, as an appliance's: Gitea's CA imported
	// with the built binary, and no system roots.
	applianceDir := t.TempDir()
	noRoots := filepath.Join(t.TempDir(), "no-roots.pem")
	if err := os.WriteFile(noRoots, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(coderBinary(t), "certs", "import", f.g.CAFile, "--dir", applianceDir, "--system-bundle", noRoots).CombinedOutput(); err != nil {
		t.Fatalf("coder certs import: %v\n%s", err, out)
	}
	var err error
	if f.trust, err = certs.Load(applianceDir); err != nil || f.trust.Len() != 1 {
		t.Fatalf("the trust store after the import: %v; want Gitea's CA alone", err)
	}
	tr := &http.Transport{TLSClientConfig: f.trust.TLSConfig()}
	t.Cleanup(tr.CloseIdleConnections)

	addr := testport.Addr(t)
	clientID, clientSecret := f.g.AddOAuthApp(t, "coder", "https://"+addr+codersdk.ExternalAuthCallbackPath("gitea"))
	f.d = coderdtest.NewWithProvisionersOptions(t, coderBinary(t), coderdtest.Options{
		Address: addr, TLS: true,
		// The token and validate URLs and the regex are the type's
		// defaults, derived from the authorize URL's host.
		ExternalAuth: []externalauth.Config{{
			ID: "gitea", Type: "gitea", ClientID: clientID, ClientSecret: clientSecret, AuthURL: f.g.URL + "login/oauth/authorize",
		}},
		ExternalAuthHTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	})
	f.admin, _ = f.d.CreateFirstUser(t)
	f.alice, _ = f.d.CreateUser(t, f.admin, "alice")
	f.pageURL = f.d.URL.String() + codersdk.ExternalAuthPagePath("gitea")
	return f
}

// linkInBrowser signs alice in to the dashboard, checks that the create
// page asks her to connect Gitea, and links her account from the external
// auth page: Connect, Gitea's login page, its authorize page, and back.
func (f *giteaFixture) linkInBrowser(b *browser) {
	t := f.t
	t.Helper()
	b.mu.Lock()
	b.ignore = func(u string) bool { return strings.Contains(u, f.giteaHost) } // Gitea's pages' own log
	b.mu.Unlock()
	b.do("open the login page", chromedp.Navigate(b.url("/login")))
	b.signIn("alice@example.com", coderdtest.FirstUserPassword)
	b.do("open the create page", chromedp.Navigate(b.url("/workspaces/new?template=gitea")), chromedp.WaitVisible(chromedp.CSS("#external-auth-gitea")))
	if link := get(b, "read the create page's link", chromedp.Text(chromedp.CSS("#external-auth-gitea"))); link != "Connect Gitea" {
		t.Errorf("the create page's link says %q, want %q", link, "Connect Gitea")
	}
	b.do("open the external auth page", chromedp.Navigate(f.pageURL), chromedp.WaitVisible(chromedp.CSS("#external-auth-connect")))
	if status := get(b, "read the status", chromedp.Text(chromedp.CSS("#external-auth-status"))); !strings.HasPrefix(status, "Not linked") {
		t.Errorf("before linking the page says %q, want Not linked", status)
	}
	b.do("click Connect", chromedp.Click(chromedp.CSS("#external-auth-connect")))
	b.do("sign in on Gitea's login page",
		chromedp.WaitVisible(chromedp.CSS("#"+testgitea.UsernameField)),
		chromedp.SendKeys(chromedp.CSS("#"+testgitea.UsernameField), f.user.Username),
		chromedp.SendKeys(chromedp.CSS("#"+testgitea.PasswordField), f.user.Password),
		chromedp.Click(chromedp.CSS(testgitea.SignInButton)))
	b.do("authorize the application on Gitea's page",
		chromedp.WaitVisible(chromedp.CSS("#"+testgitea.GrantButtonID)),
		chromedp.Click(chromedp.CSS("#"+testgitea.GrantButtonID)))
	b.do("come back linked", chromedp.WaitVisible(chromedp.CSS("#external-auth-login")))
	if loc := b.location(); loc != f.pageURL {
		t.Errorf("after linking the browser is at %s, want %s", loc, f.pageURL)
	}
	if status := get(b, "read the status", chromedp.Text(chromedp.CSS("#external-auth-status"))); status != "Linked as alice." {
		t.Errorf("after linking the page says %q, want %q", status, "Linked as alice.")
	}
	b.screenshot("external-auth-linked")
	b.do("open the providers page from the menu", chromedp.Click(chromedp.CSS(`nav a[href="/external-auth"]`)), chromedp.WaitVisible(chromedp.CSS("#external-auths")))
	if row := get(b, "read gitea's row", chromedp.Text(chromedp.CSS(`#external-auths tr[data-provider="gitea"]`))); !strings.Contains(row, "Linked") {
		t.Errorf("the providers page shows gitea as %q, want Linked", row)
	}
}

// loginCLI signs the built binary in as alice.
func (f *giteaFixture) loginCLI() {
	f.t.Helper()
	f.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + f.t.TempDir(),
		"CODER_CONFIG_DIR=" + filepath.Join(f.t.TempDir(), "config"), "CODER_CA_FILE=" + f.d.CAFile}
	if _, stderr, code := runCoder(f.t, f.env, time.Minute, "login", f.d.URL.String(), "--token", f.alice.SessionToken); code != 0 {
		f.t.Fatalf("coder login: exit %d: %s", code, stderr)
	}
}

// ssh runs command in alice's workspace "ws" with `coder ssh ws --` and
// returns its stdout; it fails the test unless the command exits 0.
func (f *giteaFixture) ssh(step, command string) string {
	f.t.Helper()
	stdout, stderr, code := runCoder(f.t, f.env, 2*time.Minute, "ssh", "ws", "--", command)
	if code != 0 {
		f.t.Fatalf("%s: coder ssh ws -- %s: exit %d\nstdout: %s\nstderr: %s\ngitea: %s", step, command, code, stdout, stderr, lastBytes(f.g.Output(), 3000))
	}
	return stdout
}

// accessToken is the token coderd hands the workspace now, as scripts get
// it.
func (f *giteaFixture) accessToken() string {
	f.t.Helper()
	return strings.TrimSpace(f.ssh("the token for scripts", `"$GIT_ASKPASS" external-auth access-token gitea`))
}

// checkExternalAuthAudit checks that the audit log has external auth's
// link, unlink and tokens handed to workspaces, and that no entry holds
// token.
func checkExternalAuthAudit(t *testing.T, admin *codersdk.Client, token string) {
	t.Helper()
	logs, err := admin.AuditLogs(context.Background(), codersdk.AuditLogsRequest{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[codersdk.AuditAction]bool{}
	for _, l := range logs.AuditLogs {
		if l.ResourceType != "external_auth" {
			continue
		}
		seen[l.Action] = true
		if raw := string(l.AdditionalFields) + l.Description; strings.Contains(raw, token) {
			t.Errorf("audit entry %s holds the token: %s", l.Action, raw)
		}
	}
	for _, action := range []codersdk.AuditAction{codersdk.AuditActionCreate, codersdk.AuditActionDelete, "hand_token"} {
		if !seen[action] {
			t.Errorf("no external_auth audit entry with action %q (got %v)", action, seen)
		}
	}
}

// apiStatus is the status Gitea answers an API request made with an OAuth2
// access token with: 200 valid, 401 not.
func (f *giteaFixture) apiStatus(token string) int {
	t, g := f.t, f.g
	t.Helper()
	c := g.HTTPClient()
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.URL+"api/v1/user", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("ask Gitea about a token: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// latestCommit is the subject of the latest commit on main of repo
// ("owner/name"), as Gitea's API reports it.
func (f *giteaFixture) latestCommit(repo string) string {
	t, g := f.t, f.g
	t.Helper()
	c := g.HTTPClient()
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.URL+"api/v1/repos/"+repo+"/commits?sha=main&limit=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+f.apiToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("list the commits of %s: %v", repo, err)
	}
	defer resp.Body.Close()
	var commits []struct {
		Commit struct {
			Message string `json:"message"`
		} `json:"commit"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&commits); err != nil || len(commits) == 0 {
		t.Fatalf("list the commits of %s: %s, %v (%d commits)", repo, resp.Status, err, len(commits))
	}
	return strings.TrimSpace(commits[0].Commit.Message)
}

// waitWorkspaceAgent waits until the workspace is running and its agent
// connected and ready, and returns the agent.
func waitWorkspaceAgent(t *testing.T, c *codersdk.Client, workspaceID, agentLog string) codersdk.WorkspaceAgent {
	t.Helper()
	var agent codersdk.WorkspaceAgent
	testwait.For(t, 3*time.Minute, "the workspace's agent to be ready", func() (bool, string) {
		w, err := c.Workspace(context.Background(), workspaceID)
		if err != nil {
			return false, err.Error()
		}
		if w.LatestBuild.Status != codersdk.WorkspaceStatusRunning {
			return false, fmt.Sprintf("build %s: %s", w.LatestBuild.Status, w.LatestBuild.Job.Error)
		}
		agent = coderdtest.WorkspaceAgent(t, w)
		a, err := c.WorkspaceAgent(context.Background(), agent.ID)
		if err != nil {
			return false, err.Error()
		}
		agent = a
		log, _ := os.ReadFile(agentLog)
		return a.Status == codersdk.AgentStatusConnected && a.LifecycleState == codersdk.AgentLifecycleReady,
			fmt.Sprintf("agent %s, %s; its log:\n%s", a.Status, a.LifecycleState, lastBytes(string(log), 3000))
	})
	return agent
}

// stopProcessWorkspace stops a workspace of the process template, whose
// stop ends the agent, and then whatever agent a failed stop left running.
func stopProcessWorkspace(c *codersdk.Client, workspaceID, home string) {
	ctx := context.Background()
	if _, err := c.CreateWorkspaceBuild(ctx, workspaceID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStop}); err == nil {
		testwait.Until(time.Minute, func() bool {
			w, err := c.Workspace(ctx, workspaceID)
			return err != nil || (w.LatestBuild.Status != codersdk.WorkspaceStatusPending && w.LatestBuild.Status != codersdk.WorkspaceStatusStopping)
		})
	}
	stopPIDFile(filepath.Join(home, ".coder-agent.pid"))
}

// startCoder runs the built binary with env and args; it is killed at the
// test's end if still running.
func startCoder(t *testing.T, env []string, args ...string) *testbin.Proc {
	t.Helper()
	return testbin.Start(t, coderBinary(t), env, args...)
}

// runCoder runs the built binary to its end, killing it after timeout.
func runCoder(t *testing.T, env []string, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := startCoder(t, env, args...)
	code = p.Wait(t, timeout)
	return p.Stdout.String(), p.Stderr.String(), code
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string { return s[max(0, len(s)-n):] }
