package coderd

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/appurl"
	"airgapcoder/coderd/database"
	"airgapcoder/coderd/site"
	"airgapcoder/codersdk"
)

// Signing in on app hosts. The dashboard's session cookie belongs to the
// access URL's host and never reaches an app host, so an app host has its
// own cookie, obtained by a redirect dance as in Coder:
//
//  1. A request to an app host without a valid app cookie is redirected
//     to <access URL>/api/v2/applications/auth-redirect?redirect_uri=<app URL>
//     (GET and HEAD; other methods get 401).
//  2. There, a signed-in visitor (else the login page first, then back)
//     gets a redirect to the app URL with an exchange token in
//     ?coder_application_connect_api_key=, but only when redirect_uri is
//     an app host of this deployment, or the access URL or an app host of
//     a registered workspace proxy (workspaceproxyapps.go), which trades
//     the token for its cookie through the primary. The mint is audited.
//  3. The app host checks the exchange token, sets its cookie
//     (coder_subdomain_app_session_token: host-only, HttpOnly, SameSite=Lax,
//     Secure on https) and redirects to the same URL without the parameter.
//
// Both tokens are signed, not stored: "v1.<payload>.<HMAC-SHA256>", the
// payload (JSON, base64url) naming the kind (exchange: 1 minute; cookie:
// until the session ends), the app's host name, the user and the ID of the
// dashboard session (API key) it came from. The HMAC key is derived from
// the deployment's replica secret, so every replica checks what any
// replica signed. Each request with the cookie also checks that session:
// signing out, a suspended or deleted user, or an expired session ends app
// access at once. The tokens are not API keys: the API refuses them
// (they are not "<id>-<secret>"), and one app host's token is refused by
// every other. docs/decisions.md, "issue 31", says why.

const (
	appTokenExchange = "exchange"
	appTokenCookie   = "cookie"
	// appExchangeLifetime bounds the exchange token, which travels in a
	// URL.
	appExchangeLifetime = time.Minute
)

// appTokenClaims is the signed payload of an app token.
type appTokenClaims struct {
	Kind    string `json:"k"`
	Host    string `json:"h"`
	UserID  string `json:"u"`
	KeyID   string `json:"s"`
	Expires int64  `json:"e"`
}

var errAppToken = errors.New("invalid app token")

func (api *API) appTokenMAC(payload string) []byte {
	// A key of its own, derived from the replica secret: an app token
	// reveals nothing about the secret replicas authenticate with.
	k := hmac.New(sha256.New, []byte(api.replicaSecret))
	k.Write([]byte("airgapcoder subdomain app token v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func (api *API) signAppToken(c appTokenClaims) string {
	b, _ := json.Marshal(c)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return "v1." + payload + "." + base64.RawURLEncoding.EncodeToString(api.appTokenMAC(payload))
}

// verifyAppToken checks an app token's signature, kind, host and expiry.
func (api *API) verifyAppToken(tok, kind, host string) (appTokenClaims, error) {
	rest, ok := strings.CutPrefix(tok, "v1.")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return appTokenClaims{}, errAppToken
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, api.appTokenMAC(payload)) {
		return appTokenClaims{}, errAppToken
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	var c appTokenClaims
	if err != nil || json.Unmarshal(b, &c) != nil {
		return appTokenClaims{}, errAppToken
	}
	if c.Kind != kind || c.Host != host || !api.now().Before(time.Unix(c.Expires, 0)) {
		return appTokenClaims{}, errAppToken
	}
	return c, nil
}

// appSession returns the user of the dashboard session an app token came
// from, if that session still holds.
func (api *API) appSession(ctx context.Context, c appTokenClaims) (database.User, database.APIKey, error) {
	key, user, deleted, err := api.db.APIKeyWithUser(ctx, c.KeyID)
	if errors.Is(err, database.ErrNotFound) || (err == nil && (key.UserID != c.UserID || deleted || user.Status != database.UserStatusActive ||
		!api.now().Before(key.ExpiresAt))) {
		return database.User{}, database.APIKey{}, errAppToken
	}
	return user, key, err
}

// appHostName is the name app tokens are bound to: the host name of a
// Host header or URL, lower case, without port or trailing dot (cookies
// do not tell ports apart either).
func appHostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// appCookieUser is the user of a valid app cookie of this host, if any.
// Every cookie of that name is tried: another app host may have set one
// for the parent domain.
func (api *API) appCookieUser(r *http.Request, host string) (database.User, bool, error) {
	var values []string
	for _, ck := range r.Cookies() {
		if ck.Name == codersdk.SubdomainAppSessionTokenCookie {
			values = append(values, ck.Value)
		}
	}
	return api.appCookieValuesUser(r.Context(), values, host)
}

// appCookieValuesUser is the user of the first of values that is a valid
// app cookie of host, if any (a workspace proxy sends the values its
// visitor brought: workspaceproxyapps.go).
func (api *API) appCookieValuesUser(ctx context.Context, values []string, host string) (database.User, bool, error) {
	for _, v := range values {
		claims, err := api.verifyAppToken(v, appTokenCookie, host)
		if err != nil {
			continue
		}
		user, _, err := api.appSession(ctx, claims)
		if errors.Is(err, errAppToken) {
			continue
		}
		if err != nil {
			return database.User{}, false, err
		}
		return user, true, nil
	}
	return database.User{}, false, nil
}

// exchangeAppToken is step 3: an app host request that carries an exchange
// token gets the app cookie and a redirect to the same URL without it.
func (api *API) exchangeAppToken(c *gin.Context, host, tok string) error {
	r := c.Request
	cookie, expires, err := api.redeemExchangeToken(r.Context(), host, tok)
	if err != nil {
		return err
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: codersdk.SubdomainAppSessionTokenCookie, Value: cookie, Path: "/",
		MaxAge: max(1, int(expires.Sub(api.now()).Seconds())), HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: r.TLS != nil || api.opts.AccessURL.Scheme == "https",
	})
	q := r.URL.Query()
	q.Del(codersdk.SubdomainAppSessionTokenParam)
	loc := r.URL.EscapedPath()
	if enc := q.Encode(); enc != "" {
		loc += "?" + enc
	}
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusSeeOther, site.LocalRedirect(loc))
	return nil
}

// redeemExchangeToken checks an exchange token of host and answers the
// app cookie it is exchanged for, valid until the session it came from
// expires.
func (api *API) redeemExchangeToken(ctx context.Context, host, tok string) (string, time.Time, error) {
	claims, err := api.verifyAppToken(tok, appTokenExchange, host)
	if err != nil {
		return "", time.Time{}, errorf(http.StatusUnauthorized, "", "This app sign-in link is invalid or has expired (it lasts %s): open the app again from the dashboard", appExchangeLifetime)
	}
	_, key, err := api.appSession(ctx, claims)
	if errors.Is(err, errAppToken) {
		return "", time.Time{}, errorf(http.StatusUnauthorized, "", "The session this app sign-in link came from has ended: sign in again and open the app from the dashboard")
	}
	if err != nil {
		return "", time.Time{}, err
	}
	cookie := api.signAppToken(appTokenClaims{Kind: appTokenCookie, Host: host, UserID: claims.UserID, KeyID: claims.KeyID, Expires: key.ExpiresAt.Unix()})
	return cookie, key.ExpiresAt, nil
}

// appSignIn is step 1: the redirect of a visitor without a valid app
// cookie to the access URL's auth-redirect.
func (api *API) appSignIn(c *gin.Context) error {
	r := c.Request
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return errorf(http.StatusUnauthorized, "", "You are not signed in to this app: open it in the browser (GET) to sign in through %s", api.opts.AccessURL)
	}
	app := url.URL{Scheme: api.opts.AccessURL.Scheme, Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusTemporaryRedirect, api.appAuthRedirectURL(app.String()))
	return nil
}

// appAuthRedirectURL is the auth-redirect URL on the access URL that
// sends a signed-in visitor back to app (an app URL) with an exchange
// token.
func (api *API) appAuthRedirectURL(app string) string {
	to := *api.opts.AccessURL
	to.Path = strings.TrimSuffix(to.Path, "/") + codersdk.AppAuthRedirectPath
	to.RawPath = ""
	to.RawQuery = url.Values{"redirect_uri": {app}}.Encode()
	return to.String()
}

// appAuthRedirect is step 2, GET /api/v2/applications/auth-redirect on
// the access URL.
func (api *API) appAuthRedirect(c *gin.Context) error {
	raw := c.Query("redirect_uri")
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceAPIKey).field("kind", "app-token").field("redirect_uri", raw)
	a := api.authOnce(c)
	var ae *apiError
	if errors.As(a.err, &ae) && ae.status == http.StatusUnauthorized {
		// Sign in first, then come back here. Nothing was minted, and the
		// sign-in is audited itself.
		e.skip(c)
		login := url.URL{Path: "/login", RawQuery: url.Values{"redirect": {c.Request.URL.RequestURI()}}.Encode()}
		c.Header("Cache-Control", "no-store")
		c.Redirect(http.StatusSeeOther, login.String())
		return nil
	}
	if a.err != nil {
		return a.err
	}
	e.actor(a.user)
	target, host, err := api.checkAppRedirect(c.Request.Context(), raw)
	if err != nil {
		return err
	}
	e.resource(a.key.ID, "app token for "+host).field("app_host", host)
	tok := api.signAppToken(appTokenClaims{Kind: appTokenExchange, Host: host, UserID: a.user.ID, KeyID: a.key.ID,
		Expires: api.now().Add(appExchangeLifetime).Unix()})
	param := url.Values{codersdk.SubdomainAppSessionTokenParam: {tok}}.Encode()
	if target.RawQuery != "" {
		target.RawQuery += "&" + param
	} else {
		target.RawQuery = param
	}
	target.Fragment, target.RawFragment = "", ""
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusSeeOther, target.String())
	return nil
}

// checkAppRedirect accepts only an app URL of this deployment: the access
// URL's scheme, a host under the wildcard that names an app or port, and
// the port app URLs use; or a URL of a registered workspace proxy
// (proxyAppRedirect).
func (api *API) checkAppRedirect(ctx context.Context, raw string) (*url.URL, string, error) {
	w := api.opts.WildcardAccessURL
	refuse := func(why string) error {
		return errorf(http.StatusBadRequest, why, "redirect_uri %q is not an app URL of this deployment (app URLs look like %s://%s/)",
			raw, api.opts.AccessURL.Scheme, w.HostPattern(api.opts.AccessURL))
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" || u.User != nil {
		return nil, "", refuse("it must be an absolute URL without user information")
	}
	if ok, err := api.proxyAppRedirect(ctx, u); err != nil || ok {
		return u, appHostName(u.Host), err
	}
	if w.IsZero() {
		return nil, "", errorf(http.StatusNotFound, "Set --wildcard-access-url (CODER_WILDCARD_ACCESS_URL) to serve subdomain apps.",
			"This deployment has no wildcard access URL, so it serves no subdomain apps")
	}
	if u.Scheme != api.opts.AccessURL.Scheme {
		return nil, "", refuse("its scheme must be " + api.opts.AccessURL.Scheme)
	}
	sub, ok := w.Match(u.Host)
	if !ok || appHostName(u.Host) == appHostName(api.opts.AccessURL.Host) {
		return nil, "", refuse("its host is not under " + w.String())
	}
	if _, err := appurl.ParseAppHost(sub); err != nil {
		return nil, "", refuse(err.Error())
	}
	want := w.Port()
	if want == "" {
		want = api.opts.AccessURL.Port()
	}
	if u.Port() != want {
		return nil, "", refuse("its port must be the app URLs' (" + want + ")")
	}
	return u, appHostName(u.Host), nil
}

// appHost is GET /api/v2/applications/host.
func (api *API) appHost(c *gin.Context) error {
	c.JSON(http.StatusOK, codersdk.AppHostResponse{Host: api.opts.WildcardAccessURL.HostPattern(api.opts.AccessURL)})
	return nil
}
