package testgitea_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"airgapcoder/internal/testgitea"
	"airgapcoder/internal/testoidc"
)

var alice = testgitea.User{Username: "alice", Email: "alice@corp.example", Password: "alice-password", FullName: "Alice Liddell"}

// flow is one relying party's flow against Gitea.
type flow struct {
	*testoidc.Flow
	gitea *testgitea.Gitea
}

func newFlow(t *testing.T, opts testgitea.Options) *flow {
	t.Helper()
	g := testgitea.Start(t, opts)
	cb := testoidc.NewCallback(t)
	id, secret := g.AddOAuthApp(t, "relying-party", cb.URL)
	f := testoidc.NewFlow(t, g.HTTPClient(), g.Issuer, cb, id, secret, oidc.ScopeOpenID, "email", "profile", "groups")
	return &flow{Flow: f, gitea: g}
}

// signIn signs in as username on Gitea's pages in a fresh browser and
// exchanges the code the callback got.
func (f *flow) signIn(t *testing.T, username string) *oauth2.Token {
	t.Helper()
	browser := f.gitea.HTTPClient()
	t.Cleanup(browser.CloseIdleConnections)
	page := f.gitea.SignIn(t, browser, f.AuthURL(), username)
	if page.Status != http.StatusOK || page.Body != testoidc.CallbackBody {
		t.Fatalf("sign in as %s ended at %v, want the callback\ngitea: %s", username, page, f.gitea.Output())
	}
	return f.Exchange(t)
}

// verify checks an ID token's signature, audience, issuer and nonce and
// returns it with its claims.
func (f *flow) verify(t *testing.T, tok *oauth2.Token) (*oidc.IDToken, testoidc.Claims) {
	t.Helper()
	var c testoidc.Claims
	idt := f.Verify(t, tok, &c)
	return idt, c
}

// TestAuthorizationCodeFlow signs in through Gitea's login form (and, the
// first time, its authorize page) and checks the ID token's and userinfo's
// claims: the email, verified, and the organizations and teams as groups.
func TestAuthorizationCodeFlow(t *testing.T) {
	f := newFlow(t, testgitea.Options{AccessTokenExpiration: 2 * time.Minute})
	g := f.gitea
	sub := g.AddUser(t, alice)
	g.AddUser(t, testgitea.User{Username: "bob", Email: "bob@corp.example", Password: "bob-password"})
	g.AddOrg(t, "devs")
	g.AddTeam(t, "devs", "Backend")
	g.AddTeamMember(t, "devs", "Backend", "alice")

	if got := f.Provider.Endpoint().AuthURL; got != g.URL+"login/oauth/authorize" {
		t.Errorf("authorization endpoint = %q, want %q", got, g.URL+"login/oauth/authorize")
	}
	start := time.Now()
	tok := f.signIn(t, "alice")
	idt, c := f.verify(t, tok)
	if idt.Subject != sub || idt.Issuer != g.Issuer {
		t.Errorf("sub, iss = %q, %q; want %q, %q", idt.Subject, idt.Issuer, sub, g.Issuer)
	}
	want := testoidc.Claims{Email: alice.Email, EmailVerified: true, Name: alice.FullName, PreferredUsername: "alice", Groups: []string{"devs", "devs:backend"}}
	if !c.Equal(want) {
		t.Errorf("claims = %+v, want %+v", c, want)
	}
	// Options.AccessTokenExpiration: the access token lives two minutes.
	if life := tok.Expiry.Sub(start); life < time.Minute || life > 3*time.Minute {
		t.Errorf("access token expires in %v, want about 2m", life)
	}

	var ic testoidc.Claims
	info := f.UserInfo(t, tok, &ic)
	if info.Subject != sub || info.Email != alice.Email || !slices.Equal(ic.Groups, want.Groups) {
		t.Errorf("userinfo = %s %s %v, want %s %s %v", info.Subject, info.Email, ic.Groups, sub, alice.Email, want.Groups)
	}

	refreshed := f.Refresh(t, tok)
	// (Gitea's access token is a JWT of the grant and its times: within
	// the same second a refresh may give the same one.)
	if _, err := f.Provider.UserInfo(f.Ctx, oauth2.StaticTokenSource(refreshed)); err != nil {
		t.Errorf("userinfo with the refreshed access token: %v", err)
	}

	// A second sign-in, the application granted, and a user in no
	// organization: no groups.
	f.Nonce = oauth2.GenerateVerifier()
	_, c = f.verify(t, f.signIn(t, "alice"))
	if !slices.Equal(c.Groups, want.Groups) {
		t.Errorf("second sign-in: groups = %v, want %v", c.Groups, want.Groups)
	}
	_, c = f.verify(t, f.signIn(t, "bob"))
	if c.Email != "bob@corp.example" || len(c.Groups) != 0 {
		t.Errorf("bob: email, groups = %q, %v; want bob@corp.example, none", c.Email, c.Groups)
	}
}

// TestWrongPassword: Gitea refuses the login and shows its form again; no
// code reaches the relying party.
func TestWrongPassword(t *testing.T) {
	f := newFlow(t, testgitea.Options{})
	f.gitea.AddUser(t, testgitea.User{Username: "carol", Email: "carol@corp.example", Password: "carol-password"})
	// SignIn types the password AddUser stored; a wrong one is posted by
	// hand.
	browser := f.gitea.HTTPClient()
	t.Cleanup(browser.CloseIdleConnections)
	resp, err := browser.Get(f.AuthURL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/user/login" {
		t.Fatalf("the authorization request ended at %s, want Gitea's login page", resp.Request.URL)
	}
	req, _ := http.NewRequest(http.MethodPost, f.gitea.URL+"user/login", strings.NewReader(url.Values{
		testgitea.UsernameField: {"carol"}, testgitea.PasswordField: {"not-her-password"},
	}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.gitea.Issuer)
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/user/login" || !strings.Contains(string(b), `id="`+testgitea.UsernameField+`"`) {
		t.Errorf("a wrong password ended at %d %s, want the login form again", resp.StatusCode, resp.Request.URL)
	}
	if q := f.Callback.Query(); q != nil {
		t.Errorf("the callback got %v, want nothing", q)
	}
}

// git runs git with a minimal environment (no prompt, no system or user
// configuration) and the CA file caFile ("" for none), in dir.
func git(t *testing.T, dir, caFile string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Alice", "GIT_AUTHOR_EMAIL=alice@corp.example", "GIT_COMMITTER_NAME=Alice", "GIT_COMMITTER_EMAIL=alice@corp.example"}
	if caFile != "" {
		cmd.Env = append(cmd.Env, "GIT_SSL_CAINFO="+caFile)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGitPrivateRepo: a private repository clones over HTTPS with a token
// and the test CA, and a commit pushes (Gitea's hooks run); without
// credentials, or without the CA, git fails.
func TestGitPrivateRepo(t *testing.T) {
	g := testgitea.Start(t, testgitea.Options{})
	g.AddUser(t, alice)
	g.AddOrg(t, "corp")
	g.AddTeam(t, "corp", "devs")
	g.AddTeamMember(t, "corp", "devs", "alice")
	cloneURL := g.CreateRepo(t, "corp", "private", true)
	if want := g.URL + "corp/private.git"; cloneURL != want {
		t.Errorf("clone URL = %q, want %q", cloneURL, want)
	}
	token := g.AddToken(t, "alice", "write:repository")
	withToken, err := url.Parse(cloneURL)
	if err != nil {
		t.Fatal(err)
	}
	withToken.User = url.UserPassword("alice", token)

	for _, tc := range []struct {
		name, url, caFile, wantErr string
	}{
		{"no credentials", cloneURL, g.CAFile, "could not read Username"},
		{"wrong token", strings.Replace(withToken.String(), token, "0123456789abcdef0123456789abcdef01234567", 1), g.CAFile, "Authentication failed"},
		{"without the CA", withToken.String(), "", "server certificate verification failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := git(t, t.TempDir(), tc.caFile, "clone", tc.url, "repo")
			if err == nil || !strings.Contains(out, tc.wantErr) {
				t.Errorf("git clone: got %v: %s\nwant an error containing %q", err, out, tc.wantErr)
			}
		})
	}

	dir := t.TempDir()
	if out, err := git(t, dir, g.CAFile, "clone", withToken.String(), "repo"); err != nil {
		t.Fatalf("git clone with a token: %v: %s\ngitea: %s", err, out, g.Output())
	}
	repo := filepath.Join(dir, "repo")
	if _, err := os.Stat(filepath.Join(repo, "README.md")); err != nil {
		t.Errorf("the clone has no README.md (auto-init): %v", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "hello.txt"}, {"commit", "-m", "hello"}, {"push", "origin", "main"}} {
		if out, err := git(t, repo, g.CAFile, args...); err != nil {
			t.Fatalf("git %s: %v: %s\ngitea: %s", args[0], err, out, g.Output())
		}
	}
	// The push is in Gitea: a fresh clone has the file.
	dir2 := t.TempDir()
	if out, err := git(t, dir2, g.CAFile, "clone", withToken.String(), "repo"); err != nil {
		t.Fatalf("second clone: %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir2, "repo", "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("hello.txt in a fresh clone: got %q, %v; want the pushed file", b, err)
	}
}

// TestUntrustedCA: without the test CA, discovery fails with Go's
// unknown-authority error; with it, it works.
func TestUntrustedCA(t *testing.T) {
	g := testgitea.Start(t, testgitea.Options{})
	testoidc.CheckTrust(t, g.Issuer, g.HTTPClient())
}

// TestVersion keeps Version in step with scripts/install-deps.sh, which
// builds Gitea, and checks the build is there.
func TestVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "install-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\ngitea_version=" + testgitea.Version + "\n"; !strings.Contains(string(b), want) {
		t.Errorf("scripts/install-deps.sh does not set %q", strings.TrimSpace(want))
	}
	out, err := exec.Command(testgitea.Path(t), "--version").Output()
	if want := "version " + strings.TrimPrefix(testgitea.Version, "v") + " "; err != nil || !strings.Contains(string(out), want) {
		t.Errorf("gitea --version: got %q, %v; want %q", out, err, want)
	}
}
