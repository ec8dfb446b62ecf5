package testidp_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"airgapcoder/internal/testidp"
)

// callback is the relying party's redirect URI: it records the query
// Hydra sends the browser back with.
type callback struct {
	URL string // the redirect URI

	mu    sync.Mutex
	query url.Values
}

func newCallback(t *testing.T) *callback {
	t.Helper()
	cb := &callback{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r) // a browser's /favicon.ico, say: not the redirect
			return
		}
		cb.mu.Lock()
		cb.query = r.URL.Query()
		cb.mu.Unlock()
		io.WriteString(w, "signed in")
	}))
	t.Cleanup(srv.Close)
	cb.URL = srv.URL + "/callback"
	return cb
}

func (cb *callback) got() url.Values {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.query
}

// claims are the ID token claims the login app sets.
type claims struct {
	Email             string   `json:"email"`
	EmailVerified     bool     `json:"email_verified"`
	Name              string   `json:"name"`
	PreferredUsername string   `json:"preferred_username"`
	Groups            []string `json:"groups"`
	Roles             []string `json:"roles"`
}

var alice = testidp.User{
	Username:      "alice",
	Subject:       "alice-subject",
	Email:         "alice@corp.example",
	EmailVerified: true,
	Name:          "Alice Admin",
	Groups:        []string{"developers", "ops"},
	Roles:         []string{"template-admin"},
}

// flow is one relying party's view of an authorization-code flow with PKCE
// and nonce.
type flow struct {
	idp      *testidp.IdP
	cb       *callback
	client   *http.Client
	ctx      context.Context
	provider *oidc.Provider
	conf     oauth2.Config
	state    string
	nonce    string
	verifier string
}

func newFlow(t *testing.T) *flow {
	t.Helper()
	cb := newCallback(t)
	idp := testidp.Start(t, cb.URL)
	idp.AddUser(alice)
	client := idp.HTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	ctx := oidc.ClientContext(t.Context(), client)
	provider, err := oidc.NewProvider(ctx, idp.Issuer)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	return &flow{
		idp: idp, cb: cb, client: client, ctx: ctx, provider: provider,
		conf: oauth2.Config{
			ClientID:     idp.ClientID,
			ClientSecret: idp.ClientSecret,
			Endpoint:     provider.Endpoint(),
			RedirectURL:  cb.URL,
			Scopes:       []string{oidc.ScopeOpenID, "email", "profile", "groups", oidc.ScopeOfflineAccess},
		},
		state:    oauth2.GenerateVerifier(),
		nonce:    oauth2.GenerateVerifier(),
		verifier: oauth2.GenerateVerifier(),
	}
}

func (f *flow) authURL(opts ...oauth2.AuthCodeOption) string {
	opts = append(opts, oidc.Nonce(f.nonce), oauth2.S256ChallengeOption(f.verifier))
	return f.conf.AuthCodeURL(f.state, opts...)
}

// code returns the code the callback got, checking the state.
func (f *flow) code(t *testing.T) string {
	t.Helper()
	q := f.cb.got()
	if q.Get("error") != "" {
		t.Fatalf("callback got error %q: %s", q.Get("error"), q.Get("error_description"))
	}
	if got := q.Get("state"); got != f.state {
		t.Fatalf("callback state = %q, want %q", got, f.state)
	}
	if q.Get("code") == "" {
		t.Fatalf("callback got no code: %v", q)
	}
	return q.Get("code")
}

// verify checks an ID token's signature, audience, issuer and nonce and
// returns its claims.
func (f *flow) verify(t *testing.T, tok *oauth2.Token) (*oidc.IDToken, claims) {
	t.Helper()
	raw, ok := tok.Extra("id_token").(string)
	if !ok {
		t.Fatal("token response has no id_token")
	}
	idt, err := f.provider.Verifier(&oidc.Config{ClientID: f.conf.ClientID}).Verify(f.ctx, raw)
	if err != nil {
		t.Fatalf("verify ID token: %v", err)
	}
	if idt.Nonce != f.nonce {
		t.Errorf("nonce = %q, want %q", idt.Nonce, f.nonce)
	}
	var c claims
	if err := idt.Claims(&c); err != nil {
		t.Fatal(err)
	}
	return idt, c
}

func checkClaims(t *testing.T, c claims) {
	t.Helper()
	want := claims{
		Email: alice.Email, EmailVerified: true, Name: alice.Name, PreferredUsername: alice.Username,
		Groups: alice.Groups, Roles: alice.Roles,
	}
	if c.Email != want.Email || c.EmailVerified != want.EmailVerified || c.Name != want.Name ||
		c.PreferredUsername != want.PreferredUsername || !slices.Equal(c.Groups, want.Groups) || !slices.Equal(c.Roles, want.Roles) {
		t.Errorf("claims = %+v, want %+v", c, want)
	}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestAuthorizationCodeFlowWithLoginHint(t *testing.T) {
	f := newFlow(t)
	if got, want := f.provider.Endpoint().TokenURL, f.idp.Issuer+"oauth2/token"; got != want {
		t.Errorf("token URL = %q, want %q", got, want)
	}

	resp, body := get(t, f.client, f.authURL(oauth2.SetAuthURLParam("login_hint", alice.Username)))
	if resp.StatusCode != http.StatusOK || body != "signed in" {
		t.Fatalf("flow ended at %s with %d %q\n%s", resp.Request.URL, resp.StatusCode, body, f.idp.Output())
	}
	code := f.code(t)

	// The verifier is checked: a wrong one gets no token.
	if _, err := f.conf.Exchange(f.ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil {
		t.Fatal("exchange with a wrong PKCE verifier succeeded")
	}
	// Hydra revokes a code after a failed exchange; sign in again.
	resp, body = get(t, f.client, f.authURL(oauth2.SetAuthURLParam("login_hint", alice.Username)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second flow ended with %d %q", resp.StatusCode, body)
	}
	tok, err := f.conf.Exchange(f.ctx, f.code(t), oauth2.VerifierOption(f.verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	idt, c := f.verify(t, tok)
	if idt.Subject != alice.Subject {
		t.Errorf("sub = %q, want %q", idt.Subject, alice.Subject)
	}
	if idt.Issuer != f.idp.Issuer {
		t.Errorf("iss = %q, want %q", idt.Issuer, f.idp.Issuer)
	}
	checkClaims(t, c)
	if got := f.idp.Logins(); got != 2 {
		t.Errorf("Logins() = %d, want 2", got)
	}

	info, err := f.provider.UserInfo(f.ctx, oauth2.StaticTokenSource(tok))
	if err != nil {
		t.Fatalf("userinfo: %v", err)
	}
	var ic claims
	if err := info.Claims(&ic); err != nil {
		t.Fatal(err)
	}
	if info.Subject != alice.Subject {
		t.Errorf("userinfo sub = %q, want %q", info.Subject, alice.Subject)
	}
	checkClaims(t, ic)

	if tok.RefreshToken == "" {
		t.Fatal("no refresh token (offline_access)")
	}
	expired := &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Unix(1, 0)}
	refreshed, err := f.conf.TokenSource(f.ctx, expired).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if refreshed.AccessToken == "" || refreshed.AccessToken == tok.AccessToken {
		t.Errorf("refresh gave access token %q, want a new one", refreshed.AccessToken)
	}
	// Hydra issues a new ID token on refresh, with the claims of the
	// consent.
	_, rc := f.verify(t, refreshed)
	checkClaims(t, rc)
	if got := f.idp.Logins(); got != 2 {
		t.Errorf("Logins() after refresh = %d, want 2", got)
	}
}

func TestLoginForm(t *testing.T) {
	f := newFlow(t)
	resp, body := get(t, f.client, f.authURL())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="username"`) || !strings.Contains(body, `id="sign-in"`) {
		t.Fatalf("got %d from %s, want the login page:\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	page := resp.Request.URL
	challenge := page.Query().Get("login_challenge")
	submit := page.ResolveReference(&url.URL{Path: "/login"}).String()

	resp, err := f.client.PostForm(submit, url.Values{"login_challenge": {challenge}, "username": {"mallory"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `Unknown user &#34;mallory&#34;`) || !strings.Contains(string(b), `id="username"`) {
		t.Fatalf("unknown user: got %d, want 401 and the form with an error:\n%s", resp.StatusCode, b)
	}
	if got := f.idp.Logins(); got != 0 {
		t.Errorf("Logins() = %d, want 0", got)
	}

	resp, err = f.client.PostForm(submit, url.Values{"login_challenge": {challenge}, "username": {alice.Username}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "signed in" {
		t.Fatalf("sign in: ended at %s with %d %q", resp.Request.URL, resp.StatusCode, b)
	}
	tok, err := f.conf.Exchange(f.ctx, f.code(t), oauth2.VerifierOption(f.verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	_, c := f.verify(t, tok)
	checkClaims(t, c)
	if got := f.idp.Logins(); got != 1 {
		t.Errorf("Logins() = %d, want 1", got)
	}
}

func TestClientSecretPost(t *testing.T) {
	f := newFlow(t)
	f.conf.ClientID, f.conf.ClientSecret = f.idp.AddClient(t, "client_secret_post", f.cb.URL)
	f.conf.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	resp, body := get(t, f.client, f.authURL(oauth2.SetAuthURLParam("login_hint", alice.Username)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("flow ended at %s with %d %q", resp.Request.URL, resp.StatusCode, body)
	}
	tok, err := f.conf.Exchange(f.ctx, f.code(t), oauth2.VerifierOption(f.verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	_, c := f.verify(t, tok)
	checkClaims(t, c)
}

// TestUntrustedCA: without the test CA, discovery fails with Go's
// unknown-authority error, which other tests look for.
func TestUntrustedCA(t *testing.T) {
	idp := testidp.Start(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
	t.Cleanup(client.CloseIdleConnections)
	_, err := oidc.NewProvider(oidc.ClientContext(t.Context(), client), idp.Issuer)
	if err == nil {
		t.Fatal("discovery without the test CA succeeded")
	}
	const want = "x509: certificate signed by unknown authority"
	t.Logf("discovery without the CA: %v", err)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("discovery error = %q, want it to contain %q", err, want)
	}
	// The CA file is what makes it work.
	trusting := idp.HTTPClient()
	t.Cleanup(trusting.CloseIdleConnections)
	if _, err := oidc.NewProvider(oidc.ClientContext(t.Context(), trusting), idp.Issuer); err != nil {
		t.Errorf("discovery with the CA: %v", err)
	}
}

// TestHydraVersion keeps HydraVersion in step with tools/hydra/go.mod, which
// install-deps builds from.
func TestHydraVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tools", "hydra", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/ory/hydra/v2 " + testidp.HydraVersion + " "; !strings.Contains(string(b), want) {
		t.Errorf("tools/hydra/go.mod does not require %q", strings.TrimSpace(want))
	}
	_ = testidp.HydraPath(t)
}
