package coderd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testidp"
	"airgapcoder/internal/testport"
)

// oidcEnv is a deployment signing in through a real Hydra (package
// testidp) over HTTPS, and a browser (an HTTP client with a cookie jar)
// that trusts both.
type oidcEnv struct {
	d       *coderdtest.Deployment
	idp     *testidp.IdP
	browser *http.Client
}

type oidcEnvOptions struct {
	// untrusted leaves the IdP's CA out of coderd's trust.
	untrusted           bool
	disablePasswordAuth bool
	// provisionerPSK lets the test run a provisioner daemon (NewDaemon).
	provisionerPSK string
	config         func(*coderd.OIDCConfig)
	// now is coderd's clock (default time.Now).
	now func() time.Time
}

func newOIDCEnv(t *testing.T, o oidcEnvOptions) *oidcEnv {
	t.Helper()
	addr := testport.Addr(t)
	idp := testidp.Start(t, "https://"+addr+codersdk.OIDCCallbackPath)
	outbound := &http.Transport{}
	if !o.untrusted {
		outbound.TLSClientConfig = &tls.Config{RootCAs: idp.CertPool()}
	}
	t.Cleanup(outbound.CloseIdleConnections)
	cfg := coderd.OIDCConfig{
		IssuerURL: idp.Issuer, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, AllowSignups: true,
		HTTPClient: &http.Client{Transport: outbound, Timeout: 30 * time.Second},
	}
	if o.config != nil {
		o.config(&cfg)
	}
	d := coderdtest.New(t, coderdtest.Options{Address: addr, TLS: true, OIDC: cfg, DisablePasswordAuth: o.disablePasswordAuth, ProvisionerPSK: o.provisionerPSK, Now: o.now})
	pool := idp.CertPool()
	pem, err := os.ReadFile(d.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	return &oidcEnv{d: d, idp: idp, browser: newBrowser(t, pool)}
}

func newBrowser(t *testing.T, pool *x509.CertPool) *http.Client {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Jar: jar, Transport: tr, Timeout: 60 * time.Second}
}

// signIn runs the whole flow as username (login_hint skips the IdP's form)
// and returns the last response's status, URL and body.
func (e *oidcEnv) signIn(t *testing.T, browser *http.Client, username, redirect string) (int, *url.URL, string) {
	t.Helper()
	q := url.Values{"login_hint": {username}}
	if redirect != "" {
		q.Set("redirect", redirect)
	}
	res, err := browser.Get(e.d.URL.String() + codersdk.OIDCCallbackPath + "?" + q.Encode())
	if err != nil {
		t.Fatalf("sign in as %s: %v\nhydra: %s", username, err, e.idp.Output())
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Request.URL, html.UnescapeString(string(body))
}

// sessionClient is a client with the session the browser holds.
func (e *oidcEnv) sessionClient(t *testing.T, browser *http.Client) *codersdk.Client {
	t.Helper()
	c := e.d.Client()
	for _, ck := range browser.Jar.Cookies(e.d.URL) {
		if ck.Name == codersdk.SessionTokenCookie {
			c.SessionToken = ck.Value
		}
	}
	if c.SessionToken == "" {
		t.Fatalf("the browser holds no %s cookie", codersdk.SessionTokenCookie)
	}
	return c
}

func TestOIDCSignIn(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{config: func(c *coderd.OIDCConfig) { c.EmailDomain = []string{"corp.example"} }})
	ctx := context.Background()
	owner, _ := e.d.CreateFirstUser(t)
	e.idp.AddUser(testidp.User{Username: "alice", Subject: "sub-alice", Email: "alice@corp.example", EmailVerified: true, Name: "Alice Liddell"})
	e.idp.AddUser(testidp.User{Username: "mallory", Email: "mallory@corp.example", EmailVerified: false})
	e.idp.AddUser(testidp.User{Username: "eve", Email: "eve@elsewhere.example", EmailVerified: true})
	e.idp.AddUser(testidp.User{Username: "bob", Subject: "sub-bob", Email: "bob@corp.example", EmailVerified: true})

	methods, err := e.d.Client().AuthMethods(ctx)
	if err != nil || !methods.OIDC.Enabled || methods.OIDC.SignInText != "OpenID Connect" || !methods.Password.Enabled {
		t.Fatalf("authmethods: got %+v, %v", methods, err)
	}

	t.Run("new user", func(t *testing.T) {
		status, u, body := e.signIn(t, newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs), "alice", "/templates")
		if status != http.StatusOK || u.Path != "/templates" {
			t.Fatalf("got %d at %s, want 200 at /templates: %s", status, u, body)
		}
	})
	t.Run("new user session", func(t *testing.T) {
		b := newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs)
		if status, u, body := e.signIn(t, b, "alice", ""); status != http.StatusOK || u.Path != "/workspaces" {
			t.Fatalf("got %d at %s, want the workspaces page: %s", status, u, body)
		}
		me, err := e.sessionClient(t, b).User(ctx, codersdk.Me)
		if err != nil {
			t.Fatal(err)
		}
		if me.Username != "alice" || me.Email != "alice@corp.example" || me.Name != "Alice Liddell" {
			t.Errorf("got %+v, want alice created from the claims (once: the second sign-in found her by subject)", me)
		}
	})
	t.Run("existing user linked by verified email", func(t *testing.T) {
		b := newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs)
		if _, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: "carol@corp.example", Username: "carol", Password: coderdtest.FirstUserPassword}); err != nil {
			t.Fatal(err)
		}
		e.idp.AddUser(testidp.User{Username: "carol-idp", Subject: "sub-carol", Email: "carol@corp.example", EmailVerified: true})
		if status, u, body := e.signIn(t, b, "carol-idp", ""); status != http.StatusOK || u.Path != "/workspaces" {
			t.Fatalf("got %d at %s: %s", status, u, body)
		}
		me, err := e.sessionClient(t, b).User(ctx, codersdk.Me)
		if err != nil || me.Username != "carol" {
			t.Fatalf("got %+v, %v; want the existing user carol", me, err)
		}
	})
	refusals := []struct {
		name, username, want string
		setup                func(t *testing.T)
	}{
		{"unverified email", "mallory", "is not verified at the identity provider", nil},
		{"email domain", "eve", `email domain "elsewhere.example" is not allowed`, nil},
		{"suspended", "bob", "is suspended", func(t *testing.T) {
			if _, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: "bob@corp.example", Username: "bob-corp", Password: coderdtest.FirstUserPassword}); err != nil {
				t.Fatal(err)
			}
			if _, err := owner.SuspendUser(ctx, "bob-corp"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			b := newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs)
			status, u, body := e.signIn(t, b, tc.username, "")
			if status != http.StatusForbidden || u.Path != codersdk.OIDCCallbackPath || !strings.Contains(body, tc.want) {
				t.Fatalf("got %d at %s: %s\nwant 403 saying %q", status, u, body, tc.want)
			}
			for _, ck := range b.Jar.Cookies(e.d.URL) {
				if ck.Name == codersdk.SessionTokenCookie {
					t.Errorf("a refused sign-in got a session cookie")
				}
			}
		})
	}

	t.Run("audit", func(t *testing.T) {
		logs, err := owner.AuditLogs(ctx, codersdk.AuditLogsRequest{SearchQuery: "action:login", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, l := range logs.AuditLogs {
			var f map[string]any
			_ = json.Unmarshal(l.AdditionalFields, &f)
			if f["login_type"] != "oidc" {
				continue
			}
			sub, _ := f["subject"].(string)
			key := sub + " " + l.Outcome
			if r, ok := f["refused"].(string); ok {
				key += " " + r
			}
			seen[key] = true
		}
		for _, want := range []string{"sub-alice success", "sub-carol success", "mallory failure email_not_verified", "eve failure email_domain", "sub-bob failure suspended"} {
			if !seen[want] {
				t.Errorf("no audit record %q; got %v", want, seen)
			}
		}
	})
}

func TestOIDCSignupsDisabled(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{config: func(c *coderd.OIDCConfig) { c.AllowSignups = false }})
	e.idp.AddUser(testidp.User{Username: "dan", Email: "dan@corp.example", EmailVerified: true})
	// Before the first owner exists nobody signs up, allowed or not.
	status, _, body := e.signIn(t, e.browser, "dan", "")
	if status != http.StatusForbidden || !strings.Contains(body, "no owner yet") {
		t.Fatalf("before setup: got %d: %s", status, body)
	}
	e.d.CreateFirstUser(t)
	status, _, body = e.signIn(t, newBrowser(t, e.browser.Transport.(*http.Transport).TLSClientConfig.RootCAs), "dan", "")
	if status != http.StatusForbidden || !strings.Contains(body, "sign-ups are disabled") {
		t.Fatalf("got %d: %s", status, body)
	}
}

func TestOIDCRedirectStaysLocal(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{})
	e.d.CreateFirstUser(t)
	e.idp.AddUser(testidp.User{Username: "erin", Email: "erin@corp.example", EmailVerified: true})
	status, u, body := e.signIn(t, e.browser, "erin", "https://evil.example/")
	if status != http.StatusOK || u.Host != e.d.URL.Host || u.Path != "/workspaces" {
		t.Fatalf("got %d at %s, want the workspaces page: %s", status, u, body)
	}
}

func TestOIDCUntrustedCertificate(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{untrusted: true})
	e.d.CreateFirstUser(t)
	res, err := e.browser.Get(e.d.URL.String() + codersdk.OIDCCallbackPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{"OIDC discovery at " + strings.TrimSuffix(e.idp.Issuer, "/") + "/.well-known/openid-configuration", "x509: certificate signed by unknown authority", "coder certs import"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the error page lacks %q: %d %s", want, res.StatusCode, body)
		}
	}
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("got status %d, want 502", res.StatusCode)
	}
}

func TestDisablePasswordAuth(t *testing.T) {
	e := newOIDCEnv(t, oidcEnvOptions{disablePasswordAuth: true})
	ctx := context.Background()
	// The first owner is created with a password and keeps it (as Coder's
	// owners do): CreateFirstUser logs in with it.
	owner, _ := e.d.CreateFirstUser(t)
	if _, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: "m@corp.example", Username: "m", Password: coderdtest.FirstUserPassword}); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.Client().LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "m@corp.example", Password: coderdtest.FirstUserPassword})
	var ae *codersdk.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, "Password sign-in is disabled") {
		t.Fatalf("got %v, want 403 saying password sign-in is disabled", err)
	}
	m, err := e.d.Client().AuthMethods(ctx)
	if err != nil || m.Password.Enabled || !m.OIDC.Enabled {
		t.Fatalf("authmethods: got %+v, %v", m, err)
	}
	e.idp.AddUser(testidp.User{Username: "m-idp", Email: "m@corp.example", EmailVerified: true})
	if status, u, body := e.signIn(t, e.browser, "m-idp", ""); status != http.StatusOK || u.Path != "/workspaces" {
		t.Fatalf("OIDC sign-in: got %d at %s: %s", status, u, body)
	}
}

// TestPasswordAuthDisabledOwnersKeepIt needs no identity provider: with
// --disable-password-auth a member's password login is refused (403, what
// to do instead), an owner's still works (as Coder's, against lock-out),
// and the login page keeps the password form only behind the owners'
// fold.
func TestPasswordAuthDisabledOwnersKeepIt(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{DisablePasswordAuth: true})
	ctx := context.Background()
	owner, _ := d.CreateFirstUser(t) // logs in with the owner's password
	if _, err := owner.CreateUser(ctx, codersdk.CreateUserRequest{Email: "m@example.com", Username: "m", Password: coderdtest.FirstUserPassword}); err != nil {
		t.Fatal(err)
	}
	_, err := d.Client().LoginWithPassword(ctx, codersdk.LoginWithPasswordRequest{Email: "m@example.com", Password: coderdtest.FirstUserPassword})
	var ae *codersdk.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, "Password sign-in is disabled") {
		t.Fatalf("got %v, want 403 saying password sign-in is disabled", err)
	}
	m, err := d.Client().AuthMethods(ctx)
	if err != nil || m.Password.Enabled || m.OIDC.Enabled {
		t.Fatalf("authmethods: got %+v, %v; want neither enabled", m, err)
	}
	status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/login", "", nil, "")
	if status != http.StatusOK || !strings.Contains(string(body), `id="owner-password"`) || !strings.Contains(string(body), `id="password"`) ||
		strings.Contains(string(body), "oidc-sign-in") {
		t.Errorf("login page: got %d %s", status, body)
	}
	status, body = coderdtest.Do(t, http.MethodGet, d.URL.String()+codersdk.OIDCCallbackPath, "", nil, "")
	if status != http.StatusNotFound {
		t.Errorf("callback without OIDC: got %s, want 404", coderdtest.String(status, body))
	}
}

func TestAuthMethodsDefault(t *testing.T) {
	d := coderdtest.New(t, coderdtest.Options{})
	m, err := d.Client().AuthMethods(context.Background())
	if err != nil || !m.Password.Enabled || m.OIDC.Enabled {
		t.Fatalf("got %+v, %v; want password only", m, err)
	}
	status, body := coderdtest.Do(t, http.MethodGet, d.URL.String()+"/login", "", nil, "")
	if status != http.StatusOK || strings.Contains(string(body), "owner-password") || !strings.Contains(string(body), `id="password"`) {
		t.Errorf("login page: got %d %s", status, body)
	}
}
