package coderd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testwait"
)

// appBrowser is a browser for the deployment and its app hosts: a cookie
// jar, redirects followed, every host dialed at the deployment.
type appBrowser struct {
	*http.Client
	jar *cookiejar.Jar
}

func newAppBrowser(t *testing.T, d *coderdtest.Deployment, sessionToken string) *appBrowser {
	t.Helper()
	c, jar := testagent.NewAppClient(t, d.URL.Host, "", true)
	b := &appBrowser{jar: jar, Client: c}
	if sessionToken != "" {
		jar.SetCookies(d.URL, []*http.Cookie{{Name: codersdk.SessionTokenCookie, Value: sessionToken, Path: "/"}})
	}
	return b
}

func (b *appBrowser) get(t *testing.T, rawURL string) (int, string, *http.Response) {
	t.Helper()
	resp, err := b.Get(rawURL)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp
}

func (b *appBrowser) appCookie(t *testing.T, rawURL string) string {
	t.Helper()
	u, _ := url.Parse(rawURL)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == codersdk.SubdomainAppSessionTokenCookie {
			return c.Value
		}
	}
	return ""
}

// noFollow sends one request and does not follow its redirect.
func noFollow(t *testing.T, d *coderdtest.Deployment, method, rawURL string, header http.Header) *http.Response {
	t.Helper()
	c, _ := testagent.NewAppClient(t, d.URL.Host, "", false)
	resp, _ := testagent.Do(t, c, method, rawURL, header)
	return resp
}

// TestSubdomainApps: apps on hosts under the wildcard access URL, through a
// real agent: the sign-in redirect dance, the app cookie bound to its host,
// coderd's cookies never reaching the app, share levels for the owner,
// another member, an owner and an anonymous visitor, app tokens refused by
// the API, foreign redirect targets refused, subdomain_name in the API.
func TestSubdomainApps(t *testing.T) {
	ctx := context.Background()
	target := testagent.NewApp(t, nil)
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", WildcardAccessURL: "*.apps.test",
		AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second})
	admin, _ := d.CreateFirstUser(t)
	alice, _ := d.CreateUser(t, admin, "alice")
	bob, _ := d.CreateUser(t, admin, "bob")
	daemon := d.NewDaemon(t, "test", nil)
	appURL := target.URL()
	token := uuid.NewString()
	w := coderdtest.CreateWorkspaceWithAgent(t, admin, alice, daemon, "dev", codersdk.ProvisionedAgent{Token: token, Directory: t.TempDir(),
		Apps: []codersdk.ProvisionedApp{
			{Slug: "own", URL: appURL, Subdomain: true, Share: "owner"},
			{Slug: "auth", URL: appURL, Subdomain: true, Share: "authenticated"},
			{Slug: "pub", URL: appURL, Subdomain: true, Share: "public"},
			{Slug: "path", URL: appURL, Share: "authenticated"},
		}})
	agentID := coderdtest.WorkspaceAgent(t, w).ID
	startAgent(t, d, token)
	testagent.WaitConnected(t, alice, agentID)
	port := d.URL.Port()
	app := func(sub string) string { return fmt.Sprintf("http://%s.apps.test:%s", sub, port) }
	own, auth, pub := app("own--main--dev--alice"), app("auth--main--dev--alice"), app("pub--main--dev--alice")

	t.Run("API", func(t *testing.T) {
		ws, err := alice.Workspace(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, a := range coderdtest.WorkspaceAgent(t, ws).Apps {
			got[a.Slug] = a.SubdomainName
		}
		want := map[string]string{"own": "own--main--dev--alice", "auth": "auth--main--dev--alice", "pub": "pub--main--dev--alice", "path": ""}
		for slug, name := range want {
			if got[slug] != name {
				t.Errorf("app %s: got subdomain_name %q, want %q", slug, got[slug], name)
			}
		}
		host, err := alice.AppHost(ctx)
		if err != nil || host.Host != "*.apps.test:"+port {
			t.Errorf("GET /api/v2/applications/host: got %+v, %v, want *.apps.test:%s", host, err, port)
		}
	})

	t.Run("RedirectDance", func(t *testing.T) {
		b := newAppBrowser(t, d, alice.SessionToken)
		// A cookie the app set for itself must reach it.
		u, _ := url.Parse(own)
		b.jar.SetCookies(u, []*http.Cookie{{Name: "app_own", Value: "kept", Path: "/"}})
		status, body, resp := b.get(t, own+"/some/path?x=1")
		if status != http.StatusOK || body != "app /some/path?x=1" {
			t.Fatalf("GET %s/some/path?x=1: got %d %q, want 200 from the app", own, status, body)
		}
		if resp.Request.URL.String() != own+"/some/path?x=1" {
			t.Errorf("landed on %s, want the app URL without the token", resp.Request.URL)
		}
		r := target.Last(t)
		if r.URL.Query().Has(codersdk.SubdomainAppSessionTokenParam) {
			t.Errorf("the app received the exchange token: %s", r.URL)
		}
		for _, c := range r.Cookies() {
			if c.Name == codersdk.SessionTokenCookie || c.Name == codersdk.SubdomainAppSessionTokenCookie {
				t.Errorf("the app received cookie %s", c.Name)
			}
		}
		if ck, err := r.Cookie("app_own"); err != nil || ck.Value != "kept" {
			t.Errorf("the app's own cookie: got %v, %v, want app_own=kept", ck, err)
		}
		if r.Header.Get(codersdk.SessionTokenHeader) != "" {
			t.Errorf("the app received the %s header", codersdk.SessionTokenHeader)
		}
		// The app cookie belongs to this host only.
		if b.appCookie(t, own) == "" {
			t.Fatal("no app cookie for the app host")
		}
		for _, other := range []string{auth, d.URL.String()} {
			if b.appCookie(t, other) != "" {
				t.Errorf("the app cookie of %s is sent to %s", own, other)
			}
		}
		// A second request needs no dance.
		before := target.Count()
		resp2 := noFollow(t, d, http.MethodGet, own+"/again", http.Header{"Cookie": {codersdk.SubdomainAppSessionTokenCookie + "=" + b.appCookie(t, own)}})
		if resp2.StatusCode != http.StatusOK || target.Count() != before+1 {
			t.Errorf("GET with the app cookie: got %d, want 200 from the app", resp2.StatusCode)
		}
	})

	t.Run("CookieOnlyForItsHost", func(t *testing.T) {
		b := newAppBrowser(t, d, alice.SessionToken)
		if status, _, _ := b.get(t, own+"/"); status != http.StatusOK {
			t.Fatalf("GET %s: got %d", own, status)
		}
		ck := b.appCookie(t, own)
		resp := noFollow(t, d, http.MethodGet, auth+"/", http.Header{"Cookie": {codersdk.SubdomainAppSessionTokenCookie + "=" + ck}})
		if resp.StatusCode != http.StatusTemporaryRedirect || !strings.Contains(resp.Header.Get("Location"), codersdk.AppAuthRedirectPath) {
			t.Errorf("another app host with %s's cookie: got %d %s, want a redirect to sign in", own, resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("AppTokensRefusedByTheAPI", func(t *testing.T) {
		b := newAppBrowser(t, d, alice.SessionToken)
		if status, _, _ := b.get(t, own+"/"); status != http.StatusOK {
			t.Fatalf("GET %s: got %d", own, status)
		}
		resp := noFollow(t, d, http.MethodGet, d.URL.String()+codersdk.AppAuthRedirectPath+"?redirect_uri="+url.QueryEscape(own+"/"),
			http.Header{codersdk.SessionTokenHeader: {alice.SessionToken}})
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil {
			t.Fatalf("auth-redirect: got %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		exchange := loc.Query().Get(codersdk.SubdomainAppSessionTokenParam)
		for name, tok := range map[string]string{"exchange token": exchange, "app cookie": b.appCookie(t, own)} {
			for _, h := range []http.Header{
				{codersdk.SessionTokenHeader: {tok}},
				{"Cookie": {codersdk.SessionTokenCookie + "=" + tok}},
			} {
				if r := noFollow(t, d, http.MethodGet, d.URL.String()+"/api/v2/users/me", h); r.StatusCode != http.StatusUnauthorized {
					t.Errorf("GET /api/v2/users/me with the %s as %v: got %d, want 401", name, h, r.StatusCode)
				}
			}
		}
		// The exchange token opens only the host it was made for, and a
		// forged one nothing.
		for _, bad := range []string{auth + "/?" + codersdk.SubdomainAppSessionTokenParam + "=" + url.QueryEscape(exchange),
			own + "/?" + codersdk.SubdomainAppSessionTokenParam + "=" + url.QueryEscape(exchange+"x")} {
			if r := noFollow(t, d, http.MethodGet, bad, nil); r.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s: got %d, want 401", bad, r.StatusCode)
			}
		}
	})

	t.Run("ForeignRedirectRefused", func(t *testing.T) {
		for _, target := range []string{
			"http://evil.example/", "https://own--main--dev--alice.apps.test:" + port + "/", d.URL.String() + "/",
			"http://own--main--dev--alice.apps.test:1/", "http://apps.test:" + port + "/", "http://x.own--main--dev--alice.apps.test:" + port + "/",
			"http://not-an-app.apps.test:" + port + "/", "//own--main--dev--alice.apps.test:" + port + "/",
		} {
			resp := noFollow(t, d, http.MethodGet, d.URL.String()+codersdk.AppAuthRedirectPath+"?redirect_uri="+url.QueryEscape(target),
				http.Header{codersdk.SessionTokenHeader: {alice.SessionToken}})
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("redirect_uri %s: got %d %s, want 400", target, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	})

	t.Run("ShareLevels", func(t *testing.T) {
		tokens := map[string]string{"alice": alice.SessionToken, "bob": bob.SessionToken, "admin": admin.SessionToken, "anonymous": ""}
		want := map[string]map[string]int{
			// The anonymous visitor ends on the login page (200, not the
			// app's answer): checked by body below.
			"alice":     {own: 200, auth: 200, pub: 200},
			"bob":       {own: 404, auth: 200, pub: 200},
			"admin":     {own: 200, auth: 200, pub: 200},
			"anonymous": {own: 0, auth: 0, pub: 200},
		}
		for who, byApp := range want {
			for appHost, status := range byApp {
				b := newAppBrowser(t, d, tokens[who])
				got, body, resp := b.get(t, appHost+"/share")
				fromApp := strings.HasPrefix(body, "app /share")
				switch {
				case status == 0:
					if fromApp || resp.Request.URL.Path != "/login" {
						t.Errorf("%s on %s: got %d at %s, want the login page", who, appHost, got, resp.Request.URL)
					}
				case status == 200 && (got != 200 || !fromApp):
					t.Errorf("%s on %s: got %d %q, want the app", who, appHost, got, body)
				case status != 200 && (got != status || fromApp):
					t.Errorf("%s on %s: got %d %q, want %d", who, appHost, got, body, status)
				}
			}
		}
		// Path-based apps stay owner-only, whatever their share level.
		status, _ := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/@alice/dev/apps/path/", bob.SessionToken, nil, "")
		if status == http.StatusOK {
			t.Errorf("bob on alice's path app shared with authenticated users: got 200, want a refusal")
		}
	})

	t.Run("SignInThenBack", func(t *testing.T) {
		// A visitor without a session goes to the login page, signs in
		// there, and lands on the app.
		b := newAppBrowser(t, d, "")
		_, _, resp := b.get(t, auth+"/after-login")
		if resp.Request.URL.Path != "/login" {
			t.Fatalf("landed on %s, want /login", resp.Request.URL)
		}
		form := url.Values{"email": {"bob@example.com"}, "password": {coderdtest.FirstUserPassword}, "redirect": {resp.Request.URL.Query().Get("redirect")}}
		resp2, err := b.PostForm(d.URL.String()+"/login", form)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp2.Body)
		_ = resp2.Body.Close()
		if resp2.StatusCode != http.StatusOK || string(body) != "app /after-login?" {
			t.Errorf("after signing in: got %d %q at %s, want the app", resp2.StatusCode, body, resp2.Request.URL)
		}
	})

	t.Run("SignOutEndsAppAccess", func(t *testing.T) {
		c := d.Client()
		login, err := c.LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "alice@example.com", Password: coderdtest.FirstUserPassword})
		if err != nil {
			t.Fatal(err)
		}
		c.SessionToken = login.SessionToken
		b := newAppBrowser(t, d, c.SessionToken)
		if status, _, _ := b.get(t, own+"/"); status != http.StatusOK {
			t.Fatalf("GET %s: got %d", own, status)
		}
		if err := c.Logout(ctx); err != nil {
			t.Fatal(err)
		}
		resp := noFollow(t, d, http.MethodGet, own+"/", http.Header{"Cookie": {codersdk.SubdomainAppSessionTokenCookie + "=" + b.appCookie(t, own)}})
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("after signing out: got %d, want a redirect to sign in", resp.StatusCode)
		}
		if r := noFollow(t, d, http.MethodPost, own+"/", nil); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST without an app cookie: got %d, want 401", r.StatusCode)
		}
	})

	t.Run("NotAnAppHost", func(t *testing.T) {
		resp := noFollow(t, d, http.MethodGet, "http://nothing.apps.test:"+port+"/", nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("a host under the wildcard that names no app: got %d, want 404", resp.StatusCode)
		}
	})

	t.Run("Audit", func(t *testing.T) {
		testwait.For(t, 10*time.Second, "bob's mint, connect and refused records", func() (bool, string) {
			logs := auditLogs(t, admin, "username:bob")
			var mint, conn, refused bool
			for _, l := range logs {
				var f map[string]any
				_ = json.Unmarshal(l.AdditionalFields, &f)
				switch {
				case l.Action == codersdk.AuditActionCreate && l.ResourceType == codersdk.AuditResourceAPIKey && f["kind"] == "app-token":
					mint = true
				case l.Action == codersdk.AuditActionConnect && f["access"] == "subdomain" && f["share"] == "authenticated" && l.StatusCode < 400:
					conn = true
				case l.Action == codersdk.AuditActionConnect && f["access"] == "subdomain" && l.StatusCode == http.StatusNotFound:
					refused = true
				}
			}
			return mint && conn && refused, fmt.Sprintf("mint %v, connection %v, refusal %v among %d records", mint, conn, refused, len(logs))
		})
	})
}

// TestNoSubdomainAppsWithoutWildcard: without --wildcard-access-url a
// subdomain app has no subdomain_name, the app host is empty and
// auth-redirect says why.
func TestNoSubdomainAppsWithoutWildcard(t *testing.T) {
	ctx := context.Background()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "test")
	w := coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, "dev", codersdk.ProvisionedAgent{Token: uuid.NewString(),
		Apps: []codersdk.ProvisionedApp{{Slug: "web", URL: "http://localhost:8080", Subdomain: true}}})
	apps := coderdtest.WorkspaceAgent(t, w).Apps
	if len(apps) != 1 || !apps[0].Subdomain || apps[0].SubdomainName != "" {
		t.Errorf("got apps %+v, want one subdomain app without subdomain_name", apps)
	}
	if h, err := admin.AppHost(ctx); err != nil || h.Host != "" {
		t.Errorf("app host: got %+v, %v, want empty", h, err)
	}
	status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+codersdk.AppAuthRedirectPath+"?redirect_uri=http://a.example/", admin.SessionToken, nil, "")
	if status != http.StatusNotFound || !strings.Contains(string(body), "wildcard-access-url") {
		t.Errorf("auth-redirect: got %s, want 404 naming --wildcard-access-url", coderdtest.String(status, body))
	}
}
