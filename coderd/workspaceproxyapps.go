package coderd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// Dev URLs through a workspace proxy (codersdk/workspaceproxyapps.go). The
// proxy serves path-based dev URLs on its access URL and subdomain apps on
// the hosts under its wildcard; for each request it has no fresh answer
// for, it sends what the visitor brought to authorize-app, and the
// primary decides with the code that decides for its own requests
// (authorizePathDevURL, authorizeSubdomainApp): the same share levels, the
// same refusal of other users' workspaces with a browser credential on a
// path-based URL (a proxy's access URL is an origin shared by every path
// dev URL on it, as the primary's is).
//
// Browsers sign in to a proxy's hosts as to the primary's app hosts
// (appauth.go): the primary's auth-redirect accepts a redirect_uri on a
// registered proxy's access URL or wildcard host, and the exchange token it
// mints is bound to that host; the proxy trades it here for an app cookie
// bound to the same host. Tokens and cookies are checked against the
// calling proxy's hosts, so one proxy cannot redeem what was minted for
// another's.
//
// Audit as for the primary's own dev URL requests: a refusal is a record
// (connect workspace_agent, kind dev-url, with the proxy's name and the
// access, path or subdomain); a grant is not, the connections the proxy
// relays for it are (reported when they end, proxyConnectionReport). A
// grant may be reused by the proxy for workspaceProxyAuthTTL, so
// revocation takes effect at the proxy within it.

// workspaceProxyAppRoutes mounts the calls a proxy makes to serve dev URLs.
func (api *API) workspaceProxyAppRoutes(v2 *gin.RouterGroup) {
	v2.POST("/workspaceproxies/me/authorize-app", api.handle(api.authorizeProxyApp))
}

// workspaceProxyAuthTTL is how long a proxy may reuse an answer about a
// user's credentials.
func (api *API) workspaceProxyAuthTTL() time.Duration {
	if api.opts.WorkspaceProxyAuthTTL > 0 {
		return api.opts.WorkspaceProxyAuthTTL
	}
	return DefaultWorkspaceProxyAuthTTL
}

// Where on a proxy a URL is.
const (
	proxyHostNone      = ""
	proxyHostPath      = "path"      // the proxy's access URL: path-based dev URLs
	proxyHostSubdomain = "subdomain" // under its wildcard: subdomain apps
)

// proxyHostKind says whether hostport (a Host header or URL host) is proxy
// p's access URL host or an app host under its wildcard, and for an app
// host the part the wildcard stands for. wantPort, when set, also requires
// the port URLs of that kind use (the access URL's; the wildcard's, else
// the access URL's).
func proxyHostKind(p database.WorkspaceProxy, hostport string, wantPort bool) (string, string) {
	access, err := url.Parse(p.URL)
	if err != nil || access.Host == "" {
		return proxyHostNone, ""
	}
	host := appHostName(hostport)
	_, port := splitPort(hostport)
	if host == appHostName(access.Host) {
		if wantPort && port != access.Port() {
			return proxyHostNone, ""
		}
		return proxyHostPath, ""
	}
	w, err := appurl.ParseWildcard(p.WildcardHostname)
	if err != nil || p.WildcardHostname == "" {
		return proxyHostNone, ""
	}
	sub, ok := w.Match(hostport)
	if !ok {
		return proxyHostNone, ""
	}
	if _, err := appurl.ParseAppHost(sub); err != nil {
		return proxyHostNone, ""
	}
	want := w.Port()
	if want == "" {
		want = access.Port()
	}
	if wantPort && port != want {
		return proxyHostNone, ""
	}
	return proxyHostSubdomain, sub
}

// splitPort splits "host:port" ("host" has no port).
func splitPort(hostport string) (string, string) {
	u := url.URL{Host: hostport}
	return u.Hostname(), u.Port()
}

// proxyAppRedirect reports whether u (an auth-redirect's redirect_uri) is
// a URL of a registered workspace proxy that is not deleted: its access
// URL (path-based dev URLs) or an app host under its wildcard, with the
// proxy's scheme and port.
func (api *API) proxyAppRedirect(ctx context.Context, u *url.URL) (bool, error) {
	ps, err := api.db.WorkspaceProxies(ctx) // deleted ones are not listed
	if err != nil {
		return false, fmt.Errorf("list workspace proxies: %w", err)
	}
	for _, p := range ps {
		if p.LastHeartbeatAt.IsZero() || p.URL == "" {
			continue
		}
		access, err := url.Parse(p.URL)
		if err != nil || access.Scheme != u.Scheme {
			continue
		}
		if kind, _ := proxyHostKind(p, u.Host, true); kind != proxyHostNone {
			return true, nil
		}
	}
	return false, nil
}

// proxyHostsCSP lists the CSP sources of the registered workspace proxies'
// hosts: each access URL's origin, and its wildcard's hosts
// ("https://*.eu.example.internal:8443"; a wildcard inside the first label
// widens to the parent domain, which CSP can express). A failure to list
// them is logged and lists none: the login page then works for everything
// but a sign-in that ends on a proxy.
func (api *API) proxyHostsCSP(ctx context.Context) []string {
	ps, err := api.db.WorkspaceProxies(ctx)
	if err != nil {
		api.log.Warn("list workspace proxies for the login page's form-action", "err", err)
		return nil
	}
	var out []string
	for _, p := range ps {
		access, err := url.Parse(p.URL)
		if p.LastHeartbeatAt.IsZero() || err != nil || access.Host == "" || (access.Scheme != "http" && access.Scheme != "https") {
			continue
		}
		out = append(out, access.Scheme+"://"+access.Host)
		w, err := appurl.ParseWildcard(p.WildcardHostname)
		if err != nil || p.WildcardHostname == "" {
			continue
		}
		port := w.Port()
		if port == "" {
			port = access.Port()
		}
		src := access.Scheme + "://" + w.CertificateName()
		if port != "" {
			src += ":" + port
		}
		out = append(out, src)
	}
	return out
}

// authorizeProxyApp is POST /api/v2/workspaceproxies/me/authorize-app.
func (api *API) authorizeProxyApp(c *gin.Context) error {
	p, err := api.authenticateProxy(c)
	if err != nil {
		return err
	}
	var req codersdk.ProxyAuthorizeAppRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	u, err := url.Parse(req.URL)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return validation("url", "must be the absolute URL the visitor asked for at the proxy, e.g. https://eu.example.internal/@alice/dev/apps/web/")
	}
	kind, sub := proxyHostKind(p, u.Host, false)
	if kind == proxyHostNone {
		return validation("url", fmt.Sprintf("host %s is neither workspace proxy %s's access URL (%s) nor under its wildcard %q: register the proxy with the URLs users reach it at",
			u.Host, p.Name, p.URL, p.WildcardHostname))
	}
	ctx := c.Request.Context()
	host := appHostName(u.Host)
	if req.ExchangeToken != "" {
		cookie, expires, err := api.redeemExchangeToken(ctx, host, req.ExchangeToken)
		if err != nil {
			return err
		}
		c.Header("Cache-Control", "no-store")
		c.JSON(http.StatusOK, codersdk.ProxyAuthorizeAppResponse{AppCookie: cookie, AppCookieExpiresAt: expires})
		return nil
	}

	var g proxyAppGrant
	switch kind {
	case proxyHostPath:
		g, err = api.decideProxyPathApp(c, p, req, u, host)
	case proxyHostSubdomain:
		g, err = api.decideProxySubdomainApp(c, p, req, u, sub, host)
	}
	if errors.Is(err, errAppSignIn) {
		return api.proxyAppSignIn(c, req)
	}
	if err != nil {
		return err
	}
	t, who := g.target, g.user.Username
	if !g.signed {
		who = "anonymous"
	}
	api.noteActivity(t.agent.ID) // a request is activity, as on the primary (schedules_activity.go)
	api.log.Debug("dev URL authorized for a workspace proxy", "proxy", p.Name, "user", who, "workspace", t.agent.OwnerName+"/"+t.agent.WorkspaceName,
		"target", g.dev.kind+"/"+g.dev.target, "access", kind)
	c.JSON(http.StatusOK, codersdk.ProxyAuthorizeAppResponse{
		UserID: g.user.ID, Username: who, AgentID: t.agent.ID, OwnerName: t.agent.OwnerName, WorkspaceName: t.agent.WorkspaceName, AgentName: t.agent.Name,
		Scheme: t.scheme, Host: t.host, Port: t.port, BasePath: t.basePath, Query: t.query, PathPrefix: g.prefix,
		SharingLevel: t.share, ValidForMillis: api.workspaceProxyAuthTTL().Milliseconds(),
	})
	return nil
}

// proxyAppGrant is a yes to a visitor of a proxy's dev URL or app host.
type proxyAppGrant struct {
	dev    devURL
	target devTarget
	user   database.User
	signed bool   // false: an anonymous visitor of a public app
	prefix string // the path prefix to strip, "" for an app host
}

// proxyAppAudit starts the record of a proxy's dev URL request, as the
// primary's own are recorded, with the proxy's name. A grant leaves it
// out (skip): as on the primary, the proxy reports each connection it
// relays (ProxyConnectionReport, kind dev-url), which is recorded.
func (api *API) proxyAppAudit(c *gin.Context, p database.WorkspaceProxy, req codersdk.ProxyAuthorizeAppRequest, d devURL, access string) *auditEntry {
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).workspace(d.owner, d.workspace).
		resource("", d.owner+"/"+d.workspace).field("kind", "dev-url").field("access", access).field("target", d.kind+"/"+d.target).
		field("workspace_proxy", p.Name)
	if req.Remote != "" {
		e.field("remote", req.Remote)
	}
	return e
}

// decideProxyPathApp decides about a path-based dev URL on the proxy's
// access URL, with the visitor's session token (header or cookie) or the
// access URL host's app cookie; errAppSignIn without either.
func (api *API) decideProxyPathApp(c *gin.Context, p database.WorkspaceProxy, req codersdk.ProxyAuthorizeAppRequest, u *url.URL, host string) (proxyAppGrant, error) {
	ctx := c.Request.Context()
	d, ok := parseDevURL(u.EscapedPath())
	if !ok {
		return proxyAppGrant{}, notFound("Dev URL " + u.Path + " (dev URLs look like /@owner/workspace/apps/slug/ or /@owner/workspace/ports/8080/)")
	}
	if d.rest == "" {
		d.rest = "/"
	}
	g := proxyAppGrant{dev: d, prefix: d.prefix}
	var err error
	if req.SessionToken != "" {
		if g.user, _, err = api.authenticate(ctx, req.SessionToken); err != nil {
			return g, err
		}
		g.signed = true
	} else if g.user, g.signed, err = api.appCookieValuesUser(ctx, req.AppCookies, host); err != nil {
		return g, err
	}
	if !g.signed {
		return g, errAppSignIn
	}
	e := api.proxyAppAudit(c, p, req, d, "path").actor(g.user)
	// A browser's credential (a cookie, the app cookie included) opens
	// only the visitor's own workspaces: the proxy's access URL is one
	// origin for every path dev URL on it.
	if g.target, err = api.authorizePathDevURL(ctx, e, g.user, d, !req.SessionTokenInHeader); err == nil {
		e.skip(c)
	}
	return g, err
}

// decideProxySubdomainApp decides about an app host under the proxy's
// wildcard, with the host's app cookie and the app's share level;
// errAppSignIn for an anonymous visitor of anything but a public app.
func (api *API) decideProxySubdomainApp(c *gin.Context, p database.WorkspaceProxy, req codersdk.ProxyAuthorizeAppRequest, u *url.URL, sub, host string) (proxyAppGrant, error) {
	ctx := c.Request.Context()
	h, err := appurl.ParseAppHost(sub)
	if err != nil {
		return proxyAppGrant{}, errorf(http.StatusNotFound, err.Error(), "%s is not an app host of workspace proxy %s", host, p.Name)
	}
	d, https, err := subdomainDevURL(h, u.EscapedPath())
	if err != nil {
		return proxyAppGrant{}, err
	}
	g := proxyAppGrant{dev: d}
	if g.user, g.signed, err = api.appCookieValuesUser(ctx, req.AppCookies, host); err != nil {
		return g, err
	}
	e := api.proxyAppAudit(c, p, req, d, "subdomain")
	if g.signed {
		e.actor(g.user)
	}
	g.target, err = api.authorizeSubdomainApp(ctx, e, d, https, host, g.user, g.signed)
	if err == nil || errors.Is(err, errAppSignIn) { // a sign-in is not a refusal worth a record
		e.skip(c)
	}
	return g, err
}

// proxyAppSignIn answers a visitor without credentials: a browser (GET,
// HEAD) is sent to sign in, anything else is refused.
func (api *API) proxyAppSignIn(c *gin.Context, req codersdk.ProxyAuthorizeAppRequest) error {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return errorf(http.StatusUnauthorized, "", "You are not signed in to this app: open it in the browser (GET) to sign in through %s, or send a session token in the %s header",
			api.opts.AccessURL, codersdk.SessionTokenHeader)
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, codersdk.ProxyAuthorizeAppResponse{SignInURL: api.appAuthRedirectURL(req.URL)})
	return nil
}
