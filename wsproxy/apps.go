package wsproxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/appproxy"
)

// Dev URLs and apps through the proxy (codersdk/workspaceproxyapps.go),
// the same URLs as on the primary (coderd/devurls.go,
// coderd/subdomainapps.go) with the proxy's access URL or wildcard:
//
//	/@<owner>/<workspace>[.<agent>]/apps/<slug>/<path>   on the access URL's host
//	/@<owner>/<workspace>[.<agent>]/ports/<port>/<path>  on the access URL's host
//	<slug or port>--<agent>--<workspace>--<owner><wildcard suffix>   any path
//
// The proxy decides nothing itself. For each request it has no fresh
// answer for, it sends the primary what the visitor brought (a session
// token in the Coder-Session-Token header or coder_session_token cookie,
// the app cookie of this host, or the exchange token at the end of the
// sign-in redirect) with the request's URL, and the primary answers as
// for a request of its own: the agent, the target inside the workspace
// and the prefix to strip; a refusal (passed on as it is); the URL to sign
// in at (a browser's GET without credentials: the primary's auth-redirect,
// which comes back here with an exchange token); or, for an exchange
// token, the app cookie to set. A yes is kept for the answer's ValidFor
// (the primary's WorkspaceProxyAuthTTL), keyed by the credentials, the
// host and the path prefix: a revoked session or a changed share level
// takes effect here within that bound.
//
// Requests go on as on the primary: an httputil.ReverseProxy whose
// transport's dials open relay streams to the agent (dialAgent: through
// the agent's session here, or through the primary), WebSocket upgrades
// included. The visitor's Host stays, X-Forwarded-For/-Host/-Proto/-Prefix
// say what the proxy saw, and the session token (header and cookie) and
// the app cookie never reach the app; an app cannot set either. Each
// relayed connection is reported to the primary when it ends (kind
// dev-url), which writes its audit record with the proxy's name, and
// counts its agent active for the workspace's deadline.

// appRoutes mounts dev URLs (path apps and ports) on the proxy's access
// URL. A ServeMux pattern cannot match "/@<owner>", so they are
// dispatched by byHost, before the mux: nothing is added here.
func (s *Server) appRoutes(*http.ServeMux) {}

// byHost serves subdomain apps (hosts under Options.WildcardAccessURL) and
// path-based dev URLs (paths under "/@" on the access URL's host) before
// main.
func (s *Server) byHost(main http.Handler) http.Handler {
	a := &appProxy{s: s}
	suffix := wildcardSuffix(s.opts.WildcardAccessURL)
	access := hostName(s.opts.AccessURL.Host)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostName(r.Host)
		switch {
		case host != access && suffix != "" && isAppHost(host, suffix):
			a.serve(w, r, false)
		case strings.HasPrefix(r.URL.Path, "/@"):
			a.serve(w, r, true)
		default:
			main.ServeHTTP(w, r)
		}
	})
}

// wildcardSuffix is what an app host ends with under wildcard
// ("*.eu.example.internal:8443" → ".eu.example.internal"), "" for none.
func wildcardSuffix(wildcard string) string {
	if wildcard == "" {
		return ""
	}
	h := wildcard
	if hh, _, err := net.SplitHostPort(wildcard); err == nil {
		h = hh
	}
	return strings.ToLower(strings.TrimPrefix(h, "*"))
}

// isAppHost reports whether host (lower case, no port) is under the
// wildcard: the "*" stands for part of its first label.
func isAppHost(host, suffix string) bool {
	sub, ok := strings.CutSuffix(host, suffix)
	return ok && sub != "" && !strings.Contains(sub, ".")
}

// hostName is a Host header's or URL's host name, lower case, without
// port or trailing dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// appProxy serves dev URLs and app hosts for s.
type appProxy struct {
	s *Server

	cache answerCache[appCacheKey, codersdk.ProxyAuthorizeAppResponse]

	transportOnce sync.Once
	transport     *http.Transport
}

// appCacheKey keys the primary's yes-answers: the SHA-256 of the
// credentials, the host and the path prefix ("" for app hosts).
type appCacheKey struct {
	credentials [sha256.Size]byte
	host        string
	prefix      string
}

// devPath splits a path-based dev URL's escaped path into its prefix
// ("/@alice/dev/apps/web") and the rest, as the primary does; rest is ""
// when the path stops at the prefix.
func devPath(escaped string) (prefix, rest string, hasRest, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(escaped, "/@"), "/", 4)
	if len(parts) < 4 || (parts[2] != "apps" && parts[2] != "ports") || parts[0] == "" || parts[1] == "" {
		return "", "", false, false
	}
	target, after, hasRest := strings.Cut(parts[3], "/")
	if target == "" {
		return "", "", false, false
	}
	prefix = "/@" + parts[0] + "/" + parts[1] + "/" + parts[2] + "/" + target
	if hasRest {
		rest = "/" + after
	}
	return prefix, rest, hasRest, true
}

// serve serves one request to a dev URL (path) or an app host.
func (a *appProxy) serve(w http.ResponseWriter, r *http.Request, path bool) {
	s := a.s
	if !s.track() {
		writeJSON(w, http.StatusServiceUnavailable, codersdk.Response{Message: "This workspace proxy is shutting down; open the app again in a moment, or through the primary"})
		return
	}
	defer s.handlers.Done()
	escaped := r.URL.EscapedPath()
	prefix, rest := "", escaped
	if path {
		var hasRest, ok bool
		prefix, rest, hasRest, ok = devPath(escaped)
		if !ok {
			writeJSON(w, http.StatusNotFound, codersdk.Response{
				Message: fmt.Sprintf("Dev URL %s not found (dev URLs look like /@owner/workspace/apps/slug/ or /@owner/workspace/ports/8080/)", r.URL.Path),
			})
			return
		}
		if !hasRest {
			// Relative links in the app resolve under the prefix only with
			// a trailing slash (the target is this host's own path).
			loc := prefix + "/"
			if r.URL.RawQuery != "" {
				loc += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
			return
		}
	}
	if rest == "" {
		rest = "/"
	}

	q := r.URL.Query()
	exchange := q.Get(codersdk.SubdomainAppSessionTokenParam)
	q.Del(codersdk.SubdomainAppSessionTokenParam)
	self := url.URL{Scheme: s.opts.AccessURL.Scheme, Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	if exchange != "" {
		self.RawQuery = q.Encode()
		a.exchange(w, r, self, exchange)
		return
	}
	grant, err := a.authorize(r.Context(), appRequest(r, self), hostName(r.Host), prefix)
	if err != nil {
		s.log.Info("dev URL request refused", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		writeError(w, err)
		return
	}
	if grant.SignInURL != "" {
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, grant.SignInURL, http.StatusTemporaryRedirect)
		return
	}
	a.proxy(w, r, grant, prefix, rest)
}

// appRequest is what the visitor of self brought, for the primary: a
// session token (the header, else the dashboard's cookie) and the app
// cookies.
func appRequest(r *http.Request, self url.URL) codersdk.ProxyAuthorizeAppRequest {
	req := codersdk.ProxyAuthorizeAppRequest{Method: r.Method, URL: self.String(), Remote: r.RemoteAddr}
	if t := r.Header.Get(codersdk.SessionTokenHeader); t != "" {
		req.SessionToken, req.SessionTokenInHeader = t, true
	} else if c, err := r.Cookie(codersdk.SessionTokenCookie); err == nil {
		req.SessionToken = c.Value
	}
	for _, c := range r.Cookies() {
		if c.Name == codersdk.SubdomainAppSessionTokenCookie {
			req.AppCookies = append(req.AppCookies, c.Value)
		}
	}
	return req
}

// exchange ends the sign-in redirect: the exchange token is traded for
// this host's app cookie, and the visitor is sent to the same URL without
// the token.
func (a *appProxy) exchange(w http.ResponseWriter, r *http.Request, self url.URL, token string) {
	ctx, cancel := context.WithTimeout(r.Context(), attemptTimeout)
	defer cancel()
	res, err := a.s.client.AuthorizeApp(ctx, codersdk.ProxyAuthorizeAppRequest{
		Method: r.Method, URL: self.String(), ExchangeToken: token, Remote: r.RemoteAddr,
	})
	if err != nil {
		writeError(w, primaryError(err))
		return
	}
	if res.AppCookie == "" {
		writeJSON(w, http.StatusBadGateway, codersdk.Response{Message: "The primary answered the app sign-in without an app cookie; open the app again from the dashboard"})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: codersdk.SubdomainAppSessionTokenCookie, Value: res.AppCookie, Path: "/",
		MaxAge: max(1, int(a.s.clock.Until(res.AppCookieExpiresAt).Seconds())), HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: a.s.opts.AccessURL.Scheme == "https",
	})
	// Absolute, on the host the visitor asked: a path such as
	// "//evil.example" stays a path of this host.
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, self.String(), http.StatusSeeOther)
}

// primaryError is an error of a call to the primary as the visitor sees
// it: the primary's own answer, or a 502 saying the primary did not
// answer.
func primaryError(err error) error {
	var apiErr *codersdk.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode != 0 {
		return apiErr
	}
	return apiError(http.StatusBadGateway, "This workspace proxy could not ask the primary whether you may open this app; try again, or open it through the primary", err.Error())
}

// authorize answers req from the cache, or asks the primary and keeps a
// yes for its ValidFor.
func (a *appProxy) authorize(ctx context.Context, req codersdk.ProxyAuthorizeAppRequest, host, prefix string) (codersdk.ProxyAuthorizeAppResponse, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%q %t", req.SessionToken, req.SessionTokenInHeader)
	for _, c := range req.AppCookies {
		fmt.Fprintf(h, " %q", c)
	}
	key := appCacheKey{host: host, prefix: prefix}
	h.Sum(key.credentials[:0])
	now := a.s.clock.Now()
	if grant, ok := a.cache.get(key, now); ok {
		return grant, nil
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	res, err := a.s.client.AuthorizeApp(actx, req)
	if err != nil {
		return res, primaryError(err)
	}
	if res.SignInURL != "" || res.AppCookie != "" {
		return res, nil
	}
	if res.AgentID == "" || res.Port == 0 || (res.Scheme != "http" && res.Scheme != "https") {
		return res, apiError(http.StatusBadGateway, "The primary's answer names no app to open", fmt.Sprintf("agent %q, scheme %q, port %d", res.AgentID, res.Scheme, res.Port))
	}
	a.cache.put(key, res, now, res.ValidFor())
	return res, nil
}

// appDial is what the transport's dials need to know about the request
// that asked for the connection; it travels in the request's context.
type appDial struct {
	grant  codersdk.ProxyAuthorizeAppResponse
	remote string
}

type appDialKey struct{}

// appAddr names a connection target as a transport address, so that the
// transport pools idle connections per agent, target and user:
// "h<hex host>.u<hex user>.<agent id>.relay.invalid:<port>".
func appAddr(g codersdk.ProxyAuthorizeAppResponse) string {
	return fmt.Sprintf("h%s.u%s.%s.relay.invalid:%d", hex.EncodeToString([]byte(g.Host)), hex.EncodeToString([]byte(g.Username)), g.AgentID, g.Port)
}

// proxy sends the request to the app and its answer back.
func (a *appProxy) proxy(w http.ResponseWriter, r *http.Request, g codersdk.ProxyAuthorizeAppResponse, prefix, rest string) {
	s := a.s
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			appproxy.Rewrite(pr, appproxy.Target{Scheme: g.Scheme, Addr: appAddr(g), BasePath: g.BasePath, Query: g.Query}, prefix, rest)
		},
		Transport:      a.httpTransport(),
		FlushInterval:  -1,
		ModifyResponse: appproxy.DropCoderCookies,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			var apiErr *codersdk.Error
			if !errors.As(err, &apiErr) {
				apiErr = apiError(http.StatusBadGateway, fmt.Sprintf("The workspace did not answer on port %d", g.Port), err.Error())
			}
			writeError(w, apiErr)
		},
	}
	s.log.Debug("dev URL request", "user", g.Username, "workspace", g.OwnerName+"/"+g.WorkspaceName, "agent", g.AgentID,
		"port", g.Port, "method", r.Method, "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
	ctx := context.WithValue(r.Context(), appDialKey{}, appDial{grant: g, remote: r.RemoteAddr})
	rp.ServeHTTP(w, r.WithContext(ctx))
}

// httpTransport is the transport of app requests, whose dials open relay
// streams (dialAgent). Its idle connections are closed when the proxy
// stops.
func (a *appProxy) httpTransport() *http.Transport {
	a.transportOnce.Do(func() {
		a.transport = &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return a.dial(ctx)
			},
			DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				conn, err := a.dial(ctx)
				if err != nil {
					return nil, err
				}
				d, _ := ctx.Value(appDialKey{}).(appDial)
				// The hop to the app is inside the workspace, behind the
				// authenticated relay; apps there commonly have self-signed
				// certificates (as on the primary).
				tc := tls.Client(conn, &tls.Config{ServerName: d.grant.Host, InsecureSkipVerify: true}) //nolint:gosec
				if err := tc.HandshakeContext(ctx); err != nil {
					_ = conn.Close()
					return nil, fmt.Errorf("TLS handshake with the app: %w", err)
				}
				return tc, nil
			},
			MaxIdleConnsPerHost: 16, IdleConnTimeout: 60 * time.Second, TLSHandshakeTimeout: 15 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		tr := a.transport
		go func() {
			<-a.s.closing
			tr.CloseIdleConnections()
		}()
	})
	return a.transport
}

// dial opens a relay stream to the app of the request in ctx and returns
// it counting its bytes; closing it reports the connection to the
// primary.
func (a *appProxy) dial(ctx context.Context) (net.Conn, error) {
	d, ok := ctx.Value(appDialKey{}).(appDial)
	if !ok {
		return nil, errors.New("dial an app: the request carries no grant")
	}
	g := d.grant
	hdr := codersdk.RelayHeader{Kind: codersdk.RelayKindTCP, Host: g.Host, Port: g.Port, ConnID: newConnID(), User: g.Username}
	rec := codersdk.ProxyConnectionReport{
		UserID: g.UserID, AgentID: g.AgentID, ConnID: hdr.ConnID, Kind: "dev-url", Host: g.Host, Port: g.Port,
		Remote: d.remote, StartedAt: a.s.clock.Now(),
	}
	log := a.s.log.With("conn", hdr.ConnID, "user", g.Username, "workspace", g.OwnerName+"/"+g.WorkspaceName, "agent", g.AgentID,
		"kind", "dev-url", "host", g.Host, "port", g.Port)
	conn, err := a.s.dialAgent(ctx, g.AgentID, hdr)
	if err != nil {
		log.Info("relay connection refused", "err", err)
		if g.UserID != "" {
			a.s.refused(rec, err)
		}
		return nil, err
	}
	log.Info("relay connection opened")
	a.s.setActive(g.AgentID, 1)
	c := &countedConn{Conn: conn}
	c.onClose = func() {
		a.s.setActive(g.AgentID, -1)
		rec.EndedAt, rec.BytesUp, rec.BytesDown = a.s.clock.Now(), c.up.Load(), c.down.Load()
		log.Info("relay connection closed", "bytes_to_agent", rec.BytesUp, "bytes_from_agent", rec.BytesDown,
			"duration", rec.EndedAt.Sub(rec.StartedAt).Round(time.Millisecond))
		if g.UserID != "" { // an anonymous visitor of a public app has no user to record
			a.s.report(rec)
		}
	}
	return c, nil
}

// countedConn counts the bytes of a relayed connection and calls onClose
// once, when it is first closed.
type countedConn struct {
	net.Conn
	up, down atomic.Int64
	once     sync.Once
	onClose  func()
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.down.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.up.Add(int64(n))
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}
