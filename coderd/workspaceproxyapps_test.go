package coderd_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// registeredProxy creates a workspace proxy named name and registers it at
// accessURL with wildcard, returning its client of the primary.
func registeredProxy(t *testing.T, d *coderdtest.Deployment, admin *codersdk.Client, name, accessURL, wildcard string) *codersdk.ProxyClient {
	t.Helper()
	ctx := context.Background()
	created, err := admin.CreateWorkspaceProxy(ctx, codersdk.CreateWorkspaceProxyRequest{Name: name})
	if err != nil {
		t.Fatalf("create workspace proxy %s: %v", name, err)
	}
	pc := &codersdk.ProxyClient{Client: d.Client(), Token: created.ProxyToken}
	if _, err := pc.RegisterWorkspaceProxy(ctx, codersdk.RegisterWorkspaceProxyRequest{
		AccessURL: accessURL, WildcardHostname: wildcard, Version: "v0.0.0-test", ReplicaID: uuid.NewString(), ReplicaHostname: "test",
	}); err != nil {
		t.Fatalf("register workspace proxy %s: %v", name, err)
	}
	return pc
}

// exchangeToken runs the primary's auth-redirect for the holder of token
// and redirectURI and returns the exchange token it hands out.
func exchangeToken(t *testing.T, d *coderdtest.Deployment, token, redirectURI string) string {
	t.Helper()
	u := d.URL.String() + codersdk.AppAuthRedirectPath + "?" + url.Values{"redirect_uri": {redirectURI}}.Encode()
	resp := noFollow(t, d, http.MethodGet, u, http.Header{codersdk.SessionTokenHeader: {token}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET %s: got %d, want 303 to the app with an exchange token", u, resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	tok := loc.Query().Get(codersdk.SubdomainAppSessionTokenParam)
	if tok == "" || !strings.HasPrefix(loc.String(), redirectURI) {
		t.Fatalf("auth-redirect: got Location %s, want %s with an exchange token", loc, redirectURI)
	}
	return tok
}

// TestWorkspaceProxyAuthorizeApp: the primary's decisions about dev URLs a
// proxy serves, for path-based URLs on its access URL and apps on its
// wildcard's hosts: the same rules as for the primary's own (owner, other
// member, owner role with a header or a browser credential, share levels,
// sign-in), the sign-in exchange bound to the proxy's host, bad user
// credentials and a deleted proxy's token.
func TestWorkspaceProxyAuthorizeApp(t *testing.T) {
	ctx := context.Background()
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk"})
	admin, _ := d.CreateFirstUser(t)
	alice, aliceUser := d.CreateUser(t, admin, "alice")
	bob, bobUser := d.CreateUser(t, admin, "bob")
	daemon := d.NewDaemon(t, "test", nil)
	w := coderdtest.CreateWorkspaceWithAgent(t, admin, alice, daemon, "dev", codersdk.ProvisionedAgent{Token: uuid.NewString(), Directory: t.TempDir(),
		Apps: []codersdk.ProvisionedApp{
			{Slug: "web", URL: "http://127.0.0.1:8080/base?x=1", Share: "owner"},
			{Slug: "own", Port: 3000, Subdomain: true, Share: "owner"},
			{Slug: "auth", Port: 3001, Subdomain: true, Share: "authenticated"},
		}})
	agentID := coderdtest.WorkspaceAgent(t, w).ID
	eu := registeredProxy(t, d, admin, "eu", "https://eu.test", "*.eu.test")
	us := registeredProxy(t, d, admin, "us", "https://us.test", "*.us.test")

	for _, tc := range []struct {
		name string
		req  codersdk.ProxyAuthorizeAppRequest
		// status is the refusal's; 0 for a grant of want.
		status int
		want   codersdk.ProxyAuthorizeAppResponse
	}{
		{name: "owner, path app", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/a/b?q=1",
			SessionToken: alice.SessionToken, SessionTokenInHeader: true},
			want: codersdk.ProxyAuthorizeAppResponse{UserID: aliceUser.ID, Username: "alice", AgentID: agentID, Scheme: "http", Host: "127.0.0.1", Port: 8080,
				BasePath: "/base", Query: "x=1", PathPrefix: "/@alice/dev/apps/web", SharingLevel: "owner", ValidForMillis: coderd.DefaultWorkspaceProxyAuthTTL.Milliseconds()}},
		{name: "owner, port, browser cookie", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://EU.test:443/@alice/dev.main/ports/9000/",
			SessionToken: alice.SessionToken},
			want: codersdk.ProxyAuthorizeAppResponse{UserID: aliceUser.ID, Username: "alice", AgentID: agentID, Scheme: "http", Port: 9000,
				PathPrefix: "/@alice/dev.main/ports/9000", SharingLevel: "owner", ValidForMillis: coderd.DefaultWorkspaceProxyAuthTTL.Milliseconds()}},
		{name: "another member", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/",
			SessionToken: bob.SessionToken, SessionTokenInHeader: true}, status: http.StatusNotFound},
		{name: "owner role, header", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/",
			SessionToken: admin.SessionToken, SessionTokenInHeader: true},
			want: codersdk.ProxyAuthorizeAppResponse{Username: "admin", AgentID: agentID, Scheme: "http", Host: "127.0.0.1", Port: 8080,
				BasePath: "/base", Query: "x=1", PathPrefix: "/@alice/dev/apps/web", SharingLevel: "owner", ValidForMillis: coderd.DefaultWorkspaceProxyAuthTTL.Milliseconds()}},
		{name: "owner role, browser cookie", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/",
			SessionToken: admin.SessionToken}, status: http.StatusForbidden},
		{name: "bad session token", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/",
			SessionToken: "0123456789-0123456789012345678901", SessionTokenInHeader: true}, status: http.StatusUnauthorized},
		{name: "no credentials, POST", req: codersdk.ProxyAuthorizeAppRequest{Method: "POST", URL: "https://eu.test/@alice/dev/apps/web/"},
			status: http.StatusUnauthorized},
		{name: "no credentials, GET", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/x?y=1"},
			want: codersdk.ProxyAuthorizeAppResponse{SignInURL: d.URL.String() + codersdk.AppAuthRedirectPath + "?" +
				url.Values{"redirect_uri": {"https://eu.test/@alice/dev/apps/web/x?y=1"}}.Encode()}},
		{name: "subdomain, no cookie", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://auth--main--dev--alice.eu.test/",
			SessionToken: alice.SessionToken, SessionTokenInHeader: true},
			want: codersdk.ProxyAuthorizeAppResponse{SignInURL: d.URL.String() + codersdk.AppAuthRedirectPath + "?" +
				url.Values{"redirect_uri": {"https://auth--main--dev--alice.eu.test/"}}.Encode()}},
		{name: "another proxy's host", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://us.test/@alice/dev/apps/web/",
			SessionToken: alice.SessionToken, SessionTokenInHeader: true}, status: http.StatusBadRequest},
		{name: "not a dev URL", req: codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/",
			SessionToken: alice.SessionToken, SessionTokenInHeader: true}, status: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := eu.AuthorizeApp(ctx, tc.req)
			if tc.status != 0 {
				if !codersdk.IsStatus(err, tc.status) {
					t.Fatalf("got %+v, %v, want a %d refusal", got, err, tc.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.Username == "admin" {
				tc.want.UserID = got.UserID
			}
			tc.want.OwnerName, tc.want.WorkspaceName, tc.want.AgentName = got.OwnerName, got.WorkspaceName, got.AgentName
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if got.AgentID != "" && (got.OwnerName != "alice" || got.WorkspaceName != "dev" || got.AgentName != "main") {
				t.Errorf("got the agent named %s/%s.%s, want alice/dev.main", got.OwnerName, got.WorkspaceName, got.AgentName)
			}
		})
	}

	// A browser signs in to the proxy's app host through the primary's
	// auth-redirect; the exchange token becomes an app cookie for that
	// host only; the cookie opens what the app's share level allows.
	t.Run("SubdomainSignIn", func(t *testing.T) {
		authHost := "https://auth--main--dev--alice.eu.test"
		ownHost := "https://own--main--dev--alice.eu.test"
		cookieFor := func(t *testing.T, token, host string) string {
			t.Helper()
			ex := exchangeToken(t, d, token, host+"/")
			if _, err := us.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: host + "/", ExchangeToken: ex}); !codersdk.IsStatus(err, http.StatusBadRequest) {
				t.Errorf("another proxy redeems the exchange token: got %v, want 400 (not its host)", err)
			}
			res, err := eu.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: host + "/", ExchangeToken: ex})
			if err != nil || res.AppCookie == "" || !res.AppCookieExpiresAt.After(time.Now()) {
				t.Fatalf("redeem the exchange token: got %+v, %v, want an app cookie", res, err)
			}
			return res.AppCookie
		}
		bobAuth := cookieFor(t, bob.SessionToken, authHost)
		got, err := eu.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: authHost + "/x", AppCookies: []string{"junk", bobAuth}})
		if err != nil || got.UserID != bobUser.ID || got.SharingLevel != "authenticated" || got.Port != 3001 || got.PathPrefix != "" {
			t.Errorf("bob opens an app shared with signed-in users: got %+v, %v, want a grant to port 3001 without a prefix", got, err)
		}
		// The cookie is bound to its host: not another app's.
		got, err = eu.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: ownHost + "/", AppCookies: []string{bobAuth}})
		if err != nil || got.SignInURL == "" {
			t.Errorf("bob's cookie of another host: got %+v, %v, want to sign in", got, err)
		}
		bobOwn := cookieFor(t, bob.SessionToken, ownHost)
		if _, err := eu.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: ownHost + "/", AppCookies: []string{bobOwn}}); !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Errorf("bob opens alice's owner-only app: got %v, want 404", err)
		}
		aliceOwn := cookieFor(t, alice.SessionToken, ownHost)
		if got, err := eu.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: ownHost + "/", AppCookies: []string{aliceOwn}}); err != nil || got.Username != "alice" {
			t.Errorf("alice opens her owner-only app: got %+v, %v, want a grant", got, err)
		}
		// The app cookie works for a path dev URL of that host only: the
		// access URL's host has a cookie of its own.
		aliceAccess := cookieFor(t, alice.SessionToken, "https://eu.test")
		if got, err := eu.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://eu.test/@alice/dev/apps/web/", AppCookies: []string{aliceAccess}}); err != nil || got.Username != "alice" {
			t.Errorf("alice opens her path app with the access URL's app cookie: got %+v, %v, want a grant", got, err)
		}
	})

	t.Run("RedirectTargets", func(t *testing.T) {
		for _, target := range []string{"https://eu.test:8443/", "http://eu.test/", "https://other.test/", "https://x.y.eu.test/"} {
			u := d.URL.String() + codersdk.AppAuthRedirectPath + "?" + url.Values{"redirect_uri": {target}}.Encode()
			if resp := noFollow(t, d, http.MethodGet, u, http.Header{codersdk.SessionTokenHeader: {alice.SessionToken}}); resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
				t.Errorf("auth-redirect to %s: got %d, want a refusal", target, resp.StatusCode)
			}
		}
	})

	t.Run("Audit", func(t *testing.T) {
		logs, err := admin.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "action:connect", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, l := range logs.AuditLogs {
			if l.StatusCode == http.StatusNotFound && l.Actor() == "bob" && strings.Contains(string(l.AdditionalFields), `"workspace_proxy":"eu"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("audit log: want bob's refused dev URL through proxy eu recorded, got %d records", len(logs.AuditLogs))
		}
	})

	t.Run("DeletedProxy", func(t *testing.T) {
		if err := admin.DeleteWorkspaceProxy(ctx, "us"); err != nil {
			t.Fatal(err)
		}
		_, err := us.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{Method: "GET", URL: "https://us.test/@alice/dev/apps/web/",
			SessionToken: alice.SessionToken, SessionTokenInHeader: true})
		if !codersdk.IsStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "deleted") {
			t.Errorf("got %v, want 401 saying the proxy was deleted", err)
		}
		// Its hosts are no sign-in targets any more.
		u := d.URL.String() + codersdk.AppAuthRedirectPath + "?" + url.Values{"redirect_uri": {"https://us.test/"}}.Encode()
		if resp := noFollow(t, d, http.MethodGet, u, http.Header{codersdk.SessionTokenHeader: {alice.SessionToken}}); resp.StatusCode == http.StatusSeeOther {
			t.Errorf("auth-redirect to a deleted proxy: got 303, want a refusal")
		}
	})
}
