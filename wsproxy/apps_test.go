package wsproxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"airgapcoder/agent"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testagent"
	"airgapcoder/internal/testwait"
)

// newWorkspaceApp is a web server inside the workspace: it answers what it
// was asked, sets a cookie of its own and one named as coderd's session
// cookie, and echoes WebSocket messages at /ws.
func newWorkspaceApp(t *testing.T) *testagent.App {
	t.Helper()
	return testagent.NewApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" || strings.HasSuffix(r.URL.Path, "/ws") {
			testagent.EchoWebSocket(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true}, "echo ")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: codersdk.SessionTokenCookie, Value: "stolen", Path: "/"})
		http.SetCookie(w, &http.Cookie{Name: "app_cookie", Value: "set", Path: "/"})
		testagent.AnswerApp(w, r)
	}))
}

// appEnv is a primary and a proxy of region eu with wildcard *.eu.test,
// and a workspace of alice's whose agent is connected to the proxy and
// serves app.
type appEnv struct {
	d           *coderdtest.Deployment
	admin       *codersdk.Client
	alice, bob  *codersdk.Client
	proxyURL    *url.URL
	primaryLogs *syncbuf.Buffer
	proxyLogs   *syncbuf.Buffer
	app         *testagent.App
}

func newAppEnv(t *testing.T) *appEnv {
	t.Helper()
	e := &appEnv{primaryLogs: &syncbuf.Buffer{}, proxyLogs: &syncbuf.Buffer{}, app: newWorkspaceApp(t)}
	debug := &slog.HandlerOptions{Level: slog.LevelDebug}
	e.d = coderdtest.New(t, coderdtest.Options{
		ProvisionerPSK: "psk", AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second,
		WorkspaceProxyAuthTTL: time.Second, Logger: slog.New(slog.NewTextHandler(e.primaryLogs, debug)),
	})
	e.admin, _ = e.d.CreateFirstUser(t)
	e.alice, _ = e.d.CreateUser(t, e.admin, "alice")
	e.bob, _ = e.d.CreateUser(t, e.admin, "bob")
	daemon := e.d.NewDaemon(t, "test", nil)
	token := uuid.NewString()
	appURL := e.app.URL()
	ws := coderdtest.CreateWorkspaceWithAgent(t, e.admin, e.alice, daemon, "dev", codersdk.ProvisionedAgent{Token: token, Directory: t.TempDir(),
		Apps: []codersdk.ProvisionedApp{
			{Slug: "web", URL: appURL + "/base/", Share: "owner"},
			{Slug: "own", URL: appURL, Subdomain: true, Share: "owner"},
			{Slug: "pub", URL: appURL, Subdomain: true, Share: "public"},
		}})
	agentID := coderdtest.WorkspaceAgent(t, ws).ID
	// Another workspace's agent is connected to the primary: the proxy
	// reaches it through its relay session.
	farToken := uuid.NewString()
	far := coderdtest.CreateWorkspaceWithAgent(t, e.admin, e.alice, daemon, "far", codersdk.ProvisionedAgent{Token: farToken, Directory: t.TempDir(),
		Apps: []codersdk.ProvisionedApp{{Slug: "web", URL: appURL, Share: "owner"}}})
	farID := coderdtest.WorkspaceAgent(t, far).ID
	e.proxyURL, _ = coderdtest.NewWorkspaceProxy(t, e.admin, "eu", coderdtest.WorkspaceProxyOptions{
		WildcardAccessURL: "*.eu.test", Logger: slog.New(slog.NewTextHandler(e.proxyLogs, debug)),
	})

	// The agent connects to the proxy, as an agent of the region does.
	runAgent(t, e.proxyURL, token)
	runAgent(t, e.d.URL, farToken)
	for _, id := range []string{agentID, farID} {
		testagent.WaitConnected(t, e.alice, id)
	}
	return e
}

// runAgent runs an agent with token connected to u until the test ends.
func runAgent(t *testing.T, u *url.URL, token string) {
	t.Helper()
	ac := codersdk.New(u)
	ac.SessionToken = token
	testagent.Start(t, agent.Options{Client: ac})
}

// browser is an HTTP client with a cookie jar that reaches every host
// under *.eu.test at the proxy's address; follow says whether it follows
// redirects.
func (e *appEnv) browser(t *testing.T, follow bool) (*http.Client, *cookiejar.Jar) {
	t.Helper()
	return testagent.NewAppClient(t, e.proxyURL.Host, ".eu.test", follow)
}

// TestAppsThroughProxy: dev URLs and apps served by a workspace proxy from
// an agent connected to it: path apps and ports on the proxy's access URL
// with a session token, the primary's refusals passed on, subdomain apps
// on the proxy's wildcard with the browser's sign-in through the
// primary, a public app without signing in, WebSockets, the headers the
// app gets, and the primary's audit records of the relayed connections.
// No request goes through the primary's dev URL handler.
func TestAppsThroughProxy(t *testing.T) {
	e := newAppEnv(t)
	ctx := context.Background()
	c, _ := e.browser(t, false)
	base := e.proxyURL.String()
	alice := http.Header{codersdk.SessionTokenHeader: {e.alice.SessionToken}}

	t.Run("PathApp", func(t *testing.T) {
		h := alice.Clone()
		h.Set("Cookie", codersdk.SessionTokenCookie+"=x; "+codersdk.SubdomainAppSessionTokenCookie+"=y; mine=kept")
		resp, body := testagent.Do(t, c, http.MethodGet, base+"/@alice/dev/apps/web/hello%2Fthere?x=1", h)
		if resp.StatusCode != http.StatusOK || body != "app /base/hello/there?x=1" {
			t.Fatalf("GET through the proxy: got %d %q, want 200 %q", resp.StatusCode, body, "app /base/hello/there?x=1")
		}
		got := e.app.Last(t)
		if p := got.Header.Get("X-Forwarded-Prefix"); p != "/@alice/dev/apps/web" {
			t.Errorf("X-Forwarded-Prefix: got %q, want /@alice/dev/apps/web", p)
		}
		if got.Host != e.proxyURL.Host || got.Header.Get("X-Forwarded-Host") != e.proxyURL.Host {
			t.Errorf("Host: got %q (X-Forwarded-Host %q), want the visitor's %q", got.Host, got.Header.Get("X-Forwarded-Host"), e.proxyURL.Host)
		}
		if got.Header.Get(codersdk.SessionTokenHeader) != "" || got.Header.Get("Cookie") != "mine=kept" {
			t.Errorf("the app got %s %q and cookies %q, want no session token and only its own cookie",
				codersdk.SessionTokenHeader, got.Header.Get(codersdk.SessionTokenHeader), got.Header.Get("Cookie"))
		}
		for _, ck := range resp.Cookies() {
			if ck.Name == codersdk.SessionTokenCookie {
				t.Errorf("the app set the session cookie through the proxy: %v", ck)
			}
		}
		if !strings.Contains(e.proxyLogs.String(), "dev URL request") {
			t.Errorf("proxy logs: want the dev URL request logged\n%s", e.proxyLogs)
		}
	})

	t.Run("Port", func(t *testing.T) {
		resp, body := testagent.Do(t, c, http.MethodGet, fmt.Sprintf("%s/@alice/dev.main/ports/%d/p", base, e.app.Port), alice)
		if resp.StatusCode != http.StatusOK || body != "app /p?" {
			t.Fatalf("GET a port through the proxy: got %d %q, want 200 %q", resp.StatusCode, body, "app /p?")
		}
	})

	t.Run("AgentOnPrimary", func(t *testing.T) {
		resp, body := testagent.Do(t, c, http.MethodGet, base+"/@alice/far/apps/web/x", alice)
		if resp.StatusCode != http.StatusOK || body != "app /x?" {
			t.Fatalf("GET an app whose agent is connected to the primary: got %d %q, want 200 %q", resp.StatusCode, body, "app /x?")
		}
	})

	// A revoked token stops working at the proxy within the primary's
	// WorkspaceProxyAuthTTL (1 s here), however often it is used.
	t.Run("Revoked", func(t *testing.T) {
		tok, err := e.alice.CreateToken(ctx, "me", codersdk.CreateTokenRequest{TokenName: "revoked", Lifetime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{codersdk.SessionTokenHeader: {tok.Key}}
		if resp, body := testagent.Do(t, c, http.MethodGet, base+"/@alice/dev/apps/web/", h); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET with a new token: got %d %s, want 200", resp.StatusCode, body)
		}
		id, _, _ := strings.Cut(tok.Key, "-")
		if err := e.alice.DeleteAPIKey(ctx, "me", id); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		testwait.For(t, 30*time.Second, "the revoked token refused", func() (bool, string) {
			resp, body := testagent.Do(t, c, http.MethodGet, base+"/@alice/dev/apps/web/", h)
			return resp.StatusCode == http.StatusUnauthorized, fmt.Sprintf("%d %s", resp.StatusCode, body)
		})
		if took := time.Since(revoked); took > 2*time.Second {
			t.Errorf("the revoked token worked for %s, want at most the 1s TTL (plus slack)", took)
		}
	})

	t.Run("TrailingSlash", func(t *testing.T) {
		resp, _ := testagent.Do(t, c, http.MethodGet, base+"/@alice/dev/apps/web?a=b", alice)
		if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/@alice/dev/apps/web/?a=b" {
			t.Fatalf("got %d to %q, want 307 to /@alice/dev/apps/web/?a=b", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name, method, path string
			header             http.Header
			status             int
			want               string
		}{
			{"another member", http.MethodGet, "/@alice/dev/apps/web/", http.Header{codersdk.SessionTokenHeader: {e.bob.SessionToken}}, http.StatusNotFound, "not found"},
			{"bad token", http.MethodGet, "/@alice/dev/apps/web/", http.Header{codersdk.SessionTokenHeader: {"nope"}}, http.StatusUnauthorized, "Invalid session token"},
			{"no app", http.MethodGet, "/@alice/dev/apps/nope/", alice, http.StatusNotFound, "of workspace alice/dev not found"},
			{"not a dev URL", http.MethodGet, "/@alice/dev/", alice, http.StatusNotFound, "dev URLs look like"},
			{"no credentials, POST", http.MethodPost, "/@alice/dev/apps/web/", nil, http.StatusUnauthorized, "not signed in"},
		} {
			resp, body := testagent.Do(t, c, tc.method, base+tc.path, tc.header)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("%s: got %d %s, want %d containing %q", tc.name, resp.StatusCode, body, tc.status, tc.want)
			}
		}
		// A browser without credentials is sent to sign in at the primary.
		resp, _ := testagent.Do(t, c, http.MethodGet, base+"/@alice/dev/apps/web/x", nil)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusTemporaryRedirect || loc == nil || loc.Host != e.d.URL.Host || loc.Path != codersdk.AppAuthRedirectPath ||
			loc.Query().Get("redirect_uri") != base+"/@alice/dev/apps/web/x" {
			t.Errorf("GET without credentials: got %d to %q, want 307 to the primary's auth-redirect back to the app", resp.StatusCode, loc)
		}
	})

	t.Run("WebSocket", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		u := strings.Replace(base, "http", "ws", 1) + "/@alice/dev/apps/web/ws"
		if got := testagent.WebSocketRoundTrip(wctx, t, u, &websocket.DialOptions{HTTPHeader: alice}, websocket.MessageText, "hi"); got != "echo hi" {
			t.Fatalf("WebSocket echo through the proxy: got %q, want \"echo hi\"", got)
		}
	})

	t.Run("SubdomainSignIn", func(t *testing.T) {
		b, jar := e.browser(t, true)
		jar.SetCookies(e.d.URL, []*http.Cookie{{Name: codersdk.SessionTokenCookie, Value: e.alice.SessionToken, Path: "/"}})
		own := fmt.Sprintf("http://own--main--dev--alice.eu.test:%s", e.proxyURL.Port())
		resp, body := testagent.Do(t, b, http.MethodGet, own+"/some/path?q=1", nil)
		if resp.StatusCode != http.StatusOK || body != "app /some/path?q=1" || resp.Request.URL.String() != own+"/some/path?q=1" {
			t.Fatalf("GET %s: got %d %q at %s, want the app's answer at the same URL after signing in", own, resp.StatusCode, body, resp.Request.URL)
		}
		u, _ := url.Parse(own)
		var cookie bool
		for _, ck := range jar.Cookies(u) {
			cookie = cookie || ck.Name == codersdk.SubdomainAppSessionTokenCookie
		}
		if !cookie {
			t.Errorf("the proxy set no app cookie for %s", u.Host)
		}
		if got := e.app.Last(t).Header.Get("Cookie"); got != "" {
			t.Errorf("the app got cookies %q, want none of the deployment's", got)
		}
		// Bob signs in too, and is refused: the app is its owner's.
		bb, bjar := e.browser(t, true)
		bjar.SetCookies(e.d.URL, []*http.Cookie{{Name: codersdk.SessionTokenCookie, Value: e.bob.SessionToken, Path: "/"}})
		if resp, body := testagent.Do(t, bb, http.MethodGet, own+"/", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob: got %d %s, want 404", resp.StatusCode, body)
		}
	})

	// The redirect after the exchange stays on the app's host, whatever its
	// path holds.
	t.Run("ExchangeStaysOnHost", func(t *testing.T) {
		app := fmt.Sprintf("http://own--main--dev--alice.eu.test:%s//evil.example/x?a=1", e.proxyURL.Port())
		signIn := e.d.URL.String() + codersdk.AppAuthRedirectPath + "?" + url.Values{"redirect_uri": {app}}.Encode()
		resp, _ := testagent.Do(t, c, http.MethodGet, signIn, alice)
		back, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil || back.Query().Get(codersdk.SubdomainAppSessionTokenParam) == "" {
			t.Fatalf("auth-redirect to %s: got %d to %q, want 303 back with an exchange token", app, resp.StatusCode, resp.Header.Get("Location"))
		}
		resp, _ = testagent.Do(t, c, http.MethodGet, back.String(), nil)
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Host != back.Host || loc.String() != app {
			t.Errorf("after the exchange: got %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), app)
		}
		if !strings.Contains(resp.Header.Get("Set-Cookie"), codersdk.SubdomainAppSessionTokenCookie+"=") || !strings.Contains(resp.Header.Get("Set-Cookie"), "HttpOnly") {
			t.Errorf("after the exchange: Set-Cookie %q, want the HttpOnly app cookie", resp.Header.Get("Set-Cookie"))
		}
	})

	t.Run("PublicApp", func(t *testing.T) {
		anon, _ := e.browser(t, false)
		pub := fmt.Sprintf("http://pub--main--dev--alice.eu.test:%s/x", e.proxyURL.Port())
		if resp, body := testagent.Do(t, anon, http.MethodGet, pub, nil); resp.StatusCode != http.StatusOK || body != "app /x?" {
			t.Errorf("anonymous GET of a public app: got %d %q, want 200 %q", resp.StatusCode, body, "app /x?")
		}
	})

	t.Run("NotThroughPrimary", func(t *testing.T) {
		if strings.Contains(e.primaryLogs.String(), "dev URL request") {
			t.Errorf("primary logs: a dev URL request went through the primary's handler\n%s", e.primaryLogs)
		}
		// The proxy reported the connections it relayed: the primary's
		// audit log names the proxy.
		testwait.For(t, 30*time.Second, "an audit record of a dev URL connection through proxy eu", func() (bool, string) {
			logs, err := e.admin.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "action:connect", Limit: 100})
			if err != nil {
				return false, err.Error()
			}
			for _, l := range logs.AuditLogs {
				var f map[string]any
				_ = json.Unmarshal(l.AdditionalFields, &f)
				if f["kind"] == "dev-url" && f["proxy"] == "eu" && l.Actor() == "alice" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d connect records, none a dev-url through eu", len(logs.AuditLogs))
		})
	})
}
