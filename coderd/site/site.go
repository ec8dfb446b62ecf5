// Package site is the dashboard: the web pages coderd serves outside /api
// (setup, login, workspaces, one workspace, its terminal, templates and their
// versions, external auth, and the owners' admin pages: users, provisioners,
// audit, replicas and the appliance), rendered
// on the server from html/template files, with one CSS file and a few small
// vanilla JavaScript files for the live parts. Every asset is embedded with
// go:embed; the pages load nothing from another host (no CDN, no web fonts).
// Third-party browser code (xterm.js) is vendored under static/vendor by
// `make web-vendor` from web/package-lock.json and committed.
//
// The site owns no state and no authorization. Every read and write goes
// through the API: the handler coderd passes in Options.API, called in
// process through codersdk with the visitor's own session token, so the
// dashboard sees exactly what the JSON API lets that user see, with the
// API's validation, audit and error messages. It must not open the database,
// dial coderd over the network, or set cookies itself: the session cookie is
// the one the API's login and logout set, passed on to the browser.
package site

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/bytesize"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the site.
type Options struct {
	// API serves /api/v2 (coderd's router). Required. The site calls it in
	// process; it is never reached over the network.
	API http.Handler
	// Logger receives errors that are not the visitor's (nil discards).
	Logger *slog.Logger
	// AppHosts is the CSP source of subdomain app hosts
	// ("https://*.apps.example.internal:3443"), "" for none: the login
	// form's redirect may end on an app host (coderd's appauth.go), which
	// the form-action directive must allow.
	AppHosts string
	// ProxyHosts, when set, lists the CSP sources of the workspace proxies'
	// hosts (access URLs and wildcards) now: the login form's redirect may
	// end on one of them too (a dev URL through a proxy), so the login
	// page's form-action allows them.
	ProxyHosts func(context.Context) []string
}

// Handler serves the dashboard's pages and assets.
type Handler struct {
	api    http.Handler
	log    *slog.Logger
	pages  map[string]*template.Template
	static http.Handler
	// appHosts is Options.AppHosts, proxyHosts Options.ProxyHosts.
	appHosts   string
	proxyHosts func(context.Context) []string
}

// New parses the embedded templates. It starts no goroutines.
func New(opts Options) (*Handler, error) {
	if opts.API == nil {
		return nil, errors.New("site: Options.API is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{api: opts.API, log: log, pages: map[string]*template.Template{}, appHosts: opts.AppHosts, proxyHosts: opts.ProxyHosts}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		page := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if page == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("site: parse %s: %w", n, err)
		}
		h.pages[page] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix("/static/", http.FileServerFS(static))
	return h, nil
}

// Owns reports whether the site serves path. Everything else (the API,
// /healthz, /bin, dev URLs under /@owner/workspace/apps|ports/) is coderd's.
func Owns(path string) bool {
	switch path {
	case "/", "/setup", "/login", "/logout", "/cli-auth", "/workspaces", "/workspaces/new", "/templates", "/external-auth", "/favicon.ico",
		"/admin/users", "/admin/provisioners", "/admin/audit", "/admin/replicas", "/admin/appliance":
		return true
	}
	if strings.HasPrefix(path, "/static/") {
		return true
	}
	if _, _, ok := templatePath(path); ok {
		return true
	}
	if _, ok := externalAuthID(path); ok {
		return true
	}
	if rest, ok := strings.CutPrefix(path, "/@"); ok {
		parts := strings.Split(rest, "/")
		switch {
		case len(parts) == 2:
			return parts[0] != "" && parts[1] != ""
		case len(parts) == 3:
			return parts[0] != "" && parts[1] != "" && (parts[2] == "terminal" || parts[2] == "build")
		}
	}
	return false
}

// ServeHTTP serves one page or asset.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	if strings.HasPrefix(r.URL.Path, "/static/") {
		w.Header().Set("Cache-Control", "no-cache")
		h.static.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/favicon.ico" {
		// Browsers ask for it on every page, dev URL pages included.
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "max-age=86400")
		http.ServeFileFS(w, r, staticFS, "static/favicon.svg")
		return
	}
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Cache-Control", "no-store")
	csp := contentSecurityPolicy(r.URL.Path)
	if h.appHosts != "" {
		csp = strings.Replace(csp, "form-action 'self'", "form-action 'self' "+h.appHosts, 1)
	}
	if r.URL.Path == "/login" && h.proxyHosts != nil {
		if hosts := h.proxyHosts(r.Context()); len(hosts) > 0 {
			csp = strings.Replace(csp, "form-action 'self'", "form-action 'self' "+strings.Join(hosts, " "), 1)
		}
	}
	w.Header().Set("Content-Security-Policy", csp)
	if r.Method == http.MethodPost && !sameOrigin(r) {
		http.Error(w, "Cross-site form posts are refused", http.StatusForbidden)
		return
	}
	if r.Method == http.MethodPost {
		// Read now, so a form that did not arrive (coderd's body deadline)
		// is refused rather than taken for an empty one.
		if err := r.ParseForm(); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, os.ErrDeadlineExceeded) {
				status = http.StatusRequestTimeout
			}
			http.Error(w, "The form could not be read: "+err.Error(), status)
			return
		}
	}
	var err error
	switch p := r.URL.Path; {
	case p == "/":
		http.Redirect(w, r, "/workspaces", http.StatusSeeOther)
	case p == "/setup":
		err = h.setup(w, r)
	case p == "/login":
		err = h.login(w, r)
	case p == "/logout":
		err = h.logout(w, r)
	case p == "/cli-auth":
		err = h.authed(h.cliAuth)(w, r)
	case p == "/workspaces":
		err = h.authed(h.workspaces)(w, r)
	case p == "/workspaces/new":
		err = h.authed(h.newWorkspace)(w, r)
	case p == "/templates":
		err = h.authed(h.templates)(w, r)
	case strings.HasPrefix(p, "/templates/"):
		err = h.authed(h.templatePage)(w, r)
	case p == "/external-auth":
		err = h.authed(h.externalAuthList)(w, r)
	case strings.HasPrefix(p, "/external-auth/"):
		err = h.authed(h.externalAuth)(w, r)
	case p == "/admin/users":
		err = h.authed(h.ownerOnly(h.adminUsers))(w, r)
	case p == "/admin/provisioners":
		err = h.authed(h.ownerOnly(h.adminProvisioners))(w, r)
	case p == "/admin/audit":
		err = h.authed(h.ownerOnly(h.adminAudit))(w, r)
	case p == "/admin/replicas":
		err = h.authed(h.ownerOnly(h.adminReplicas))(w, r)
	case p == "/admin/appliance":
		err = h.authed(h.ownerOnly(h.adminAppliance))(w, r)
	case strings.HasSuffix(p, "/terminal"):
		err = h.authed(h.terminal)(w, r)
	case strings.HasSuffix(p, "/build"):
		err = h.authed(h.postBuild)(w, r)
	default:
		err = h.authed(h.workspace)(w, r)
	}
	if err != nil {
		h.renderError(w, r, err)
	}
}

// contentSecurityPolicy allows only this origin. The terminal page also
// allows inline styles: xterm.js writes its theme into a <style> element.
func contentSecurityPolicy(path string) string {
	style := "'self'"
	if strings.HasSuffix(path, "/terminal") {
		style = "'self' 'unsafe-inline'"
	}
	return "default-src 'self'; script-src 'self'; style-src " + style + "; img-src 'self' data:; connect-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}

// sameOrigin refuses form posts from other sites (SameSite=Lax already keeps
// the session cookie off them; this is the second lock).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return r.Header.Get("Sec-Fetch-Site") == "" || r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// inProcess is an http.RoundTripper that hands requests to the API handler
// in this process, as if they came from the visitor's connection (its
// address and TLS state, so rate limits, audit and the cookie's Secure flag
// are the visitor's).
type inProcess struct {
	api  http.Handler
	from *http.Request
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	req.RemoteAddr = t.from.RemoteAddr
	req.TLS = t.from.TLS
	req.Host = t.from.Host
	req.RequestURI = req.URL.RequestURI()
	for _, k := range []string{"User-Agent", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-Ip"} {
		if v := t.from.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	t.api.ServeHTTP(rec, req)
	res := rec.Result()
	res.Request = req
	return res, nil
}

// client returns an API client acting for the visitor of r.
func (h *Handler) client(r *http.Request, token string) *codersdk.Client {
	return &codersdk.Client{
		URL:          &url.URL{Scheme: "http", Host: "coderd.internal"},
		SessionToken: token,
		HTTPClient:   &http.Client{Transport: inProcess{api: h.api, from: r}, Timeout: 30 * time.Second},
	}
}

// session is the signed-in visitor of a page.
type session struct {
	client *codersdk.Client
	user   codersdk.User
}

func (s session) isOwner() bool { return s.user.HasRole(codersdk.RoleOwner) }

type pageFunc func(w http.ResponseWriter, r *http.Request, s session) error

// authed runs page for a signed-in visitor and sends anyone else to the
// login page (or to setup while there is no user), saying why when a
// session they had is no longer valid.
func (h *Handler) authed(page pageFunc) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		token := ""
		if c, err := r.Cookie(codersdk.SessionTokenCookie); err == nil {
			token = c.Value
		}
		toLogin := func(message string) error {
			q := url.Values{"redirect": {r.URL.RequestURI()}}
			if message != "" {
				q.Set("message", message)
			}
			http.Redirect(w, r, "/login?"+q.Encode(), http.StatusSeeOther)
			return nil
		}
		if token == "" {
			if exists, err := h.client(r, "").HasFirstUser(r.Context()); err == nil && !exists {
				http.Redirect(w, r, "/setup", http.StatusSeeOther)
				return nil
			}
			return toLogin("")
		}
		c := h.client(r, token)
		user, err := c.User(r.Context(), codersdk.Me)
		if codersdk.IsStatus(err, http.StatusUnauthorized) {
			return toLogin("Your session ended: " + apiMessage(err))
		}
		if err != nil {
			return err
		}
		return page(w, r, session{client: c, user: user})
	}
}

// forwardCookies passes the API's Set-Cookie headers on to the browser.
func forwardCookies(w http.ResponseWriter, res *http.Response) {
	for _, c := range res.Header.Values("Set-Cookie") {
		w.Header().Add("Set-Cookie", c)
	}
}

// apiMessage is an API error in words: its message, detail and field
// validations.
func apiMessage(err error) string {
	var e *codersdk.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := e.Message
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	for _, v := range e.Validations {
		msg += "; " + v.Field + " " + v.Detail
	}
	return msg
}

// validations maps field names to the API's messages about them.
func validations(err error) map[string]string {
	var e *codersdk.Error
	out := map[string]string{}
	if errors.As(err, &e) {
		for _, v := range e.Validations {
			out[v.Field] = v.Detail
		}
	}
	return out
}

// page is what every template gets.
type page struct {
	Title string
	User  *codersdk.User
	// Error is shown at the top of the page, in words.
	Error string
	Data  any
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, p page) {
	t, ok := h.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	var b strings.Builder
	if err := t.Execute(&b, p); err != nil {
		h.log.Error("render page", "page", name, "err", err)
		http.Error(w, "The page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// renderError shows an error page; API errors keep their status.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var e *codersdk.Error
	if errors.As(err, &e) {
		status = e.StatusCode
	} else if !errors.Is(err, context.Canceled) {
		h.log.Error("dashboard page", "path", r.URL.Path, "err", err)
	}
	h.render(w, status, "error", page{Title: http.StatusText(status), Error: apiMessage(err)})
}

// statusClassOf colours a status (of a workspace, build, agent, app's
// health, user, daemon, audit outcome, component): "ok", "bad", "idle" (at rest:
// stopped, off); anything not listed is "busy" (on its way somewhere).
var statusClassOf = map[string]string{
	"running": "ok", "connected": "ok", "ready": "ok", "succeeded": "ok", "active": "ok", "idle": "ok", "success": "ok", "ok": "ok", "healthy": "ok",
	"failed": "bad", "canceled": "bad", "timeout": "bad", "start_error": "bad", "start_timeout": "bad", "disconnected": "bad",
	"suspended": "bad", "offline": "bad", "failure": "bad", "down": "bad", "rolled back": "bad", "unhealthy": "bad",
	"stopped": "idle", "off": "idle", "deleted": "idle", "created": "idle", "disabled": "idle",
}

func statusClass(s any) string {
	if c, ok := statusClassOf[fmt.Sprint(s)]; ok {
		return c
	}
	return "busy"
}

var funcs = template.FuncMap{
	"since": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"pathEscape": url.PathEscape,
	// appHref and appUnavailable link workspace apps (apps.go).
	"appHref": appHref, "appUnavailable": appUnavailable,
	// when is a time (or *time.Time) in UTC, "" for none.
	"when": func(v any) string {
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case *time.Time:
			if x != nil {
				t = *x
			}
		}
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	// tags is a tag set as sorted key=value pairs.
	"tags": func(tags map[string]string) []string {
		out := make([]string, 0, len(tags))
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			out = append(out, k+"="+tags[k])
		}
		return out
	},
	"bytes":       bytesize.Format,
	"statusClass": statusClass,
	// statusClasses is statusClassOf as JSON, for live.js (the one place
	// the colours of statuses are decided).
	"statusClasses": func() (string, error) {
		b, err := json.Marshal(statusClassOf)
		return string(b), err
	},
}
