package codersdk

import (
	"context"
	"time"
)

// Dev URLs through a workspace proxy (docs/wsproxy.md). A proxy serves
// path-based dev URLs (/@owner/workspace[.agent]/apps/slug/… and
// …/ports/port/…) on its access URL and subdomain apps on the hosts under
// its wildcard, as the primary serves them on its own. It does not decide
// who may open what: for every request it has no fresh answer for, it asks
// the primary with what the visitor brought,
//
//	POST /api/v2/workspaceproxies/me/authorize-app
//
// authenticated with the proxy's token (ExternalProxyAuthTokenHeader), and
// the primary decides exactly as for a request of its own (the same share
// levels, the same rules for browser credentials). A refusal is an error
// answer (400, 401, 403, 404, 409, 503) with the message the visitor sees;
// the proxy passes it on as it is.

// ProxyAuthorizeAppRequest is what a visitor brought to a proxy's dev URL
// or app host.
type ProxyAuthorizeAppRequest struct {
	// Method is the request's method: only a GET or HEAD without
	// credentials is sent to sign in.
	Method string `json:"method"`
	// URL is the URL the visitor asked for at the proxy: the proxy's scheme,
	// the request's Host, its escaped path and its query without
	// SubdomainAppSessionTokenParam. The host is the proxy's access URL's
	// (a path-based dev URL) or one under its wildcard (a subdomain app).
	URL string `json:"url"`
	// SessionToken is a session token the visitor sent, in the
	// SessionTokenHeader header or the SessionTokenCookie cookie;
	// SessionTokenInHeader says it was the header (a browser's cookie opens
	// only the visitor's own workspaces' path-based dev URLs). Subdomain
	// apps ignore it, as on the primary: they take the app cookie.
	SessionToken         string `json:"session_token,omitempty"`
	SessionTokenInHeader bool   `json:"session_token_in_header,omitempty"`
	// AppCookies are the values of the visitor's
	// SubdomainAppSessionTokenCookie cookies (the proxy's host's, and any a
	// parent domain set).
	AppCookies []string `json:"app_cookies,omitempty"`
	// ExchangeToken is the SubdomainAppSessionTokenParam of the URL: the
	// end of the sign-in redirect. The answer is then only AppCookie.
	ExchangeToken string `json:"exchange_token,omitempty"`
	// Remote is the visitor's address at the proxy (the audit log).
	Remote string `json:"remote,omitempty"`
}

// ProxyAuthorizeAppResponse is the primary's answer (200). It is one of:
//
//   - SignInURL set: the visitor must sign in; redirect (307) there. It is
//     the primary's auth-redirect, which sends the visitor back to URL with
//     an exchange token.
//   - AppCookie set (an ExchangeToken was sent): set it as the
//     SubdomainAppSessionTokenCookie of the proxy's host until
//     AppCookieExpiresAt (Path /, HttpOnly, SameSite=Lax, Secure on https)
//     and redirect to URL without the exchange token.
//   - Otherwise the grant: open a RelayKindTCP connection to AgentID's
//     Host:Port as Username and proxy the request there.
type ProxyAuthorizeAppResponse struct {
	SignInURL          string    `json:"sign_in_url,omitempty"`
	AppCookie          string    `json:"app_cookie,omitempty"`
	AppCookieExpiresAt time.Time `json:"app_cookie_expires_at,omitzero"`

	// UserID and Username are the visitor's ("" and "anonymous" for a
	// public app's anonymous visitor).
	UserID   string `json:"user_id,omitempty"`
	Username string `json:"username,omitempty"`
	// AgentID is the agent the app runs behind; OwnerName, WorkspaceName and
	// AgentName name it for logs.
	AgentID       string `json:"agent_id,omitempty"`
	OwnerName     string `json:"owner_name,omitempty"`
	WorkspaceName string `json:"workspace_name,omitempty"`
	AgentName     string `json:"agent_name,omitempty"`
	// Scheme ("http" or "https") is how the app inside the workspace is
	// spoken to; Host ("" for the workspace's loopback) and Port are where
	// it listens.
	Scheme string `json:"scheme,omitempty"`
	Host   string `json:"host,omitempty"`
	Port   uint16 `json:"port,omitempty"`
	// BasePath (escaped) and Query are those of the app's url: the request's
	// path after PathPrefix is appended to BasePath, its query to Query.
	BasePath string `json:"base_path,omitempty"`
	Query    string `json:"query,omitempty"`
	// PathPrefix is the escaped dev URL prefix the app is mounted under
	// ("/@alice/dev/apps/web"), stripped from the path and sent as
	// X-Forwarded-Prefix; "" for a subdomain app, which owns its host.
	PathPrefix string `json:"path_prefix,omitempty"`
	// SharingLevel is the app's share level (AppShare*; ports are "owner").
	SharingLevel string `json:"sharing_level,omitempty"`
	// ValidForMillis is how long the proxy may reuse this grant for the
	// same credentials, host and path prefix without asking again: the
	// bound within which a revoked session, a changed share level or a
	// stopped workspace takes effect at the proxy.
	ValidForMillis int64 `json:"valid_for_ms,omitempty"`
}

// ValidFor is ValidForMillis as a duration.
func (r ProxyAuthorizeAppResponse) ValidFor() time.Duration {
	return time.Duration(r.ValidForMillis) * time.Millisecond
}

// AuthorizeApp asks the primary about a visitor's request to a dev URL or
// app host of the proxy. A refusal is an *Error with the status and
// message to pass on to the visitor.
func (c *ProxyClient) AuthorizeApp(ctx context.Context, req ProxyAuthorizeAppRequest) (ProxyAuthorizeAppResponse, error) {
	var out ProxyAuthorizeAppResponse
	return out, c.call(ctx, "/api/v2/workspaceproxies/me/authorize-app", req, &out, 200)
}
