// Package testidp runs a real OpenID Connect provider for tests: Ory Hydra,
// built by scripts/install-deps.sh from the module pinned in
// tools/hydra/go.mod, on loopback over HTTPS with a certificate from a fresh
// test CA, plus the login and consent app that Hydra delegates sign-in to,
// which the test owns: it knows the users the test added and puts whatever
// email, groups and roles the test gave them into the ID token.
//
// Trust: nothing trusts the test CA unless told to. A client must be given
// [IdP.CAFile] (as `coder certs import` gives it to the appliance); one that
// is not fails on the first request with Go's "x509: certificate signed by
// unknown authority".
//
// It is for tests only. It never skips: a missing Hydra binary fails the
// test with the command that builds it.
package testidp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testpki"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testserver"
	"airgapcoder/internal/testtier"
)

// HydraVersion is the Hydra release tools/hydra/go.mod pins; the binary is
// cached under a folder named after it.
const HydraVersion = "v2.3.0"

// startTimeout bounds Hydra's start, from exec to a served discovery
// document.
const startTimeout = 60 * time.Second

// HydraPath returns the Hydra binary scripts/install-deps.sh built:
// $XDG_CACHE_HOME/airgapcoder/hydra-VERSION/hydra ($HOME/.cache when
// XDG_CACHE_HOME is unset). It fails the test, with the command that builds
// it, when it is missing.
func HydraPath(t testing.TB) string {
	t.Helper()
	testtier.Heavy(t, "runs Ory Hydra")
	dir, err := testserver.CacheDir("hydra", HydraVersion)
	path := filepath.Join(dir, "hydra")
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		t.Fatalf("testidp: Ory Hydra %s is not built (%v): run ./scripts/install-deps.sh, which builds it from tools/hydra", HydraVersion, err)
	}
	return path
}

// IdP is a running Hydra with its login and consent app and one registered
// OAuth2 client. Its methods are safe for concurrent use.
type IdP struct {
	// Issuer is the issuer URL as Hydra advertises it in discovery and in
	// the "iss" claim: "https://127.0.0.1:PORT/", with the trailing slash.
	Issuer string
	// CAFile is the PEM file of the test CA that signed the certificate of
	// Hydra's public port and of the login app (what `coder certs import`
	// would import).
	CAFile string
	// ClientID and ClientSecret identify the OAuth2 client Start registered.
	// It authenticates at the token endpoint with client_secret_basic (what
	// golang.org/x/oauth2 tries first); see AddClient for
	// client_secret_post.
	ClientID     string
	ClientSecret string

	// AdminURL is Hydra's admin API, plain HTTP on loopback
	// ("http://127.0.0.1:PORT").
	AdminURL string
	// LoginURL is the login app's base URL ("https://127.0.0.1:PORT"), on
	// the same test CA as the issuer.
	LoginURL string

	admin  testserver.JSONAPI // at AdminURL
	caPool *x509.CertPool
	output func() string

	mu     sync.Mutex
	users  map[string]User // by Username
	logins int
}

// User is someone the login page accepts.
type User struct {
	// Username is what is typed in the login form, or given as login_hint.
	Username string
	// Subject is the "sub" claim; empty means Username.
	Subject string
	// Email is the "email" claim, left out when empty.
	Email string
	// EmailVerified is the "email_verified" claim.
	EmailVerified bool
	// Name is the "name" claim, left out when empty.
	Name string
	// Groups is the "groups" claim, left out when nil (an empty, non-nil
	// slice is an empty claim).
	Groups []string
	// Roles is the "roles" claim, left out when nil like Groups.
	Roles []string
}

// Start runs Hydra on loopback over HTTPS with a certificate from a fresh
// test CA and DSN=memory, and the login and consent app the test owns, and
// registers one OAuth2 client (authorization code and refresh token grants,
// PKCE allowed, client_secret_basic, scopes openid email profile groups
// offline_access) with redirectURIs. Everything stops at t.Cleanup.
func Start(t testing.TB, redirectURIs ...string) *IdP {
	t.Helper()
	hydra := HydraPath(t)
	dir := t.TempDir()
	certs, err := testpki.New(dir)
	if err != nil {
		t.Fatalf("testidp: make test CA: %v", err)
	}

	p := &IdP{
		CAFile: certs.CAFile,
		admin:  testserver.JSONAPI{Client: &http.Client{Timeout: 10 * time.Second}},
		caPool: certs.CertPool(),
		users:  map[string]User{},
	}
	t.Cleanup(p.admin.Client.CloseIdleConnections)

	app := httptest.NewUnstartedServer(p.loginApp())
	app.Config.ReadHeaderTimeout = 10 * time.Second
	app.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Cert}}
	app.StartTLS()
	t.Cleanup(app.Close)
	p.LoginURL = app.URL

	publicPort, adminPort := testport.Port(t), testport.Port(t)
	p.Issuer = fmt.Sprintf("https://127.0.0.1:%d/", publicPort)
	p.AdminURL = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	p.admin.BaseURL = p.AdminURL
	cfgPath := filepath.Join(dir, "hydra.json")
	if err := writeConfig(cfgPath, hydraConfig(p.Issuer, app.URL, publicPort, adminPort, certs)); err != nil {
		t.Fatalf("testidp: write Hydra config: %v", err)
	}

	// A minimal environment: Hydra reads every setting from variables too
	// (DSN, LOG_LEVEL, URLS_…), and the test's environment must not reach
	// into it.
	cmd := exec.Command(hydra, "serve", "all", "--config", cfgPath, "--sqa-opt-out")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir, "SQA_OPT_OUT=true"}
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p.output = out.String
	exited, err := testserver.Start(t, cmd)
	if err != nil {
		t.Fatalf("testidp: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := p.waitReady(ctx, exited); err != nil {
		t.Fatalf("testidp: Hydra did not start: %v\n%s", err, out.String())
	}
	p.ClientID, p.ClientSecret, err = p.addClient(ctx, "client_secret_basic", redirectURIs)
	if err != nil {
		t.Fatalf("testidp: register OAuth2 client: %v\n%s", err, out.String())
	}
	return p
}

// AddClient registers another OAuth2 client like Start's, authenticating at
// the token endpoint with authMethod ("client_secret_basic" or
// "client_secret_post": a Hydra client accepts exactly one), and returns its
// ID and secret.
func (p *IdP) AddClient(t testing.TB, authMethod string, redirectURIs ...string) (id, secret string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, secret, err := p.addClient(ctx, authMethod, redirectURIs)
	if err != nil {
		t.Fatalf("testidp: register OAuth2 client: %v", err)
	}
	return id, secret
}

// AddUser registers a user the login page accepts; a user of the same
// Username is replaced. Claims are read at consent, so a change shows in
// the next sign-in, not in a refresh of an earlier one.
func (p *IdP) AddUser(u User) {
	if u.Subject == "" {
		u.Subject = u.Username
	}
	u.Groups = cloneNonNil(u.Groups)
	u.Roles = cloneNonNil(u.Roles)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users[u.Username] = u
}

// Logins counts completed logins: the login app accepted a user, from the
// form or a login_hint. A token refresh is not a login.
func (p *IdP) Logins() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logins
}

// CertPool returns a pool holding only the test CA.
func (p *IdP) CertPool() *x509.CertPool { return p.caPool.Clone() }

// HTTPClient returns a client that trusts the test CA (and nothing else),
// keeps cookies and follows redirects: a browser for tests that drive the
// flow from Go. Each call has its own transport: close its idle connections
// at the test's end (goleak counts their goroutines).
func (p *IdP) HTTPClient() *http.Client { return testserver.BrowserClient(p.CertPool()) }

// Output returns what Hydra has logged so far, for a failure message.
func (p *IdP) Output() string { return p.output() }

// waitReady polls Hydra's admin readiness and the public discovery
// document until both answer, ctx ends or Hydra exits.
func (p *IdP) waitReady(ctx context.Context, exited <-chan struct{}) error {
	// No timeout but ctx's: Hydra makes its ID token signing key on the
	// first discovery request, and a request given up on makes it start
	// over (on a loaded machine the key takes longer than any short
	// timeout, and Hydra never became ready).
	public := &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.caPool}},
	}
	defer public.CloseIdleConnections()
	return testserver.WaitReady(ctx, exited, 50*time.Millisecond, func() error {
		if err := testserver.Get(ctx, p.admin.Client, p.AdminURL+"/health/ready"); err != nil {
			return err
		}
		return testserver.Get(ctx, public, p.Issuer+".well-known/openid-configuration")
	})
}

// hydraConfig is Hydra's configuration file: public port on HTTPS with the
// test certificate, admin port in plain HTTP, both on 127.0.0.1, the login
// app's URLs and an in-memory SQLite database.
func hydraConfig(issuer, app string, publicPort, adminPort int, c *testpki.PKI) map[string]any {
	tlsFiles := map[string]any{
		"enabled": true,
		"cert":    map[string]any{"path": c.CertFile},
		"key":     map[string]any{"path": c.KeyFile},
	}
	return map[string]any{
		"dsn": "memory",
		"log": map[string]any{"level": "warn", "leak_sensitive_values": true},
		"serve": map[string]any{
			"public": map[string]any{"host": "127.0.0.1", "port": publicPort, "tls": tlsFiles},
			"admin":  map[string]any{"host": "127.0.0.1", "port": adminPort, "tls": map[string]any{"enabled": false}},
		},
		"urls": map[string]any{
			"self":    map[string]any{"issuer": issuer},
			"login":   app + "/login",
			"consent": app + "/consent",
			"error":   app + "/error",
			"logout":  app + "/logout",
		},
		"secrets": map[string]any{"system": []string{testserver.RandomString(32)}},
		"oauth2":  map[string]any{"expose_internal_errors": true},
		"webfinger": map[string]any{"oidc_discovery": map[string]any{
			"supported_scope":  []string{"email", "profile", "groups"},
			"supported_claims": []string{"email", "email_verified", "name", "preferred_username", "groups", "roles"},
		}},
	}
}

func writeConfig(path string, cfg map[string]any) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// addClient registers a confidential client through the admin API.
func (p *IdP) addClient(ctx context.Context, authMethod string, redirectURIs []string) (id, secret string, err error) {
	if redirectURIs == nil {
		redirectURIs = []string{}
	}
	req := map[string]any{
		"client_secret":              testserver.RandomString(32),
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"scope":                      "openid email profile groups offline_access",
		"redirect_uris":              redirectURIs,
		"token_endpoint_auth_method": authMethod,
	}
	var resp struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := p.call(ctx, http.MethodPost, "/admin/clients", req, &resp); err != nil {
		return "", "", err
	}
	if resp.ClientID == "" || resp.ClientSecret == "" {
		return "", "", errors.New("hydra returned no client ID or secret")
	}
	return resp.ClientID, resp.ClientSecret, nil
}

// RevokeConsent revokes every consent the subject gave, and with them the
// access and refresh tokens Hydra issued to it (the IdP ending the
// subject's sessions, as disabling a user at the IdP does).
func (p *IdP) RevokeConsent(t testing.TB, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := url.Values{"subject": {subject}, "all": {"true"}}
	if err := p.call(ctx, http.MethodDelete, "/admin/oauth2/auth/sessions/consent?"+q.Encode(), nil, nil); err != nil {
		t.Fatalf("testidp: revoke %s's consent: %v", subject, err)
	}
}

// call sends a JSON request to Hydra's admin API and decodes the answer
// into out (when not nil).
func (p *IdP) call(ctx context.Context, method, path string, in, out any) error {
	return p.admin.Call(ctx, method, path, in, out)
}

func cloneNonNil(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}
