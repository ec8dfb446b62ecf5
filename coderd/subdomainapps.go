package coderd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/internal/bodydeadline"
)

// Subdomain apps (--wildcard-access-url, package appurl for the names):
// every request whose Host is under the wildcard, except the access URL's
// own host, is an app request, whatever its path: the app owns the whole
// origin. They go to a router of their own (appRoutes: no dashboard, no
// API, no API rate limit), which resolves the workspace, agent and app as
// path-based dev URLs do (findDevTarget) and proxies through the relay the
// same way (proxyDevURL).
//
// Who may open one is the app's share level (coder_app.share), as in
// Coder: "owner" (the default, and every port) the workspace's owner and
// users with the owner role; "authenticated" any signed-in user of the
// deployment; "public" anyone, without signing in. Visitors sign in with
// the app cookie (appauth.go); coderd's session cookie and the app cookie
// are removed before the request reaches the app. Each request is in the
// audit log as its relayed connections (kind dev-url, access subdomain,
// with the share level), refusals included.

// byHost sends app-host requests to the app router and the rest to main.
func (api *API) byHost(main http.Handler) http.Handler {
	if api.opts.WildcardAccessURL.IsZero() {
		return main
	}
	apps := api.appRoutes()
	access := appHostName(api.opts.AccessURL.Host)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := api.opts.WildcardAccessURL.Match(r.Host); ok && appHostName(r.Host) != access {
			apps.ServeHTTP(w, r)
			return
		}
		main.ServeHTTP(w, r)
	})
}

// appRoutes is the router of app hosts: every path is the app's.
func (api *API) appRoutes() *gin.Engine {
	r := gin.New()
	r.Use(gin.Recovery(), api.instrument(), api.auditRequests())
	r.NoRoute(api.handle(api.serveSubdomainApp))
	return r
}

func (api *API) serveSubdomainApp(c *gin.Context) error {
	r := c.Request
	ctx := r.Context()
	host := appHostName(r.Host)
	sub, _ := api.opts.WildcardAccessURL.Match(r.Host)
	h, err := appurl.ParseAppHost(sub)
	if err != nil {
		return errorf(http.StatusNotFound, err.Error(), "%s is not an app host: app hosts look like %s://%s/ or %s://%s/",
			host, api.opts.AccessURL.Scheme, api.opts.WildcardAccessURL.Host("<slug>--<agent>--<workspace>--<owner>", api.opts.AccessURL),
			api.opts.AccessURL.Scheme, api.opts.WildcardAccessURL.Host("<port>--<agent>--<workspace>--<owner>", api.opts.AccessURL))
	}
	if tok := r.URL.Query().Get(codersdk.SubdomainAppSessionTokenParam); tok != "" {
		return api.exchangeAppToken(c, host, tok)
	}
	user, signedIn, err := api.appCookieUser(r, host)
	if err != nil {
		return err
	}

	d, https, err := subdomainDevURL(h, r.URL.EscapedPath())
	if err != nil {
		return err
	}
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).workspace(h.Owner, h.Workspace).
		resource("", h.Owner+"/"+h.Workspace).field("kind", "dev-url").field("access", "subdomain").field("target", d.kind+"/"+d.target)
	if signedIn {
		e.actor(user)
	}
	t, err := api.authorizeSubdomainApp(ctx, e, d, https, host, user, signedIn)
	if errors.Is(err, errAppSignIn) {
		// Not a refusal worth a record.
		e.skip(c)
		return api.appSignIn(c)
	}
	if err != nil {
		return err
	}
	if !api.agentReachable(t.agent) {
		return api.agentUnavailable(t.agent)
	}
	bodydeadline.Lift(r)
	stripCoderCookies(r)
	who := user.Username
	if !signedIn {
		who = "anonymous"
	}
	api.proxyDevURL(c, d, t, who)
	return nil
}

// subdomainDevURL is the dev URL an app host h stands for, with the
// request's escaped path as its rest, and whether the workspace serves a
// port host over https.
func subdomainDevURL(h appurl.AppHost, escapedPath string) (devURL, bool, error) {
	d := devURL{owner: h.Owner, workspace: h.Workspace, agent: h.Agent, kind: "apps", target: h.SlugOrPort, rest: escapedPath}
	port, https, isPort := h.Port()
	if isPort {
		d.kind, d.target = "ports", strconv.Itoa(int(port))
	} else if h.IsPort() {
		return devURL{}, false, badRequest("%q is not a TCP port (1-65535)", h.SlugOrPort)
	}
	if d.rest == "" {
		d.rest = "/"
	}
	return d, https, nil
}

// errAppSignIn is a visitor of an app host who must sign in first.
var errAppSignIn = errors.New("sign in to the app host first")

// authorizeSubdomainApp decides whether a visitor of app host host (user
// when signedIn, with the host's app cookie) may open d, here or through a
// workspace proxy (workspaceproxyapps.go), applying the app's share level,
// and names the agent in e. An anonymous visitor of anything but a public
// app gets errAppSignIn: anonymous visitors learn nothing about what
// exists.
func (api *API) authorizeSubdomainApp(ctx context.Context, e *auditEntry, d devURL, https bool, host string, user database.User, signedIn bool) (devTarget, error) {
	t, err := api.findDevTarget(ctx, d, func(string) bool { return true })
	if !signedIn && (err != nil || t.share != codersdk.AppSharePublic) {
		return devTarget{}, errAppSignIn
	}
	if err != nil {
		return devTarget{}, err
	}
	if https {
		t.scheme = "https"
	}
	e.agent(t.agent).field("share", t.share)
	if !mayOpenApp(user, signedIn, t) {
		if !can(user, resWorkspace, actRead, t.agent.OwnerID) {
			return devTarget{}, notFound(fmt.Sprintf("Workspace %q of %s", d.workspace, d.owner))
		}
		return devTarget{}, errorf(http.StatusForbidden, "", "%s is shared with the workspace's owner only (coder_app share = %q)", host, t.share)
	}
	return t, nil
}

// mayOpenApp applies the app's share level.
func mayOpenApp(u database.User, signedIn bool, t devTarget) bool {
	switch t.share {
	case codersdk.AppSharePublic:
		return true
	case codersdk.AppShareAuthenticated:
		return signedIn
	default:
		return signedIn && mayConnect(u, t.agent.OwnerID)
	}
}

// stripCoderCookies removes coderd's session cookie and the app cookie
// from a request before it goes to an app; the app's own cookies stay.
func stripCoderCookies(r *http.Request) {
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	var kept []string
	for _, ck := range cookies {
		if ck.Name != codersdk.SessionTokenCookie && ck.Name != codersdk.SubdomainAppSessionTokenCookie {
			kept = append(kept, ck.Name+"="+ck.Value)
		}
	}
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
	r.Header.Del(codersdk.SessionTokenHeader)
}

// setSubdomainNames fills in subdomain_name of the subdomain apps of
// agents in a workspace of owner: the app's host without the wildcard's
// suffix, as Coder's. It stays "" without a wildcard access URL (the
// dashboard then says the app is unavailable and why) and for names that
// cannot be part of a host.
func (api *API) setSubdomainNames(agents []codersdk.WorkspaceAgent, owner, workspace string) {
	if api.opts.WildcardAccessURL.IsZero() {
		return
	}
	for i := range agents {
		for j, app := range agents[i].Apps {
			if app.Subdomain {
				agents[i].Apps[j].SubdomainName = appurl.SubdomainName(app.Slug, agents[i].Name, workspace, owner)
			}
		}
	}
}

// appHostsCSP is the CSP source that covers every app host
// ("https://*.apps.example.internal:3443"; a wildcard inside the first
// label widens to the parent domain, which CSP can express), "" without a
// wildcard access URL.
func (api *API) appHostsCSP() string {
	w := api.opts.WildcardAccessURL
	if w.IsZero() {
		return ""
	}
	port := w.Port()
	if port == "" {
		port = api.opts.AccessURL.Port()
	}
	src := api.opts.AccessURL.Scheme + "://" + w.CertificateName()
	if port != "" {
		src += ":" + port
	}
	return src
}
