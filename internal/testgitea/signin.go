package testgitea

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// Gitea's login page (templates/user/auth/signin_inner.tmpl) and its
// authorize page (templates/user/auth/grant.tmpl), for a browser test to
// fill. Gitea 1.26 has no CSRF token in its forms: it refuses cross-origin
// posts by the browser's Sec-Fetch-Site and Origin headers instead.
const (
	// UsernameField is the id and name of the login page's username
	// input.
	UsernameField = "user_name"
	// PasswordField is the id and name of its password input.
	PasswordField = "password"
	// SignInButton is a CSS selector of the login form's sign-in button,
	// which has no id.
	SignInButton = `form[action$="/user/login"] button`
	// GrantButtonID is the id of the authorize page's "Authorize
	// Application" button, shown at a user's first authorization of an
	// OAuth2 application.
	GrantButtonID = "authorize-app"
)

// Page is where a browser ended: the last response after the redirects.
type Page struct {
	URL    *url.URL
	Status int
	Body   string
}

// SignIn drives an OAuth2 authorization through Gitea's pages as username
// (added by AddUser), in client (a browser: a cookie jar, following
// redirects, trusting the test CA, such as HTTPClient's). It opens start,
// which must lead to Gitea's authorization endpoint (the relying party's
// sign-in URL, or Gitea's authorization URL itself), posts the login form
// when Gitea asks for it, grants the application on the authorize page when
// Gitea shows it, and returns the page the redirects end on: the relying
// party's, when all went well. A login Gitea refuses ends on the login
// page, with Gitea's error in its body.
func (g *Gitea) SignIn(t testing.TB, client *http.Client, start, username string) Page {
	t.Helper()
	password := g.password(t, username)
	page := g.open(t, client, http.MethodGet, start, nil)
	loggedIn, granted := false, false
	for {
		f, ok := findForm(page)
		switch {
		case ok && f.has(UsernameField) && !loggedIn:
			loggedIn = true
			f.values.Set(UsernameField, username)
			f.values.Set(PasswordField, password)
			f.values.Del("remember")
		case ok && strings.HasSuffix(f.action.Path, "/login/oauth/grant") && !granted:
			granted = true
			f.values.Set("granted", "true")
		default:
			return page
		}
		page = g.open(t, client, http.MethodPost, f.action.String(), f.values)
	}
}

// open sends a GET, or a POST of form, as a browser on Gitea's page would
// (with Gitea's origin), and reads the page it ends on.
func (g *Gitea) open(t testing.TB, client *http.Client, method, target string, form url.Values) Page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, target, body)
	if err != nil {
		t.Fatalf("testgitea: %s %s: %v", method, target, err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", g.Issuer)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("testgitea: %s %s: %v\ngitea: %s", method, target, err, g.Output())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatalf("testgitea: read %s: %v", resp.Request.URL, err)
	}
	return Page{URL: resp.Request.URL, Status: resp.StatusCode, Body: string(b)}
}

// form is an HTML form: where it posts and what it sends as it is.
type form struct {
	action *url.URL
	values url.Values
	inputs map[string]bool
}

func (f form) has(name string) bool { return f.inputs[name] }

// findForm returns the first POST form of a Gitea page that is the login
// or the authorize form, its action resolved against the page's URL.
func findForm(p Page) (form, bool) {
	doc, err := html.Parse(strings.NewReader(p.Body))
	if err != nil {
		return form{}, false
	}
	var found form
	var ok bool
	var walk func(n *html.Node, in *form)
	walk = func(n *html.Node, in *form) {
		if ok && in == nil {
			return
		}
		if n.Type == html.ElementNode {
			switch n.Data {
			case "form":
				if !strings.EqualFold(attr(n, "method"), "post") {
					break
				}
				action, err := p.URL.Parse(attr(n, "action"))
				if err != nil {
					break
				}
				f := form{action: action, values: url.Values{}, inputs: map[string]bool{}}
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					walk(c, &f)
				}
				if f.has(UsernameField) || strings.HasSuffix(action.Path, "/login/oauth/grant") {
					found, ok = f, true
				}
				return
			case "input":
				if in != nil && attr(n, "name") != "" {
					in.inputs[attr(n, "name")] = true
					if t := attr(n, "type"); t != "checkbox" && t != "submit" {
						in.values.Set(attr(n, "name"), attr(n, "value"))
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, in)
		}
	}
	walk(doc, nil)
	return found, ok
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// String describes a page for a failure message: where it is, its status
// and the start of its text.
func (p Page) String() string {
	body := p.Body
	if len(body) > 2000 {
		body = body[:2000] + "…"
	}
	return fmt.Sprintf("%d at %s: %s", p.Status, p.URL, body)
}
