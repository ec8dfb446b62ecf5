package site_test

import (
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// browserFrom is a client that does not follow redirects and dials from
// the loopback address ip, so a test can be visitors at several addresses.
func browserFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// submit posts the dashboard form at path with values, as a browser on the
// site does.
func submit(t *testing.T, c *http.Client, base *url.URL, path string, values url.Values) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base.String()+path, strings.NewReader(values.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base.String())
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var redirectField = regexp.MustCompile(`<input type="hidden" name="redirect" value="([^"]*)">`)

// TestSignInRedirectStaysOnSite opens the sign-in page with a ?redirect=
// that browsers would follow off the site, signs in with the form as a
// browser would (the hidden field carries the target), and checks that the
// redirect after signing in lands on "/" for every such target, and on the
// target for a path of this site.
func TestSignInRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	d.CreateFirstUser(t)
	browser := browserFrom(t, "127.0.0.1")
	for _, tc := range []struct {
		name, query, want string
	}{
		{"tab between slashes (issue 28)", "%2F%09%2Fevil.example", "/"},
		{"newline between slashes", "%2F%0A%2Fevil.example", "/"},
		{"backslash", "%2F%5Cevil.example", "/"},
		{"protocol-relative", "%2F%2Fevil.example", "/"},
		{"absolute URL", "https%3A%2F%2Fevil.example%2F", "/"},
		{"javascript", "javascript%3Aalert(1)", "/"},
		{"encoded slashes in the target's path", "%2F%252F%252Fevil.example", "/"},
		{"none", "", "/"},
		{"a workspace page", "%2F%40admin%2Fdev%3Fx%3D1", "/@admin/dev?x=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := browser.Get(d.URL.String() + "/login?redirect=" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(res.Body)
			res.Body.Close()
			m := redirectField.FindStringSubmatch(string(page))
			if res.StatusCode != http.StatusOK || m == nil {
				t.Fatalf("GET /login: got %d without the redirect field:\n%s", res.StatusCode, page)
			}
			res, body := submit(t, browser, d.URL, "/login", url.Values{
				"email": {"admin@example.com"}, "password": {coderdtest.FirstUserPassword}, "redirect": {html.UnescapeString(m[1])},
			})
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign in: got %d, want 303:\n%s", res.StatusCode, body)
			}
			if got := res.Header.Get("Location"); got != tc.want {
				t.Errorf("Location: got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSignInThrottledPerAddress: the dashboard's sign-in is refused like
// the API's login (it is the API's login, called in process with the
// visitor's address): wrong passwords from one address make that address
// wait (429, Retry-After), while the owner signs in from another.
func TestSignInThrottledPerAddress(t *testing.T) {
	t.Parallel()
	frozen := time.Now()
	d := coderdtest.New(t, coderdtest.Options{Now: func() time.Time { return frozen }})
	d.CreateFirstUser(t)
	guesser, owner := browserFrom(t, "127.0.0.1"), browserFrom(t, "127.0.0.2")
	signIn := func(c *http.Client, password string) (*http.Response, string) {
		t.Helper()
		return submit(t, c, d.URL, "/login", url.Values{"email": {"admin@example.com"}, "password": {password}})
	}
	for i := range 5 {
		if res, body := signIn(guesser, "wrong-password"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: got %d, want 401:\n%s", i+1, res.StatusCode, body)
		}
	}
	for _, password := range []string{"wrong-password", coderdtest.FirstUserPassword} {
		res, body := signIn(guesser, password)
		if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); res.StatusCode != http.StatusTooManyRequests || err != nil || secs < 1 {
			t.Fatalf("from the guessing address: got %d Retry-After %q, want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
		}
		if !strings.Contains(body, "Too many failed logins for this account") {
			t.Errorf("from the guessing address: the page does not say why:\n%s", body)
		}
	}
	res, body := signIn(owner, coderdtest.FirstUserPassword)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the owner from another address: got %d, want 303:\n%s", res.StatusCode, body)
	}
	var session bool
	for _, c := range res.Cookies() {
		session = session || (c.Name == codersdk.SessionTokenCookie && c.Value != "")
	}
	if !session {
		t.Error("the owner from another address: got no session cookie")
	}
}

// TestExternalAuthPageWithoutProviders: a deployment with no external auth
// providers still serves /external-auth, saying how an owner adds one.
func TestExternalAuthPageWithoutProviders(t *testing.T) {
	t.Parallel()
	d := coderdtest.New(t, coderdtest.Options{})
	owner, _ := d.CreateFirstUser(t)
	req, err := http.NewRequest(http.MethodGet, d.URL.String()+"/external-auth", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: codersdk.SessionTokenCookie, Value: owner.SessionToken})
	res, err := browserFrom(t, "127.0.0.1").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="external-auths-none"`) || !strings.Contains(string(body), "CODER_EXTERNAL_AUTH_") {
		t.Errorf("got %d %s, want the page saying no providers are configured", res.StatusCode, body)
	}
}
