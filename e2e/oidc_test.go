//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testidp"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testwait"
)

// TestApplianceOIDC is single sign-on on an installed appliance, through
// the built coder binary, against a real identity provider (Ory Hydra,
// package testidp) on loopback with a certificate from a test CA that the
// appliance trusts only once `coder certs import` imported it
// (docs/oidc.md, "Trust and egress"):
//
//   - before the import, the sign-in ends on a page (and a log line) naming
//     the x509 problem and `coder certs import`;
//   - with password sign-in disabled, the first-user flow (setup page, CLI,
//     an SSO sign-in before any owner) says how to bootstrap, and the owner
//     made there keeps its password;
//   - after the import and a restart of `coder appliance up`, the sign-in
//     lands on /workspaces as a new user, whose /cli-auth token logs the CLI
//     in (`coder login`, then `coder list`);
//   - a member's password login is refused, naming the SSO to use.
//
// Hydra listens on the host's loopback, so this appliance does too (free
// ports, not the offline namespace of TestApplianceOffline): what is under
// test is trust, not egress, and loopback is always inside the egress
// guard.
func TestApplianceOIDC(t *testing.T) {
	e := newEnv(t, "the appliance runs as its service user, which install creates: run it as root (make test-e2e)", "")
	work := e.work
	tlsAddr := testport.Addr(t)
	access := "https://" + tlsAddr
	dir := filepath.Join(work, "appliance")
	applianceCA := filepath.Join(dir, "certs", "ca.pem")

	e.step("build coder", e.buildCoder)
	bundleFile := filepath.Join(work, "out", "sso-2026.11.1.bundle")
	e.step("bundle build", func() {
		e.buildBundle(`version: 1
name: sso
release: 2026.11.1
platforms: [linux/amd64]
coder: {binary: self}
terraform: {version: 1.11.4, path: /usr/local/bin/terraform}
postgres: {path: /usr/lib/postgresql/15}
`)
	})

	var idp *testidp.IdP
	e.step("start Hydra", func() {
		idp = testidp.Start(t, access+codersdk.OIDCCallbackPath)
		idp.AddUser(testidp.User{Username: "alice", Subject: "sub-alice", Email: "alice@corp.example", EmailVerified: true, Name: "Alice Liddell"})
	})

	e.step("appliance install (SSO only)", func() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The IdP is named by its issuer only: oidc-issuer-url allows its
		// host through the egress guard by itself.
		conf := fmt.Sprintf(`tls-address: %s
http-address: %s
mirror-address: %s
provisioner-daemons: 1
oidc-issuer-url: %s
oidc-client-id: %s
oidc-client-secret: %s
oidc-email-domain: [corp.example]
oidc-sign-in-text: Corp SSO
disable-password-auth: true
`, tlsAddr, testport.Addr(t), testport.Addr(t), idp.Issuer, idp.ClientID, idp.ClientSecret)
		if err := os.WriteFile(filepath.Join(dir, "appliance.yaml"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		e.run("appliance", "install", bundleFile, "--dir", dir, "--public-key", filepath.Join(work, "keys", "bundle.pub"))
	})

	upLog := filepath.Join(work, "up.log")
	var stop func()
	e.step("appliance up (to healthy)", func() { stop = e.upOnHost(dir, access, upLog) })

	// The "browser" trusts the appliance and the IdP, as a person's does:
	// what is missing is the appliance's trust in the IdP.
	browser := newSSOBrowser(t, applianceCA, idp.CAFile)
	e.step("sign-in without the IdP's CA", func() {
		status, _, body := ssoSignIn(t, browser, access, "alice")
		t.Logf("the page says: %s", errorParagraph(body))
		for _, want := range []string{"x509: certificate signed by unknown authority", "coder certs import", "restart `coder appliance up`"} {
			if !strings.Contains(body, want) {
				t.Errorf("sign-in page without the IdP's CA does not say %q (status %d):\n%s", want, status, body)
			}
		}
		if status != http.StatusBadGateway {
			t.Errorf("sign-in without the IdP's CA: status %d, want %d", status, http.StatusBadGateway)
		}
		if b, _ := os.ReadFile(upLog); !strings.Contains(string(b), "x509: certificate signed by unknown authority") || !strings.Contains(string(b), "coder certs import") {
			t.Errorf("the appliance log does not name the certificate problem and `coder certs import`:\n%s", tail(string(b), 20))
		}
	})

	e.step("first-user flow says how to bootstrap", func() {
		// The dashboard sends a visitor of a deployment without users to
		// /setup, which says that this owner keeps a password.
		status, u, body := browserGet(t, browser, access+"/login")
		if u.Path != "/setup" || !strings.Contains(body, "Password sign-in is disabled on this deployment, except for owners") {
			t.Errorf("/login without users: %d at %s, want /setup saying the owner keeps a password:\n%s", status, u, body)
		}
		// The CLI names the first-user flags.
		out, err := e.cli(filepath.Join(work, "cli-nobody"), "", "login", access, "--ca-file", applianceCA)
		if err == nil || !strings.Contains(out, "has no users yet: create the first owner with --first-user-username, --first-user-email and --first-user-password") {
			t.Errorf("coder login without users: %v, want the first-user flags named:\n%s", err, out)
		}
	})

	e.step("coder certs import, restart up", func() {
		stop()
		out := e.run("certs", "import", idp.CAFile, "--dir", dir)
		if !strings.Contains(out, "imported ") {
			t.Fatalf("coder certs import: want \"imported …\":\n%s", out)
		}
		stop = e.upOnHost(dir, access, filepath.Join(work, "up2.log"))
	})

	e.step("SSO before any owner: refused, says how", func() {
		status, _, body := ssoSignIn(t, browser, access, "alice")
		if status != http.StatusForbidden || !strings.Contains(body, "This deployment has no owner yet: create the first user at /setup") {
			t.Fatalf("SSO sign-in before the first user: status %d, want 403 naming /setup:\n%s", status, body)
		}
	})

	adminCLI := filepath.Join(work, "cli-admin")
	e.step("first owner, with a password", func() {
		out := e.mustCLI(adminCLI, "", "login", access, "--ca-file", applianceCA,
			"--first-user-username", "admin", "--first-user-email", "admin@corp.example", "--first-user-password", "sso-owner-password")
		if !strings.Contains(out, "Created the first user admin (owner).") || !strings.Contains(out, "as admin.") {
			t.Fatalf("coder login --first-user-*:\n%s", out)
		}
		// Owners keep their password on an SSO-only deployment.
		e.mustCLI(filepath.Join(work, "cli-admin2"), "", "login", access, "--ca-file", applianceCA, "--email", "admin@corp.example", "--password", "sso-owner-password")
	})

	e.step("SSO sign-in lands on /workspaces", func() {
		loginsBefore := idp.Logins()
		status, u, body := ssoSignIn(t, browser, access, "alice")
		if status != http.StatusOK || u.String() != access+"/workspaces" {
			t.Fatalf("SSO sign-in as alice: %d at %s, want 200 at %s/workspaces:\n%s\nhydra:\n%s", status, u, access, body, idp.Output())
		}
		if !strings.Contains(body, "alice") {
			t.Errorf("/workspaces after the sign-in does not show alice:\n%s", body)
		}
		if got := idp.Logins() - loginsBefore; got != 1 {
			t.Errorf("the IdP counted %d logins for the sign-in, want 1", got)
		}
	})

	e.step("coder login through /cli-auth, coder list", func() {
		token := cliAuthToken(t, browser, access)
		aliceCLI := filepath.Join(work, "cli-alice")
		cmd := exec.Command(e.bin, "login", access, "--ca-file", applianceCA)
		cmd.Env = append(os.Environ(), "CODER_CONFIG_DIR="+aliceCLI)
		cmd.Stdin = strings.NewReader(token + "\n")
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil || !strings.Contains(out, access+codersdk.CLIAuthPath) || !strings.Contains(out, "sign in with Corp SSO") ||
			!strings.Contains(out, "Logged in to "+access+" as alice.") {
			t.Fatalf("coder login with the /cli-auth token: %v, want the /cli-auth URL, the SSO named and alice logged in:\n%s", err, out)
		}
		e.mustCLI(aliceCLI, "", "list")
		if out := e.mustCLI(adminCLI, "", "users", "list"); !strings.Contains(out, "alice@corp.example") {
			t.Errorf("coder users list does not show the signed-up alice:\n%s", out)
		}
	})

	e.step("member's password login refused", func() {
		e.mustCLI(adminCLI, "", "users", "create", "--username", "bob", "--email", "bob@corp.example", "--password", "bob-password-1")
		out, err := e.cli(filepath.Join(work, "cli-bob"), "", "login", access, "--ca-file", applianceCA, "--email", "bob@corp.example", "--password", "bob-password-1")
		if err == nil || !strings.Contains(out, "Password sign-in is disabled on this deployment; sign in with Corp SSO") {
			t.Fatalf("bob's password login: %v, want it refused naming the SSO:\n%s", err, out)
		}
		// The login page offers the SSO, the password form only to owners.
		_, _, body := browserGet(t, newSSOBrowser(t, applianceCA), access+"/login")
		for _, want := range []string{"Sign in with Corp SSO", "Owners: sign in with a password"} {
			if !strings.Contains(body, want) {
				t.Errorf("/login does not say %q:\n%s", want, body)
			}
		}
	})
	e.step("appliance stop", stop)
}

// upOnHost starts `coder appliance up --dir dir` on the host, its output in
// logPath, waits until access answers /healthz and returns a function that
// stops it (SIGTERM, then SIGKILL after 90 s), also called when the test
// ends.
func (e *env) upOnHost(dir, access, logPath string) (stop func()) {
	e.t.Helper()
	up := exec.Command(e.bin, "appliance", "up", "--dir", dir)
	e.startLogged(up, logPath)
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = up.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				e.t.Errorf("appliance up exited with %v", err)
			}
		case <-time.After(90 * time.Second):
			_ = up.Process.Kill()
			<-exited
			e.t.Errorf("appliance up did not stop within 90 s of SIGTERM")
		}
	}
	e.t.Cleanup(stop)

	// The appliance CA exists once the first up has made it.
	ca := filepath.Join(dir, "certs", "ca.pem")
	var hc *http.Client
	testwait.For(e.t, 3*time.Minute, "appliance "+access+" healthy", func() (bool, string) {
		if _, err := os.Stat(ca); hc == nil && err == nil {
			hc = newSSOBrowser(e.t, ca)
			hc.Timeout = 2 * time.Second
		}
		if hc != nil {
			if res, err := hc.Get(access + "/healthz"); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					return true, ""
				}
			}
		}
		select {
		case err := <-exited:
			stopped = true
			b, _ := os.ReadFile(logPath)
			e.t.Fatalf("appliance up exited (%v):\n%s", err, tail(string(b), 40))
		default:
		}
		b, _ := os.ReadFile(logPath)
		return false, "its log ends:\n" + tail(string(b), 40)
	})
	return stop
}

// cli runs the coder binary on the host with CODER_CONFIG_DIR=config and
// stdin, and returns its combined output.
func (e *env) cli(config, stdin string, args ...string) (string, error) {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "CODER_CONFIG_DIR="+config)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *env) mustCLI(config, stdin string, args ...string) string {
	e.t.Helper()
	out, err := e.cli(config, stdin, args...)
	if err != nil {
		e.t.Fatalf("coder %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// newSSOBrowser is a browser for the test (cookies, redirects) that
// trusts the CAs in caFiles and nothing else.
func newSSOBrowser(t *testing.T, caFiles ...string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	for _, f := range caFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !pool.AppendCertsFromPEM(b) {
			t.Fatalf("%s holds no PEM certificate", f)
		}
	}
	jar, _ := cookiejar.New(nil) // never fails with nil options
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Jar: jar, Transport: tr, Timeout: 60 * time.Second}
}

// browserGet fetches u, following redirects, and returns the last
// response's status, URL and unescaped body.
func browserGet(t *testing.T, browser *http.Client, u string) (int, *url.URL, string) {
	t.Helper()
	res, err := browser.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return res.StatusCode, res.Request.URL, html.UnescapeString(string(b))
}

// ssoSignIn runs the sign-in as the login button starts it, as username
// (login_hint lets the IdP's login app skip its form).
func ssoSignIn(t *testing.T, browser *http.Client, access, username string) (int, *url.URL, string) {
	t.Helper()
	return browserGet(t, browser, access+codersdk.OIDCCallbackPath+"?"+url.Values{"login_hint": {username}}.Encode())
}

var sessionTokenRE = regexp.MustCompile(`<code id="session-token">([^<]+)</code>`)

// cliAuthToken presses "Create token" on /cli-auth in the signed-in
// browser and returns the token the page shows.
func cliAuthToken(t *testing.T, browser *http.Client, access string) string {
	t.Helper()
	if status, u, body := browserGet(t, browser, access+codersdk.CLIAuthPath); status != http.StatusOK || u.Path != codersdk.CLIAuthPath {
		t.Fatalf("GET /cli-auth: %d at %s:\n%s", status, u, body)
	}
	req, err := http.NewRequest(http.MethodPost, access+codersdk.CLIAuthPath, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", access)
	res, err := browser.Do(req)
	if err != nil {
		t.Fatalf("POST /cli-auth: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := sessionTokenRE.FindSubmatch(b)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("POST /cli-auth: %s, want a page with the token:\n%s", res.Status, b)
	}
	return strings.TrimSpace(html.UnescapeString(string(m[1])))
}

var errorParagraphRE = regexp.MustCompile(`(?s)<p id="error">(.*?)</p>`)

// errorParagraph is the message of the sign-in error page in body (body
// itself when it has none).
func errorParagraph(body string) string {
	if m := errorParagraphRE.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return body
}
