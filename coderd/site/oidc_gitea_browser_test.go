package site_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/internal/testgitea"
	"airgapcoder/internal/testport"
)

// TestBrowserOIDCSignInGitea: headless Chromium clicks "Sign in with
// Gitea" on the login page, signs in on a real Gitea's own login page
// (username, password, its sign-in button), authorizes the deployment's
// OAuth2 application on Gitea's authorize page (shown at a user's first
// authorization), and lands on the workspaces page as the user the first
// sign-in created. coderd trusts Gitea only through the CA given to its
// OIDC client; the browser is told to accept both test certificates (what
// it trusts is not under test).
func TestBrowserOIDCSignInGitea(t *testing.T) {
	t.Parallel()
	g := testgitea.Start(t, testgitea.Options{})
	addr := testport.Addr(t)
	d := coderdtest.New(t, coderdtest.Options{Address: addr, TLS: true, OIDC: coderdtest.GiteaOIDC(t, g, addr)})
	owner, _ := d.CreateFirstUser(t)
	alice := testgitea.User{Username: "alice", Email: "alice@corp.example", Password: "alice-password", FullName: "Alice Liddell"}
	g.AddUser(t, alice)

	b := newBrowser(t, d.URL, chromedp.Flag("ignore-certificate-errors", true))
	b.do("open the login page", chromedp.Navigate(b.url("/login")), chromedp.WaitVisible(chromedp.CSS("#oidc-sign-in")))
	if button := get(b, "read the button", chromedp.Text(chromedp.CSS("#oidc-sign-in"))); button != "Sign in with Gitea" {
		t.Errorf("got button %q, want %q", button, "Sign in with Gitea")
	}
	b.do("follow the button", chromedp.Click(chromedp.CSS("#oidc-sign-in")))
	b.do("sign in on Gitea's login page",
		chromedp.WaitVisible(chromedp.CSS("#"+testgitea.UsernameField)),
		chromedp.SendKeys(chromedp.CSS("#"+testgitea.UsernameField), alice.Username),
		chromedp.SendKeys(chromedp.CSS("#"+testgitea.PasswordField), alice.Password),
		chromedp.Click(chromedp.CSS(testgitea.SignInButton)))
	b.do("authorize the application on Gitea's page",
		chromedp.WaitVisible(chromedp.CSS("#"+testgitea.GrantButtonID)),
		chromedp.Click(chromedp.CSS("#"+testgitea.GrantButtonID)))
	b.do("land on the workspaces page", chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	if loc := b.location(); !strings.HasPrefix(loc, d.URL.String()+"/workspaces") {
		t.Errorf("after sign-in the browser is at %q, want the workspaces page", loc)
	}
	if page := get(b, "read the page", chromedp.Text(chromedp.CSS("body"))); !strings.Contains(page, "alice") {
		t.Errorf("the workspaces page does not show alice signed in: %s", page)
	}
	// The account the sign-in made carries Gitea's claims.
	u, err := owner.User(t.Context(), "alice")
	if err != nil || u.Email != alice.Email || u.Name != alice.FullName {
		t.Errorf("the user the sign-in made: got %+v, %v; want alice with Gitea's email and name", u, err)
	}
}
