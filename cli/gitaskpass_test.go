package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// fakeGitea is, to the deployment, an OAuth2 provider of type gitea
// (authorize, access_token and userinfo at Gitea's paths) and, to git, a
// smart HTTP server (git http-backend) whose repositories need basic auth
// with the token that provider hands out (as the user name or the
// password, as Gitea takes it).
type fakeGitea struct {
	srv      *httptest.Server
	token    string
	reposDir string
}

const fakeGiteaID = "corpgit"

func newFakeGitea(t *testing.T) *fakeGitea {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git http-backend is not installed (it comes with Debian's git, which scripts/install-deps.sh installs): %v", err)
	}
	g := &fakeGitea{token: "gta_" + strings.ReplaceAll(uuid.NewString(), "-", ""), reposDir: t.TempDir()}
	const code = "the-code"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/oauth/authorize", func(w http.ResponseWriter, r *http.Request) {
		back := r.URL.Query().Get("redirect_uri") + "?code=" + code + "&state=" + r.URL.Query().Get("state")
		http.Redirect(w, r, back, http.StatusFound)
	})
	mux.HandleFunc("POST /login/oauth/access_token", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("code") != code {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": g.token, "token_type": "bearer", "expires_in": 3600, "refresh_token": "refresh"})
	})
	mux.HandleFunc("GET /login/oauth/userinfo", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+g.token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sub":"1","preferred_username":"alice"}`))
	})
	cgiHandler := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + g.reposDir, "GIT_HTTP_EXPORT_ALL=1"}}
	mux.Handle("/git/", http.StripPrefix("/git", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if user != g.token && pass != g.token {
			w.Header().Set("WWW-Authenticate", `Basic realm="fake gitea"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		cgiHandler.ServeHTTP(w, r)
	})))
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)

	// A private repository with one commit, open to pushes.
	work, bare := t.TempDir(), filepath.Join(g.reposDir, "private.git")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("private content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "--bare", "--initial-branch=main", bare},
		{"-C", bare, "config", "http.receivepack", "true"},
		{"-C", work, "init", "--initial-branch=main"},
		{"-C", work, "add", "README"},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-m", "first"},
		{"-C", work, "push", bare, "main"},
	} {
		cmd := exec.Command(git, args...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return g
}

// repoURL is the private repository's clone URL.
func (g *fakeGitea) repoURL() string { return g.srv.URL + "/git/private.git" }

func (g *fakeGitea) config() externalauth.Config {
	return externalauth.Config{
		ID: fakeGiteaID, Type: "gitea", ClientID: "coder", ClientSecret: "secret",
		AuthURL: g.srv.URL + "/login/oauth/authorize", TokenURL: g.srv.URL + "/login/oauth/access_token",
		ValidateURL: g.srv.URL + "/login/oauth/userinfo",
		Regex:       "^" + regexp.QuoteMeta(g.srv.URL) + "(/.*)?$",
	}
}

// link runs the link flow as user's browser would: the deployment's
// callback path, the provider's authorize page (which approves at once),
// and the callback again with the code.
func (g *fakeGitea) link(t *testing.T, d *coderdtest.Deployment, user *codersdk.Client) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	page := codersdk.ExternalAuthPagePath(fakeGiteaID)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if req.URL.Path == page {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	req, err := http.NewRequest(http.MethodGet, d.URL.String()+codersdk.ExternalAuthCallbackPath(fakeGiteaID), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(codersdk.SessionTokenHeader, user.SessionToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("link flow: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != page {
		t.Fatalf("link flow ended with %s to %q, want 303 to %s", resp.Status, resp.Header.Get("Location"), page)
	}
	ea, err := user.ExternalAuthByID(context.Background(), fakeGiteaID)
	if err != nil || !ea.Authenticated {
		t.Fatalf("after the link flow: %+v, %v; want authenticated", ea, err)
	}
}

// TestGitAskpass: inside a workspace whose agent is the built binary, git
// clones a private repository over HTTP with no credentials given: git
// runs GIT_ASKPASS (the agent set it to the coder binary), which asks the
// deployment for the owner's token. Before the owner links the provider
// it prints the link URL and waits; after, clones just work, and
// `coder external-auth access-token` prints the token.
func TestGitAskpass(t *testing.T) {
	g := newFakeGitea(t)
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: psk, ExternalAuth: []externalauth.Config{g.config()}})
	admin, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, admin, "alice")
	pskClient := d.Client()
	pskClient.ProvisionerPSK = psk
	daemon := coderdtest.NewDaemon(t, pskClient, "test", nil)
	agentToken, dir := uuid.NewString(), t.TempDir()
	w := coderdtest.CreateWorkspaceWithAgent(t, admin, alice, daemon, "dev", codersdk.ProvisionedAgent{Token: agentToken, Directory: dir})
	agentID := coderdtest.WorkspaceAgent(t, w).ID
	env := baseEnv(t, "CODER_CONFIG_DIR="+filepath.Join(t.TempDir(), "config"))
	mustRun(t, env, "login", d.URL.String(), "--token", alice.SessionToken)
	agent := start(t, baseEnv(t, "CODER_AGENT_URL="+d.URL.String(), "CODER_AGENT_TOKEN="+agentToken), "agent")
	waitAgentReady(t, alice, agentID, agent)

	// git with no configuration of the machine's: no credential helper
	// answers in our place.
	const gitEnv = "GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0"
	linkURL := d.URL.String() + codersdk.ExternalAuthPagePath(fakeGiteaID)

	// Not linked yet: access-token prints the link and fails.
	stdout, stderr, code := run(t, env, "ssh", "dev", "--", `"$GIT_ASKPASS" external-auth access-token `+fakeGiteaID)
	if code != 1 || stdout != linkURL {
		t.Errorf("access-token before linking: exit %d, stdout %q (stderr %q); want 1 and %q", code, stdout, stderr, linkURL)
	}

	// A clone waits for the link, showing where to make it.
	clone := start(t, env, "ssh", "dev", "--", gitEnv+" git clone "+g.repoURL()+" first")
	clone.waitStderr(t, "You must authenticate with "+fakeGiteaID+" to clone this repository. Open: "+linkURL, time.Minute)
	g.link(t, d, alice)
	if code := clone.wait(t, time.Minute); code != 0 {
		t.Fatalf("git clone after linking: exit %d\nstdout: %s\nstderr: %s", code, clone.stdout, clone.stderr)
	}
	if out := mustRun(t, env, "ssh", "dev", "--", "cat first/README"); out != "private content\n" {
		t.Errorf("cloned README: got %q, want %q", out, "private content\n")
	}

	// Linked: clones and pushes need nothing, and scripts get the token.
	stdout, stderr, code = run(t, env, "ssh", "dev", "--", gitEnv+" git clone "+g.repoURL()+" second && cd second && "+
		"echo more >> README && git -c user.name=alice -c user.email=alice@example.test commit -qam more && "+gitEnv+" git push -q origin main")
	if code != 0 || strings.Contains(stderr, "You must authenticate") {
		t.Errorf("clone and push once linked: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if out, err := exec.Command("git", "-C", filepath.Join(g.reposDir, "private.git"), "log", "--format=%s", "main").Output(); err != nil || string(out) != "more\nfirst\n" {
		t.Errorf("the server's history after the push: got %q, %v; want the pushed commit on top", out, err)
	}
	if out := mustRun(t, env, "ssh", "dev", "--", `"$GIT_ASKPASS" external-auth access-token `+fakeGiteaID); out != g.token {
		t.Errorf("access-token once linked: got %q, want the provider's token", out)
	}

	// The binary run as git runs it: the prompt as its only argument and
	// GIT_PREFIX set; the agent's URL and token from the environment.
	askEnv := baseEnv(t, "CODER_AGENT_URL="+d.URL.String(), "CODER_AGENT_TOKEN="+agentToken, "GIT_PREFIX=")
	for _, tc := range []struct{ prompt, want string }{
		{fmt.Sprintf("Username for '%s': ", g.srv.URL), g.token + "\n"},
		{fmt.Sprintf("Password for '%s': ", strings.Replace(g.srv.URL, "://", "://"+g.token+"@", 1)), g.token + "\n"},
	} {
		if out := mustRun(t, askEnv, tc.prompt); out != tc.want {
			t.Errorf("askpass %q: got %q, want %q", tc.prompt, out, tc.want)
		}
	}
	// A URL no provider matches: git's own behaviour (exit 1, a note).
	_, stderr, code = run(t, askEnv, "Username for 'https://elsewhere.example.test': ")
	if code != 1 || !strings.Contains(stderr, "The default git behavior will be used instead") {
		t.Errorf("askpass for an unmatched URL: exit %d, stderr %q; want 1 and the fallback note", code, stderr)
	}

	if strings.Contains(agent.stderr.String(), g.token) || strings.Contains(agent.stderr.String(), agentToken) {
		t.Errorf("the agent logged a token:\n%s", agent.stderr)
	}
}

// waitAgentReady waits until the workspace's agent is connected and ready.
func waitAgentReady(t *testing.T, c *codersdk.Client, agentID string, agent *proc) {
	t.Helper()
	testwait.For(t, time.Minute, "the agent ready", func() (bool, string) {
		a, err := c.WorkspaceAgent(context.Background(), agentID)
		return err == nil && a.Status == codersdk.AgentStatusConnected && a.LifecycleState == codersdk.AgentLifecycleReady,
			fmt.Sprintf("%+v, %v\nagent stderr: %s", a, err, agent.stderr)
	})
}
