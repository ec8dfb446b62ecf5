package site_test

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/agent"
	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testagent"
)

// TestBrowserSubdomainApps is issue 31's subdomain acceptance: a real web
// server in the workspace (busybox httpd, whose CGI script echoes the
// cookies and Host it received) served as subdomain apps over HTTPS with a
// certificate from the appliance CA that covers the wildcard name.
// Chromium trusts that CA through its NSS database (no
// --ignore-certificate-errors) and reaches the app hosts through
// --host-resolver-rules. The owner opens the app from the workspace page
// after the sign-in redirects; the app never receives coderd's cookies;
// share = "authenticated" lets a second user in and "owner" does not;
// "public" needs no sign-in, and "authenticated" sends a visitor without
// a session to the login page and, signed in, on to the app.
func TestBrowserSubdomainApps(t *testing.T) {
	t.Parallel()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("this test needs busybox (busybox-static) for the workspace's web server: %v", err)
	}
	// The workspace's web server.
	www := t.TempDir()
	if err := os.MkdirAll(filepath.Join(www, "cgi-bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte(`<!doctype html><title>app</title><h1 id="app">hello from the workspace</h1>`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "cgi-bin", "echo"), []byte("#!"+busybox+" sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nprintf 'host=%s\\ncookie=%s\\n' \"$HTTP_HOST\" \"$HTTP_COOKIE\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	httpd := exec.Command(busybox, "httpd", "-f", "-p", "127.0.0.1:"+strconv.Itoa(port), "-h", www)
	if err := httpd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = httpd.Process.Kill(); _ = httpd.Wait() })

	cert, browserOpts := wildcardTLS(t)
	d := coderdtest.New(t, coderdtest.Options{ProvisionerPSK: "psk", TLS: true, TLSCertificate: &cert, WildcardAccessURL: appsWildcard,
		AgentHeartbeatInterval: 200 * time.Millisecond, AgentKeepAliveInterval: time.Second})
	admin, _ := d.CreateFirstUser(t)
	d.CreateUser(t, admin, "bob")
	daemon := d.NewDaemon(t, "apps", nil)
	appURL := "http://127.0.0.1:" + strconv.Itoa(port)
	agentToken := "6f1a2b3c-0000-4000-8000-0000000000a5"
	w := coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, "dev", codersdk.ProvisionedAgent{Token: agentToken, Apps: []codersdk.ProvisionedApp{
		{Slug: "own", DisplayName: "Own", URL: appURL, Subdomain: true, Share: "owner"},
		{Slug: "team", DisplayName: "Team", URL: appURL, Subdomain: true, Share: "authenticated"},
		{Slug: "pub", DisplayName: "Pub", URL: appURL, Subdomain: true, Share: "public"},
	}})
	runAgent(t, d, agentToken)
	testagent.WaitConnected(t, admin, coderdtest.WorkspaceAgent(t, w).ID)

	text := func(b *browser, step string) string {
		b.t.Helper()
		return get(b, step, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	}
	open := func(b *browser, step, u string) string {
		b.t.Helper()
		b.do(step, chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS("body")))
		return text(b, step)
	}

	t.Run("Owner", func(t *testing.T) {
		b := newBrowser(t, d.URL, browserOpts...)
		b.ignore = func(u string) bool { return strings.Contains(u, ".apps.test") }
		b.do("login page", chromedp.Navigate(b.url("/login")))
		b.signIn("admin@example.com", coderdtest.FirstUserPassword)
		b.do("workspace page", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#workspace")))
		href := get(b, "app link", chromedp.Evaluate[string](`(() => { const a = [...document.querySelectorAll('a')].find((a) => a.textContent === 'Own'); return a ? a.href : ""; })()`))
		if href != appOrigin(d, "own")+"/" {
			t.Fatalf("the workspace page links Own to %q, want %s/", href, appOrigin(d, "own"))
		}
		if got := open(b, "open the app", href); !strings.Contains(got, "hello from the workspace") {
			t.Fatalf("opening %s: got %q, want the app's page", href, got)
		}
		if loc := b.location(); loc != href {
			t.Errorf("landed on %s, want %s (the sign-in token removed)", loc, href)
		}
		got := open(b, "echo", appOrigin(d, "own")+"/cgi-bin/echo")
		if !strings.Contains(got, "host=own--main--dev--admin.apps.test") {
			t.Errorf("the app's echo: got %q, want the app host", got)
		}
		for _, name := range []string{codersdk.SessionTokenCookie, codersdk.SubdomainAppSessionTokenCookie} {
			if strings.Contains(got, name) {
				t.Errorf("the app received the %s cookie: %q", name, got)
			}
		}
		b.screenshot("subdomain-app")
	})

	t.Run("SecondUser", func(t *testing.T) {
		b := newBrowser(t, d.URL, browserOpts...)
		b.ignore = func(u string) bool { return strings.Contains(u, ".apps.test") }
		b.do("login page", chromedp.Navigate(b.url("/login")))
		b.signIn("bob@example.com", coderdtest.FirstUserPassword)
		if got := open(b, "authenticated app", appOrigin(d, "team")+"/"); !strings.Contains(got, "hello from the workspace") {
			t.Errorf("bob on the authenticated app: got %q, want the app's page", got)
		}
		if got := open(b, "owner app", appOrigin(d, "own")+"/"); strings.Contains(got, "hello from the workspace") || !strings.Contains(got, "not found") {
			t.Errorf("bob on the owner-only app: got %q, want a refusal", got)
		}
		if got := open(b, "public app", appOrigin(d, "pub")+"/"); !strings.Contains(got, "hello from the workspace") {
			t.Errorf("bob on the public app: got %q, want the app's page", got)
		}
	})

	t.Run("Anonymous", func(t *testing.T) {
		b := newBrowser(t, d.URL, browserOpts...)
		b.ignore = func(u string) bool { return strings.Contains(u, ".apps.test") }
		if got := open(b, "public app", appOrigin(d, "pub")+"/"); !strings.Contains(got, "hello from the workspace") {
			t.Errorf("anonymous on the public app: got %q, want the app's page", got)
		}
		open(b, "authenticated app", appOrigin(d, "team")+"/after")
		b.waitLocation("sign in first", "/login?", 15*time.Second)
		b.do("sign in as bob", chromedp.WaitVisible(chromedp.CSS("#email")),
			chromedp.SendKeys(chromedp.CSS("#email"), "bob@example.com"),
			chromedp.SendKeys(chromedp.CSS("#password"), coderdtest.FirstUserPassword),
			chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)))
		b.waitLocation("back on the app", appOrigin(d, "team")+"/after", 15*time.Second)
	})
}

// appsWildcard is the wildcard access URL of the subdomain app tests; their
// Chromium resolves every name under it to loopback.
const appsWildcard = "*.apps.test"

// wildcardTLS makes an appliance CA and, from it, the serving certificate
// for a deployment on 127.0.0.1 and every app host under appsWildcard (as
// the appliance's covers its wildcard access URL). It returns the
// certificate with the options for newBrowser under which Chromium trusts
// that CA through its NSS database (as a user who imported ca.pem; no
// --ignore-certificate-errors) and resolves the app hosts to loopback
// (--host-resolver-rules).
func wildcardTLS(t *testing.T) (tls.Certificate, []chromedp.ExecAllocatorOption) {
	t.Helper()
	certutil, err := exec.LookPath("certutil")
	if err != nil {
		t.Fatalf("this test needs certutil (libnss3-tools; scripts/install-deps.sh installs it) to make Chromium trust the appliance CA: %v", err)
	}
	certDir := t.TempDir()
	if _, err := certs.Generate(certDir, []string{"127.0.0.1", "localhost", appsWildcard}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, err := certs.LoadServerCertificate(certDir)
	if err != nil {
		t.Fatal(err)
	}
	// Chromium's trust: a user NSS database holding only the CA.
	home := t.TempDir()
	nssdb := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(nssdb, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-N", "-d", "sql:" + nssdb, "--empty-password"},
		{"-A", "-d", "sql:" + nssdb, "-n", "appliance CA", "-t", "C,,", "-i", filepath.Join(certs.CertsDir(certDir), "ca.pem")},
	} {
		if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %v: %v\n%s", args, err, out)
		}
	}
	return cert, []chromedp.ExecAllocatorOption{
		chromedp.Env("HOME=" + home),
		chromedp.Flag("host-resolver-rules", "MAP "+appsWildcard+" 127.0.0.1"),
	}
}

// appOrigin is the origin of app slug of agent main in admin's workspace
// dev on d (served with WildcardAccessURL appsWildcard).
func appOrigin(d *coderdtest.Deployment, slug string) string {
	return "https://" + slug + "--main--dev--admin." + strings.TrimPrefix(appsWildcard, "*.") + ":" + d.URL.Port()
}

// runAgent runs a workspace agent with token in this process until the
// test ends, trusting the deployment's certificate.
func runAgent(t *testing.T, d *coderdtest.Deployment, token string) {
	t.Helper()
	c := d.Client()
	c.SessionToken = token
	testagent.Start(t, agent.Options{Client: c})
}
