package coderd

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/coderd/site"
	"airgapcoder/codersdk"
	"airgapcoder/internal/appproxy"
	"airgapcoder/internal/bodydeadline"
)

// Dev URLs put workspace web servers under the access URL, path-based:
//
//	/@<owner>/<workspace>[.<agent>]/apps/<slug>/<path>   a coder_app (port, or url inside the workspace)
//	/@<owner>/<workspace>[.<agent>]/ports/<port>/<path>  any TCP port of the workspace
//
// Requests are reverse-proxied through the relay (an http.Transport whose
// dials open relay streams), WebSocket upgrades included. They authenticate
// like the API (header or coder_session_token cookie); the token is stripped
// before the request reaches the workspace.
//
// Who may open one: the workspace's owner. Users with the owner role may
// too, but only with the token in the header: a dev URL shares coderd's
// origin, so a page served from someone else's workspace would run in the
// visitor's browser with the visitor's session cookie (it could call the API
// as them). For the same reason coder_app share levels other than "owner"
// are not honored on these path-based URLs (Coder's default too); sharing
// apps safely needs an origin per app, which subdomain apps have
// (subdomainapps.go: they honor share levels). Other members get 404, or
// 403 when they may see the workspace.

// devURL is a parsed dev URL path.
type devURL struct {
	owner, workspace, agent string
	kind                    string // "apps" or "ports"
	target                  string // the app slug or the port
	prefix                  string // the escaped path up to and without the rest
	rest                    string // the escaped rest: "" or starting with "/"
}

// parseDevURL splits an escaped path that starts with "/@".
func parseDevURL(escaped string) (devURL, bool) {
	parts := strings.SplitN(strings.TrimPrefix(escaped, "/@"), "/", 4)
	if len(parts) < 4 || (parts[2] != "apps" && parts[2] != "ports") {
		return devURL{}, false
	}
	target, rest, hasRest := strings.Cut(parts[3], "/")
	var d devURL
	var err error
	unescape := func(s string) string {
		if err != nil {
			return ""
		}
		var v string
		v, err = url.PathUnescape(s)
		return v
	}
	d.owner = unescape(parts[0])
	ws := unescape(parts[1])
	d.target = unescape(target)
	if err != nil || d.owner == "" || ws == "" || d.target == "" {
		return devURL{}, false
	}
	d.workspace, d.agent, _ = strings.Cut(ws, ".")
	if d.workspace == "" { // ".agent" or "."
		return devURL{}, false
	}
	d.kind = parts[2]
	d.prefix = "/@" + parts[0] + "/" + parts[1] + "/" + parts[2] + "/" + target
	if hasRest {
		d.rest = "/" + rest
	}
	return d, true
}

// devURLs is middleware that serves dev URLs and passes every other
// request on.
func (api *API) devURLs() gin.HandlerFunc {
	serve := api.handle(api.serveDevURL)
	return func(c *gin.Context) {
		if !strings.HasPrefix(c.Request.URL.Path, "/@") {
			c.Next()
			return
		}
		serve(c)
		c.Abort()
	}
}

// devTarget is where a dev URL request goes inside the workspace.
type devTarget struct {
	agent    database.WorkspaceAgent
	scheme   string
	host     string // "" for the workspace's loopback
	port     uint16
	basePath string // escaped path of an app's url
	query    string // query of an app's url
	// share is the coder_app's share level ("owner", "authenticated",
	// "public"; ports are "owner"), honored on subdomain apps only
	// (subdomainapps.go).
	share string
}

func (api *API) serveDevURL(c *gin.Context) error {
	r := c.Request
	d, ok := parseDevURL(r.URL.EscapedPath())
	if !ok {
		return notFound("Dev URL " + r.URL.Path + " (dev URLs look like /@owner/workspace/apps/slug/ or /@owner/workspace/ports/8080/)")
	}
	if d.rest == "" {
		// Relative links in the app resolve under the prefix only with a
		// trailing slash. The target is made of the request's own path and
		// query, so it is kept on this site like every redirect a visitor
		// can choose.
		loc := d.prefix + "/"
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		c.Redirect(http.StatusTemporaryRedirect, site.LocalRedirect(loc))
		return nil
	}
	ctx := r.Context()
	token := tokenFromRequest(r)
	if token == "" {
		return errorf(http.StatusUnauthorized, "", "You are not signed in: send a session token in the %s header or the %s cookie",
			codersdk.SessionTokenHeader, codersdk.SessionTokenCookie)
	}
	viaCookie := r.Header.Get(codersdk.SessionTokenHeader) == ""
	user, _, err := api.authenticate(ctx, token)
	if err != nil {
		return err
	}
	e := api.audit(c, codersdk.AuditActionConnect, codersdk.AuditResourceWorkspaceAgent).actor(user).workspace(d.owner, d.workspace).
		resource("", d.owner+"/"+d.workspace).field("kind", "dev-url").field("target", d.kind+"/"+d.target)
	t, err := api.authorizePathDevURL(ctx, e, user, d, viaCookie)
	if err != nil {
		return err
	}
	if !api.agentReachable(t.agent) {
		return api.agentUnavailable(t.agent)
	}
	// The body streams to the app, authorized: it may take its time
	// (bodydeadline.go).
	bodydeadline.Lift(r)
	api.proxyDevURL(c, d, t, user.Username)
	return nil
}

// authorizePathDevURL decides whether user may open the path-based dev URL
// d, here or through a workspace proxy (workspaceproxyapps.go), and
// names the agent in e. viaCookie is a browser's credential (a session or
// app cookie) rather than a token in the header: it opens only the user's
// own workspaces (see the top of this file).
func (api *API) authorizePathDevURL(ctx context.Context, e *auditEntry, user database.User, d devURL, viaCookie bool) (devTarget, error) {
	t, err := api.resolveDevURL(ctx, user, d)
	if err != nil {
		return devTarget{}, err
	}
	e.agent(t.agent)
	if user.ID != t.agent.OwnerID {
		if !mayConnect(user, t.agent.OwnerID) {
			return devTarget{}, errorf(http.StatusForbidden, "", "Only the workspace's owner and users with the owner role may open %s", d.prefix)
		}
		if viaCookie {
			return devTarget{}, errorf(http.StatusForbidden, "The page would run in your browser with your session on this site. Use coder port-forward, or send a token in the "+codersdk.SessionTokenHeader+" header.",
				"Dev URLs of other users' workspaces do not open with a browser session")
		}
	}
	return t, nil
}

// resolveDevURL finds the workspace, agent and target of a dev URL. A
// workspace user may not see is reported as missing.
func (api *API) resolveDevURL(ctx context.Context, user database.User, d devURL) (devTarget, error) {
	return api.findDevTarget(ctx, d, func(ownerID string) bool { return can(user, resWorkspace, actRead, ownerID) })
}

// findDevTarget finds the workspace, agent and target of d (path-based or
// subdomain). A workspace whose owner visible refuses is reported as
// missing. Agent names and app slugs match without regard to case (host
// names have none).
func (api *API) findDevTarget(ctx context.Context, d devURL, visible func(ownerID string) bool) (devTarget, error) {
	missing := notFound(fmt.Sprintf("Workspace %q of %s", d.workspace, d.owner))
	owner, err := api.db.UserByEmailOrUsername(ctx, "", d.owner)
	if errors.Is(err, database.ErrNotFound) {
		return devTarget{}, missing
	}
	if err != nil {
		return devTarget{}, err
	}
	if !visible(owner.ID) {
		return devTarget{}, missing
	}
	w, err := api.db.WorkspaceByOwnerAndName(ctx, owner.ID, d.workspace)
	if errors.Is(err, database.ErrNotFound) {
		return devTarget{}, missing
	}
	if err != nil {
		return devTarget{}, err
	}
	resources, err := api.db.ResourcesByJobIDs(ctx, []string{w.LatestBuild.Job.ID})
	if err != nil {
		return devTarget{}, err
	}
	var agents []database.Agent
	for _, r := range resources[w.LatestBuild.Job.ID] {
		for _, a := range r.Agents {
			if d.agent == "" || strings.EqualFold(a.Name, d.agent) {
				agents = append(agents, a)
			}
		}
	}
	wrap := func(a database.Agent) database.WorkspaceAgent {
		return database.WorkspaceAgent{Agent: a, LatestBuild: true, Transition: w.LatestBuild.Transition,
			WorkspaceID: w.ID, WorkspaceName: w.Name, OwnerID: w.OwnerID, OwnerName: w.OwnerName}
	}
	if len(agents) == 0 {
		if w.LatestBuild.Transition != string(codersdk.WorkspaceTransitionStart) {
			return devTarget{}, errorf(http.StatusServiceUnavailable, "", "Workspace %s/%s is %s: start it with `coder start %s`",
				w.OwnerName, w.Name, workspaceStatus(w.LatestBuild.Transition, w.LatestBuild.Job.Status()), w.Name)
		}
		if d.agent != "" {
			return devTarget{}, notFound(fmt.Sprintf("Agent %q of workspace %s/%s", d.agent, w.OwnerName, w.Name))
		}
		return devTarget{}, notFound(fmt.Sprintf("An agent in workspace %s/%s", w.OwnerName, w.Name))
	}
	if d.kind == "ports" {
		if len(agents) > 1 {
			return devTarget{}, badRequest("Workspace %s/%s has %d agents: name one, as in /@%s/%s.%s/ports/%s/", w.OwnerName, w.Name,
				len(agents), d.owner, d.workspace, agents[0].Name, d.target)
		}
		port, err := strconv.ParseUint(d.target, 10, 16)
		if err != nil || port == 0 {
			return devTarget{}, badRequest("%q is not a TCP port (1-65535)", d.target)
		}
		return devTarget{agent: wrap(agents[0]), scheme: "http", port: uint16(port), share: "owner"}, nil
	}
	for _, a := range agents {
		for _, app := range a.Apps {
			if !strings.EqualFold(app.Slug, d.target) {
				continue
			}
			// External apps are opened at their URL by the browser, and
			// command apps run in a terminal: neither is served through
			// the workspace.
			if app.External {
				return devTarget{}, badRequest("App %s is external: open %s directly", app.Slug, app.URL)
			}
			if app.Port == 0 && app.URL == "" {
				return devTarget{}, badRequest("App %s runs a command (%q) in a terminal and has no URL to open", app.Slug, app.Command)
			}
			t := devTarget{agent: wrap(a), scheme: "http", share: app.Share}
			if t.share == "" {
				t.share = "owner"
			}
			if app.Port > 0 {
				t.port = uint16(app.Port)
				return t, nil
			}
			u, err := url.Parse(app.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
				return devTarget{}, errorf(http.StatusBadGateway, "", "App %s has an unusable url %q: want http(s)://host[:port]/path", app.Slug, app.URL)
			}
			t.scheme, t.host, t.basePath, t.query = u.Scheme, u.Hostname(), u.EscapedPath(), u.RawQuery
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			p, err := strconv.ParseUint(port, 10, 16)
			if err != nil || p == 0 {
				return devTarget{}, errorf(http.StatusBadGateway, "", "App %s has an unusable url %q: bad port", app.Slug, app.URL)
			}
			t.port = uint16(p)
			return t, nil
		}
	}
	return devTarget{}, notFound(fmt.Sprintf("App %q of workspace %s/%s", d.target, w.OwnerName, w.Name))
}

// devURLCaller carries who asked for what into the transport's dials, for
// the connection log.
type devURLCaller struct{}

type devURLCall struct {
	user, workspace string
	audit           *connAudit
}

func (api *API) proxyDevURL(c *gin.Context, d devURL, t devTarget, who string) {
	api.noteActivity(t.agent.ID) // a request is activity: it moves the deadline (schedules_activity.go)
	addr := relayAddr(t.agent.ID, t.host, t.port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			appproxy.Rewrite(pr, appproxy.Target{Scheme: t.scheme, Addr: addr, BasePath: t.basePath, Query: t.query}, d.prefix, d.rest)
		},
		Transport:      api.relay.devTransport(api, who),
		FlushInterval:  -1,
		ModifyResponse: appproxy.DropCoderCookies,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = errorf(http.StatusBadGateway, err.Error(), "The workspace did not answer on port %d", t.port)
			}
			if r.Context().Err() != nil {
				return
			}
			c.JSON(ae.status, ae.Response)
		},
	}
	r := c.Request.WithContext(context.WithValue(c.Request.Context(), devURLCaller{}, devURLCall{user: who, workspace: t.agent.OwnerName + "/" + t.agent.WorkspaceName, audit: connAuditOf(c)}))
	api.log.Debug("dev URL request", "user", who, "workspace", t.agent.OwnerName+"/"+t.agent.WorkspaceName, "target", d.kind+"/"+d.target,
		"method", r.Method, "path", d.rest)
	rp.ServeHTTP(c.Writer, r)
}

// relayAddr names a target inside a workspace as a transport address:
// "h<hex host>.<agent id>.relay.invalid:<port>". The transport pools idle
// connections by this name.
func relayAddr(agentID, host string, port uint16) string {
	return fmt.Sprintf("h%s.%s.relay.invalid:%d", hex.EncodeToString([]byte(host)), agentID, port)
}

func parseRelayAddr(addr string) (agentID, host string, port uint16, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", 0, err
	}
	name, ok := strings.CutSuffix(h, ".relay.invalid")
	hexHost, id, ok2 := strings.Cut(name, ".")
	if !ok || !ok2 || !strings.HasPrefix(hexHost, "h") {
		return "", "", 0, fmt.Errorf("not a relay address: %s", addr)
	}
	b, err := hex.DecodeString(hexHost[1:])
	if err != nil {
		return "", "", 0, fmt.Errorf("not a relay address: %s", addr)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", "", 0, fmt.Errorf("not a relay address: %s", addr)
	}
	return id, string(b), uint16(n), nil
}

// devTransport returns the relay's HTTP transport for user's dev URL
// requests, whose dials open relay streams.
func (r *relay) devTransport(api *API, user string) *http.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.transports[user]
	if t == nil {
		t = &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return api.dialRelayAddr(ctx, addr)
			},
			DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				conn, err := api.dialRelayAddr(ctx, addr)
				if err != nil {
					return nil, err
				}
				_, host, _, _ := parseRelayAddr(addr)
				// The hop to the app is inside the workspace, behind the
				// authenticated relay; apps there commonly have
				// self-signed certificates.
				tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec
				if err := tc.HandshakeContext(ctx); err != nil {
					_ = conn.Close()
					return nil, err
				}
				return tc, nil
			},
			MaxIdleConnsPerHost: 16, IdleConnTimeout: 60 * time.Second, TLSHandshakeTimeout: 15 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		r.transports[user] = t
	}
	return t
}

func (api *API) dialRelayAddr(ctx context.Context, addr string) (net.Conn, error) {
	agentID, host, port, err := parseRelayAddr(addr)
	if err != nil {
		return nil, err
	}
	// An agent connected here needs no look-up; one on another replica
	// needs its row to say which.
	a := database.WorkspaceAgent{}
	a.ID = agentID
	if api.relay.get(agentID) == nil {
		if a, err = api.db.AgentByID(ctx, agentID); err != nil {
			return nil, errorf(http.StatusServiceUnavailable, err.Error(), "%s", errAgentGone.Error())
		}
	}
	call, _ := ctx.Value(devURLCaller{}).(devURLCall)
	hdr := codersdk.RelayHeader{Kind: codersdk.RelayKindTCP, Host: host, Port: port, ConnID: newConnID(), User: call.user}
	conn, _, err := api.dialAgent(ctx, a, hdr)
	if err == nil {
		err = conn.await()
	}
	log := api.log.With("conn", hdr.ConnID, "user", call.user, "workspace", call.workspace, "agent", agentID, "kind", "dev-url", "host", host, "port", port)
	if err != nil {
		log.Info("relay connection refused", "err", err)
		return nil, err
	}
	log.Info("relay connection opened")
	return api.auditDevURLConn(conn, call.audit, hdr), nil
}
