package testgitea

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"airgapcoder/internal/testserver"
)

// User is a Gitea account.
type User struct {
	// Username is the login name and the ID token's "preferred_username".
	Username string
	// Email is the "email" claim; Gitea reports it verified
	// ("email_verified": the account is active, as accounts the admin
	// makes are).
	Email string
	// Password is what is typed on the login page: at least 8
	// characters.
	Password string
	// FullName is the "name" claim; empty means Username.
	FullName string
}

// AddUser creates an active account through the admin API (no password
// change asked at the first sign-in; its email is public, as Start sets
// DEFAULT_KEEP_EMAIL_PRIVATE = false) and returns its
// subject, the "sub" claim of its ID tokens (Gitea's user ID).
func (g *Gitea) AddUser(t testing.TB, u User) (subject string) {
	t.Helper()
	mustChange := false
	req := map[string]any{
		"username": u.Username, "email": u.Email, "password": u.Password, "full_name": u.FullName,
		"must_change_password": &mustChange, "visibility": "public",
	}
	var resp struct {
		ID int64 `json:"id"`
	}
	g.do(t, http.MethodPost, "api/v1/admin/users", req, &resp)
	g.mu.Lock()
	g.passwords[u.Username] = u.Password
	g.mu.Unlock()
	return fmt.Sprint(resp.ID)
}

// AddOrg creates a public organization owned by the admin. Its name is a
// group of each member ("groups" claim), and "org:team" one of each team
// member.
func (g *Gitea) AddOrg(t testing.TB, org string) {
	t.Helper()
	g.do(t, http.MethodPost, "api/v1/admin/users/"+url.PathEscape(adminUsername)+"/orgs",
		map[string]any{"username": org, "visibility": "public"}, nil)
}

// AddTeam creates a team in org whose members can read and write the
// organization's repositories.
func (g *Gitea) AddTeam(t testing.TB, org, team string) {
	t.Helper()
	req := map[string]any{
		"name": team, "permission": "write", "includes_all_repositories": true,
		"units": []string{"repo.code", "repo.issues", "repo.pulls", "repo.releases", "repo.wiki"},
	}
	var resp struct {
		ID int64 `json:"id"`
	}
	g.do(t, http.MethodPost, "api/v1/orgs/"+url.PathEscape(org)+"/teams", req, &resp)
	g.mu.Lock()
	g.teams[org+"/"+team] = resp.ID
	g.mu.Unlock()
}

// AddTeamMember adds username to a team AddTeam made, which makes them a
// member of org: their "groups" claim then holds "org" and
// "org:team" (the team's name in lower case).
func (g *Gitea) AddTeamMember(t testing.TB, org, team, username string) {
	t.Helper()
	g.do(t, http.MethodPut, g.teamMemberPath(t, org, team, username), nil, nil)
}

// RemoveTeamMember takes username out of a team AddTeam made; out of the
// organization's last team, they are out of the organization, and its
// groups leave their next ID token.
func (g *Gitea) RemoveTeamMember(t testing.TB, org, team, username string) {
	t.Helper()
	g.do(t, http.MethodDelete, g.teamMemberPath(t, org, team, username), nil, nil)
}

func (g *Gitea) teamMemberPath(t testing.TB, org, team, username string) string {
	t.Helper()
	g.mu.Lock()
	id, ok := g.teams[org+"/"+team]
	g.mu.Unlock()
	if !ok {
		t.Fatalf("testgitea: no team %s/%s (AddTeam makes it)", org, team)
	}
	return fmt.Sprintf("api/v1/teams/%d/members/%s", id, url.PathEscape(username))
}

// AddOAuthApp registers an OAuth2 application owned by the admin: a
// confidential client (client_secret_basic or _post, PKCE allowed) with
// skip_secondary_authorization, and returns its client ID and secret.
//
// Gitea still shows its authorize page at a user's first authorization of
// the application (the grant is made there); later ones redirect at once.
// SignIn, and a browser test, must click it: [GrantButtonID].
func (g *Gitea) AddOAuthApp(t testing.TB, name string, redirectURIs ...string) (clientID, clientSecret string) {
	t.Helper()
	if redirectURIs == nil {
		redirectURIs = []string{}
	}
	req := map[string]any{
		"name": name, "confidential_client": true, "skip_secondary_authorization": true, "redirect_uris": redirectURIs,
	}
	var resp struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	g.do(t, http.MethodPost, "api/v1/user/applications/oauth2", req, &resp)
	if resp.ClientID == "" || resp.ClientSecret == "" {
		t.Fatalf("testgitea: OAuth2 application %q: no client ID or secret in the answer", name)
	}
	return resp.ClientID, resp.ClientSecret
}

// CreateRepo creates a repository of owner (a user or an organization),
// initialized with a README on branch main, and returns its HTTPS clone
// URL (URL+"owner/name.git").
func (g *Gitea) CreateRepo(t testing.TB, owner, name string, private bool) (cloneURL string) {
	t.Helper()
	req := map[string]any{"name": name, "private": private, "auto_init": true, "readme": "Default", "default_branch": "main"}
	var resp struct {
		CloneURL string `json:"clone_url"`
	}
	// The admin endpoint creates for a user and for an organization alike.
	g.do(t, http.MethodPost, "api/v1/admin/users/"+url.PathEscape(owner)+"/repos", req, &resp)
	if resp.CloneURL == "" {
		t.Fatalf("testgitea: repository %s/%s: no clone URL in the answer", owner, name)
	}
	return resp.CloneURL
}

// AddToken creates a personal access token of username (who must have
// been added by AddUser) with scopes, such as "write:repository" or
// "read:user", and returns it. Git takes it as the password of an HTTPS
// URL; the API as "Authorization: token TOKEN".
func (g *Gitea) AddToken(t testing.TB, username string, scopes ...string) string {
	t.Helper()
	password := g.password(t, username)
	req := map[string]any{"name": "token-" + testserver.RandomString(8), "scopes": scopes}
	var resp struct {
		SHA1 string `json:"sha1"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Gitea makes a user's tokens only with that user's password.
	if err := g.api.Call(ctx, http.MethodPost, "api/v1/users/"+url.PathEscape(username)+"/tokens", req, &resp, func(r *http.Request) {
		r.SetBasicAuth(username, password)
	}); err != nil {
		t.Fatalf("testgitea: token of %s: %v", username, err)
	}
	if resp.SHA1 == "" {
		t.Fatalf("testgitea: token of %s: none in the answer", username)
	}
	return resp.SHA1
}

// do calls the API as the admin and fails the test on an error.
func (g *Gitea) do(t testing.TB, method, path string, in, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.call(ctx, method, path, in, out); err != nil {
		t.Fatalf("testgitea: %v", err)
	}
}

// call sends a JSON request to Gitea (path is relative to URL) with the
// admin's token and decodes the answer into out (when not nil).
func (g *Gitea) call(ctx context.Context, method, path string, in, out any) error {
	return g.api.Call(ctx, method, path, in, out)
}

// password returns the password AddUser stored for username, failing the
// test for a user it did not make.
func (g *Gitea) password(t testing.TB, username string) string {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	password, ok := g.passwords[username]
	if !ok {
		t.Fatalf("testgitea: no password of %s (AddUser makes users)", username)
	}
	return password
}
