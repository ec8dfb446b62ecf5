package site

import (
	"net/http"
	"net/url"
	"strings"

	"airgapcoder/codersdk"
)

// Links to workspace apps. A path-based app opens at
// <base>/apps/<slug>/; a subdomain app (coder_app subdomain = true) at its
// own host under the wildcard access URL, or, when the deployment has
// none, is shown unavailable with the reason, as Coder's dashboard does.
// static/live.js builds the same links after a page load (appHref there).

// noWildcardReason is why a subdomain app cannot open without a wildcard
// access URL.
const noWildcardReason = "a subdomain app, and this deployment has no wildcard access URL: an admin sets --wildcard-access-url (wildcard-access-url in appliance.yaml)"

// appBase is "<scheme>://<wildcard host with port>" for the page's links
// (the scheme is the dashboard's: app hosts share its listeners), "" when
// the deployment serves no subdomain apps.
func appBase(r *http.Request, c *codersdk.Client) string {
	h, err := c.AppHost(r.Context())
	if err != nil || h.Host == "" {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + h.Host
}

// appHref is where an app opens: base is the workspace's page path,
// apps the appBase.
func appHref(base, apps string, app codersdk.WorkspaceApp) string {
	if app.Subdomain && app.SubdomainName != "" && apps != "" {
		return strings.Replace(apps, "*", app.SubdomainName, 1) + "/"
	}
	return base + "/apps/" + url.PathEscape(app.Slug) + "/"
}

// appUnavailable says why an app cannot open, "" when it can.
func appUnavailable(apps string, app codersdk.WorkspaceApp) string {
	switch {
	case !app.Subdomain || (app.SubdomainName != "" && apps != ""):
		return ""
	case apps == "":
		return noWildcardReason
	default:
		return "a subdomain app whose names cannot make a host name (owner, workspace and agent names must not contain \"--\")"
	}
}
