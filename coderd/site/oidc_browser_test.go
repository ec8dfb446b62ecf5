package site_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/coderd/codersdk"
	"airgapcoder/internal/testidp"
	"airgapcoder/internal/testport"
)

// TestBrowserOIDCSignIn: headless Chromium clicks "Sign in with …" on the
// login page, signs in on a real Hydra's login page, and lands on the
// workspaces page as the user the first sign-in created. coderd trusts
// Hydra only through the CA given to its OIDC client; the browser is told
// to accept both test certificates (what it trusts is not under test).
func TestBrowserOIDCSignIn(t *testing.T) {
	t.Parallel()
	addr := testport.Addr(t)
	idp := testidp.Start(t, "https://"+addr+codersdk.OIDCCallbackPath)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: idp.CertPool()}}
	t.Cleanup(tr.CloseIdleConnections)
	d := coderdtest.New(t, coderdtest.Options{Address: addr, TLS: true, OIDC: coderd.OIDCConfig{
		IssuerURL: idp.Issuer, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, AllowSignups: true,
		SignInText: "Corp SSO", HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}})
	d.CreateFirstUser(t)
	idp.AddUser(testidp.User{Username: "alice", Subject: "sub-alice", Email: "alice@corp.example", EmailVerified: true, Name: "Alice"})

	b := newBrowser(t, d.URL, chromedp.Flag("ignore-certificate-errors", true))
	b.do("open the login page", chromedp.Navigate(b.url("/login")), chromedp.WaitVisible(chromedp.CSS("#oidc-sign-in")))
	if button := get(b, "read the button", chromedp.Text(chromedp.CSS("#oidc-sign-in"))); button != "Sign in with Corp SSO" {
		t.Errorf("got button %q, want %q", button, "Sign in with Corp SSO")
	}
	b.do("sign in at the identity provider",
		chromedp.Click(chromedp.CSS("#oidc-sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), "alice"),
		chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	if page := get(b, "read the page", chromedp.Text(chromedp.CSS("body"))); !strings.Contains(page, "alice") {
		t.Errorf("the workspaces page does not show alice signed in: %s", page)
	}
}
