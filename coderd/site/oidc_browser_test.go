package site_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/syncbuf"
	"airgapcoder/internal/testidp"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// newOIDCDeployment starts a real Hydra and an HTTPS deployment signing in
// through it ("Corp SSO", signups allowed) with its first owner created.
// coderd trusts Hydra only through the CA given to its OIDC client. opts
// adds to those options (its Address, TLS and OIDC are set here).
func newOIDCDeployment(t *testing.T, opts coderdtest.Options) (*coderdtest.Deployment, *testidp.IdP) {
	t.Helper()
	addr := testport.Addr(t)
	idp := testidp.Start(t, "https://"+addr+codersdk.OIDCCallbackPath)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: idp.CertPool()}}
	t.Cleanup(tr.CloseIdleConnections)
	opts.Address, opts.TLS = addr, true
	opts.OIDC = coderd.OIDCConfig{
		IssuerURL: idp.Issuer, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, AllowSignups: true,
		SignInText: "Corp SSO", HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}
	d := coderdtest.New(t, opts)
	d.CreateFirstUser(t)
	return d, idp
}

// signInAtIdP signs in as username on Hydra's login page, which the
// browser must be on its way to.
func (b *browser) signInAtIdP(username string) {
	b.t.Helper()
	b.do("sign in at the identity provider",
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), username),
		chromedp.Click(chromedp.CSS("#sign-in")))
}

// TestBrowserOIDCSignIn: headless Chromium clicks "Sign in with …" on the
// login page, signs in on a real Hydra's login page, and lands on the
// workspaces page as the user the first sign-in created. The browser is
// told to accept both test certificates (what it trusts is not under test).
func TestBrowserOIDCSignIn(t *testing.T) {
	t.Parallel()
	d, idp := newOIDCDeployment(t, coderdtest.Options{})
	idp.AddUser(testidp.User{Username: "alice", Subject: "sub-alice", Email: "alice@corp.example", EmailVerified: true, Name: "Alice"})

	b := newBrowser(t, d.URL, chromedp.Flag("ignore-certificate-errors", true))
	b.do("open the login page", chromedp.Navigate(b.url("/login")), chromedp.WaitVisible(chromedp.CSS("#oidc-sign-in")))
	if button := get(b, "read the button", chromedp.Text(chromedp.CSS("#oidc-sign-in"))); button != "Sign in with Corp SSO" {
		t.Errorf("got button %q, want %q", button, "Sign in with Corp SSO")
	}
	b.do("follow the button", chromedp.Click(chromedp.CSS("#oidc-sign-in")))
	b.signInAtIdP("alice")
	b.do("land on the workspaces page", chromedp.WaitVisible(chromedp.CSS("#workspaces")))
	if page := get(b, "read the page", chromedp.Text(chromedp.CSS("body"))); !strings.Contains(page, "alice") {
		t.Errorf("the workspaces page does not show alice signed in: %s", page)
	}
}

// TestBrowserOIDCCLILogin: on an OIDC-only deployment the real `coder
// login URL` prints the dashboard's /cli-auth page; Chromium opens it as
// printed, is sent to sign in, signs in at Hydra, comes back to /cli-auth
// and creates a token, which the test pastes into `coder login`'s stdin.
// The stored session is then the OIDC user's.
func TestBrowserOIDCCLILogin(t *testing.T) {
	t.Parallel()
	d, idp := newOIDCDeployment(t, coderdtest.Options{DisablePasswordAuth: true})
	idp.AddUser(testidp.User{Username: "carol", Subject: "sub-carol", Email: "carol@corp.example", EmailVerified: true, Name: "Carol"})
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"CODER_CONFIG_DIR=" + filepath.Join(t.TempDir(), "config"), "CODER_CA_FILE=" + d.CAFile}

	login := exec.Command(coderBinary(t), "login", d.URL.String())
	login.Env = env
	stdin, err := login.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncbuf.Buffer
	login.Stdout, login.Stderr = &stdout, &stderr
	if err := login.Start(); err != nil {
		t.Fatalf("start coder login: %v", err)
	}
	var loginErr error
	done := make(chan struct{})
	go func() { loginErr = login.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			login.Process.Kill()
			<-done
		}
	})

	// The prompt: the /cli-auth URL, then "Paste the token here".
	prompt := regexp.MustCompile(`(https://\S+/cli-auth)\s+Paste the token here`)
	var cliAuthURL string
	testwait.For(t, 30*time.Second, "coder login printing the /cli-auth URL", func() (bool, string) {
		if m := prompt.FindStringSubmatch(stderr.String()); m != nil {
			cliAuthURL = m[1]
			return true, ""
		}
		select {
		case <-done:
			t.Fatalf("coder login ended before asking for a token: %v\nstdout: %s\nstderr: %s", loginErr, stdout.String(), stderr.String())
		default:
		}
		return false, fmt.Sprintf("stderr %q", stderr.String())
	})
	if want := d.URL.String() + codersdk.CLIAuthPath; cliAuthURL != want {
		t.Errorf("got /cli-auth URL %q, want %q", cliAuthURL, want)
	}

	b := newBrowser(t, d.URL, chromedp.Flag("ignore-certificate-errors", true))
	b.do("open the printed page", chromedp.Navigate(cliAuthURL), chromedp.WaitVisible(chromedp.CSS("#oidc-sign-in")))
	b.do("sign in with Corp SSO", chromedp.Click(chromedp.CSS("#oidc-sign-in")))
	b.signInAtIdP("carol")
	b.do("come back to /cli-auth", chromedp.WaitVisible(chromedp.CSS("#create-token")))
	if loc := b.location(); loc != cliAuthURL {
		t.Errorf("after sign-in the browser is at %q, want %q", loc, cliAuthURL)
	}
	b.do("create a token", chromedp.Click(chromedp.CSS("#create-token")), chromedp.WaitVisible(chromedp.CSS("#session-token")))
	token := strings.TrimSpace(get(b, "read the token", chromedp.Text(chromedp.CSS("#session-token"))))

	if _, err := stdin.Write([]byte(token + "\n")); err != nil {
		t.Fatalf("paste the token: %v", err)
	}
	select {
	case <-done:
		if loginErr != nil {
			t.Fatalf("coder login: %v\nstdout: %s\nstderr: %s", loginErr, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("coder login did not end within 60s of the paste: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if want := "Logged in to " + d.URL.String() + " as carol."; !strings.Contains(stdout.String(), want) {
		t.Errorf("coder login: got stdout %q, want %q", stdout.String(), want)
	}

	// The CLI has neither `whoami` nor `users show`: the stored session
	// lists the token the page made, and that token is carol's.
	tokens := exec.Command(coderBinary(t), "tokens", "list")
	tokens.Env = env
	if out, err := tokens.CombinedOutput(); err != nil || !strings.Contains(string(out), "cli-") {
		t.Errorf("coder tokens list with the stored session: got %v, %s; want the cli- token", err, out)
	}
	c := d.Client()
	c.SessionToken = token
	me, err := c.User(t.Context(), codersdk.Me)
	if err != nil || me.Username != "carol" || me.Email != "carol@corp.example" {
		t.Errorf("the pasted token's user: got %+v, %v; want carol", me, err)
	}
}
