package site_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// TestBrowserRegionSelector: with a workspace proxy running, the workspace
// page offers the primary and the proxy, shows the browser's latency to
// each, links apps through the chosen region (path apps and ports on its
// access URL, subdomain apps on its wildcard) and keeps the choice across
// reloads. The latency probe is allowed by the page's CSP (b.check finds
// no violation).
func TestBrowserRegionSelector(t *testing.T) {
	t.Parallel()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{WildcardAccessURL: "*.apps.test"}, "regions")
	coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, "dev", codersdk.ProvisionedAgent{Token: "6f1a2b3c-0000-4000-8000-0000000fe9e0",
		Apps: []codersdk.ProvisionedApp{{Slug: "web", URL: "http://localhost:8080"}, {Slug: "sub", URL: "http://localhost:8081", Subdomain: true}}})
	proxyURL, _ := coderdtest.NewWorkspaceProxy(t, admin, "eu", coderdtest.WorkspaceProxyOptions{WildcardAccessURL: "*.eu.test"})

	b := newBrowser(t, d.URL)
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("workspace page", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#region")))
	const read = `(() => {
		const s = document.getElementById("region");
		const href = (slug) => { const a = [...document.querySelectorAll("[data-field=agents] a")].find((a) => a.textContent === slug); return a ? a.href : "none"; };
		return [s.value, [...s.options].map((o) => o.value + "=" + o.textContent).join(","), href("web"), href("sub")].join(" | ");
	})()`
	wait := func(step string, ok func(string) bool, want string) string {
		t.Helper()
		var got string
		testwait.For(t, 15*time.Second, step+": the page shows "+want, func() (bool, string) {
			got = get(b, step, chromedp.Evaluate[string](read))
			return ok(got), fmt.Sprintf("it shows %q", got)
		})
		return got
	}
	port := d.URL.Port()
	primaryLinks := fmt.Sprintf("%s/@admin/dev/apps/web/ | http://sub--main--dev--admin.apps.test:%s/", d.URL, port)
	proxyLinks := fmt.Sprintf("%s/@admin/dev/apps/web/ | http://sub--main--dev--admin.eu.test:%s/", proxyURL, proxyURL.Port())
	measured := func(s string) bool {
		opts := strings.Split(s, " | ")[1]
		return strings.Count(opts, " ms)") == 2
	}
	wait("the regions with their latency, apps through the primary", func(s string) bool {
		return measured(s) && strings.HasPrefix(s, "primary | primary=Default (") && strings.Contains(s, ",eu=eu (") && strings.HasSuffix(s, primaryLinks)
	}, "both regions measured and the primary's links")
	b.do("choose eu", chromedp.SetValue(chromedp.CSS("#region"), "eu"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("region").dispatchEvent(new Event("change"))`))
	wait("apps through eu", func(s string) bool { return strings.HasPrefix(s, "eu | ") && strings.HasSuffix(s, proxyLinks) }, "eu's links: "+proxyLinks)
	b.do("reload", chromedp.Navigate(b.url("/@admin/dev")), chromedp.WaitVisible(chromedp.CSS("#region")))
	wait("the choice kept", func(s string) bool { return strings.HasPrefix(s, "eu | ") && strings.HasSuffix(s, proxyLinks) }, "eu still chosen")
	b.screenshot("region-selector")
	b.check(proxyURL.Host) // the latency probes of the proxy's /healthz

}

// TestBrowserProxySignIn: a visitor who is not signed in opens a dev URL
// on a workspace proxy; the proxy sends the browser to sign in at the
// primary, the login form leads back through the auth-redirect to the
// proxy, which sets its app cookie and shows the dev URL (here the
// primary's answer through the proxy: the workspace's agent is not
// connected).
func TestBrowserProxySignIn(t *testing.T) {
	t.Parallel()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "proxysignin")
	coderdtest.CreateWorkspaceWithAgent(t, admin, admin, daemon, "dev", codersdk.ProvisionedAgent{Token: "6f1a2b3c-0000-4000-8000-0000000fe9e1",
		Apps: []codersdk.ProvisionedApp{{Slug: "web", URL: "http://localhost:8080"}}})
	proxyURL, _ := coderdtest.NewWorkspaceProxy(t, admin, "eu")

	b := newBrowser(t, d.URL)
	app := proxyURL.String() + "/@admin/dev/apps/web/"
	b.mu.Lock()
	b.ignore = func(u string) bool { return u == app } // its 503 is the answer expected
	b.mu.Unlock()
	b.do("open the app on the proxy", chromedp.Navigate(app), chromedp.WaitVisible(chromedp.CSS("#email")))
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#email"), "admin@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), coderdtest.FirstUserPassword),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)))
	testwait.For(t, 15*time.Second, "after signing in, "+app+" answering that the agent is not connected", func() (bool, string) {
		loc := get(b, "where the browser is", chromedp.Evaluate[string](`location.href + " " + document.body.innerText`))
		return strings.HasPrefix(loc, app+" ") && strings.Contains(loc, "not connected"), fmt.Sprintf("the browser is at %q", loc)
	})
	b.check(proxyURL.Host)
}
