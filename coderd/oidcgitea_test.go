package coderd_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testgitea"
	"airgapcoder/internal/testport"
)

// giteaEnv is a deployment signing in through a real Gitea (package
// testgitea) over HTTPS: Gitea's OAuth2 application for the deployment,
// the "groups" scope asked for, and coderd trusting Gitea only through
// the test CA given to its OIDC client.
type giteaEnv struct {
	d     *coderdtest.Deployment
	gitea *testgitea.Gitea
}

func newGiteaEnv(t *testing.T, provisionerPSK string, config func(*coderd.OIDCConfig)) *giteaEnv {
	t.Helper()
	g := testgitea.Start(t, testgitea.Options{})
	addr := testport.Addr(t)
	cfg := coderdtest.GiteaOIDC(t, g, addr)
	cfg.Scopes = []string{oidc.ScopeOpenID, "profile", "email", "groups"}
	if config != nil {
		config(&cfg)
	}
	d := coderdtest.New(t, coderdtest.Options{Address: addr, TLS: true, OIDC: cfg, ProvisionerPSK: provisionerPSK})
	return &giteaEnv{d: d, gitea: g}
}

// browser is a fresh browser (cookie jar) trusting Gitea's and the
// deployment's CAs.
func (e *giteaEnv) browser(t *testing.T) *http.Client {
	t.Helper()
	pool := e.gitea.CertPool()
	pem, err := os.ReadFile(e.d.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	return newBrowser(t, pool)
}

// signIn starts the deployment's OIDC flow in a fresh browser and signs in
// as username on Gitea's login form, granting the application the first
// time; it returns the page the flow ends on and the browser.
func (e *giteaEnv) signIn(t *testing.T, username string) (testgitea.Page, *http.Client) {
	t.Helper()
	b := e.browser(t)
	return e.gitea.SignIn(t, b, e.d.URL.String()+codersdk.OIDCCallbackPath, username), b
}

// signInClient signs in as username, fails the test unless the flow lands
// on the workspaces page, and returns a client with the session's token.
func (e *giteaEnv) signInClient(t *testing.T, username string) *codersdk.Client {
	t.Helper()
	page, b := e.signIn(t, username)
	if page.Status != http.StatusOK || page.URL.Path != "/workspaces" {
		t.Fatalf("sign in as %s through Gitea: got %v, want the workspaces page\ngitea: %s", username, page, e.gitea.Output())
	}
	c := e.d.Client()
	for _, ck := range b.Jar.Cookies(e.d.URL) {
		if ck.Name == codersdk.SessionTokenCookie {
			c.SessionToken = ck.Value
		}
	}
	if c.SessionToken == "" {
		t.Fatalf("the browser holds no %s cookie after %s's sign-in", codersdk.SessionTokenCookie, username)
	}
	return c
}

// TestOIDCGiteaGroupSyncTemplateAccess: Gitea's "groups" claim (its
// organizations and "org:team" of the user's teams) puts a user in the
// Coder group that may use a template; a user in no allowed organization is
// refused; leaving the team at Gitea takes the group, and the template,
// away at the next sign-in.
func TestOIDCGiteaGroupSyncTemplateAccess(t *testing.T) {
	e := newGiteaEnv(t, "psk", func(c *coderd.OIDCConfig) {
		c.GroupField = "groups"
		gs, err := coderd.ParseGroupSyncOptions(`{"corp:devs": "devs"}`, false, "", []string{"corp"})
		if err != nil {
			t.Fatal(err)
		}
		c.GroupSync = gs
	})
	ctx := context.Background()
	g := e.gitea
	g.AddOrg(t, "corp")
	g.AddTeam(t, "corp", "devs")
	g.AddTeam(t, "corp", "ops")
	danaSub := g.AddUser(t, testgitea.User{Username: "dana", Email: "dana@corp.example", Password: "dana-password", FullName: "Dana Scully"})
	g.AddTeamMember(t, "corp", "devs", "dana")
	g.AddUser(t, testgitea.User{Username: "olaf", Email: "olaf@corp.example", Password: "olaf-password"})
	g.AddTeamMember(t, "corp", "ops", "olaf")
	zedSub := g.AddUser(t, testgitea.User{Username: "zed", Email: "zed@contractor.example", Password: "zed-password"})

	owner, daemon, createWorkspace := devsOnlyTemplate(t, e.d)

	dana := e.signInClient(t, "dana")
	me, err := dana.User(ctx, codersdk.Me)
	if err != nil {
		t.Fatal(err)
	}
	if me.Username != "dana" || me.Email != "dana@corp.example" || me.Name != "Dana Scully" {
		t.Errorf("dana's account: got %s %s %q, want dana, dana@corp.example, Dana Scully (from Gitea's claims)", me.Username, me.Email, me.Name)
	}
	devs, err := owner.GroupByName(ctx, "default", "devs")
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(devs); !slices.Equal(got, []string{"dana"}) {
		t.Errorf("devs after dana's sign-in: got members %v, want [dana] (corp:devs maps to devs)", got)
	}
	if err := createWorkspace(dana, "dana-ws"); err != nil {
		t.Fatalf("dana, in devs through Gitea's team, creating a workspace: %v", err)
	}
	daemon.RunOne(t)

	olaf := e.signInClient(t, "olaf")
	if err := createWorkspace(olaf, "olaf-ws"); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("olaf, in corp:ops only, creating a workspace: got %v, want 403", err)
	}

	if page, _ := e.signIn(t, "zed"); page.Status != http.StatusForbidden || page.URL.Path != codersdk.OIDCCallbackPath || !strings.Contains(page.Body, "not in an allowed group") {
		t.Errorf("zed, in no organization: got %v\nwant 403 saying not in an allowed group", page)
	}
	if _, err := owner.User(ctx, "zed"); !codersdk.IsStatus(err, http.StatusNotFound) {
		t.Errorf("a refused sign-in made the user zed: got %v, want 404", err)
	}

	// Dana leaves the team at Gitea (and with it the organization): her
	// next sign-in takes her out of devs, and the template with it. She is
	// still in corp through ops, which keeps her allowed.
	g.AddTeamMember(t, "corp", "ops", "dana")
	g.RemoveTeamMember(t, "corp", "devs", "dana")
	dana = e.signInClient(t, "dana")
	if devs, err = owner.GroupByName(ctx, "default", "devs"); err != nil || len(devs.Members) != 0 {
		t.Errorf("devs after dana left corp:devs: got %v, %v; want no members", memberNames(devs), err)
	}
	if err := createWorkspace(dana, "dana-ws2"); !codersdk.IsStatus(err, http.StatusForbidden) {
		t.Errorf("dana, out of devs, creating a workspace: got %v, want 403", err)
	}

	checkGroupSyncAudit(t, owner, zedSub, danaSub)
}
