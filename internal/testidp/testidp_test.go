package testidp_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"airgapcoder/internal/testidp"
	"airgapcoder/internal/testoidc"
)

// claims are the ID token claims the login app sets: the standard ones
// and the roles.
type claims struct {
	testoidc.Claims
	Roles []string `json:"roles"`
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

// flow is one relying party's flow against Hydra, as the client Start
// registered, with alice added.
type flow struct {
	*testoidc.Flow
	idp *testidp.IdP
}

func newFlow(t *testing.T) *flow {
	t.Helper()
	cb := testoidc.NewCallback(t)
	idp := testidp.Start(t, cb.URL)
	idp.AddUser(alice)
	f := testoidc.NewFlow(t, idp.HTTPClient(), idp.Issuer, cb, idp.ClientID, idp.ClientSecret,
		oidc.ScopeOpenID, "email", "profile", "groups", oidc.ScopeOfflineAccess)
	return &flow{Flow: f, idp: idp}
}

// verify checks an ID token's signature, audience, issuer and nonce and
// returns its claims.
func (f *flow) verify(t *testing.T, tok *oauth2.Token) (*oidc.IDToken, claims) {
	t.Helper()
	var c claims
	idt := f.Verify(t, tok, &c)
	return idt, c
}

func checkClaims(t *testing.T, c claims) {
	t.Helper()
	want := claims{
		Claims: testoidc.Claims{Email: alice.Email, EmailVerified: true, Name: alice.Name, PreferredUsername: alice.Username, Groups: alice.Groups},
		Roles:  alice.Roles,
	}
	if !c.Claims.Equal(want.Claims) || !slices.Equal(c.Roles, want.Roles) {
		t.Errorf("claims = %+v, want %+v", c, want)
	}
}

// get and postForm send a request from c and return the answer with its
// text, failing the test when it gets none.
func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	return readAnswer(t, resp, err)
}

func postForm(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	return readAnswer(t, resp, err)
}

func readAnswer(t *testing.T, resp *http.Response, err error) (*http.Response, string) {
	t.Helper()
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
	if got, want := f.Provider.Endpoint().TokenURL, f.idp.Issuer+"oauth2/token"; got != want {
		t.Errorf("token URL = %q, want %q", got, want)
	}

	resp, body := get(t, f.Client, f.AuthURL(oauth2.SetAuthURLParam("login_hint", alice.Username)))
	if resp.StatusCode != http.StatusOK || body != testoidc.CallbackBody {
		t.Fatalf("flow ended at %s with %d %q\n%s", resp.Request.URL, resp.StatusCode, body, f.idp.Output())
	}
	code := f.Code(t)

	// The verifier is checked: a wrong one gets no token.
	if _, err := f.Config.Exchange(f.Ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil {
		t.Fatal("exchange with a wrong PKCE verifier succeeded")
	}
	// Hydra revokes a code after a failed exchange; sign in again.
	resp, body = get(t, f.Client, f.AuthURL(oauth2.SetAuthURLParam("login_hint", alice.Username)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second flow ended with %d %q", resp.StatusCode, body)
	}
	tok := f.Exchange(t)
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

	var ic claims
	info := f.UserInfo(t, tok, &ic)
	if info.Subject != alice.Subject {
		t.Errorf("userinfo sub = %q, want %q", info.Subject, alice.Subject)
	}
	checkClaims(t, ic)

	refreshed := f.Refresh(t, tok) // (a refresh token: offline_access)
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
	resp, body := get(t, f.Client, f.AuthURL())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="username"`) || !strings.Contains(body, `id="sign-in"`) {
		t.Fatalf("got %d from %s, want the login page:\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	page := resp.Request.URL
	challenge := page.Query().Get("login_challenge")
	submit := page.ResolveReference(&url.URL{Path: "/login"}).String()

	resp, body = postForm(t, f.Client, submit, url.Values{"login_challenge": {challenge}, "username": {"mallory"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `Unknown user &#34;mallory&#34;`) || !strings.Contains(body, `id="username"`) {
		t.Fatalf("unknown user: got %d, want 401 and the form with an error:\n%s", resp.StatusCode, body)
	}
	if got := f.idp.Logins(); got != 0 {
		t.Errorf("Logins() = %d, want 0", got)
	}

	resp, body = postForm(t, f.Client, submit, url.Values{"login_challenge": {challenge}, "username": {alice.Username}})
	if resp.StatusCode != http.StatusOK || body != testoidc.CallbackBody {
		t.Fatalf("sign in: ended at %s with %d %q", resp.Request.URL, resp.StatusCode, body)
	}
	tok := f.Exchange(t)
	_, c := f.verify(t, tok)
	checkClaims(t, c)
	if got := f.idp.Logins(); got != 1 {
		t.Errorf("Logins() = %d, want 1", got)
	}
}

func TestClientSecretPost(t *testing.T) {
	f := newFlow(t)
	f.Config.ClientID, f.Config.ClientSecret = f.idp.AddClient(t, "client_secret_post", f.Callback.URL)
	f.Config.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	resp, body := get(t, f.Client, f.AuthURL(oauth2.SetAuthURLParam("login_hint", alice.Username)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("flow ended at %s with %d %q", resp.Request.URL, resp.StatusCode, body)
	}
	tok := f.Exchange(t)
	_, c := f.verify(t, tok)
	checkClaims(t, c)
}

// TestUntrustedCA: without the test CA, discovery fails with Go's
// unknown-authority error, which other tests look for; with it, it works.
func TestUntrustedCA(t *testing.T) {
	idp := testidp.Start(t)
	testoidc.CheckTrust(t, idp.Issuer, idp.HTTPClient())
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
