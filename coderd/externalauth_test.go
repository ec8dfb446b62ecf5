package coderd_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/externalauth"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testidp"
	"airgapcoder/internal/testport"
)

// extAuthEnv is a deployment whose external auth provider "hydra" is a real
// OAuth2 server (Ory Hydra, package testidp) over HTTPS on a test CA that
// only the provider client coderd is given trusts, and a member, alice,
// with a browser (cookie jar, signed in to coderd) and a workspace agent.
type extAuthEnv struct {
	d       *coderdtest.Deployment
	idp     *testidp.IdP
	owner   *codersdk.Client
	alice   *codersdk.Client
	browser *http.Client
	agent   *codersdk.Client
	daemon  *coderdtest.Daemon
	// skew moves coderd's clock forward.
	skew atomic.Int64
}

const (
	extAuthID      = "hydra"
	extAuthName    = "Hydra Git"
	extAuthSubject = "alice-git"
)

func newExtAuthEnv(t *testing.T) *extAuthEnv {
	t.Helper()
	e := &extAuthEnv{}
	addr := testport.Addr(t)
	e.idp = testidp.Start(t, "https://"+addr+codersdk.ExternalAuthCallbackPath(extAuthID))
	e.idp.AddUser(testidp.User{Username: extAuthSubject, Email: "alice@git.test", EmailVerified: true, Name: "Alice at Git"})
	outbound := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.idp.CertPool()}}
	t.Cleanup(outbound.CloseIdleConnections)
	e.d = coderdtest.New(t, coderdtest.Options{
		Address: addr, TLS: true, ProvisionerPSK: "psk",
		Now: func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) },
		ExternalAuth: []externalauth.Config{{
			ID: extAuthID, Type: "generic", ClientID: e.idp.ClientID, ClientSecret: e.idp.ClientSecret,
			AuthURL: e.idp.Issuer + "oauth2/auth", TokenURL: e.idp.Issuer + "oauth2/token", ValidateURL: e.idp.Issuer + "userinfo",
			Regex: `^https://git\.test/`, Scopes: []string{"openid", "profile", "offline_access"}, DisplayName: extAuthName,
		}},
		ExternalAuthHTTPClient: &http.Client{Transport: outbound, Timeout: 30 * time.Second},
	})
	e.owner, _ = e.d.CreateFirstUser(t)
	e.alice, _ = e.d.CreateUser(t, e.owner, "alice")
	pool := e.idp.CertPool()
	pem, err := os.ReadFile(e.d.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	e.browser = newBrowser(t, pool)
	e.browser.Jar.SetCookies(e.d.URL, []*http.Cookie{{Name: codersdk.SessionTokenCookie, Value: e.alice.SessionToken, Path: "/"}})

	e.daemon = e.d.NewDaemon(t, "pd", nil)
	token := uuid.NewString()
	coderdtest.CreateWorkspaceWithAgent(t, e.owner, e.alice, e.daemon, "plain", codersdk.ProvisionedAgent{Token: token})
	e.agent = e.d.Client()
	e.agent.SessionToken = token
	return e
}

// link runs the link flow in alice's browser (login_hint skips Hydra's
// form) and returns the last page's URL and text.
func (e *extAuthEnv) link(t *testing.T, redirect string) (*url.URL, string) {
	t.Helper()
	q := url.Values{"login_hint": {extAuthSubject}}
	if redirect != "" {
		q.Set("redirect", redirect)
	}
	res, err := e.browser.Get(e.d.URL.String() + codersdk.ExternalAuthCallbackPath(extAuthID) + "?" + q.Encode())
	if err != nil {
		t.Fatalf("link: %v\nhydra: %s", err, e.idp.Output())
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("link: got %d at %s: %s", res.StatusCode, res.Request.URL, body)
	}
	return res.Request.URL, html.UnescapeString(string(body))
}

func (e *extAuthEnv) get(t *testing.T, path string) string {
	t.Helper()
	res, err := e.browser.Get(e.d.URL.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: got %d: %s", path, res.StatusCode, body)
	}
	return html.UnescapeString(string(body))
}

func (e *extAuthEnv) agentToken(t *testing.T, req codersdk.ExternalAuthRequest) codersdk.ExternalAuthResponse {
	t.Helper()
	res, err := e.agent.WorkspaceAgentExternalAuth(context.Background(), req)
	if err != nil {
		t.Fatalf("agent external auth %+v: %v", req, err)
	}
	return res
}

// rawLink is alice's external_auth_links row as stored.
func (e *extAuthEnv) rawLink(t *testing.T) (access, refresh string, expiry time.Time, found bool) {
	t.Helper()
	err := e.d.DB.Pool().QueryRow(context.Background(), `SELECT l.oauth_access_token, l.oauth_refresh_token, l.oauth_expiry
		FROM external_auth_links l JOIN users u ON u.id = l.user_id WHERE u.username = 'alice' AND l.provider_id = $1`, extAuthID).Scan(&access, &refresh, &expiry)
	if err != nil {
		if strings.Contains(err.Error(), "no rows") {
			return "", "", time.Time{}, false
		}
		t.Fatal(err)
	}
	return access, refresh, expiry, true
}

func TestExternalAuth(t *testing.T) {
	e := newExtAuthEnv(t)
	ctx := context.Background()
	pageURL := e.d.URL.String() + codersdk.ExternalAuthPagePath(extAuthID)
	// Every token handed out, to check the audit log holds none.
	var tokens []string

	tpl, _ := coderdtest.ImportTemplate(t, e.owner, e.daemon, "needs-git", codersdk.CreateTemplateVersionRequest{},
		codersdk.CompleteJobRequest{ExternalAuthProviders: []codersdk.TemplateVersionExternalAuthProvider{{ID: extAuthID}}})

	t.Run("not linked", func(t *testing.T) {
		ea, err := e.alice.ExternalAuthByID(ctx, extAuthID)
		if err != nil || ea.Authenticated || ea.DisplayName != extAuthName {
			t.Fatalf("got %+v, %v; want not authenticated, %s", ea, err, extAuthName)
		}
		res := e.agentToken(t, codersdk.ExternalAuthRequest{ID: extAuthID})
		if res.AccessToken != "" || res.Username != "" || res.URL != pageURL {
			t.Errorf("got %+v, want no token and the URL %s", res, pageURL)
		}
		if body := e.get(t, codersdk.ExternalAuthPagePath(extAuthID)); !strings.Contains(body, "Connect "+extAuthName) {
			t.Errorf("the page does not offer Connect %s:\n%s", extAuthName, body)
		}
		versions, err := e.alice.TemplateVersionExternalAuth(ctx, tpl.ActiveVersionID)
		if err != nil || len(versions) != 1 {
			t.Fatalf("template version external auth: got %+v, %v", versions, err)
		}
		if v := versions[0]; v.ID != extAuthID || v.Type != "generic" || v.DisplayName != extAuthName || v.Authenticated || v.AuthenticateURL != pageURL || v.Optional {
			t.Errorf("template version external auth: got %+v", v)
		}
		body := e.get(t, "/workspaces/new?template=needs-git")
		want := `href="` + codersdk.ExternalAuthCallbackPath(extAuthID) + `?redirect=`
		if !strings.Contains(body, "Connect "+extAuthName) || !strings.Contains(body, want) {
			t.Errorf("the create page has no Connect link (%s…):\n%s", want, body)
		}
	})

	t.Run("create refused", func(t *testing.T) {
		_, err := e.alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "refused"})
		if !codersdk.IsStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), extAuthName) || !strings.Contains(err.Error(), pageURL) {
			t.Fatalf("got %v, want 403 naming %s and %s", err, extAuthName, pageURL)
		}
		if j := e.daemon.Acquire(t, 0); j != nil {
			t.Errorf("a refused create queued job %s", j.JobID)
		}
	})

	var token string
	t.Run("listen until linked", func(t *testing.T) {
		got := make(chan codersdk.ExternalAuthResponse, 1)
		errs := make(chan error, 1)
		go func() {
			res, err := e.agent.WorkspaceAgentExternalAuth(ctx, codersdk.ExternalAuthRequest{Match: "https://git.test/org/repo.git", Listen: true})
			if err != nil {
				errs <- err
				return
			}
			got <- res
		}()
		u, body := e.link(t, "")
		if u.Path != codersdk.ExternalAuthPagePath(extAuthID) || !strings.Contains(body, `Linked as <strong id="external-auth-login">`+extAuthSubject) {
			t.Errorf("after linking: got %s: %s", u, body)
		}
		select {
		case res := <-got:
			if res.AccessToken == "" || res.Username != res.AccessToken || res.Password != "" || res.Type != "generic" || res.URL != "" {
				t.Fatalf("got %+v, want the token as username (a generic provider)", res)
			}
			token = res.AccessToken
			tokens = append(tokens, token)
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("the listening request did not answer within 30s of the link")
		}
	})

	t.Run("linked", func(t *testing.T) {
		access, refresh, _, ok := e.rawLink(t)
		if !ok || access == "" || refresh == "" {
			t.Fatalf("stored link: got %q %q %v, want sealed access and refresh tokens", access, refresh, ok)
		}
		if strings.Contains(access, token) || strings.Contains(refresh, token) || access == token {
			t.Error("the database holds the token in the clear")
		}
		ea, err := e.alice.ExternalAuthByID(ctx, extAuthID)
		if err != nil || !ea.Authenticated || ea.User == nil || ea.User.Login != extAuthSubject {
			t.Fatalf("got %+v (user %+v), %v; want authenticated as %s", ea, ea.User, err, extAuthSubject)
		}
		list, err := e.alice.ListExternalAuths(ctx)
		if err != nil || len(list.Providers) != 1 || list.Providers[0].ID != extAuthID || len(list.Links) != 1 ||
			!list.Links[0].Authenticated || !list.Links[0].HasRefreshToken {
			t.Fatalf("list: got %+v, %v", list, err)
		}
		if res := e.agentToken(t, codersdk.ExternalAuthRequest{ID: extAuthID}); res.AccessToken != token {
			t.Errorf("by id: got %+v, want the linked token", res)
		}
		if res := e.agentToken(t, codersdk.ExternalAuthRequest{Match: "https://git.test/org/repo.git"}); res.AccessToken != token {
			t.Errorf("by match: got %+v, want the linked token", res)
		}
		_, err = e.agent.WorkspaceAgentExternalAuth(ctx, codersdk.ExternalAuthRequest{Match: "https://elsewhere.test/repo.git"})
		if !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Errorf("unmatched URL: got %v, want 404", err)
		}
		if _, err := e.owner.ExternalAuthByID(ctx, extAuthID); err != nil {
			t.Fatal(err)
		} else if ea, _ := e.owner.ExternalAuthByID(ctx, extAuthID); ea.Authenticated {
			t.Error("alice's link shows as the owner's")
		}
	})

	t.Run("build carries the token", func(t *testing.T) {
		w, err := e.alice.CreateWorkspace(ctx, codersdk.Me, codersdk.CreateWorkspaceRequest{TemplateID: tpl.ID, Name: "with-git"})
		if err != nil {
			t.Fatal(err)
		}
		j := e.daemon.Acquire(t, 10*time.Second)
		if j == nil || j.WorkspaceID != w.ID {
			t.Fatalf("got job %+v, want the build of %s", j, w.Name)
		}
		if len(j.ExternalAuthProviders) != 1 || j.ExternalAuthProviders[0].ID != extAuthID || j.ExternalAuthProviders[0].AccessToken != token {
			t.Errorf("job external auth: got %+v, want hydra's token", j.ExternalAuthProviders)
		}
		e.daemon.Complete(t, j.JobID, codersdk.CompleteJobRequest{State: []byte(`{}`)})
	})

	t.Run("refresh after expiry", func(t *testing.T) {
		_, oldRefresh, oldExpiry, _ := e.rawLink(t)
		e.skew.Add(int64(2 * time.Hour)) // Hydra's access tokens last 1h
		res := e.agentToken(t, codersdk.ExternalAuthRequest{ID: extAuthID})
		if res.AccessToken == "" || res.AccessToken == token {
			t.Fatalf("got %+v, want a new token", res)
		}
		tokens = append(tokens, res.AccessToken)
		token = res.AccessToken
		_, refresh, expiry, _ := e.rawLink(t)
		if refresh == oldRefresh || !expiry.After(oldExpiry.Add(time.Hour)) {
			t.Errorf("stored link: refresh token changed %v, expiry %s (was %s); want both renewed", refresh != oldRefresh, expiry, oldExpiry)
		}
		if res := e.agentToken(t, codersdk.ExternalAuthRequest{ID: extAuthID}); res.AccessToken != token {
			t.Errorf("a fresh token was refreshed again: got %q, want %q", res.AccessToken, token)
		}
	})

	t.Run("refused refresh unlinks", func(t *testing.T) {
		e.idp.RevokeConsent(t, extAuthSubject)
		e.skew.Add(int64(2 * time.Hour))
		res := e.agentToken(t, codersdk.ExternalAuthRequest{ID: extAuthID})
		if res.AccessToken != "" || res.URL != pageURL {
			t.Fatalf("got %+v, want no token and the link URL", res)
		}
		if _, _, _, ok := e.rawLink(t); ok {
			t.Error("the stale link is still stored")
		}
	})

	t.Run("unlink", func(t *testing.T) {
		e.link(t, "/templates")
		if ea, err := e.alice.ExternalAuthByID(ctx, extAuthID); err != nil || !ea.Authenticated {
			t.Fatalf("relinked: got %+v, %v", ea, err)
		}
		tokens = append(tokens, e.agentToken(t, codersdk.ExternalAuthRequest{ID: extAuthID}).AccessToken)
		// The page's Unlink button.
		res, err := e.browser.PostForm(pageURL, url.Values{"action": {"unlink"}})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "Connect "+extAuthName) {
			t.Fatalf("unlink from the page: got %d: %s", res.StatusCode, body)
		}
		if ea, err := e.alice.ExternalAuthByID(ctx, extAuthID); err != nil || ea.Authenticated {
			t.Fatalf("after unlink: got %+v, %v", ea, err)
		}
		if err := e.alice.UnlinkExternalAuth(ctx, extAuthID); !codersdk.IsStatus(err, http.StatusNotFound) {
			t.Errorf("unlink again: got %v, want 404", err)
		}
		ws, err := e.alice.WorkspaceByOwnerAndName(ctx, codersdk.Me, "with-git")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.alice.CreateWorkspaceBuild(ctx, ws.ID, codersdk.CreateWorkspaceBuildRequest{Transition: codersdk.WorkspaceTransitionStart})
		if !codersdk.IsStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), pageURL) {
			t.Errorf("start without the link: got %v, want 403 with %s", err, pageURL)
		}
	})

	t.Run("audit", func(t *testing.T) {
		logs, err := e.owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "resource_type:external_auth", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, l := range logs.AuditLogs {
			var f map[string]any
			_ = json.Unmarshal(l.AdditionalFields, &f)
			key := string(l.Action)
			if src, _ := f["source"].(string); src != "" {
				key += "/" + src
			}
			if via, _ := f["via"].(string); via != "" {
				key += "/" + via
			}
			count[key]++
			raw, _ := json.Marshal(l)
			for _, tok := range tokens {
				if tok != "" && strings.Contains(string(raw), tok) {
					t.Errorf("audit record %s holds a token: %s", l.Description, raw)
				}
			}
			if l.User == nil || l.User.Username != "alice" {
				t.Errorf("audit record %s: got actor %v, want alice", l.Description, l.User)
			}
		}
		for _, want := range []string{"create", "delete", "delete/refresh", "hand_token/agent", "hand_token/build"} {
			if count[want] == 0 {
				t.Errorf("no %s audit record; got %v", want, count)
			}
		}
		if count["create"] != 2 {
			t.Errorf("got %d link records, want 2", count["create"])
		}
	})
}

// TestExternalAuthUntrusted: the provider's CA is trusted only through
// ExternalAuthHTTPClient; without it the link fails, saying what to do.
func TestExternalAuthUntrusted(t *testing.T) {
	addr := testport.Addr(t)
	idp := testidp.Start(t, "https://"+addr+codersdk.ExternalAuthCallbackPath(extAuthID))
	idp.AddUser(testidp.User{Username: extAuthSubject})
	outbound := &http.Transport{} // the system's roots only
	t.Cleanup(outbound.CloseIdleConnections)
	d := coderdtest.New(t, coderdtest.Options{
		Address: addr, TLS: true,
		ExternalAuth: []externalauth.Config{{
			ID: extAuthID, Type: "generic", ClientID: idp.ClientID, ClientSecret: idp.ClientSecret,
			AuthURL: idp.Issuer + "oauth2/auth", TokenURL: idp.Issuer + "oauth2/token", ValidateURL: idp.Issuer + "userinfo",
			Scopes: []string{"openid", "offline_access"}, DisplayName: extAuthName,
		}},
		ExternalAuthHTTPClient: &http.Client{Transport: outbound, Timeout: 30 * time.Second},
	})
	owner, _ := d.CreateFirstUser(t)
	pool := idp.CertPool()
	pem, err := os.ReadFile(d.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	browser := newBrowser(t, pool)
	browser.Jar.SetCookies(d.URL, []*http.Cookie{{Name: codersdk.SessionTokenCookie, Value: owner.SessionToken, Path: "/"}})
	res, err := browser.Get(d.URL.String() + codersdk.ExternalAuthCallbackPath(extAuthID) + "?login_hint=" + extAuthSubject)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	text := html.UnescapeString(string(body))
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(text, "certificate signed by unknown authority") || !strings.Contains(text, "coder certs import") {
		t.Fatalf("got %d at %s: %s\nwant 502 naming the unknown authority and coder certs import", res.StatusCode, res.Request.URL, text)
	}
	if ea, err := owner.ExternalAuthByID(context.Background(), extAuthID); err != nil || ea.Authenticated {
		t.Errorf("got %+v, %v; want not linked", ea, err)
	}
}
